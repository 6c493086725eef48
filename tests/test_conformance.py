"""The conformance suite: each broken store fails the clause it breaks, by id; the CLI's exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from soak.cli import main
from soak.clauses import CLAUSES
from soak.conformance import ConformanceReport, list_checks, run_conformance
from soak.errors import HarnessError, StoreSpecError
from tests.broken_stores import BROKEN

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("name, clause", sorted(BROKEN.items()))
def test_broken_store_fails_its_clause_by_id(name, clause):
    report = run_conformance(f"tests.broken_stores:{name}", clauses=[clause])
    assert not report.passed
    assert clause in report.failed_clauses(), [(r.check, r.status, r.detail) for r in report.results]
    assert report.clause_status()[clause] in ("fail", "error")
    assert {r.clause for r in report.results} == {clause}  # the filter ran only that clause


@pytest.mark.parametrize("clause", sorted(set(BROKEN.values())))
def test_reference_store_passes_each_clause_the_broken_ones_fail(clause):
    report = run_conformance("sqlite:", clauses=[clause])
    assert report.passed, [(r.check, r.detail) for r in report.failed]


def test_two_transaction_fence_breaks_only_atomic_fence():
    # Everything else about it is the reference store: only the real race exposes it.
    clauses = [c for c in CLAUSES if c != "concurrent-boot"]
    report = run_conformance("tests.broken_stores:open_two_transaction_fence", clauses=clauses)
    assert report.failed_clauses() == {"atomic-fence"}
    surfaces = {r.check for r in report.failed}
    assert {"atomic-append", "atomic-put_meta", "atomic-delete", "atomic-blob-put", "atomic-blob-delete"} <= surfaces
    assert all("after the successor's grant" in r.detail or "successor's later" in r.detail for r in report.failed)


def test_read_then_write_fence_fails_atomic_fence():
    report = run_conformance("tests.broken_stores:open_read_then_write", clauses=["atomic-fence"])
    assert "atomic-append" in {r.check for r in report.failed}


def test_an_unexpected_exception_is_never_a_pass():
    report = run_conformance("tests.broken_stores:open_crashing_load", clauses=["journal-a2", "journal-a4"])
    assert not report.passed
    for r in report.results:
        assert r.status in ("fail", "error")
        assert "RuntimeError" in r.detail


def test_every_clause_has_a_check_and_sub_checks_are_named():
    assert {c for c, _ in list_checks()} | {f"journal-a{i}" for i in range(1, 6)} >= set(CLAUSES)
    report = run_conformance("memory:", clauses=["stale-rejected", "atomic-fence"])
    names = {r.check for r in report.results}
    for surface in ("append", "put_meta", "delete", "blob-put", "blob-delete"):
        assert f"stale-{surface}" in names and f"atomic-{surface}" in names
    assert {"atomic-renew", "atomic-release"} <= names
    assert isinstance(report, ConformanceReport) and report.passed
    assert all("[injected clock]" in r.detail for r in report.results)


def test_without_clock_injection_the_suite_sleeps_and_says_so():
    clauses = ["ttl-honoured", "store-clock", "live-accepted", "stale-lease-ops", "atomic-fence"]
    report = run_conformance("tests.broken_stores:open_reference_no_clock", clauses=clauses)
    assert report.timing == "real sleeps"
    assert report.passed, [(r.check, r.detail) for r in report.failed]
    assert all("[real sleeps]" in r.detail for r in report.results)
    assert all("real-time expiry" in r.detail for r in report.results if r.clause == "atomic-fence")


def test_without_clock_injection_a_two_transaction_fence_still_fails():
    report = run_conformance("tests.broken_stores:open_two_transaction_fence_no_clock", clauses=["atomic-fence"])
    assert report.timing == "real sleeps"
    assert "atomic-append" in {r.check for r in report.failed}, [(r.check, r.detail) for r in report.results]


def test_the_suite_removes_the_locations_it_made(tmp_path):
    run_conformance("sqlite:", clauses=["journal-a2"], location=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_are_harness_errors():
    with pytest.raises(StoreSpecError, match="unknown clause id 'bogus'"):
        run_conformance("memory:", clauses=["bogus"])
    with pytest.raises(StoreSpecError, match="fresh location per check"):
        run_conformance("sqlite:///tmp/fixed.db")
    with pytest.raises(HarnessError, match="too short"):
        run_conformance("memory:", lease_ttl_ms=5)


def test_cli_passes_a_reference_store(capsys):
    assert main(["conformance", "--store", "memory:", "--clause", "lease-exclusive", "--clause", "journal-a5"]) == 0
    out = capsys.readouterr().out
    assert "PASS   lease-exclusive" in out and "PASS   journal-a5" in out
    assert out.strip().splitlines()[-1].endswith("PASS")


def test_cli_fails_a_broken_store_and_names_the_clause(capsys):
    code = main(["conformance", "--store", "tests.broken_stores:open_acquire_while_live", "--clause", "lease-exclusive"])
    assert code == 1
    out = capsys.readouterr().out
    assert "FAIL   lease-exclusive" in out and "FAIL (lease-exclusive)" in out


def test_cli_json(capsys):
    assert main(["conformance", "--store", "memory:", "--clause", "journal-a4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True and data["store"] == "memory:"
    assert [r["clause"] for r in data["results"]] == ["journal-a4"]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--store", "nosuch:"], "unknown store scheme 'nosuch:'"),
        (["--store", "not.a.module:f"], "cannot import module 'not.a.module'"),
        (["--store", "memory:", "--clause", "bogus"], "unknown clause id 'bogus'"),
    ],
)
def test_cli_usage_errors_exit_2_with_one_line(capsys, argv, fragment):
    assert main(["conformance", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and lines[0].startswith("soak: ")


@pytest.mark.parametrize("spec", ["nosuch:", "not.a.module:f"])
def test_cli_process_exit_code_for_bad_specs(spec):
    proc = subprocess.run(
        [sys.executable, "-m", "soak.cli", "conformance", "--store", spec],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
