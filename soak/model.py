"""Hypothesis state machines that drive a real store and the pure model in lockstep.

`FencedStoreMachine` runs random programs of lease and data operations (acquire, renew,
release, appends at the right and wrong seq, meta writes, blob puts and deletes, run deletes)
against a store and against `soak.oracle.Oracle`, with live, superseded, foreign and absent
leases. Every outcome is compared by type, the full observable state after every step, and
a failure names the contract clause it breaks (`soak.clauses`).

Time: where the store's factory accepts `clock=`, store and model share a fake clock that a
rule advances; otherwise a rule sleeps past a short ttl and every outcome near an expiry
boundary is allowed either way (as `expired-unsuperseded` is), the model following the store.

A vendor runs it from its own tests in one line::

    TestMyStore = soak.model.machine_test_case("mypkg.store:open_store")

or calls `run_model(spec, max_examples=..., profile=...)`; `soak model --store SPEC` is the CLI.
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import sys
import tempfile
import time
import unittest
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings as Settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from soak.clauses import CLAUSES
from soak.errors import HarnessError, ScenarioError, StoreBootError
from soak.oracle import LeaseStanding, Oracle
from soak.spi import (
    RUN_STATUSES,
    JournalEntry,
    JournalOrderError,
    Lease,
    LeaseHeldError,
    RunMeta,
    StoreBusyError,
    StoreError,
)
from soak.stores import StoreTarget, resolve

__all__ = [
    "ContractViolation",
    "FakeClock",
    "FencedStoreMachine",
    "ModelOutcome",
    "PROFILES",
    "check_model",
    "configure_parser",
    "default_profile",
    "machine_for",
    "machine_test_case",
    "model_settings",
    "run_cli",
    "run_model",
]

RUNS = ("r1", "r2")
OWNERS = ("w1", "w2", "w3")
BLOB_NAMES = ("t1", "t2")

#: ttl with the fake clock (its value does not matter: time only moves when a rule moves it)
FAKE_TTL_MS = 1000
#: ttl with real time: short, so a rule can sleep past it cheaply
REAL_TTL_MS = 100
#: fake clock: how far from an expiry instant an outcome is still judged either way (seconds)
_FAKE_SLACK = 1e-6


class ContractViolation(AssertionError):
    """A model step where the store broke a clause; `clause` is an id from `soak.clauses`."""

    def __init__(self, clause: str, message: str) -> None:
        self.clause = clause
        super().__init__(f"[{clause}] {message} (clause {clause}: {CLAUSES.get(clause, clause)})")


# -- Hypothesis profiles: registered here and nowhere else ----------------------------------

#: our profile name -> Hypothesis profile name (namespaced so a vendor's own `ci` stays theirs)
PROFILES: dict[str, str] = {"dev": "soak-dev", "ci": "soak-ci", "nightly": "soak-nightly"}

_BASE = dict(
    # Store set-up (a fresh location per example) must never trip a deadline.
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    report_multiple_bugs=False,
    # The explain phase re-runs the shrunk program many times and adds nothing to a contract failure.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
Settings.register_profile(
    "soak-dev", Settings(Settings.get_profile("default"), max_examples=50, stateful_step_count=30, **_BASE)
)
Settings.register_profile(
    "soak-ci",
    Settings(
        Settings.get_profile("default"),
        max_examples=100,
        stateful_step_count=40,
        derandomize=True,
        database=None,
        print_blob=True,
        **_BASE,
    ),
)
Settings.register_profile(
    "soak-nightly",
    Settings(
        Settings.get_profile("default"),
        max_examples=1000,
        stateful_step_count=50,
        # Randomness on even where Hypothesis detects CI; failures kept for replay.
        derandomize=False,
        database=DirectoryBasedExampleDatabase(os.path.join(".hypothesis", "examples")),
        print_blob=True,
        **_BASE,
    ),
)


def default_profile() -> str:
    """`ci` where Hypothesis detects a CI environment, else `dev`."""
    try:
        from hypothesis._settings import is_in_ci
    except ImportError:  # a private helper: fall back to the common variable
        return "ci" if os.environ.get("CI") else "dev"
    return "ci" if is_in_ci() else "dev"


def model_settings(profile: str | None = None, *, max_examples: int | None = None, **overrides: Any) -> Settings:
    """The Hypothesis settings for one of `PROFILES` (default: `ci` under CI, else `dev`)."""
    name = profile or default_profile()
    if name not in PROFILES:
        raise ScenarioError(f"unknown model profile {name!r}; use one of {', '.join(PROFILES)}")
    if max_examples is not None:
        if max_examples < 1:
            raise ScenarioError(f"--examples must be at least 1, got {max_examples}")
        overrides["max_examples"] = max_examples
    return Settings(Settings.get_profile(PROFILES[name]), **overrides)


# -- time -----------------------------------------------------------------------------------

class FakeClock:
    """A clock shared by the store and the model; only `advance` moves it."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def accepts_clock(factory: Callable[..., Any]) -> bool:
    """True where the factory names a `clock` keyword (the reference stores do)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    p = params.get("clock")
    return p is not None and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)


# -- the machine ----------------------------------------------------------------------------

_LEASE = Bundle("leases")
_MAYBE_LEASE = st.none() | _LEASE
_RUN = st.sampled_from(RUNS)
_PAYLOAD = st.binary(max_size=4)


@dataclass
class _Outcome:
    value: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        if self.error is None:
            return "accepted"
        return f"raised {type(self.error).__name__}: {self.error}"


class FencedStoreMachine(RuleBasedStateMachine):
    """Drives one store and `soak.oracle.Oracle` in lockstep; build one with `machine_for(spec)`."""

    #: set by `machine_for`
    target: StoreTarget | None = None
    fake_clock: bool = True
    lease_ttl_ms: int = FAKE_TTL_MS
    _preflight_ok: bool = False

    leases = _LEASE

    def __init__(self) -> None:
        super().__init__()
        if self.target is None:
            raise HarnessError("FencedStoreMachine needs a store; build one with soak.model.machine_for(spec)")
        self.clock = FakeClock() if self.fake_clock else None
        if not type(self)._preflight_ok:
            self._preflight()
            type(self)._preflight_ok = True
        self.location = tempfile.mkdtemp(prefix="soak-model-")
        self.store = None
        try:
            self.store = self._open(self.location)
        finally:
            if self.store is None:
                shutil.rmtree(self.location, ignore_errors=True)
        self.oracle = Oracle(self.lease_ttl_ms)
        self._epoch0 = time.monotonic()
        self._base_slack = _FAKE_SLACK if self.clock else 0.03 + 0.1 * self.lease_ttl_ms / 1000.0
        self._slowest_call = 0.0
        # What the last step did, the clause it threatens and whether it was a refusal, so the
        # state invariant can name the clause a difference breaks.
        self._last = ("the initial state", "typed-refusal", False)

    def _open(self, location: str):
        extra = {"clock": self.clock} if self.clock is not None else {}
        return self.target.open(location, self.lease_ttl_ms, **extra)

    def _preflight(self) -> None:
        """Once per machine: a store opened over a fresh location must not see another's data."""
        first, second = tempfile.mkdtemp(prefix="soak-model-"), tempfile.mkdtemp(prefix="soak-model-")
        try:
            store = self._open(first)
            try:
                store.put_meta(RunMeta("soak-preflight", "running", 0))
                other = self._open(second)
                try:
                    seen = other.get_meta("soak-preflight")
                finally:
                    other.close()
                store.delete("soak-preflight")  # leave a shared store as it was
            finally:
                store.close()
        finally:
            shutil.rmtree(first, ignore_errors=True)
            shutil.rmtree(second, ignore_errors=True)
        if seen is not None:
            raise StoreBootError(
                f"store {self.target.spec} shares data between locations, but the model needs an empty store "
                "per program: use a spec that keeps its data inside the location (sqlite:, not sqlite:///path)"
            )

    def teardown(self) -> None:
        try:
            if self.store is not None:
                self.store.close()
        finally:
            shutil.rmtree(self.location, ignore_errors=True)

    # -- plumbing -------------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock.now if self.clock else time.monotonic() - self._epoch0

    def _call(self, fn: Callable[[], Any]) -> tuple[_Outcome, float, float]:
        """Run one store call; returns its outcome and the model-time window it ran in."""
        t0 = self._now()
        try:
            out = _Outcome(value=fn())
        except Exception as exc:  # every exception is an outcome to judge
            out = _Outcome(error=exc)
        t1 = self._now()
        self._slowest_call = max(self._slowest_call, t1 - t0)
        return out, t0, t1

    @property
    def _slack(self) -> float:
        """How far an expiry instant is uncertain: the store stamped a grant or renew somewhere
        inside that call, so with real time the slowest call so far widens every window."""
        return self._base_slack + (0.0 if self.clock else self._slowest_call)

    def _standing(self, lease: Lease, run_id: str, t0: float, t1: float) -> LeaseStanding:
        """Where the lease stood; a LIVE/EXPIRED boundary inside the window counts as EXPIRED."""
        lo = self.oracle.classify(lease, run_id, t0 - self._slack)
        hi = self.oracle.classify(lease, run_id, t1 + self._slack)
        return lo if lo is hi else LeaseStanding.EXPIRED

    def _fail(self, clause: str, message: str) -> None:
        __tracebackhide__ = True  # pytest shows the rule that failed, not this helper
        raise ContractViolation(clause, message)

    def _untyped(self, what: str, out: _Outcome) -> None:
        """Busy means nothing happened; anything untyped is a failure of typed-refusal."""
        if out.error is not None and not isinstance(out.error, StoreError):
            self._fail("typed-refusal", f"{what} raised untyped {type(out.error).__name__}: {out.error}")

    # -- leases ---------------------------------------------------------------------------

    @initialize(target=leases, run=_RUN, owner=st.sampled_from(OWNERS))
    def first_acquire(self, run: str, owner: str):
        """Every program starts holding a lease, so rules drawing one never meet an empty bundle."""
        return self.acquire(run, owner)

    @rule(target=leases, run=_RUN, owner=st.sampled_from(OWNERS))
    def acquire(self, run: str, owner: str):
        what = f"acquire({run!r}, {owner!r})"
        out, t0, t1 = self._call(lambda: self.store.acquire(run, owner))
        self._untyped(what, out)
        self._last = (what, "lease-exclusive", False)
        if isinstance(out.error, StoreBusyError):
            return multiple()
        held_lo = self.oracle.holder(run, t0 - self._slack)
        held_hi = self.oracle.holder(run, t1 + self._slack)
        if out.ok:
            if held_hi is not None:  # live at the latest instant the call could have run
                self._fail("lease-exclusive", f"{what} was granted while {held_hi} was still within its ttl "
                           "(two live tenures, or the store ended the first before its ttl)")
            want = Lease(run, owner, self.oracle.high_water(run) + 1)
            if out.value != want:
                clause = "epoch-monotonic" if getattr(out.value, "epoch", None) != want.epoch else "live-accepted"
                self._fail(clause, f"{what} returned {out.value!r}; expected {want!r}")
            self.oracle.acquire(run, owner, max(t0, t1 + self._slack) if held_lo is not None else t0)
            self.oracle.state.tenures[run].expires_at = t0 + self.oracle.ttl
            return out.value
        if not isinstance(out.error, LeaseHeldError):
            self._fail("typed-refusal", f"{what} {out.describe()}; a refused acquire raises LeaseHeldError")
        if held_lo is None:  # nobody could have held it at any instant of the call
            # The run's last tenure expired or was released (or never existed): it must be free.
            self._fail("ttl-honoured", f"{what} was refused though no tenure was live ({out.describe()})")
        return multiple()

    def _lease_op(self, verb: str, lease: Lease, call: Callable[[], Any],
                  accepted: Callable[[Any, float], None]) -> None:
        """Renew or release: judged by where the lease stands; `accepted` follows an ok outcome."""
        what = f"{verb}({lease!r})"
        out, t0, t1 = self._call(call)
        self._untyped(what, out)
        self._last = (what, "stale-lease-ops", False)
        if isinstance(out.error, StoreBusyError):
            return
        standing = self._standing(lease, lease.run_id, t0, t1)
        if out.ok:
            if standing is LeaseStanding.STALE:
                self._fail("stale-lease-ops", f"{what} was accepted under a superseded or released tenure")
            accepted(out, t0)
        elif not isinstance(out.error, LeaseHeldError):
            self._fail("typed-refusal", f"{what} {out.describe()}; a refused {verb} raises LeaseHeldError")
        elif standing is LeaseStanding.LIVE:
            self._fail("live-accepted", f"{what} was refused under the live tenure ({out.describe()})")

    @rule(lease=leases)
    def renew(self, lease: Lease) -> None:
        def accepted(out: Any, t0: float) -> None:
            if out.value != lease:
                self._fail("live-accepted", f"renew({lease!r}) returned {out.value!r}; a renew keeps owner and epoch")
            self.oracle.state.tenures[lease.run_id].expires_at = t0 + self.oracle.ttl

        self._lease_op("renew", lease, lambda: self.store.renew(lease), accepted)

    @rule(lease=leases)
    def release(self, lease: Lease) -> None:
        def accepted(out: Any, t0: float) -> None:
            self.oracle.state.tenures[lease.run_id].released = True

        self._lease_op("release", lease, lambda: self.store.release(lease), accepted)

    # -- fenced mutations -----------------------------------------------------------------

    def _mutate(
        self,
        what: str,
        run_id: str,
        lease: Lease | None,
        call: Callable[[], Any],
        apply: Callable[[], None],
        accepted_clause: str,
        order_refuses: bool = False,
        fenced: bool = True,
    ) -> None:
        """One fenced mutation: judge the store's outcome, then apply it to the model if accepted.

        `fenced` is the store's `fenced_writes` claim: where it is False, a leased mutation may
        be accepted or refused (no fencing clause applies) and the model follows the store.
        """
        out, t0, t1 = self._call(call)
        self._untyped(what, out)
        if isinstance(out.error, StoreBusyError):
            self._last = (f"{what} (busy: nothing written)", "typed-refusal", True)
            return
        standing = None if lease is None else self._standing(lease, run_id, t0, t1)
        if not fenced and standing is not None and standing is not LeaseStanding.LIVE:
            standing = LeaseStanding.EXPIRED  # either outcome is allowed
        fence_refuses = standing in (LeaseStanding.STALE, LeaseStanding.FOREIGN)
        fence_clause = "run-match" if standing is LeaseStanding.FOREIGN else "stale-rejected"
        if out.ok:
            self._last = (what, accepted_clause, False)
            if fence_refuses:
                self._fail(fence_clause, f"{what} was accepted under a {standing.value} lease")
            if order_refuses:
                self._fail("journal-a5", f"{what} was accepted though its seq is not above the tail")
            apply()  # under an expired, unsuperseded lease the store may accept: follow it
            return
        err = out.error
        self._last = (f"refused {what}", fence_clause if fence_refuses else "typed-refusal", True)
        allowed: list[type[StoreError]] = []
        if fence_refuses or standing is LeaseStanding.EXPIRED:
            allowed.append(LeaseHeldError)
        if order_refuses:
            allowed.append(JournalOrderError)
        if isinstance(err, tuple(allowed)):
            return
        if isinstance(err, LeaseHeldError):
            clause = "unleased-passthrough" if lease is None else "live-accepted"
            self._fail(clause, f"{what} was refused ({out.describe()}) though the lease stood "
                       f"{'absent' if standing is None else standing.value}")
        if isinstance(err, JournalOrderError):
            self._fail("journal-a5", f"{what} was refused with JournalOrderError though its seq is above the tail")
        names = " or ".join(e.__name__ for e in allowed) or "acceptance"
        self._fail("typed-refusal", f"{what} {out.describe()}; expected {names}")

    @rule(run=_RUN, lease=_MAYBE_LEASE, seq_offset=st.sampled_from([1, 2, 0, -1]), payload=_PAYLOAD)
    def append(self, run: str, lease: Lease | None, seq_offset: int, payload: bytes) -> None:
        entry = JournalEntry(max(self.oracle.tail(run) + seq_offset, 0), payload)
        self._mutate(
            f"append({run!r}, {entry!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.append(run, entry, lease),
            lambda: self.oracle.append(run, entry, None, self._now()),
            "journal-a1",
            fenced=bool(self.store.fenced_writes),
            order_refuses=entry.seq <= self.oracle.tail(run),
        )

    @rule(
        run=_RUN,
        lease=_MAYBE_LEASE,
        status=st.sampled_from(RUN_STATUSES),
        segments=st.integers(0, 3),
        payload=_PAYLOAD,
    )
    def put_meta(self, run: str, lease: Lease | None, status: str, segments: int, payload: bytes) -> None:
        meta = RunMeta(run, status, segments, payload)
        self._mutate(
            f"put_meta({meta!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.put_meta(meta, lease),
            lambda: self.oracle.put_meta(meta, None, self._now()),
            "meta-last-write",
            fenced=bool(self.store.fenced_writes),
        )

    @rule(run=_RUN, lease=_MAYBE_LEASE)
    def delete_run(self, run: str, lease: Lease | None) -> None:
        self._mutate(
            f"delete({run!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.delete(run, lease),
            lambda: self.oracle.delete(run, None, self._now()),
            "delete-semantics",
            fenced=bool(self.store.fenced_writes),
        )

    @rule(run=_RUN, name=st.sampled_from(BLOB_NAMES), lease=_MAYBE_LEASE, blob=_PAYLOAD)
    def put_blob(self, run: str, name: str, lease: Lease | None, blob: bytes) -> None:
        ref = f"{run}/{name}"
        self._mutate(
            f"transcripts.put({ref!r}, {blob!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.transcripts.put(ref, blob, lease),
            lambda: self.oracle.blob_put(ref, blob, None, self._now()),
            "blob-semantics",
            fenced=bool(self.store.transcripts.fenced_writes),
        )

    @rule(run=_RUN, name=st.sampled_from(BLOB_NAMES), lease=_MAYBE_LEASE)
    def delete_blob(self, run: str, name: str, lease: Lease | None) -> None:
        ref = f"{run}/{name}"
        self._mutate(
            f"transcripts.delete({ref!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.transcripts.delete(ref, lease),
            lambda: self.oracle.blob_delete(ref, None, self._now()),
            "blob-semantics",
            fenced=bool(self.store.transcripts.fenced_writes),
        )

    # -- time -----------------------------------------------------------------------------

    @rule(ttls=st.sampled_from([0.5, 1.5, 0.25, 0.9, 3.0]))
    def let_time_pass(self, ttls: float) -> None:
        """Advance the shared fake clock, or sleep (real time), by a multiple of the ttl."""
        if self.clock is not None:
            self.clock.advance(ttls * self.lease_ttl_ms / 1000.0)
        else:  # real time: past the ttl is past it; longer sleeps only cost wall time
            time.sleep(min(ttls, 1.5) * self.lease_ttl_ms / 1000.0)
        self._last = (f"let_time_pass({ttls})", "store-clock", False)

    # -- the state invariant --------------------------------------------------------------

    @invariant()
    def observable_state_matches_model(self) -> None:
        what, clause, refused = self._last
        store, oracle = self.store, self.oracle

        def differs(kind: str, got: Any, want: Any, bytes_only: bool) -> None:
            # After an accepted write, the same rows with other bytes break A4 (byte for byte).
            named = "journal-a4" if bytes_only and not refused else clause
            self._fail(named, f"after {what}: {kind} = {got!r}, model expects {want!r}")

        for run in RUNS:
            got, want = list(store.load(run)), oracle.load(run)
            if got != want:
                seqs, want_seqs = [e.seq for e in got], [e.seq for e in want]
                if not refused and seqs != want_seqs and sorted(seqs) == sorted(want_seqs):
                    self._fail("journal-a2", f"after {what}: load({run!r}) = {got!r}, out of append order {want!r}")
                differs(f"load({run!r})", got, want, seqs == want_seqs)
            got_meta, want_meta = store.get_meta(run), oracle.get_meta(run)
            if got_meta != want_meta:
                same_row = got_meta is not None and want_meta is not None and (
                    (got_meta.status, got_meta.segments) == (want_meta.status, want_meta.segments))
                differs(f"get_meta({run!r})", got_meta, want_meta, same_row)
            refs, want_refs = sorted(store.transcripts.list(run)), oracle.blob_list(run)
            if refs != want_refs:
                differs(f"transcripts.list({run!r})", refs, want_refs, False)
            for name in BLOB_NAMES:
                ref = f"{run}/{name}"
                got_blob, want_blob = store.transcripts.get(ref), oracle.blob_get(ref)
                if got_blob != want_blob:
                    differs(f"transcripts.get({ref!r})", got_blob, want_blob, None not in (got_blob, want_blob))
        listed = sorted(store.list_runs(), key=lambda m: m.run_id)
        if listed != oracle.list_runs():
            differs("list_runs()", listed, oracle.list_runs(), False)


