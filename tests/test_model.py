"""The Hypothesis model: passes on the reference stores, fails small broken ones with short programs.

Each broken store below is a reference store with one defect. The model must fail it, name the
clause it breaks, and shrink the failing program to a handful of steps.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import unittest
from pathlib import Path

import pytest
from hypothesis import settings as Settings

from soak import model
from soak.clauses import default_call_bound_s
from soak.clock import FakeClock
from soak.errors import ScenarioError, StoreBootError, StoreSpecError
from soak.oracle import LeaseStanding, Oracle
from soak.spi import JournalEntry, Lease, LeaseHeldError, RunMeta, StoreBusyError
from soak.stores.memory import MemoryStore
from soak.stores.sqlite import SqliteStore, open_sqlite
from tests.certify_stores import (
    NoClockStore,
    open_always_busy,
    open_busy_acquire,
    open_delete_ends_tenure,
    open_no_clock,
    open_single_writer,
)

ROOT = Path(__file__).resolve().parents[1]

# Derandomized and small: a broken store is caught within these, and shrinking stays quick.
FAST = Settings(model.model_settings("ci"), max_examples=100, stateful_step_count=15)


# -- broken stores ----------------------------------------------------------------------------

class UnfencedMetaStore(MemoryStore):
    """put_meta skips the fence: stale and foreign leases write meta."""

    def put_meta(self, meta: RunMeta, lease=None) -> None:
        with self._lock:
            self._oracle.put_meta(meta, None, self._clock())


class WritesThenRefuses(MemoryStore):
    """put_meta writes first and checks the fence after: the refusal is typed but not clean."""

    def put_meta(self, meta: RunMeta, lease=None) -> None:
        with self._lock:
            self._oracle.put_meta(meta, None, self._clock())
            self._oracle.fence(meta.run_id, lease, self._clock())


class EpochResetOnRelease(MemoryStore):
    """release forgets the epoch high-water mark: the next acquire reissues epoch 1."""

    def release(self, lease) -> None:
        super().release(lease)
        with self._lock:
            del self._oracle.state.tenures[lease.run_id]


class NoRunMatchStore(MemoryStore):
    """The blob fence checks the lease against the lease's own run, not the run the ref names."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        store = self

        class Blobs(type(self.transcripts)):
            def put(self, ref, blob, lease=None):
                with store._lock:
                    if lease is not None:
                        store._oracle.fence(lease.run_id, lease, store._clock())
                    store._oracle.blob_put(ref, blob, None, store._clock())

        self.transcripts = Blobs(self)


class PaddedBlobs(MemoryStore):
    """Blob puts store one extra byte: the same refs, other bytes."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        inner = self.transcripts

        class Blobs(type(inner)):
            def put(self, ref, blob, lease=None):
                inner.put(ref, bytes(blob) + b"\0", lease)

        self.transcripts = Blobs(self)


class UntypedAcquireRefusal(SqliteStore):
    """acquire refuses a live holder with RuntimeError instead of LeaseHeldError."""

    def acquire(self, run_id: str, owner: str):
        try:
            return super().acquire(run_id, owner)
        except LeaseHeldError as exc:
            raise RuntimeError(f"run {run_id} is busy") from exc


class RefusesLiveRenew(MemoryStore):
    """renew is always refused: safe, but it starves the live holder."""

    def renew(self, lease):
        raise LeaseHeldError(lease.run_id, None, "renew not supported")


def _memory_factory(cls):
    def factory(location: str, *, lease_ttl_ms: int, clock=None):
        return cls(lease_ttl_ms, clock=clock or time.monotonic)

    factory.__qualname__ = f"open_{cls.__name__}"
    return factory


def open_untyped_acquire(location: str, *, lease_ttl_ms: int, clock=None):
    """Named by spec in the CLI test."""
    return UntypedAcquireRefusal(str(Path(location) / "store.db"), lease_ttl_ms, clock=clock or time.time)


class AcquireWhileLiveNoClock(NoClockStore):
    def acquire(self, run_id: str, owner: str):
        with self._tx() as conn:
            conn.execute("UPDATE leases SET released = 1 WHERE run_id = ?", (run_id,))
        return super().acquire(run_id, owner)


def open_acquire_while_live_no_clock(location: str, *, lease_ttl_ms: int):
    return AcquireWhileLiveNoClock(str(Path(location) / "store.db"), lease_ttl_ms)


class DeleteChoiceByRun(MemoryStore):
    """A fenced delete ends the tenure on r1 and keeps it on r2: the store answers both ways."""

    def delete(self, run_id, lease=None):
        super().delete(run_id, lease)
        if lease is not None and run_id == "r1":
            with self._lock:
                self._oracle.state.tenures[run_id].released = True


class SlowMetaStore(MemoryStore):
    """put_meta takes 0.4 s: past a call-returns bound of 0.25 s, which no other call of a memory store nears even on
    a loaded machine (a 20 ms bound made the test fail when another call was descheduled that long)."""

    def put_meta(self, meta, lease=None):
        time.sleep(0.4)
        super().put_meta(meta, lease)


class EveryThirdCallBusy(MemoryStore):
    """Every third call answers StoreBusyError first (nothing written); the retry goes through."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0

    def __getattribute__(self, name):
        attr = super().__getattribute__(name)
        if name not in ("acquire", "renew", "release", "append", "put_meta", "delete", "load", "get_meta"):
            return attr

        def call(*args, **kwargs):
            self.calls += 1
            if self.calls % 3 == 0:
                raise StoreBusyError(f"{name}: busy this once")
            return attr(*args, **kwargs)

        return call


