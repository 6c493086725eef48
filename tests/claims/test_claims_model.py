"""The claims model: passes on the `memory:` claim store, fails each broken claim store naming what it broke."""

from __future__ import annotations

import time

import pytest
from hypothesis import settings as Settings

from soak.claims import resolve_claims
from soak.claims.model import CLAIMANTS, CLAIMS_MODEL_NEVER_EXERCISES, ClaimViolation, claims_machine_for, run_claims_model
from soak.cli import main
from soak.errors import ScenarioError, StoreSpecError
from soak.stores import resolve
from soak.model import model_settings
from soak.retry import BUSY_ATTEMPTS
from tests.claims import broken_claim_stores as broken

FAST = Settings(model_settings("ci"), max_examples=100, stateful_step_count=20)

#: the claim stores the model must pass (sqlite: once its module lands)
SPECS = ["memory:"]
try:  # noqa: SIM105 - the other reference store, where this tree has it
    import soak.claims._sqlite  # noqa: F401

    SPECS.append("sqlite:")
except ImportError:
    pass


@pytest.mark.parametrize("spec", SPECS)
def test_the_model_passes_a_reference_claim_store(spec):
    outcome = run_claims_model(spec, settings=FAST)
    assert outcome.verdict == "pass", (outcome.error, outcome.program)
    assert outcome.clock == "fake" and "declares injectable_clock" in outcome.clock_reason
    # every claim clause the model can judge was judged
    for clause in ("claim-epoch-once", "claim-epoch-step", "conflict-holder", "claim-live-accepted",
                   "heartbeat-fenced", "progress-fenced", "claim-lease-protected", "progress-preserved",
                   "recovery-audited", "rows-reconciled"):
        assert outcome.exercised.get(clause, 0) > 0, clause
    assert not set(outcome.exercised) & set(CLAIMS_MODEL_NEVER_EXERCISES)


def test_a_seed_makes_a_run_repeatable():
    a = run_claims_model("memory:", max_examples=5, seed=7, settings=Settings(FAST, derandomize=False))
    b = run_claims_model("memory:", max_examples=5, seed=7, settings=Settings(FAST, derandomize=False))
    assert a.passed and b.passed and a.exercised == b.exercised and a.seed == 7


@pytest.mark.parametrize("store, clause, words", [
    (broken.ReleaseResetsEpoch, "claim-epoch-step", "release("),
    (broken.NamelessConflict, "conflict-holder", "naming None"),
    (broken.RecoverWithoutAudit, "recovery-audited", "auto-recover-node-unreachable"),
    (broken.RecoverDropsStep, "progress-preserved", "recover("),
    (broken.RecoverWithinLease, "claim-lease-protected", "within its lease"),
    (broken.UnfencedProgress, "progress-fenced", "record_progress("),
    (broken.StaleHeartbeat, "heartbeat-fenced", "heartbeat("),
    (broken.StealingClaim, "claim-lease-protected", "was granted"),
])
def test_the_model_fails_a_broken_claim_store_naming_its_defect(store, clause, words):
    outcome = run_claims_model(broken.factory(store), settings=FAST)
    assert outcome.verdict == "fail" and outcome.clause == clause, (outcome.clause, outcome.error)
    assert words in outcome.error, outcome.error
    assert outcome.program and outcome.program[-1] == "state.teardown()"
    assert outcome.steps <= 8, outcome.program


def _claim_mutants() -> list[str]:
    try:
        from soak.claims.mutants import CLAIM_MUTANTS
    except ImportError:
        return []
    return sorted(CLAIM_MUTANTS)


@pytest.mark.slow  # about a minute on sqlite; the broken memory stores above cover every clause in the fast tier
@pytest.mark.parametrize("name", _claim_mutants() or [pytest.param("none", marks=pytest.mark.skip(
    reason="soak.claims.mutants is not in this tree yet"))])
def test_the_model_fails_every_claim_mutant_it_can_see(name):
    from soak.claims.mutants import CLAIM_MUTANTS

    clause = CLAIM_MUTANTS[name].clause
    outcome = run_claims_model(f"mutant:{name}", settings=FAST)
    if clause in CLAIMS_MODEL_NEVER_EXERCISES or clause == "rows-reconciled":
        # needs concurrency or a split write (conformance and the storm make those): the model may not see it,
        # and must never fail it on a clause it did not break
        assert outcome.verdict == "pass" or outcome.clause == clause, (outcome.clause, outcome.error)
        return
    assert outcome.verdict == "fail" and outcome.clause == clause, (outcome.clause, outcome.error)


