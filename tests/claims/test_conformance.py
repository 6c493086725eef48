"""Claims conformance: every claim store mutant fails the clause it breaks, the reference stores pass, busy
answers are retried, hangs and crashes are named by the liveness clauses, spec errors are one line."""

from __future__ import annotations

import json

import pytest

from soak.claims.conformance import CHECKS, ClaimsConformanceReport, run_claims_conformance
from soak.claims.mutants import CLAIM_MUTANTS
from soak.cli import main
from soak.clauses import CLAIM_CLAUSES
from soak.errors import StoreSpecError
from soak.stores import resolve


def _bad(report: ClaimsConformanceReport) -> list[tuple[str, str, str, str]]:
    return [(r.clause, r.check, r.status, r.detail) for r in report.results if r.status not in ("pass",
                                                                                               "not-exercised")]


@pytest.mark.parametrize("name", sorted(CLAIM_MUTANTS))
def test_every_mutant_fails_its_own_clause(name):
    mutant = CLAIM_MUTANTS[name]
    assert mutant.clause in CLAIM_CLAUSES
    # few race rounds: the interleavings check stops calls mid-way, so no mutant's detection rests on a race's luck
    report = run_claims_conformance(f"mutant:{name}", rounds=10)
    assert report.verdict == "fail" and report.exit_code == 1, report.render()
    assert report.clause_status()[mutant.clause] == "fail", report.render()
    assert report.evidence(mutant.clause)


def test_sqlite_reference_passes():
    report = run_claims_conformance("sqlite:")
    assert report.verdict == "pass", report.render()
    assert report.timing == "injected clock"
    status = report.clause_status()
    for clause in (*CLAIM_CLAUSES, "concurrent-boot", "call-returns", "no-crash"):
        assert status[clause] == ("not-exercised" if clause == "handoff-policy" else "pass"), (clause, report.render())
    assert "PASS" in report.render().splitlines()[-1]
    assert json.loads(json.dumps(report.to_dict()))["verdict"] == "pass"


def test_memory_reference_passes_and_says_what_it_skipped():
    report = run_claims_conformance("memory:")
    assert report.verdict == "pass", report.render()
    skipped = {r.check: r.detail for r in report.results if r.status == "not-exercised"}
    assert {"barrier-race", "split-writes", "concurrent-boot"} <= set(skipped)
    assert all("single-process" in skipped[c] for c in ("barrier-race", "split-writes", "concurrent-boot"))


def test_real_time_store_passes():
    # a ttl long enough that a stalled machine does not expire a lease the checks hold live
    report = run_claims_conformance("tests.claims.claim_workers:open_no_clock", rounds=2, lease_ttl_ms=500,
                                    checks=["epoch-steps", "lease-protected", "recovery", "fence-race",
                                            "interleavings"])
    assert report.timing == "real time"
    assert any(r.check == "interleavings" and r.status == "not-exercised" for r in report.results)
    assert report.verdict == "pass", report.render()


def test_busy_answers_are_retried_never_a_failure():
    report = run_claims_conformance("tests.claims.claim_workers:open_busy", rounds=10)
    assert report.verdict == "pass", _bad(report)
    assert report.busy.retries > 0


def test_a_hung_call_is_call_returns_and_the_suite_goes_on():
    report = run_claims_conformance("tests.claims.claim_workers:open_hanging", call_bound_s=1.0,
                                    checks=["seed-unit-conflict", "stale-heartbeat-release", "progress-fence"])
    assert report.clause_status()["call-returns"] == "fail", report.render()
    assert "heartbeat" in report.evidence("call-returns")
    assert report.clause_status()["progress-fenced"] == "pass"  # the check after the hang still ran
    assert report.verdict == "fail"


def test_a_process_ending_call_is_no_crash():
    report = run_claims_conformance("tests.claims.claim_workers:open_exiting",
                                    checks=["seed-unit-conflict", "progress-fence"])
    assert report.clause_status()["no-crash"] == "fail", report.render()
    assert "release" in report.evidence("no-crash") and "exit 7" in report.evidence("no-crash")
    assert report.verdict == "fail"


@pytest.mark.parametrize(("factory", "clause"), [("open_progress_check_then_write", "progress-fenced"),
                                                 ("open_heartbeat_check_then_write", "heartbeat-fenced")])
def test_a_fence_checked_apart_from_its_write_fails_the_interleavings(factory, clause):
    """Broken stores outside the catalogue: the fence is checked in one transaction and the write lands in the
    next, so a takeover in between lets the superseded owner's write through."""
    report = run_claims_conformance(f"tests.claims.claim_workers:{factory}", checks=["interleavings"])
    assert report.clause_status()[clause] == "fail", report.render()


def test_checks_cover_every_claim_clause():
    covered = {c for _, clauses, _ in CHECKS for c in clauses}
    assert set(CLAIM_CLAUSES) <= covered


@pytest.mark.parametrize("spec", ["mutant:nope", "sqlite:bad", "nosuch:", "sqlite:?colour=red"])
def test_spec_errors_are_one_line(spec, capsys):
    with pytest.raises(StoreSpecError) as info:
        resolve(spec, kind="claims")
    assert "\n" not in str(info.value)
    code = main(["conformance", "--workload", "claims", "--store", spec])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("soak: "), err


def test_cli_claims_workload(capsys):
    code = main(["conformance", "--workload", "claims", "--store", "memory:", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] == "pass"
    assert out["clauses"]["conflict-holder"]["status"] == "pass"
    code = main(["conformance", "--workload", "claims", "--store", "mutant:conflict-without-holder"])
    text = capsys.readouterr().out
    assert code == 1 and "conflict-holder" in text.splitlines()[-1]