# -- the reference stores pass ----------------------------------------------------------------

@pytest.mark.parametrize("spec", ["memory:", "sqlite:"])
def test_reference_stores_pass(spec):
    outcome = model.check_model(spec, settings=Settings(FAST, max_examples=60, stateful_step_count=30))
    assert outcome.passed, (outcome.error, outcome.program)


class DeclaredUnfencedMeta(UnfencedMetaStore):
    """The same unfenced put_meta, but honest about it: no fencing clause applies."""

    fenced_writes = False


def test_a_store_declaring_unfenced_writes_is_not_held_to_the_fence():
    outcome = model.check_model(_memory_factory(DeclaredUnfencedMeta), settings=FAST)
    assert outcome.passed, (outcome.error, outcome.program)


def test_a_store_without_the_declaration_runs_in_real_time_though_its_factory_takes_options():
    # open_no_clock takes **options and would swallow a clock=: only the declaration counts.
    machine = model.machine_for(open_no_clock)
    assert machine.fake_clock is None  # not decided before the store is asked
    machine.prepare()
    assert machine.fake_clock is False and machine.lease_ttl_ms == model.REAL_TTL_MS
    assert "does not declare injectable_clock" in machine.clock_reason
    outcome = model.check_model(open_no_clock, settings=Settings(FAST, max_examples=6, stateful_step_count=12))
    assert outcome.passed, (outcome.error, outcome.program)
    assert outcome.clock == "real" and "does not declare injectable_clock" in outcome.clock_reason
    # real time: the model cannot tell whose clock judged expiry, so it does not claim store-clock
    assert "store-clock" not in outcome.exercised and outcome.exercised["ttl-honoured"] > 0


def test_a_declaring_store_gets_the_fake_clock_and_says_so():
    outcome = model.check_model("sqlite:", settings=Settings(FAST, max_examples=10))
    assert outcome.passed and outcome.clock == "fake" and outcome.lease_ttl_ms == model.FAKE_TTL_MS
    assert outcome.clock_reason == "fake clock: the store declares injectable_clock = True"
    assert outcome.exercised["store-clock"] > 0
    assert model.FakeClock is FakeClock  # one shared clock, still importable from soak.model


