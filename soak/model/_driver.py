"""What the model's machine stands on: one store under test beside `soak.oracle.Oracle`.

`StoreDriver` settles the clock, ttl and call bound from the store's declaration (`prepare`), opens a
fresh store per program, runs every store call timed against the `call-returns` bound with busy
answers retried, says where a lease stood over a call's window, and fails a clause. The rules and the
state invariant are `FencedStoreMachine`'s (`soak.model._machine`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import unittest
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis.stateful import RuleBasedStateMachine

from soak.clauses import CLAUSES, default_call_bound_s
from soak.clock import FakeClock
from soak.errors import HarnessError, ScenarioError, StoreBootError
from soak.oracle import LeaseStanding, Oracle
from soak.retry import BusyCount, BusyExhausted, retry_busy
from soak.spi import JournalEntry, Lease, LeaseHeldError, RunMeta, StoreError
from soak.stores import StoreTarget, retry_busy_boot

__all__ = ["FAKE_TTL_MS", "REAL_TTL_MS", "CallOutcome", "ContractViolation", "ModelInconclusive", "RunStats",
           "StoreDriver"]

T = TypeVar("T")

#: ttl with the fake clock (its value does not matter: time only moves when a rule moves it)
FAKE_TTL_MS = 1000
#: ttl with real time: short, so a rule can sleep past it cheaply
REAL_TTL_MS = 100
#: fake clock: how far from an expiry instant an outcome is still judged either way (seconds)
_FAKE_SLACK = 1e-6
#: ttl of the store the delete-choice probe opens: long, so no call's latency can expire its tenure
_PROBE_TTL_MS = 60_000


class ContractViolation(AssertionError):
    """A model step where the store broke a clause; `clause` is an id from `soak.clauses`."""

    def __init__(self, clause: str, message: str) -> None:
        self.clause = clause
        super().__init__(f"[{clause}] {message} (clause {clause}: {CLAUSES.get(clause, clause)})")


class ModelInconclusive(unittest.SkipTest):
    """The model could not conclude anything: a store call answered `StoreBusyError` on every attempt.

    A skip to Hypothesis, pytest and unittest (it stops the run at once, never a pass nor a shrunk
    failure); `check_model` returns it as an inconclusive `ModelOutcome` and `soak model` exits 3."""


# -- what a run adds up to ------------------------------------------------------------------

@dataclass
class RunStats:
    """What every program of one run adds up to: Hypothesis makes a machine per program, so this
    lives on the machine class that `machine_for` builds (one per run)."""

    busy: BusyCount = field(default_factory=BusyCount)
    #: clause -> judgements made that could have failed it
    exercised: Counter = field(default_factory=Counter)
    #: surface -> [accepted, refused] under a lease clearly expired and not superseded
    expired: dict[str, list[int]] = field(default_factory=dict)
    #: True (ends) / False (keeps) -> programs in which the store showed that delete choice (the
    #: programs learn it only where the probe before them could not: `StoreDriver.delete_probe`)
    delete_choice: Counter = field(default_factory=Counter)
    #: the first observation that showed each delete choice
    delete_evidence: dict[bool, str] = field(default_factory=dict)
    slowest_call_s: float = 0.0
    slowest_call: str = ""
    #: the first violation seen (clause, message), kept in case a later replay ends inconclusive
    first_violation: tuple[str, str] | None = None


def _exhausted(exc: BusyExhausted) -> ModelInconclusive:
    return ModelInconclusive(f"inconclusive: {exc}")


# -- one store under the model --------------------------------------------------------------

@dataclass
class CallOutcome:
    """What one store call did: the value it returned, or what it raised."""

    value: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        if self.error is None:
            return "accepted"
        return f"raised {type(self.error).__name__}: {self.error}"


class StoreDriver(RuleBasedStateMachine):
    """One store and the oracle beside it, for the machine's rules to drive (`FencedStoreMachine`).

    `prepare()` (run once per class, before the first program) reads the store's injectable-clock
    declaration, settles the clock and ttl, and checks that locations do not share data."""

    #: set by `machine_for`
    target: StoreTarget | None = None
    clock_mode: str = "auto"
    requested_ttl_ms: int | None = None
    requested_call_bound_s: float | None = None
    stats: RunStats | None = None
    #: set by `prepare`
    fake_clock: bool | None = None
    clock_reason: str = ""
    lease_ttl_ms: int = FAKE_TTL_MS
    call_bound_s: float = default_call_bound_s(FAKE_TTL_MS)
    #: the store's delete choice as the probe saw it (True ends, False keeps, None unclear), and what showed it
    delete_probe: bool | None = None
    delete_probe_evidence: str = ""
    _prepared: bool = False

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        cls.prepare()
        self.run_stats: RunStats = cls.stats
        self.clock = FakeClock() if self.fake_clock else None
        self.location = tempfile.mkdtemp(prefix="soak-model-")
        self.store = None
        try:
            self.store = cls._open(self.location, self.clock)
        finally:
            if self.store is None:
                cls._discard(self.location)
        # The store's delete choice as the probe saw it; where that was unclear, not known until a program
        # shows it (soak.oracle's module docstring).
        self.oracle = Oracle(self.lease_ttl_ms, delete_ends_tenure=self.delete_probe)
        self._epoch0 = time.monotonic()
        self._base_slack = _FAKE_SLACK if self.clock else 0.03 + 0.1 * self.lease_ttl_ms / 1000.0
        self._slowest_call = 0.0

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
            cls._discard(location)
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
        cls._probe_delete_choice()
        cls._prepared = True

    @classmethod
    def _discard(cls, location: str) -> None:
        """Remove a program's location, and the namespace a networked store keeps for it."""
        cls.target.cleanup(location)
        shutil.rmtree(location, ignore_errors=True)

    @classmethod
    def _busy_boot(cls, what: str, call: Callable[[], T]) -> T:
        """A store boot (or probe), retried while it fails because the store answered busy."""
        try:
            return retry_busy_boot(call, what, count=cls.stats.busy)
        except BusyExhausted as exc:
            raise _exhausted(exc) from exc

    @classmethod
    def _busy(cls, what: str, call: Callable[[], T]) -> T:
        try:
            return retry_busy(call, what, count=cls.stats.busy)
        except BusyExhausted as exc:
            raise _exhausted(exc) from exc

    @classmethod
    def _open(cls, location: str, clock: FakeClock | None, lease_ttl_ms: int | None = None):
        extra = {"clock": clock} if clock is not None else {}
        ttl = lease_ttl_ms or cls.lease_ttl_ms
        return cls._busy_boot(f"opening store {cls.target.spec}", lambda: cls.target.open(location, ttl, **extra))

    @classmethod
    def _probe_delete_choice(cls) -> None:
        """Once per machine, as conformance does, learn whether a fenced delete ends the deleting holder's
        tenure, so that no program has to read the choice off an outcome that a broken store could give for
        another reason (a refused renew is no proof that a delete ended the tenure).

        Over a fresh location, with a ttl no call's latency can reach: acquire, delete under that lease, then
        an append under it. Accepted: the store keeps the tenure. Refused, and another owner is granted the run
        at once: it ends it. Anything else (a store broken on this path) leaves the choice unclear, and the
        programs learn it as they go."""
        location = tempfile.mkdtemp(prefix="soak-model-")
        run = "soak-delete-probe"
        ends, evidence = None, ""
        try:
            store = cls._open(location, FakeClock() if cls.fake_clock else None, _PROBE_TTL_MS)
            try:
                busy = cls._busy  # the calls are named as the programs' are, by the probe's run
                try:
                    lease = busy(f"acquire({run!r}, 'probe-a')", lambda: store.acquire(run, "probe-a"))
                    busy(f"delete({run!r}, lease={lease!r})", lambda: store.delete(run, lease))
                    entry = JournalEntry(1, b"p")
                    try:
                        busy(f"append({run!r}, {entry!r}, lease={lease!r})", lambda: store.append(run, entry, lease))
                        ends, evidence = False, f"an append under {lease!r} after its fenced delete was accepted"
                    except LeaseHeldError:
                        other = busy(f"acquire({run!r}, 'probe-b')", lambda: store.acquire(run, "probe-b"))
                        ends, evidence = True, (f"an append under {lease!r} after its fenced delete was refused, "
                                                f"and another owner was granted {other!r} at once")
                except ModelInconclusive:
                    raise
                except Exception:  # broken on the probe's path: the programs will say how
                    ends, evidence = None, ""
            finally:
                store.close()
        finally:
            cls._discard(location)
        cls.delete_probe, cls.delete_probe_evidence = ends, evidence
        if ends is not None:
            cls.stats.delete_choice[ends] += 1
            cls.stats.delete_evidence.setdefault(ends, f"the probe before the programs: {evidence}")

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
            cls._discard(first)
            cls._discard(second)
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
            type(self)._discard(self.location)

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

    def _call(self, what: str, fn: Callable[[], Any]) -> tuple[CallOutcome, float, float]:
        """Run one store call (busy answers retried); returns its outcome and the model-time window
        of the attempt that answered."""
        window = [self._now()]
        try:
            out = CallOutcome(value=retry_busy(self._timed(what, fn, window), what, count=self.run_stats.busy))
        except BusyExhausted as exc:
            raise _exhausted(exc) from exc
        except Exception as exc:  # every exception is an outcome to judge
            out = CallOutcome(error=exc)
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
        return lo if lo is hi else LeaseStanding.EXPIRED

    def _fail(self, clause: str, message: str) -> None:
        __tracebackhide__ = True  # pytest shows the rule that failed, not this helper
        if self.run_stats.first_violation is None:
            self.run_stats.first_violation = (clause, message)
        raise ContractViolation(clause, message)

    def _untyped(self, what: str, out: CallOutcome) -> None:
        """Anything untyped is a failure of typed-refusal (busy answers never get here: retried)."""
        if out.error is not None and not isinstance(out.error, StoreError):
            self._fail("typed-refusal", f"{what} raised untyped {type(out.error).__name__}: {out.error}")