def test_an_untyped_exception_is_an_indeterminate_failure_naming_the_call():
    outcome = run_claims_model(broken.factory(broken.UntypedHeartbeat), settings=FAST)
    assert outcome.verdict == "fail" and outcome.clause == "typed-refusal"
    assert "indeterminate: heartbeat(" in outcome.error and "RuntimeError: heartbeat exploded" in outcome.error


def test_a_store_busy_on_every_attempt_is_inconclusive_never_a_pass():
    outcome = run_claims_model(broken.factory(broken.AlwaysBusyClaim), settings=Settings(FAST, max_examples=5))
    assert outcome.verdict == "inconclusive" and not outcome.passed, outcome
    assert "claim(" in outcome.reason and f"StoreBusyError {BUSY_ATTEMPTS} times in a row" in outcome.reason
    assert outcome.busy_retries >= BUSY_ATTEMPTS


def test_a_store_without_an_injectable_clock_runs_on_real_time():
    started = time.monotonic()
    outcome = run_claims_model(broken.factory(broken.RealClockOnly),
                               settings=Settings(FAST, max_examples=8, stateful_step_count=10))
    assert outcome.verdict == "pass", (outcome.error, outcome.program)
    assert outcome.clock == "real" and "does not declare" in outcome.clock_reason
    assert outcome.lease_ttl_ms == 150 and time.monotonic() - started < 60
    with pytest.raises(ScenarioError, match="declares injectable_clock"):
        run_claims_model(broken.factory(broken.RealClockOnly), clock="fake", max_examples=1)


def test_a_real_clock_machine_still_catches_a_recovery_within_the_lease():
    # one program by hand: a whole real-time run shrinks through sleeps, which is slow
    machine = claims_machine_for(broken.factory(broken.RecoverWithinLease), clock="real")()
    try:
        assert machine.clock is None and machine.lease_ttl_ms == 150
        machine.claim("p1", "t1", CLAIMANTS[0])
        with pytest.raises(ClaimViolation) as info:
            machine.recover_held(0, CLAIMANTS[2])
        assert info.value.clause == "claim-lease-protected" and "within its lease" in str(info.value)
    finally:
        machine.teardown()
    machine = claims_machine_for("memory:", clock="real")()
    try:  # the correct store: refused within the lease, accepted once it ran out
        machine.claim("p1", "t1", CLAIMANTS[0])
        machine.recover_held(0, CLAIMANTS[2])
        assert machine.oracle.get("p1", "t1").owner == CLAIMANTS[0]
        machine.outlive_then_recover(0, CLAIMANTS[2])
        assert machine.oracle.get("p1", "t1").owner is None and len(machine.oracle.audit("p1")) == 1
        machine.state_matches_oracle()
    finally:
        machine.teardown()


def test_the_machine_judges_a_conflicts_holder_directly():
    machine = claims_machine_for(broken.factory(broken.NamelessConflict))()
    try:
        machine.claim("p1", "t1", CLAIMANTS[0])
        with pytest.raises(ClaimViolation) as info:
            machine.claim("p1", "t1", CLAIMANTS[2])
        assert info.value.clause == "conflict-holder" and "naming None" in str(info.value)
    finally:
        machine.teardown()


def test_bad_specs_are_one_line_errors(capsys):
    with pytest.raises(StoreSpecError):
        run_claims_model("nosuchscheme:x")
    with pytest.raises(ScenarioError, match="needs a claim store"):
        claims_machine_for(resolve("memory:"))  # a run store target
    assert main(["model", "--workload", "claims", "--store", "memory:zz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "memory: takes no location" in err


def test_cli_claims_workload_passes_and_fails(capsys):
    assert main(["model", "--workload", "claims", "--store", "memory:", "--examples", "10", "--profile", "ci"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("soak model: pass: 10 claim programs") and "fake clock" in out
    spec = "tests.claims.test_claims_model:open_epoch_reset"
    assert resolve_claims(spec).kind == "claims"
    assert main(["model", "--workload", "claims", "--store", spec, "--examples", "100", "--profile", "ci"]) == 1
    out = capsys.readouterr().out
    assert "[claim-epoch-step]" in out and "minimal failing program:" in out and "release(" in out


def test_cli_claims_workload_busy_is_inconclusive(capsys):
    spec = "tests.claims.test_claims_model:open_always_busy"
    # a fixed seed: the first programs Hypothesis draws may make no claim at all (CI once drew three in 0.1 s)
    assert main(["model", "--workload", "claims", "--store", spec, "--examples", "3", "--profile", "ci",
                 "--seed", "1"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("soak model: INCONCLUSIVE") and "StoreBusyError" in out


open_epoch_reset = broken.factory(broken.ReleaseResetsEpoch)
open_always_busy = broken.factory(broken.AlwaysBusyClaim)