def test_clock_fake_on_a_store_without_the_declaration_is_a_one_line_usage_error(capsys):
    from soak.cli import main

    with pytest.raises(ScenarioError, match="injectable_clock = True"):
        model.check_model(open_no_clock, clock="fake", settings=FAST)
    assert main(["model", "--store", "tests.certify_stores:open_no_clock", "--clock", "fake"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--clock fake needs a store that declares injectable_clock = True" in err
    assert "--clock auto" in err  # names the fix


# -- broken stores fail, name the clause, and shrink to a few steps ---------------------------

@pytest.mark.parametrize(
    "factory, clauses, rule",
    [
        (_memory_factory(UnfencedMetaStore), {"stale-rejected", "run-match"}, "state.put_meta("),
        (_memory_factory(EpochResetOnRelease), {"epoch-monotonic"}, "state.release("),
        (_memory_factory(NoRunMatchStore), {"run-match"}, "state.put_blob("),
        (open_untyped_acquire, {"typed-refusal"}, "state.acquire("),
        (_memory_factory(RefusesLiveRenew), {"live-accepted"}, "state.renew("),
        (_memory_factory(PaddedBlobs), {"journal-a4"}, "state.put_blob("),
        (_memory_factory(WritesThenRefuses), {"stale-rejected", "run-match", "typed-refusal"}, "state.put_meta("),
    ],
    ids=["unfenced-meta", "epoch-reset-on-release", "no-run-match", "untyped-refusal", "refuses-live-renew",
         "padded-blobs", "writes-then-refuses"],
)
def test_broken_store_fails_with_a_short_program(factory, clauses, rule):
    # a broken store is found on the first failing program, so a larger budget costs nothing when the model works;
    # 100 programs missed epoch-reset-on-release on about 1 seed in 12 (the derandomized seed moves with collection)
    outcome = model.check_model(factory, settings=Settings(FAST, max_examples=600))
    assert not outcome.passed
    assert outcome.clause in clauses, outcome.error
    assert outcome.steps <= 6, "\n".join(outcome.program)  # usually 2-3; the shrinker can stall a little longer
    # the rule itself, or a rule that makes that call (`state.outlive_the_ttl(how='put_meta')`)
    verb = rule.removeprefix("state.").removesuffix("(")
    assert any(line.lstrip().startswith(rule) or f"= {rule}" in line or f"how={verb!r}" in line
               for line in outcome.program), outcome.program
    assert outcome.program[0].startswith("state = ") and outcome.program[-1] == "state.teardown()"
    assert f"[{outcome.clause}]" in outcome.error


def test_real_time_mode_judges_a_double_grant_at_once():
    machine = model.machine_for(open_acquire_while_live_no_clock)()
    try:
        assert machine.clock is None
        machine.first_acquire("r1", "w1")
        with pytest.raises(model.ContractViolation) as info:
            machine.acquire("r1", "w2")
        assert info.value.clause == "lease-exclusive"
    finally:
        machine.teardown()


@pytest.mark.slow  # shrinking replays real sleeps: 5-30 s on a loaded 2-core machine
def test_real_time_mode_catches_a_double_grant():
    # the rules that show a store's choices (deletes, outliving the ttl) make a double grant rarer per program
    outcome = model.check_model(
        open_acquire_while_live_no_clock, settings=Settings(FAST, max_examples=100, stateful_step_count=10)
    )
    assert not outcome.passed and outcome.clause == "lease-exclusive", outcome.error
    assert outcome.steps <= 4, outcome.program


class LenientOracle(Oracle):
    """Accepts mutations and renews under an expired tenure nobody superseded (allowed)."""

    def fence(self, run_id, lease, now):
        if lease is not None and self.classify(lease, run_id, now) is LeaseStanding.EXPIRED:
            return
        super().fence(run_id, lease, now)


class LenientExpiryStore(MemoryStore):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._oracle = LenientOracle(self.lease_ttl_ms)


def test_expired_unsuperseded_either_way_is_conformant():
    outcome = model.check_model(_memory_factory(LenientExpiryStore), settings=FAST)
    assert outcome.passed, (outcome.error, outcome.program)
    # and the lenient path is taken: a write under an expired lease is followed, not failed
    machine = model.machine_for(_memory_factory(LenientExpiryStore))()
    try:
        lease = machine.first_acquire("r1", "w1")
        machine.let_time_pass(1.5)
        machine.put_meta("r1", lease, "running", 1, b"x")
        machine.renew(lease)
        machine.append("r1", lease, 1, b"y")
        machine.observable_state_matches_model()
        assert machine.store.get_meta("r1") == RunMeta("r1", "running", 1, b"x")
        assert [e.seq for e in machine.store.load("r1")] == [1]
    finally:
        machine.teardown()


def test_run_model_raises_the_contract_violation():
    with pytest.raises(model.ContractViolation) as info:
        model.run_model(open_untyped_acquire, settings=FAST)
    assert info.value.clause == "typed-refusal"
    assert any("state.acquire(" in note for note in getattr(info.value, "__notes__", ()))


# -- busy answers are retried; busy on every attempt is inconclusive -------------------------

def test_busy_answers_are_retried_and_counted():
    outcome = model.check_model(_memory_factory(EveryThirdCallBusy), settings=Settings(FAST, max_examples=20))
    assert outcome.passed, (outcome.error, outcome.program)
    assert outcome.busy_retries > 20  # a third of the calls answered busy once


@pytest.mark.parametrize("factory, first_busy", [(open_always_busy, "preflight put_meta"),
                                                 (open_busy_acquire, "acquire(")],
                         ids=["every-call", "acquire-only"])
def test_a_store_busy_on_every_attempt_is_inconclusive_not_a_pass(factory, first_busy):
    outcome = model.check_model(factory, settings=FAST)
    assert outcome.inconclusive and not outcome.passed and outcome.result == "inconclusive"
    assert outcome.clause is None and outcome.program == ()  # not a violation of any clause
    assert first_busy in outcome.reason and "StoreBusyError 60 times in a row" in outcome.reason
    assert outcome.busy_retries == 60 and outcome.exercised.get("lease-exclusive", 0) == 0


def test_cli_exits_3_on_an_inconclusive_run_and_run_model_skips(capsys):
    from soak.cli import main

    assert main(["model", "--store", "tests.certify_stores:open_busy_acquire", "--examples", "3"]) == 3
    out = capsys.readouterr().out
    assert "soak model: INCONCLUSIVE against tests.certify_stores:open_busy_acquire" in out
    assert "busy: 60 StoreBusyError answer(s) retried" in out
    # Under pytest and unittest an inconclusive run is a skip (never a pass); Hypothesis stops at once.
    with pytest.raises(model.ModelInconclusive, match="inconclusive: acquire"):
        model.run_model(open_busy_acquire, settings=FAST)
    assert issubclass(model.ModelInconclusive, unittest.SkipTest)


# -- store choices: accepted both ways, reported, held to within a program -----------------------

def test_delete_ending_the_tenure_is_accepted_and_reported():
    outcome = model.check_model(open_delete_ends_tenure, settings=FAST)
    assert outcome.passed, (outcome.error, outcome.program)
    assert outcome.choices["delete-ends-tenure"] == "ends"
    assert "the tenure was ended" in outcome.choice_detail["delete-ends-tenure"]
    assert "the probe before the programs: an append" in outcome.choice_detail["delete-ends-tenure"]
    keeps = model.check_model("sqlite:", settings=Settings(FAST, max_examples=40))
    assert keeps.passed and keeps.choices["delete-ends-tenure"] == "keeps"


def test_the_delete_choice_is_probed_once_and_every_program_is_held_to_it():
    # ends: the probe saw it, so the lease is stale at once after the delete
    machine = model.machine_for(open_delete_ends_tenure)()
    try:
        assert type(machine).delete_probe is True and "was refused" in type(machine).delete_probe_evidence
        lease = machine.first_acquire("r1", "w1")
        machine.delete_run("r1", lease)
        assert machine.oracle.classify(lease, "r1", machine.clock.now) is LeaseStanding.STALE
        machine.renew(lease)  # refused: the store ends tenures on delete
        second = machine.acquire("r1", "w2")  # granted at once, epoch 2: the high-water mark survived
        assert second == Lease("r1", "w2", 2)
        machine.observable_state_matches_model()
    finally:
        machine.teardown()
    # keeps: the tenure stays live, an acquire by another owner is refused and still adds a lease (the holder's)
    machine = model.machine_for("sqlite:")()
    try:
        assert type(machine).delete_probe is False and "was accepted" in type(machine).delete_probe_evidence
        lease = machine.first_acquire("r1", "w1")
        machine.delete_run("r1", lease)
        assert machine.oracle.classify(lease, "r1", machine.clock.now) is LeaseStanding.LIVE
        assert machine.acquire("r1", "w2") == lease
        machine.append("r1", lease, 1, b"x")  # still live: accepted
        machine.observable_state_matches_model()
    finally:
        machine.teardown()


class DeleteBreaksNoProbe(MemoryStore):
    """A memory store whose fenced delete raises on the probe's run: the probe cannot tell the choice."""

    def delete(self, run_id, lease=None):
        if run_id == "soak-delete-probe":
            raise LeaseHeldError(run_id, None, "no")
        super().delete(run_id, lease)


def test_where_the_probe_cannot_tell_the_programs_learn_the_choice():
    machine = model.machine_for(_memory_factory(DeleteBreaksNoProbe))()
    try:
        assert type(machine).delete_probe is None
        lease = machine.first_acquire("r1", "w1")
        machine.delete_run("r1", lease)
        assert machine.oracle.undecided("r1")
        machine.renew(lease)  # accepted: the delete kept the tenure
        assert machine.oracle.delete_ends_tenure is False
    finally:
        machine.teardown()


def test_a_refused_live_renew_after_a_delete_is_live_accepted_not_a_delete_choice():
    machine = model.machine_for(_memory_factory(RefusesLiveRenew))()
    try:
        lease = machine.first_acquire("r1", "w1")
        machine.delete_own_run(lease)
        with pytest.raises(model.ContractViolation) as info:
            machine.renew(lease)  # the tenure is still held (another owner is refused): the renew was live
        assert info.value.clause == "live-accepted"
    finally:
        machine.teardown()


def test_a_store_answering_both_ways_on_delete_breaks_delete_semantics():
    machine = model.machine_for(_memory_factory(DeleteChoiceByRun))()
    try:
        assert type(machine).delete_probe is False  # the probe's run is neither r1 nor r2: kept there
        first = machine.first_acquire("r1", "w1")
        machine.delete_own_run(first)
        with pytest.raises(model.ContractViolation) as info:
            machine.renew(first)  # refused, and another owner is granted r1 at once: this delete ended the tenure
        assert info.value.clause == "delete-semantics" and "answered both ways" in str(info.value)
    finally:
        machine.teardown()
    # The search finds it too: a fenced delete on r1 and what shows that it ended the tenure there.
    outcome = model.check_model(_memory_factory(DeleteChoiceByRun),
                                settings=Settings(FAST, max_examples=500, stateful_step_count=30))
    assert not outcome.passed and outcome.clause == "delete-semantics", outcome.error
    assert "answered both ways" in outcome.error and "the probe before the programs" in outcome.error
    assert any("delete_own_run(" in line or "delete_run(" in line for line in outcome.program), outcome.program


def test_expired_unsuperseded_is_reported_as_the_stores_choice():
    strict = model.check_model("memory:", settings=Settings(FAST, max_examples=40))
    assert strict.passed and strict.choices["expired-unsuperseded"] == "refuses"
    assert "refused" in strict.choice_detail["expired-unsuperseded"]
    lenient = model.check_model(_memory_factory(LenientExpiryStore), settings=Settings(FAST, max_examples=40))
    assert lenient.passed and lenient.choices["expired-unsuperseded"] == "accepts"
    # the model can fail no outcome there, so it never counts the clause as exercised
    for outcome in (strict, lenient):
        assert not set(outcome.exercised) & set(model.MODEL_NEVER_EXERCISES)


def test_a_store_without_fenced_writes_does_not_exercise_the_fence_on_mutations():
    outcome = model.check_model(open_single_writer, settings=Settings(FAST, max_examples=30))
    assert outcome.passed, (outcome.error, outcome.program)
    assert "stale-rejected" not in outcome.exercised and "run-match" not in outcome.exercised
    assert outcome.exercised["unleased-passthrough"] > 0 and outcome.exercised["journal-a1"] > 0


# -- call-returns: each store call is timed against the bound -------------------------------------

def test_a_call_past_the_bound_breaks_call_returns_naming_the_call_and_its_duration():
    machine = model.machine_for(_memory_factory(SlowMetaStore), call_bound_s=0.25)()
    try:
        lease = machine.first_acquire("r1", "w1")
        with pytest.raises(model.ContractViolation) as info:
            machine.put_meta("r1", lease, "running", 1, b"")
        assert info.value.clause == "call-returns"
        assert "put_meta(RunMeta(run_id='r1'" in str(info.value) and "past the bound of 0.25 s" in str(info.value)
        took = float(str(info.value).split(" took ")[1].split(" s,")[0])
        assert 0.4 <= took < 10
    finally:
        machine.teardown()
    outcome = model.check_model(_memory_factory(SlowMetaStore), call_bound_s=0.25,
                                settings=Settings(FAST, max_examples=20))
    assert outcome.clause == "call-returns" and "put_meta(RunMeta(run_id='r1'" in outcome.error  # the slow call
    # the rule itself, or a rule that makes that call (`state.outlive_the_ttl(how='put_meta')`): which one the
    # shrinker ends at depends on the draws, which Hypothesis derives from the machine's source under `ci`
    assert any("put_meta(" in line or "how='put_meta'" in line for line in outcome.program), outcome.program
    assert outcome.steps <= 3, outcome.program


def test_the_default_bound_is_the_contracts():
    machine = model.machine_for("memory:")
    machine.prepare()
    assert machine.call_bound_s == default_call_bound_s(model.FAKE_TTL_MS) == 20.0


# -- the oracle's readings of the delete choice ------------------------------------------------

def test_oracle_delete_choice_readings():
    keeps, ends, unknown = (Oracle(1000, delete_ends_tenure=c) for c in (False, True, None))
    for oracle in (keeps, ends, unknown):
        lease = oracle.acquire("r", "a", 0.0)
        oracle.append("r", JournalEntry(1, b"x"), lease, 0.1)
        oracle.delete("r", lease, 0.2)
        assert oracle.load("r") == [] and oracle.high_water("r") == 1
    lease = Lease("r", "a", 1)
    assert keeps.classify(lease, "r", 0.3) is LeaseStanding.LIVE and keeps.holder("r", 0.3) == lease
    assert ends.classify(lease, "r", 0.3) is LeaseStanding.STALE and ends.holder("r", 0.3) is None
    assert ends.acquire("r", "b", 0.3) == Lease("r", "b", 2)  # free at once; the epoch survived
    assert unknown.classify(lease, "r", 0.3) is LeaseStanding.UNDECIDED and unknown.undecided("r")
    assert unknown.classify(lease, "r", 0.3, delete_ends=False) is LeaseStanding.LIVE
    assert unknown.classify(lease, "r", 0.3, delete_ends=True) is LeaseStanding.STALE
    assert unknown.holder("r", 0.3) == lease and unknown.holder("r", 0.3, delete_ends=True) is None
    with pytest.raises(LeaseHeldError):  # the oracle cannot accept for a store whose choice it does not know
        unknown.renew(lease, 0.3)
    unknown.settle_delete_choice(True)
    assert unknown.classify(lease, "r", 0.3) is LeaseStanding.STALE and unknown.ended_by_delete("r")
    # an unleased delete is no caller's tenure: nothing ends
    other = Oracle(1000, delete_ends_tenure=True)
    held = other.acquire("r", "a", 0.0)
    other.delete("r", None, 0.1)
    assert other.classify(held, "r", 0.2) is LeaseStanding.LIVE


# -- expiry boundary: either outcome allowed, the model follows the store -------------------

def test_standing_near_expiry_counts_as_expired():
    machine = model.machine_for("memory:")()
    try:
        lease = machine.oracle.acquire("r1", "w1", machine.clock.now)
        expiry = machine.clock.now + machine.oracle.ttl
        assert machine._standing(lease, "r1", expiry - 1, expiry - 1) is LeaseStanding.LIVE
        assert machine._standing(lease, "r1", expiry, expiry) is LeaseStanding.EXPIRED
        assert machine._standing(lease, "r2", expiry - 1, expiry - 1) is LeaseStanding.FOREIGN
    finally:
        machine.teardown()


# -- settings and profiles --------------------------------------------------------------------

def test_profiles_are_explicit_about_deadlines_and_randomness():
    dev, ci, nightly = (model.model_settings(p) for p in ("dev", "ci", "nightly"))
    for s in (dev, ci, nightly):
        assert s.deadline is None
    assert ci.derandomize is True and ci.database is None
    assert nightly.derandomize is False and nightly.database is not None
    assert nightly.max_examples > ci.max_examples >= dev.max_examples
    assert model.model_settings("dev", max_examples=7).max_examples == 7


def test_under_ci_the_default_is_ci_and_nightly_stays_random(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert model.default_profile() == "ci"
    assert model.model_settings().derandomize is True
    nightly = model.model_settings("nightly")
    assert nightly.derandomize is False and nightly.database is not None
    from hypothesis._settings import _CI_VARS  # every variable Hypothesis reads as "in CI"

    for var in _CI_VARS:
        monkeypatch.delenv(var, raising=False)
    assert model.default_profile() == "dev"


def test_plugin_offers_exactly_the_model_profiles():
    from soak import pytest_plugin

    assert sorted(pytest_plugin._PROFILES) == sorted(model.PROFILES)
    assert model.__all__ == sorted(model.__all__)


def test_unknown_profile_and_bad_examples_name_the_fix():
    with pytest.raises(ScenarioError, match="dev, ci, nightly"):
        model.model_settings("weekly")
    with pytest.raises(ScenarioError, match="at least 1"):
        model.model_settings("dev", max_examples=0)
    with pytest.raises(StoreSpecError):
        model.machine_for("nosuchscheme:x")


def test_machine_test_case_is_a_one_line_vendor_entry_point():
    case = model.machine_test_case("memory:", settings=Settings(FAST, max_examples=5))
    assert case.settings.max_examples == 5
    result = case("runTest").run()
    assert result.wasSuccessful(), result.failures + result.errors
    broken = model.machine_test_case(_memory_factory(RefusesLiveRenew), settings=FAST)
    result = broken("runTest").run()
    assert not result.wasSuccessful()


# -- the CLI and the pytest plugin ------------------------------------------------------------

def _cli_args(**kw) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    model.configure_parser(p)
    argv = [f"--{k}={v}" for k, v in kw.items()]
    return p.parse_args(argv)


def test_cli_passes_and_fails_with_the_minimal_program(capsys):
    assert model.run_cli(_cli_args(store="memory:", examples=5, profile="ci")) == 0
    out = capsys.readouterr().out
    assert out.startswith("soak model: pass: 5 programs") and "clock: fake clock: the store declares" in out
    assert "busy: 0 StoreBusyError answer(s) retried" in out
    assert "choice expired-unsuperseded: " in out and "choice delete-ends-tenure: " in out
    assert model.run_cli(_cli_args(store="tests.test_model:open_untyped_acquire", examples=30, profile="ci")) == 1
    out = capsys.readouterr().out
    assert "[typed-refusal]" in out and "minimal failing program:" in out
    program = out.split("minimal failing program:")[1]
    assert program.count("acquire(") == 2 and "state.teardown()" in program


def test_pytest_models_runs_on_the_store_named_by_the_option():
    cmd = [sys.executable, "-m", "pytest", "models", "-q", "-p", "no:cacheprovider", "--soak-profile", "ci"]
    ok = subprocess.run([*cmd, "--store", "memory:"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert "1 passed" in ok.stdout
    bad = subprocess.run([*cmd, "--store", "nosuchscheme:x"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 4
    assert "--soak-store:" in bad.stderr and "Traceback" not in bad.stderr
    # a store busy on every attempt: the model test is skipped as inconclusive, never passed
    busy = subprocess.run([*cmd, "-rs", "--store", "tests.certify_stores:open_busy_acquire"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert busy.returncode == 0 and "1 skipped" in busy.stdout and "passed" not in busy.stdout, busy.stdout[-2000:]
    # (the first acquire is the delete-choice probe's, before any program)
    assert "inconclusive: acquire('soak-delete-probe', 'probe-a') answered StoreBusyError 60 times in a row" \
        in busy.stdout


def test_a_store_shared_between_locations_is_a_one_line_usage_error(tmp_path, capsys):
    from soak.cli import main

    spec = f"sqlite://{tmp_path}/shared.db"
    with pytest.raises(StoreBootError, match="not sqlite:///path"):
        model.check_model(spec, settings=FAST)
    assert main(["model", "--store", spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "empty store per program" in err
    left = open_sqlite(str(tmp_path), lease_ttl_ms=100, path=str(tmp_path / "shared.db"))
    assert left.list_runs() == []  # the preflight left nothing behind
    left.close()