# -- building and running -------------------------------------------------------------------

def machine_for(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
) -> type[FencedStoreMachine]:
    """A `FencedStoreMachine` subclass bound to one store (spec string, target or factory).

    `clock` is `auto` (fake where the factory accepts `clock=`), `fake` or `real`.
    """
    target = spec if isinstance(spec, StoreTarget) else resolve(spec)
    if clock not in ("auto", "fake", "real"):
        raise ScenarioError(f"clock must be auto, fake or real, got {clock!r}")
    fake = accepts_clock(target.factory) if clock == "auto" else clock == "fake"
    ttl = lease_ttl_ms or (FAKE_TTL_MS if fake else REAL_TTL_MS)
    return type(
        "FencedStoreMachine",
        (FencedStoreMachine,),
        {
            "target": target,
            "fake_clock": fake,
            "lease_ttl_ms": int(ttl),
            "__module__": __name__,
            # Hypothesis keys its example database (and derandomized seed) on this: one per store.
            "_hypothesis_internal_add_digest": f"{target.spec}|{fake}|{ttl}".encode(),
        },
    )


def machine_test_case(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    settings: Settings | None = None,
    profile: str | None = None,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
) -> type[unittest.TestCase]:
    """A unittest/pytest test case running the machine on one store; assign it in a test module."""
    machine = machine_for(spec, lease_ttl_ms=lease_ttl_ms, clock=clock)
    case = machine.TestCase
    case.settings = settings or model_settings(profile)
    case.__name__ = case.__qualname__ = "FencedStoreModelTest"
    return case


