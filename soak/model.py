"""Hypothesis state machines that drive a real store and the pure model in lockstep.

`FencedStoreMachine` runs random programs of lease and data operations (acquire, renew,
release, appends at the right and wrong seq, meta writes, blob puts and deletes, run deletes)
against a store and against `soak.oracle.Oracle`, with live, superseded, foreign and absent
leases. Every outcome is compared by type, the full observable state after every step, and
a failure names the contract clause it breaks (`soak.clauses`).

Time: where the store object declares `injectable_clock = True` (CONTRACT section 1, read by
`StoreTarget.probe_injectable_clock`, never inferred from the factory's signature), store and
model share a `soak.clock.FakeClock` that a rule advances; otherwise a rule sleeps past a short
ttl and every outcome near an expiry boundary is allowed either way (as `expired-unsuperseded`
is), the model following the store. The outcome says which clock was used and why.

Busy: a `StoreBusyError` wrote nothing, so the call is retried (`soak.retry`, bounded) and the
retries are counted; a call busy on every attempt ends the run `inconclusive`, never a pass.

Choices the contract leaves to the store are accepted both ways and reported: whether an
expired, unsuperseded lease is accepted (`expired-unsuperseded`), and whether a fenced delete
ends the deleting holder's tenure (`delete-ends-tenure`). After such a delete the tenure's
standing is unknown until the store shows its choice; from then on the program holds the store
to it, and a store that answers both ways breaks `delete-semantics`.

Liveness: each store call is timed, and one that takes longer than the `call-returns` bound
(`soak.clauses.default_call_bound_s(ttl)`) fails that clause. A call that never returns hangs
the model with it, and a store that kills its process kills the model: those are for
conformance and the storm, which run calls where a hang or a crash can be seen (`no-crash` is
never exercised here).

A vendor runs it from its own tests in one line::

    TestMyStore = soak.model.machine_test_case("mypkg.store:open_store")

or calls `run_model(spec, max_examples=..., profile=...)`; `soak model --store SPEC` is the CLI.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import unittest
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings as Settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from soak.clauses import CLAUSES, default_call_bound_s, expired_choice
from soak.clock import FakeClock
from soak.errors import HarnessError, ScenarioError, StoreBootError
from soak.oracle import LeaseStanding, Oracle
from soak.retry import BusyCount, BusyExhausted, retry_busy
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
    "MODEL_NEVER_EXERCISES",
    "ModelInconclusive",
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

T = TypeVar("T")

RUNS = ("r1", "r2")
OWNERS = ("w1", "w2", "w3")
BLOB_NAMES = ("t1", "t2")

#: ttl with the fake clock (its value does not matter: time only moves when a rule moves it)
FAKE_TTL_MS = 1000
#: ttl with real time: short, so a rule can sleep past it cheaply
REAL_TTL_MS = 100
#: fake clock: how far from an expiry instant an outcome is still judged either way (seconds)
_FAKE_SLACK = 1e-6

#: Clauses the model never exercises, and why (`ModelOutcome.exercised` never names them).
MODEL_NEVER_EXERCISES: dict[str, str] = {
    "atomic-fence": "the model runs one store object in one process, one call at a time: no takeover can land "
                    "inside a call",
    "concurrent-boot": "the model opens one store object at a time",
    "expired-unsuperseded": "either outcome is conformant, so the model can only report the store's choice",
    "no-crash": "a store that kills its process kills the model with it; conformance and the storm see that",
}


class ContractViolation(AssertionError):
    """A model step where the store broke a clause; `clause` is an id from `soak.clauses`."""

    def __init__(self, clause: str, message: str) -> None:
        self.clause = clause
        super().__init__(f"[{clause}] {message} (clause {clause}: {CLAUSES.get(clause, clause)})")


class ModelInconclusive(unittest.SkipTest):
    """The model could not conclude anything: a store call answered `StoreBusyError` on every attempt.

    A skip to Hypothesis, pytest and unittest (it stops the run at once, never a pass nor a shrunk
    failure); `check_model` returns it as an inconclusive `ModelOutcome` and `soak model` exits 3."""


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


# -- what a run adds up to ------------------------------------------------------------------

@dataclass
class _RunStats:
    """What every program of one run adds up to: Hypothesis makes a machine per program, so this
    lives on the machine class that `machine_for` builds (one per run)."""

    busy: BusyCount = field(default_factory=BusyCount)
    #: clause -> judgements made that could have failed it
    exercised: Counter = field(default_factory=Counter)
    #: surface -> [accepted, refused] under a lease clearly expired and not superseded
    expired: dict[str, list[int]] = field(default_factory=dict)
    #: True (ends) / False (keeps) -> programs in which the store showed that delete choice
    delete_choice: Counter = field(default_factory=Counter)
    #: the first observation that showed each delete choice
    delete_evidence: dict[bool, str] = field(default_factory=dict)
    slowest_call_s: float = 0.0
    slowest_call: str = ""
    #: the first violation seen (clause, message), kept in case a later replay ends inconclusive
    first_violation: tuple[str, str] | None = None


def _exhausted(exc: BusyExhausted) -> ModelInconclusive:
    return ModelInconclusive(f"inconclusive: {exc}")


# -- the machine ----------------------------------------------------------------------------

_LEASE = Bundle("leases")
_MAYBE_LEASE = st.none() | _LEASE
_RUN = st.sampled_from(RUNS)
_PAYLOAD = st.binary(max_size=4)

_LIVE, _EXPIRED, _STALE, _FOREIGN, _UNDECIDED = (
    LeaseStanding.LIVE, LeaseStanding.EXPIRED, LeaseStanding.STALE, LeaseStanding.FOREIGN, LeaseStanding.UNDECIDED)


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
    """Drives one store and `soak.oracle.Oracle` in lockstep; build one with `machine_for(spec)`.

    `prepare()` (run once per class, before the first program) reads the store's injectable-clock
    declaration, settles the clock and ttl, and checks that locations do not share data."""

    #: set by `machine_for`
    target: StoreTarget | None = None
    clock_mode: str = "auto"
    requested_ttl_ms: int | None = None
    requested_call_bound_s: float | None = None
    stats: _RunStats | None = None
    #: set by `prepare`
    fake_clock: bool | None = None
    clock_reason: str = ""
    lease_ttl_ms: int = FAKE_TTL_MS
    call_bound_s: float = default_call_bound_s(FAKE_TTL_MS)
    _prepared: bool = False

    leases = _LEASE

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        cls.prepare()
        self.run_stats: _RunStats = cls.stats
        self.clock = FakeClock() if self.fake_clock else None
        self.location = tempfile.mkdtemp(prefix="soak-model-")
        self.store = None
        try:
            self.store = cls._open(self.location, self.clock)
        finally:
            if self.store is None:
                shutil.rmtree(self.location, ignore_errors=True)
        # The store's delete choice is not known until it shows it (soak.oracle's module docstring).
        self.oracle = Oracle(self.lease_ttl_ms, delete_ends_tenure=None)
        self._epoch0 = time.monotonic()
        self._base_slack = _FAKE_SLACK if self.clock else 0.03 + 0.1 * self.lease_ttl_ms / 1000.0
        self._slowest_call = 0.0
        self._delete_evidence = ""
        self._choice_tenure: tuple[str, int] | None = None
        # What the last step did, the clause it threatens and whether it was a refusal, so the
        # state invariant can name the clause a difference breaks.
        self._last = ("the initial state", "typed-refusal", False)

    # -- preparing the class --------------------------------------------------------------

    @classmethod
    def prepare(cls) -> None:
        """Settle the clock, ttl and call bound from the store's declaration; check the locations."""
        if cls._prepared:
            return
        if cls.target is None or cls.stats is None:
            raise HarnessError("FencedStoreMachine needs a store; build one with soak.model.machine_for(spec)")
        probe_ttl = cls.requested_ttl_ms or FAKE_TTL_MS
        location = tempfile.mkdtemp(prefix="soak-model-")
        try:
            declared = cls._busy_boot("probing the store's injectable_clock declaration",
                                      lambda: cls.target.probe_injectable_clock(location, probe_ttl))
        finally:
            shutil.rmtree(location, ignore_errors=True)
        if cls.clock_mode == "fake" and not declared:
            raise ScenarioError(
                f"--clock fake needs a store that declares injectable_clock = True, and {cls.target.spec} does not; "
                "use --clock auto (real time for it), or declare injectable_clock = True on the store object once "
                "its factory accepts clock= and judges expiry by that clock alone"
            )
        if cls.clock_mode == "real":
            fake, reason = False, "real time, as asked (--clock real)"
        elif declared:
            fake, reason = True, "fake clock: the store declares injectable_clock = True"
        else:
            fake, reason = False, ("real time: the store does not declare injectable_clock = True "
                                   "(soak never infers it from the factory's signature)")
        cls.fake_clock, cls.clock_reason = fake, reason
        cls.lease_ttl_ms = int(cls.requested_ttl_ms or (FAKE_TTL_MS if fake else REAL_TTL_MS))
        cls.call_bound_s = float(cls.requested_call_bound_s or default_call_bound_s(cls.lease_ttl_ms))
        cls._preflight()
        cls._prepared = True

    @classmethod
    def _busy_boot(cls, what: str, call: Callable[[], T]) -> T:
        """A store boot (or probe), retried while it fails because the store answered busy."""

        def attempt() -> T:
            try:
                return call()
            except StoreBootError as exc:
                if isinstance(exc.__cause__, StoreBusyError):
                    raise exc.__cause__ from exc
                raise

        try:
            return retry_busy(attempt, what, count=cls.stats.busy)
        except BusyExhausted as exc:
            raise _exhausted(exc) from exc

    @classmethod
    def _busy(cls, what: str, call: Callable[[], T]) -> T:
        try:
            return retry_busy(call, what, count=cls.stats.busy)
        except BusyExhausted as exc:
            raise _exhausted(exc) from exc

    @classmethod
    def _open(cls, location: str, clock: FakeClock | None):
        extra = {"clock": clock} if clock is not None else {}
        return cls._busy_boot(f"opening store {cls.target.spec}",
                              lambda: cls.target.open(location, cls.lease_ttl_ms, **extra))

    @classmethod
    def _preflight(cls) -> None:
        """Once per machine: a store opened over a fresh location must not see another's data."""
        first, second = tempfile.mkdtemp(prefix="soak-model-"), tempfile.mkdtemp(prefix="soak-model-")
        clock = FakeClock() if cls.fake_clock else None
        try:
            store = cls._open(first, clock)
            try:
                cls._busy("preflight put_meta", lambda: store.put_meta(RunMeta("soak-preflight", "running", 0)))
                other = cls._open(second, clock)
                try:
                    seen = cls._busy("preflight get_meta", lambda: other.get_meta("soak-preflight"))
                finally:
                    other.close()
                cls._busy("preflight delete", lambda: store.delete("soak-preflight"))  # leave a shared store as it was
            finally:
                store.close()
        finally:
            shutil.rmtree(first, ignore_errors=True)
            shutil.rmtree(second, ignore_errors=True)
        if seen is not None:
            raise StoreBootError(
                f"store {cls.target.spec} shares data between locations, but the model needs an empty store "
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

    def _exercise(self, *clauses: str | None) -> None:
        for clause in clauses:
            if clause is not None:
                self.run_stats.exercised[clause] += 1

    def _timed(self, what: str, fn: Callable[[], T], window: list[float]) -> Callable[[], T]:
        """One attempt of a store call, timed against the call-returns bound; `window[0]` becomes
        the model time the attempt started (a busy attempt before it wrote nothing)."""

        def attempt() -> T:
            window[0] = self._now()
            started = time.monotonic()
            try:
                return fn()
            finally:
                took = time.monotonic() - started
                stats = self.run_stats
                if took > stats.slowest_call_s:
                    stats.slowest_call_s, stats.slowest_call = took, what
                if took > self.call_bound_s:
                    window.append(took)

        return attempt

    def _past_bound(self, what: str, window: list[float]) -> None:
        self._exercise("call-returns")
        if len(window) > 1:
            self._fail("call-returns", f"{what} took {max(window[1:]):.2f} s, past the bound of "
                                       f"{self.call_bound_s:.2f} s on one store call")

    def _call(self, what: str, fn: Callable[[], Any]) -> tuple[_Outcome, float, float]:
        """Run one store call (busy answers retried); returns its outcome and the model-time window
        of the attempt that answered."""
        window = [self._now()]
        try:
            out = _Outcome(value=retry_busy(self._timed(what, fn, window), what, count=self.run_stats.busy))
        except BusyExhausted as exc:
            raise _exhausted(exc) from exc
        except Exception as exc:  # every exception is an outcome to judge
            out = _Outcome(error=exc)
        t0, t1 = window[0], self._now()
        self._slowest_call = max(self._slowest_call, t1 - t0)
        self._past_bound(what, window)
        return out, t0, t1

    def _read(self, what: str, fn: Callable[[], T]) -> T:
        """A read for the state invariant: busy answers retried, timed; anything raised propagates."""
        window = [self._now()]
        try:
            value = retry_busy(self._timed(what, fn, window), what, count=self.run_stats.busy)
        except BusyExhausted as exc:
            raise _exhausted(exc) from exc
        except Exception:
            self._past_bound(what, window)  # a slow call that then raised is still past the bound
            raise
        self._past_bound(what, window)
        return value

    @property
    def _slack(self) -> float:
        """How far an expiry instant is uncertain: the store stamped a grant or renew somewhere
        inside that call, so with real time the slowest call so far widens every window."""
        return self._base_slack + (0.0 if self.clock else self._slowest_call)

    def _standings(self, lease: Lease, run_id: str, t0: float, t1: float,
                   delete_ends: bool | None = None) -> tuple[LeaseStanding, LeaseStanding]:
        return (self.oracle.classify(lease, run_id, t0 - self._slack, delete_ends=delete_ends),
                self.oracle.classify(lease, run_id, t1 + self._slack, delete_ends=delete_ends))

    def _standing(self, lease: Lease, run_id: str, t0: float, t1: float, *,
                  delete_ends: bool | None = None) -> LeaseStanding:
        """Where the lease stood; a LIVE/EXPIRED boundary inside the window counts as EXPIRED."""
        lo, hi = self._standings(lease, run_id, t0, t1, delete_ends)
        return lo if lo is hi else _EXPIRED

    def _fail(self, clause: str, message: str) -> None:
        __tracebackhide__ = True  # pytest shows the rule that failed, not this helper
        if self.run_stats.first_violation is None:
            self.run_stats.first_violation = (clause, message)
        raise ContractViolation(clause, message)

    def _untyped(self, what: str, out: _Outcome) -> None:
        """Anything untyped is a failure of typed-refusal (busy answers never get here: retried)."""
        if out.error is not None and not isinstance(out.error, StoreError):
            self._fail("typed-refusal", f"{what} raised untyped {type(out.error).__name__}: {out.error}")

    # -- the delete choice ----------------------------------------------------------------

    def _tenure_of(self, lease: Lease):
        """The run's newest tenure, when `lease` is it."""
        t = self.oracle.state.tenures.get(lease.run_id)
        return t if t is not None and (t.owner, t.epoch) == (lease.owner, lease.epoch) else None

    def _delete_choice(self, run: str, ends: bool, evidence: str) -> None:
        """The store showed its delete choice on `run`'s tenure; the program holds it to that from now on."""
        t = self.oracle.state.tenures[run]
        self._choice_tenure = (run, t.epoch)
        self.oracle.settle_delete_choice(ends)
        self._delete_evidence = evidence
        self.run_stats.delete_choice[ends] += 1
        self.run_stats.delete_evidence.setdefault(ends, evidence)
        self._exercise("delete-semantics")

    def _both_ways(self, run: str, message: str) -> None:
        """A store that showed one delete choice on another tenure earlier in this program now acts
        on the other choice. (On the tenure that showed it, a contrary outcome breaks the ordinary
        clause: the store itself has shown that tenure live, or ended.)"""
        t = self.oracle.state.tenures[run]
        if self._choice_tenure == (run, t.epoch):
            return
        ends = self.oracle.delete_ends_tenure
        self._fail("delete-semantics", f"{message}; earlier in this program the store showed that a fenced delete "
                   f"{'ends' if ends else 'keeps'} the deleting holder's tenure ({self._delete_evidence}): "
                   "it answered both ways")

    def _settle_from_lease_outcome(self, lease: Lease, what: str, out: _Outcome, t0: float, t1: float) -> None:
        """An operation under a lease whose tenure waits on the delete choice: what it shows."""
        kept = self._standing(lease, lease.run_id, t0, t1, delete_ends=False)
        if out.ok:  # under "ends" the lease would be stale and refused
            self._delete_choice(lease.run_id, False, f"{what} was accepted after a fenced delete under that lease")
        elif isinstance(out.error, LeaseHeldError) and kept is _LIVE:  # under "keeps" it would be accepted
            self._delete_choice(lease.run_id, True,
                                f"{what} was refused within the ttl after a fenced delete under that lease")

    # -- leases ---------------------------------------------------------------------------

    @initialize(target=leases, run=_RUN, owner=st.sampled_from(OWNERS))
    def first_acquire(self, run: str, owner: str):
        """Every program starts holding a lease, so rules drawing one never meet an empty bundle."""
        return self.acquire(run, owner)

    @rule(target=leases, run=_RUN, owner=st.sampled_from(OWNERS))
    def acquire(self, run: str, owner: str):
        what = f"acquire({run!r}, {owner!r})"
        out, t0, t1 = self._call(what, lambda: self.store.acquire(run, owner))
        self._untyped(what, out)
        self._last = (what, "lease-exclusive", False)
        lo, hi = t0 - self._slack, t1 + self._slack
        if self.oracle.undecided(run):
            kept_lo = self.oracle.holder(run, lo, delete_ends=False)
            kept_hi = self.oracle.holder(run, hi, delete_ends=False)
            if out.ok and kept_hi is not None:
                self._delete_choice(run, True, f"{what} was granted at once after a fenced delete under {kept_hi!r}")
            elif isinstance(out.error, LeaseHeldError) and kept_lo is not None:
                self._delete_choice(run, False, f"{what} was refused after a fenced delete under {kept_lo!r}, "
                                                "within its ttl")
        held_lo, held_hi = self.oracle.holder(run, lo), self.oracle.holder(run, hi)
        tenure = self.oracle.state.tenures.get(run)
        self._exercise("lease-exclusive" if held_hi is not None else None,
                       "ttl-honoured" if tenure is not None and not tenure.released else None)
        if out.ok:
            self._exercise("epoch-monotonic")
            if held_hi is not None:  # live at the latest instant the call could have run
                message = (f"{what} was granted while {held_hi} was still within its ttl "
                           "(two live tenures, or the store ended the first before its ttl)")
                if tenure.deleted_live and self.oracle.delete_ends_tenure is False:
                    self._both_ways(run, message)
                self._fail("lease-exclusive", message)
            want = Lease(run, owner, self.oracle.high_water(run) + 1)
            if out.value != want:
                clause = "epoch-monotonic" if getattr(out.value, "epoch", None) != want.epoch else "live-accepted"
                self._fail(clause, f"{what} returned {out.value!r}; expected {want!r}")
            self.oracle.acquire(run, owner, max(t0, t1 + self._slack) if held_lo is not None else t0)
            self.oracle.state.tenures[run].expires_at = t0 + self.oracle.ttl
            return out.value
        self._exercise("typed-refusal")
        if not isinstance(out.error, LeaseHeldError):
            self._fail("typed-refusal", f"{what} {out.describe()}; a refused acquire raises LeaseHeldError")
        if held_lo is None:  # nobody could have held it at any instant of the call
            # The run's last tenure expired or was released (or never existed): it must be free.
            message = f"{what} was refused though no tenure was live ({out.describe()})"
            if self.oracle.ended_by_delete(run) and tenure.expires_at > lo:
                self._both_ways(run, message)
            self._fail("ttl-honoured", message)
        return multiple()

    def _lease_op(self, verb: str, lease: Lease, call: Callable[[], Any],
                  accepted: Callable[[Any, float], None]) -> None:
        """Renew or release: judged by where the lease stands; `accepted` follows an ok outcome."""
        what = f"{verb}({lease!r})"
        out, t0, t1 = self._call(what, call)
        self._untyped(what, out)
        self._last = (what, "stale-lease-ops", False)
        if self.oracle.classify(lease, lease.run_id, t1) is _UNDECIDED:
            self._settle_from_lease_outcome(lease, what, out, t0, t1)
        lo, hi = self._standings(lease, lease.run_id, t0, t1)
        standing = lo if lo is hi and lo is not _UNDECIDED else _EXPIRED  # still undecided: either way
        clearly_expired = lo is hi is _EXPIRED
        self._exercise({_LIVE: "live-accepted", _STALE: "stale-lease-ops"}.get(standing))
        if out.ok:
            if standing is _STALE:
                message = f"{what} was accepted under a superseded or released tenure"
                if self.oracle.ended_by_delete(lease.run_id) and self._tenure_of(lease) is not None:
                    self._both_ways(lease.run_id, message)
                self._fail("stale-lease-ops", message)
            if clearly_expired:
                self._expired_choice(verb, accepted=True)
            accepted(out, t0)
            return
        self._exercise("typed-refusal")
        if not isinstance(out.error, LeaseHeldError):
            self._fail("typed-refusal", f"{what} {out.describe()}; a refused {verb} raises LeaseHeldError")
        if standing is _LIVE:
            message = f"{what} was refused under the live tenure ({out.describe()})"
            tenure = self._tenure_of(lease)
            if tenure is not None and tenure.deleted_live:
                self._both_ways(lease.run_id, message)
            self._fail("live-accepted", message)
        if clearly_expired:
            self._expired_choice(verb, accepted=False)

    def _expired_choice(self, surface: str, *, accepted: bool) -> None:
        counts = self.run_stats.expired.setdefault(surface, [0, 0])
        counts[0 if accepted else 1] += 1

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
        accepted_clauses: tuple[str, ...],
        surface: str,
        order_refuses: bool = False,
        fenced: bool = True,
    ) -> LeaseStanding | None:
        """One fenced mutation: judge the store's outcome, then apply it to the model if accepted.

        `accepted_clauses` are the clauses the state invariant judges after an accepted write (the
        first names a difference). `fenced` is the store's `fenced_writes` claim: where it is
        False, a leased mutation may be accepted or refused (no fencing clause applies) and the
        model follows the store. Returns where the lease stood when the store accepted, else None.
        """
        out, t0, t1 = self._call(what, call)
        self._untyped(what, out)
        lo = hi = None
        if lease is not None:
            if fenced and self.oracle.classify(lease, run_id, t1) is _UNDECIDED:
                self._settle_from_lease_outcome(lease, what, out, t0, t1)
            lo, hi = self._standings(lease, run_id, t0, t1)
        standing = None if lease is None else lo if lo is hi and lo is not _UNDECIDED else _EXPIRED
        if not fenced and standing is not None and standing is not _LIVE:
            standing = _EXPIRED  # either outcome is allowed
        clearly_expired = fenced and lo is hi is _EXPIRED
        fence_refuses = standing in (_STALE, _FOREIGN)
        fence_clause = "run-match" if standing is _FOREIGN else "stale-rejected"
        self._exercise("unleased-passthrough" if lease is None else None,
                       {_LIVE: "live-accepted", _STALE: "stale-rejected", _FOREIGN: "run-match"}.get(standing))
        if out.ok:
            self._last = (what, accepted_clauses[0], False)
            if fence_refuses:
                message = f"{what} was accepted under a {standing.value} lease"
                if standing is _STALE and self.oracle.ended_by_delete(run_id) and self._tenure_of(lease) is not None:
                    self._both_ways(run_id, message)
                self._fail(fence_clause, message)
            if order_refuses:
                self._fail("journal-a5", f"{what} was accepted though its seq is not above the tail")
            if clearly_expired:
                self._expired_choice(surface, accepted=True)
            self._exercise(*accepted_clauses, "journal-a3")
            apply()  # under an expired, unsuperseded lease the store may accept: follow it
            return standing
        err = out.error
        self._exercise("typed-refusal")
        self._last = (f"refused {what}", fence_clause if fence_refuses else "typed-refusal", True)
        allowed: list[type[StoreError]] = []
        if fence_refuses or standing is _EXPIRED:
            allowed.append(LeaseHeldError)
        if order_refuses:
            allowed.append(JournalOrderError)
        if isinstance(err, tuple(allowed)):
            if clearly_expired and isinstance(err, LeaseHeldError):
                self._expired_choice(surface, accepted=False)
            return None
        if isinstance(err, LeaseHeldError):
            clause = "unleased-passthrough" if lease is None else "live-accepted"
            message = (f"{what} was refused ({out.describe()}) though the lease stood "
                       f"{'absent' if standing is None else standing.value}")
            tenure = None if lease is None else self._tenure_of(lease)
            if fenced and tenure is not None and tenure.deleted_live and standing is _LIVE:
                self._both_ways(run_id, message)
            self._fail(clause, message)
        if isinstance(err, JournalOrderError):
            self._fail("journal-a5", f"{what} was refused with JournalOrderError though its seq is above the tail")
        names = " or ".join(e.__name__ for e in allowed) or "acceptance"
        self._fail("typed-refusal", f"{what} {out.describe()}; expected {names}")
        return None

    @rule(run=_RUN, lease=_MAYBE_LEASE, seq_offset=st.sampled_from([1, 2, 0, -1]), payload=_PAYLOAD)
    def append(self, run: str, lease: Lease | None, seq_offset: int, payload: bytes) -> None:
        entry = JournalEntry(max(self.oracle.tail(run) + seq_offset, 0), payload)
        self._exercise("journal-a5")
        self._mutate(
            f"append({run!r}, {entry!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.append(run, entry, lease),
            lambda: self.oracle.append(run, entry, None, self._now()),
            ("journal-a1", "journal-a2", "journal-a4"),
            "append",
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
            ("meta-last-write", "journal-a4"),
            "put_meta",
            fenced=bool(self.store.fenced_writes),
        )

    @rule(run=_RUN, lease=_MAYBE_LEASE)
    def delete_run(self, run: str, lease: Lease | None) -> None:
        fenced = bool(self.store.fenced_writes)
        standing = self._mutate(
            f"delete({run!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.delete(run, lease),
            lambda: self.oracle.delete(run, None, self._now()),
            ("delete-semantics",),
            "delete",
            fenced=fenced,
        )
        if fenced and standing is _LIVE:
            # The store's choice: the tenure ends with the run or stays live (undecided until shown).
            self.oracle.deleted_under_live(run)

    @rule(lease=leases)
    def delete_own_run(self, lease: Lease) -> None:
        """A holder deleting its own run: where the store's delete choice shows."""
        self.delete_run(lease.run_id, lease)

    @rule(run=_RUN, name=st.sampled_from(BLOB_NAMES), lease=_MAYBE_LEASE, blob=_PAYLOAD)
    def put_blob(self, run: str, name: str, lease: Lease | None, blob: bytes) -> None:
        ref = f"{run}/{name}"
        self._mutate(
            f"transcripts.put({ref!r}, {blob!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.transcripts.put(ref, blob, lease),
            lambda: self.oracle.blob_put(ref, blob, None, self._now()),
            ("blob-semantics", "journal-a4"),
            "blob put",
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
            ("blob-semantics",),
            "blob delete",
            fenced=bool(self.store.transcripts.fenced_writes),
        )

    @precondition(lambda self: any(self.oracle.undecided(run) for run in RUNS))
    @rule(target=leases, how=st.sampled_from(["renew", "acquire", "append", "release"]))
    def after_fenced_delete(self, how: str):
        """Use a tenure that a fenced delete left waiting on the store's choice (read off the
        model, never the store): what the store does with it shows whether the delete ended it."""
        run = next(r for r in RUNS if self.oracle.undecided(r))
        lease = self.oracle.state.tenures[run].lease(run)
        if how == "acquire":
            return self.acquire(run, next(o for o in OWNERS if o != lease.owner))
        if how == "append":
            self.append(run, lease, 1, b"d")
        else:
            getattr(self, how)(lease)
        return multiple()

    @precondition(lambda self: any(not t.released for t in self.oracle.state.tenures.values()))
    @rule(how=st.sampled_from(["put_meta", "renew", "append", "put_blob", "release"]))
    def outlive_the_ttl(self, how: str) -> None:
        """Let the newest unreleased tenure expire, then use its lease (read off the model): where
        a store shows its `expired-unsuperseded` choice."""
        run = next(r for r in RUNS if r in self.oracle.state.tenures and not self.oracle.state.tenures[r].released)
        lease = self.oracle.state.tenures[run].lease(run)
        self.let_time_pass(1.5)
        if how == "put_meta":
            self.put_meta(run, lease, "running", 1, b"e")
        elif how == "append":
            self.append(run, lease, 1, b"e")
        elif how == "put_blob":
            self.put_blob(run, BLOB_NAMES[0], lease, b"e")
        else:
            getattr(self, how)(lease)

    # -- time -----------------------------------------------------------------------------

    @rule(ttls=st.sampled_from([0.5, 1.5, 0.25, 0.9, 3.0]))
    def let_time_pass(self, ttls: float) -> None:
        """Advance the shared fake clock, or sleep (real time), by a multiple of the ttl."""
        if self.clock is not None:
            self.clock.advance(ttls * self.lease_ttl_ms / 1000.0)
            # From here on expiry is judged by the injected clock alone, never by wall time.
            self._exercise("store-clock")
        else:  # real time: past the ttl is past it; longer sleeps only cost wall time
            time.sleep(min(ttls, 1.5) * self.lease_ttl_ms / 1000.0)
        self._last = (f"let_time_pass({ttls})", "store-clock", False)

    # -- the state invariant --------------------------------------------------------------

    @invariant()
    def observable_state_matches_model(self) -> None:
        what, clause, refused = self._last
        store, oracle, read = self.store, self.oracle, self._read

        def differs(kind: str, got: Any, want: Any, bytes_only: bool) -> None:
            # After an accepted write, the same rows with other bytes break A4 (byte for byte).
            named = "journal-a4" if bytes_only and not refused else clause
            self._fail(named, f"after {what}: {kind} = {got!r}, model expects {want!r}")

        for run in RUNS:
            got, want = list(read(f"load({run!r})", lambda: store.load(run))), oracle.load(run)
            if got != want:
                seqs, want_seqs = [e.seq for e in got], [e.seq for e in want]
                if not refused and seqs != want_seqs and sorted(seqs) == sorted(want_seqs):
                    self._fail("journal-a2", f"after {what}: load({run!r}) = {got!r}, out of append order {want!r}")
                differs(f"load({run!r})", got, want, seqs == want_seqs)
            got_meta, want_meta = read(f"get_meta({run!r})", lambda: store.get_meta(run)), oracle.get_meta(run)
            if got_meta != want_meta:
                same_row = got_meta is not None and want_meta is not None and (
                    (got_meta.status, got_meta.segments) == (want_meta.status, want_meta.segments))
                differs(f"get_meta({run!r})", got_meta, want_meta, same_row)
            refs = sorted(read(f"transcripts.list({run!r})", lambda: store.transcripts.list(run)))
            want_refs = oracle.blob_list(run)
            if refs != want_refs:
                differs(f"transcripts.list({run!r})", refs, want_refs, False)
            for name in BLOB_NAMES:
                ref = f"{run}/{name}"
                got_blob, want_blob = read(f"transcripts.get({ref!r})", lambda: store.transcripts.get(ref)), \
                    oracle.blob_get(ref)
                if got_blob != want_blob:
                    differs(f"transcripts.get({ref!r})", got_blob, want_blob, None not in (got_blob, want_blob))
        listed = sorted(read("list_runs()", store.list_runs), key=lambda m: m.run_id)
        if listed != oracle.list_runs():
            differs("list_runs()", listed, oracle.list_runs(), False)


