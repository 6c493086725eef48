"""The Hypothesis model: passes on the reference stores, fails small broken ones with short programs.

Each broken store below is a reference store with one defect. The model must fail it, name the
clause it breaks, and shrink the failing program to a handful of steps.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import settings as Settings

from soak import model
from soak.errors import ScenarioError, StoreBootError, StoreSpecError
from soak.oracle import LeaseStanding, Oracle
from soak.spi import LeaseHeldError, RunMeta
from soak.stores.memory import MemoryStore
from soak.stores.sqlite import SqliteStore, open_sqlite

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


def open_sqlite_no_clock(location: str, *, lease_ttl_ms: int):
    """A factory without `clock=`: the model falls back to real time."""
    return open_sqlite(location, lease_ttl_ms=lease_ttl_ms)


class AcquireWhileLiveNoClock(SqliteStore):
    def acquire(self, run_id: str, owner: str):
        with self._tx() as conn:
            conn.execute("UPDATE leases SET released = 1 WHERE run_id = ?", (run_id,))
        return super().acquire(run_id, owner)


def open_acquire_while_live_no_clock(location: str, *, lease_ttl_ms: int):
    return AcquireWhileLiveNoClock(str(Path(location) / "store.db"), lease_ttl_ms)


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


def test_real_time_mode_passes_on_a_store_without_a_clock():
    machine = model.machine_for(open_sqlite_no_clock)
    assert machine.fake_clock is False and machine.lease_ttl_ms == model.REAL_TTL_MS
    outcome = model.check_model(open_sqlite_no_clock, settings=Settings(FAST, max_examples=6, stateful_step_count=12))
    assert outcome.passed, (outcome.error, outcome.program)


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
    outcome = model.check_model(factory, settings=FAST)
    assert not outcome.passed
    assert outcome.clause in clauses, outcome.error
    assert outcome.steps <= 6, "\n".join(outcome.program)  # usually 2-3; the shrinker can stall a little longer
    assert any(line.lstrip().startswith(rule) or f"= {rule}" in line for line in outcome.program), outcome.program
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
    outcome = model.check_model(
        open_acquire_while_live_no_clock, settings=Settings(FAST, max_examples=40, stateful_step_count=10)
    )
    assert not outcome.passed and outcome.clause == "lease-exclusive", outcome.error
    assert outcome.steps <= 3, outcome.program


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
    assert "pass" in capsys.readouterr().out
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
    assert "--store:" in bad.stderr and "Traceback" not in bad.stderr


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