def run_model(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    max_examples: int | None = None,
    profile: str | None = None,
    settings: Settings | None = None,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
) -> None:
    """Run the machine on one store; raises Hypothesis' shrunk failure (a `ContractViolation`)."""
    machine = machine_for(spec, lease_ttl_ms=lease_ttl_ms, clock=clock)
    chosen = settings or model_settings(profile)
    if max_examples is not None:
        chosen = Settings(chosen, max_examples=max_examples)
    run_state_machine_as_test(machine, settings=chosen)


@dataclass(frozen=True)
class ModelOutcome:
    """The result of `check_model`: the minimal failing program and the clause, on failure."""

    passed: bool
    program: tuple[str, ...] = ()
    clause: str | None = None
    error: str = ""

    @property
    def steps(self) -> int:
        """Rule calls in the failing program (not set-up, invariant checks or teardown)."""
        return sum(1 for line in self.program if _is_step(line))


def _is_step(line: str) -> bool:
    line = line.strip()
    if line.startswith("state = ") or line in ("state.teardown()", "state.observable_state_matches_model()"):
        return False
    return "state." in line


def _program_from(exc: BaseException) -> tuple[str, ...]:
    """Hypothesis' printed program, from `state = ...` to `state.teardown()`."""
    lines: list[str] = []
    for note in getattr(exc, "__notes__", ()):
        for line in str(note).splitlines():
            if line.startswith("state = "):
                lines = []
            lines.append(line)
            if line == "state.teardown()":
                return tuple(lines)
    return ()