# -- building and running -------------------------------------------------------------------

def machine_for(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
    call_bound_s: float | None = None,
) -> type[FencedStoreMachine]:
    """A `FencedStoreMachine` subclass bound to one store (spec string, target or factory).

    `clock` is `auto` (a fake clock where the store object declares `injectable_clock = True`,
    else real time), `fake` (a usage error for a store that does not declare it) or `real`. The
    declaration is read by `prepare()`, before the first program. `call_bound_s` overrides the
    `call-returns` bound (default `soak.clauses.default_call_bound_s(ttl)`).
    """
    target = spec if isinstance(spec, StoreTarget) else resolve(spec)
    if clock not in ("auto", "fake", "real"):
        raise ScenarioError(f"clock must be auto, fake or real, got {clock!r}")
    if call_bound_s is not None and call_bound_s <= 0:
        raise ScenarioError(f"call_bound_s must be positive, got {call_bound_s}")
    return type(
        "FencedStoreMachine",
        (FencedStoreMachine,),
        {
            "target": target,
            "clock_mode": clock,
            "requested_ttl_ms": lease_ttl_ms,
            "requested_call_bound_s": call_bound_s,
            "stats": _RunStats(),
            "__module__": __name__,
            # Hypothesis keys its example database (and derandomized seed) on this: one per store.
            "_hypothesis_internal_add_digest": f"{target.spec}|{clock}|{lease_ttl_ms}".encode(),
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
    """A unittest/pytest test case running the machine on one store; assign it in a test module.

    The store is first opened when the test runs, not when the module is imported. A run that a
    store's busy answers leave inconclusive is a skip, never a pass."""
    machine = machine_for(spec, lease_ttl_ms=lease_ttl_ms, clock=clock)
    case = machine.TestCase
    case.settings = settings or model_settings(profile)
    case.__name__ = case.__qualname__ = "FencedStoreModelTest"
    return case


def _settings(settings: Settings | None, profile: str | None, max_examples: int | None) -> Settings:
    chosen = settings or model_settings(profile)
    if max_examples is not None:
        chosen = Settings(chosen, max_examples=max_examples)
    return chosen


def run_model(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    max_examples: int | None = None,
    profile: str | None = None,
    settings: Settings | None = None,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
    call_bound_s: float | None = None,
) -> None:
    """Run the machine on one store; raises Hypothesis' shrunk failure (a `ContractViolation`), or
    `ModelInconclusive` (a skip under pytest) when a call answered busy on every attempt."""
    machine = machine_for(spec, lease_ttl_ms=lease_ttl_ms, clock=clock, call_bound_s=call_bound_s)
    machine.prepare()
    run_state_machine_as_test(machine, settings=_settings(settings, profile, max_examples))


@dataclass(frozen=True)
class ModelOutcome:
    """The result of `check_model`: on failure the minimal failing program and the clause; on an
    inconclusive run the reason; always the clock used, busy retries, the clauses the programs
    exercised and the choices the store made."""

    passed: bool
    program: tuple[str, ...] = ()
    clause: str | None = None
    error: str = ""
    #: a store call answered busy on every attempt: nothing was concluded (neither pass nor fail)
    inconclusive: bool = False
    reason: str = ""
    #: StoreBusyError answers retried, over every program
    busy_retries: int = 0
    #: "fake" or "real" ("unknown" if the run ended before the store's declaration was read), and why
    clock: str = ""
    clock_reason: str = ""
    lease_ttl_ms: int = 0
    call_bound_s: float = 0.0
    slowest_call_s: float = 0.0
    slowest_call: str = ""
    #: clause -> judgements made that could have failed it (a clause absent was not exercised)
    exercised: dict[str, int] = field(default_factory=dict)
    #: the store's choices as seen: "expired-unsuperseded" -> accepts | refuses | mixed,
    #: "delete-ends-tenure" -> ends | keeps | mixed (mixed: both, in different programs)
    choices: dict[str, str] = field(default_factory=dict)
    #: choice -> what was seen, in a line
    choice_detail: dict[str, str] = field(default_factory=dict)

    @property
    def result(self) -> str:
        """`pass`, `fail` or `inconclusive`."""
        return "pass" if self.passed else "inconclusive" if self.inconclusive else "fail"

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


def _choices(stats: _RunStats) -> tuple[dict[str, str], dict[str, str]]:
    """The store's choices from what the programs saw (see `ModelOutcome.choices`)."""
    choices: dict[str, str] = {}
    detail: dict[str, str] = {}
    expired = expired_choice({surface: (a, r) for surface, (a, r) in stats.expired.items()})
    if expired is not None:  # the release is shown beside it, in the detail
        choices["expired-unsuperseded"] = expired
    if stats.expired:
        detail["expired-unsuperseded"] = "under a lease expired and not superseded: " + ", ".join(
            f"{surface} accepted {a}, refused {r}" for surface, (a, r) in sorted(stats.expired.items()))
    ends, keeps = stats.delete_choice[True], stats.delete_choice[False]
    if ends or keeps:
        choices["delete-ends-tenure"] = "ends" if not keeps else "keeps" if not ends else "mixed"
        seen = [f"{n} of the programs run showed the tenure {word} (first: {stats.delete_evidence[flag]})"
                for flag, n, word in ((True, ends, "ended"), (False, keeps, "kept")) if n]
        detail["delete-ends-tenure"] = "after a fenced delete under the live lease: " + "; ".join(seen)
    return choices, detail


def _outcome(machine: type[FencedStoreMachine], passed: bool, **fields: Any) -> ModelOutcome:
    stats = machine.stats
    choices, detail = _choices(stats)
    return ModelOutcome(
        passed,
        busy_retries=stats.busy.retries,
        clock={True: "fake", False: "real"}.get(machine.fake_clock, "unknown"),
        clock_reason=machine.clock_reason or "not settled: the run ended before the store's declaration was read",
        lease_ttl_ms=machine.lease_ttl_ms,
        call_bound_s=machine.call_bound_s,
        slowest_call_s=round(stats.slowest_call_s, 4),
        slowest_call=stats.slowest_call,
        exercised=dict(sorted(stats.exercised.items())),
        choices=choices,
        choice_detail=detail,
        **fields,
    )


def check_model(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    max_examples: int | None = None,
    profile: str | None = None,
    settings: Settings | None = None,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
    call_bound_s: float | None = None,
) -> ModelOutcome:
    """Like `run_model`, but returns the outcome; store set-up errors still raise `HarnessError`."""
    machine = machine_for(spec, lease_ttl_ms=lease_ttl_ms, clock=clock, call_bound_s=call_bound_s)
    try:
        machine.prepare()
        run_state_machine_as_test(machine, settings=_settings(settings, profile, max_examples))
    except ModelInconclusive as exc:
        seen = machine.stats.first_violation
        if seen is not None:  # a proven violation outranks a later replay that stayed busy
            clause, message = seen
            return _outcome(machine, False, clause=clause, error=" ".join(f"ContractViolation: [{clause}] {message}; "
                            f"its replay then ended inconclusive ({exc})".split()))
        return _outcome(machine, False, inconclusive=True, reason=" ".join(str(exc).split()))
    except HarnessError:
        raise
    except Exception as exc:
        harness = _find(exc, HarnessError)
        if harness is not None:  # a set-up problem surfacing through a flaky replay
            raise harness from exc
        violation = _find(exc, ContractViolation)
        clause = violation.clause if violation is not None else None
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        return _outcome(machine, False, program=_program_from(exc), clause=clause, error=error)
    return _outcome(machine, True)


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
                   help="auto: a fake clock where the store declares injectable_clock = True, else real time; "
                        "fake: insist on it (a usage error for a store that does not declare it); real: real time")


def _facts(outcome: ModelOutcome) -> list[str]:
    """What every outcome reports: the clock, busy retries, the slowest call and the store's choices."""
    lines = [f"clock: {outcome.clock_reason} (ttl {outcome.lease_ttl_ms} ms)",
             f"busy: {outcome.busy_retries} StoreBusyError answer(s) retried",
             f"slowest store call: {outcome.slowest_call_s * 1000:.1f} ms ({outcome.slowest_call or 'none'}); "
             f"call-returns bound {outcome.call_bound_s:g} s"]
    for name in ("expired-unsuperseded", "delete-ends-tenure"):
        choice = outcome.choices.get(name, "not observed")
        detail = outcome.choice_detail.get(name)
        lines.append(f"choice {name}: {choice}" + (f" ({detail})" if detail else ""))
    return lines


def run_cli(args: argparse.Namespace) -> int:
    """`soak model`: 0 when the machine passes, 1 with the minimal failing program, 3 when inconclusive."""
    target = resolve(args.store)
    chosen = model_settings(args.profile, max_examples=args.examples)
    started = time.monotonic()
    outcome = check_model(target, settings=chosen, clock=args.clock)
    took = time.monotonic() - started
    facts = "".join(f"\n  {line}" for line in _facts(outcome))
    if outcome.passed:
        print(f"soak model: pass: {chosen.max_examples} programs of up to {chosen.stateful_step_count} steps "
              f"against {target.spec} in {took:.1f} s{facts}")
        return 0
    if outcome.inconclusive:
        print(f"soak model: INCONCLUSIVE against {target.spec} ({took:.1f} s): {outcome.reason}{facts}")
        sys.stdout.flush()
        return 3
    print(f"soak model: FAIL against {target.spec} ({took:.1f} s): {outcome.error}{facts}")
    if outcome.program:
        print("minimal failing program:")
        for line in outcome.program:
            print("    " + line)
    sys.stdout.flush()
    return 1
