"""The vendor suites over `exec:` with the Python wire server: conformance and the model pass a correct store and
fail a broken one naming its clause; atomic-fence, which cannot reach into a child, says so instead of passing."""

from __future__ import annotations

import shlex
import sys

import pytest

from soak.conformance import NOT_EXERCISED, run_conformance

SERVER = f"exec:{shlex.quote(sys.executable)} -m soak.stores.wire_server"


def test_conformance_passes_the_reference_store_and_fails_a_broken_one_naming_its_clause():
    good = run_conformance(f"{SERVER} sqlite:", clauses=["stale-rejected", "typed-refusal", "run-match"])
    assert good.verdict == "pass", [(r.check, r.status, r.detail) for r in good.results if r.status != "pass"]
    bad = run_conformance(f"{SERVER} mutant:unfenced-meta", clauses=["stale-rejected"])
    assert bad.verdict == "fail" and "stale-rejected" in bad.failed_clauses()


def test_atomic_fence_is_not_exercised_through_a_child_rather_than_passed():
    report = run_conformance(f"{SERVER} mutant:split-fence", clauses=["atomic-fence"])
    cells = [r for r in report.results if r.clause == "atomic-fence"]
    assert cells and all(r.status == NOT_EXERCISED and "child process" in r.detail for r in cells)


@pytest.mark.slow
def test_the_whole_conformance_suite_passes_over_exec():
    report = run_conformance(f"{SERVER} sqlite:")
    assert report.verdict == "pass", [(r.check, r.status, r.detail) for r in report.results if r.status != "pass"]


@pytest.mark.slow
@pytest.mark.parametrize("spec, clause", [("sqlite:", None), ("mutant:stale-release", "stale-lease-ops")])
def test_the_model_over_exec(spec, clause):
    from soak.model import check_model

    outcome = check_model(f"{SERVER} {spec}", max_examples=60 if clause else 20)
    assert outcome.passed == (clause is None), outcome
    assert clause is None or outcome.clause == clause