def check_model(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    max_examples: int | None = None,
    profile: str | None = None,
    settings: Settings | None = None,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
) -> ModelOutcome:
    """Like `run_model`, but returns the outcome; store set-up errors still raise `HarnessError`."""
    try:
        run_model(
            spec, max_examples=max_examples, profile=profile, settings=settings,
            lease_ttl_ms=lease_ttl_ms, clock=clock,
        )
    except HarnessError:
        raise
    except Exception as exc:
        harness = _find(exc, HarnessError)
        if harness is not None:  # a set-up problem surfacing through a flaky replay
            raise harness from exc
        violation = _find(exc, ContractViolation)
        clause = violation.clause if violation is not None else None
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        return ModelOutcome(False, _program_from(exc), clause, error)
    return ModelOutcome(True)


def _find(exc: BaseException, kind: type[BaseException]) -> Any:
    """The first `kind` inside a failure (a flaky replay wraps failures in an exception group)."""
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _find(inner, kind)
        if found is not None:
            return found
    return None


# -- CLI ------------------------------------------------------------------------------------

def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default="sqlite:", metavar="SPEC", help="store spec (default: sqlite:)")
    p.add_argument("--examples", type=int, default=None, metavar="N", help="programs to run (default: the profile's)")
    p.add_argument("--profile", choices=sorted(PROFILES), default=None,
                   help="Hypothesis profile (default: ci under CI, else dev)")
    p.add_argument("--clock", choices=("auto", "fake", "real"), default="auto",
                   help="fake clock where the store accepts clock= (auto), or force one")


def run_cli(args: argparse.Namespace) -> int:
    """`soak model`: 0 when the machine passes, 1 with the minimal failing program otherwise."""
    target = resolve(args.store)
    chosen = model_settings(args.profile, max_examples=args.examples)
    started = time.monotonic()
    outcome = check_model(target, settings=chosen, clock=args.clock)
    took = time.monotonic() - started
    if outcome.passed:
        print(f"soak model: pass: {chosen.max_examples} programs of up to {chosen.stateful_step_count} steps "
              f"against {target.spec} in {took:.1f} s")
        return 0
    print(f"soak model: FAIL against {target.spec} ({took:.1f} s): {outcome.error}")
    if outcome.program:
        print("minimal failing program:")
        for line in outcome.program:
            print("    " + line)
    sys.stdout.flush()
    return 1
