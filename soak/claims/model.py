"""The Hypothesis model of a claim store (CONTRACT section 2): random programs checked call by call against
`ClaimsOracle`.

`ClaimsMachine` drives one claim store under test and the pure `soak.claims.oracle.ClaimsOracle` in lockstep,
as `soak.model.FencedStoreMachine` does for run stores: two projects with two tasks each, three claimants (two
agents on node `n1`, one on `n2`), and rules that claim, heartbeat, release, write progress, recover, reconcile,
read and let time pass. Heartbeats, releases, progress writes and recoveries are made at the current epoch and at
the epochs either side of it, by the owner and by others. Every result is compared with the oracle's: the
returned `Claim` (owner, epoch and, with a fake clock, `renewed_at`), the task row a recovery returns, and for a
refusal that it is a `CheckoutConflictError` whose `current_holder` is the oracle's row at the time. After every
step an invariant reads back every central row, task row, project listing and audit trail, and a difference
fails the clause it breaks (`soak.clauses.CLAIM_CLAUSES`): an epoch that changed where it must not is
`claim-epoch-step`, lost step progress is `progress-preserved`, a missing or extra audit event is
`recovery-audited`, a task row that does not mirror its own central row is `rows-reconciled`.

Leeway for what the contract leaves open: a task row's worktree is compared as present or absent (its name is
the store's), an audit event's free-text detail is not compared, a never-claimed task may read as absent or as a
fresh `todo` row, `reconcile` may report any of the project's tasks (the invariant judges the rows it leaves),
and a conflict on a released row may name that row or None. Each claimant keeps one run id: whether a renewal by
the same owner under another run id updates the row's run is not pinned by the contract, so the model does not
ask.

Time: where the store object declares `injectable_clock = True` (read with `StoreTarget.probe_injectable_clock`,
never inferred from the factory's signature) store and oracle share a `soak.clock.FakeClock` that a rule
advances, `renewed_at` is compared exactly and a recovery must be accepted past the ttl and refused within it
(an instant exactly at the ttl may go either way). Otherwise the store runs on its own real clock with a short
ttl (`REAL_TTL_MS`), the time rules sleep, `renewed_at` is not compared, and a recovery whose window straddles
the expiry (widened by the slowest call so far) may go either way; the oracle follows the store.

Outcomes: `StoreBusyError` wrote nothing, so the call is retried (bounded, `soak.retry`); a call busy on every
attempt ends the run `inconclusive` (`ModelInconclusive`), never a pass. Any exception other than
`CheckoutConflictError` is an indeterminate outcome the model cannot judge, so it fails the run naming the call
(clause `typed-refusal`).

Vendors call `run_claims_model(spec, max_examples=..., seed=...)`, which returns a `ClaimsModelOutcome` with
verdict `pass`, `fail` (the clause and the minimal failing program) or `inconclusive`; `soak model --workload
claims --store SPEC` is the CLI. The spec is any claim store spec (`memory:`, `sqlite:`, `package.module:callable`)
or a factory callable `factory(location, *, lease_ttl_ms, [clock])`.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from soak.claims._spec import resolve_claims
from soak.claims._types import CheckoutConflictError, Claim, Claimant, TaskRow
from soak.claims.oracle import ClaimsOracle, fresh_task
from soak.clauses import clause_title
from soak.clock import FakeClock
from soak.errors import HarnessError, ScenarioError, StoreBootError
from soak.model._driver import ContractViolation, ModelInconclusive
from soak.model._profiles import model_settings
from soak.model._runner import _find, _is_step, _program_from
from soak.retry import BusyCount, BusyExhausted, retry_busy
from soak.stores import StoreTarget, retry_busy_boot

__all__ = ["CLAIMANTS", "CLAIMS_MODEL_NEVER_EXERCISES", "ClaimViolation", "ClaimsMachine", "ClaimsModelOutcome",
           "FAKE_TTL_MS", "PROJECTS", "REAL_TTL_MS", "TASKS", "claims_machine_for", "run_claims_model"]

PROJECTS = ("p1", "p2")
TASKS = ("t1", "t2")
CLAIMANTS = (Claimant("n1", "a1", "run-1"), Claimant("n1", "a2", "run-2"), Claimant("n2", "a1", "run-3"))
#: ttl with the fake clock (time moves only when a rule moves it)
FAKE_TTL_MS = 1000
#: ttl with real time: short, so a rule can sleep past it cheaply
REAL_TTL_MS = 150
_FAKE_SLACK = 1e-6

#: Claim clauses the model never exercises, and why (`ClaimsModelOutcome.exercised` never names them). Of
#: `rows-reconciled` the model judges only that every task row mirrors its central row after each call and that
#: `reconcile` leaves them so: a row left stale needs a split write (a process killed between two commits).
CLAIMS_MODEL_NEVER_EXERCISES: dict[str, str] = {
    "claim-atomic": "the model runs one store object in one process, one call at a time: no other claim can land "
                    "between a claim's check and its write",
    "handoff-policy": "the model calls recover directly; the policy's decisions are judged by the handoff tests "
                      "and the storm",
}

_P, _T, _C = st.sampled_from(PROJECTS), st.sampled_from(TASKS), st.sampled_from(CLAIMANTS)
#: an epoch relative to the task's current one: mostly the current one, sometimes either side
_D = st.sampled_from([0, 0, 0, -1, 1])


class ClaimViolation(ContractViolation):
    """A model step where the claim store broke a clause of `soak.clauses.CLAIM_CLAUSES` (or `typed-refusal`)."""

    def __init__(self, clause: str, message: str) -> None:
        self.clause = clause
        AssertionError.__init__(self, f"[{clause}] {message} (clause {clause}: {clause_title(clause)})")


@dataclass
class ClaimsRunStats:
    """What every program of one run adds up to (Hypothesis makes a machine per program)."""

    busy: BusyCount = field(default_factory=BusyCount)
    exercised: Counter = field(default_factory=Counter)
    first_violation: tuple[str, str] | None = None


@dataclass
class _Out:
    value: Any = None
    error: BaseException | None = None
    t0: float = 0.0
    t1: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        return "accepted" if self.error is None else f"raised {type(self.error).__name__}: {self.error}"


def _who(c: Claimant) -> str:
    return f"{c.node_id}/{c.agent_id}"


def _inconclusive(exc: BusyExhausted) -> ModelInconclusive:
    return ModelInconclusive(f"inconclusive: {exc}")


class ClaimsMachine(RuleBasedStateMachine):
    """Drives one claim store and `ClaimsOracle` in lockstep; build one with `claims_machine_for(spec)`."""

    #: set by `claims_machine_for`
    target: StoreTarget | None = None
    clock_mode: str = "auto"
    requested_ttl_ms: int | None = None
    stats: ClaimsRunStats | None = None
    #: set by `prepare`
    fake_clock: bool | None = None
    clock_reason: str = ""
    lease_ttl_ms: int = FAKE_TTL_MS
    _prepared: bool = False

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        cls.prepare()
        self.run_stats: ClaimsRunStats = cls.stats
        self.clock = FakeClock() if cls.fake_clock else None
        self.location = tempfile.mkdtemp(prefix="soak-claims-model-")
        self.store = None
        try:
            self.store = cls._open(self.location, self.clock)
        finally:
            if self.store is None:
                shutil.rmtree(self.location, ignore_errors=True)
        self.oracle = ClaimsOracle(self.lease_ttl_ms / 1000.0)
        self._epoch0 = time.monotonic()
        #: (project, task) -> model-time window of the last accepted claim or heartbeat
        self._stamps: dict[tuple[str, str], tuple[float, float]] = {}
        self._slowest = 0.0
        # the last step, the clause a difference after it breaks, and whether it was refused
        self._last = ("the initial state", "claim-live-accepted", False)

    # -- preparing the class ----------------------------------------------------------------

    @classmethod
    def prepare(cls) -> None:
        """Settle the clock and ttl from the store's declaration; check that locations do not share data."""
        if cls._prepared:
            return
        if cls.target is None or cls.stats is None:
            raise HarnessError("ClaimsMachine needs a claim store; build one with soak.claims.model."
                               "claims_machine_for(spec)")
        location = tempfile.mkdtemp(prefix="soak-claims-model-")
        try:
            declared = cls._busy("probing the store's injectable_clock declaration",
                                 lambda: cls.target.probe_injectable_clock(location,
                                                                          cls.requested_ttl_ms or FAKE_TTL_MS))
        finally:
            shutil.rmtree(location, ignore_errors=True)
        if cls.clock_mode == "fake" and not declared:
            raise ScenarioError(f"--clock fake needs a claim store that declares injectable_clock = True, and "
                                f"{cls.target.spec} does not; use --clock auto (real time for it)")
        if cls.clock_mode == "real":
            fake, reason = False, "real time, as asked (--clock real)"
        elif declared:
            fake, reason = True, "fake clock: the store declares injectable_clock = True"
        else:
            fake, reason = False, ("real time: the store does not declare injectable_clock = True "
                                   "(soak never infers it from the factory's signature)")
        cls.fake_clock, cls.clock_reason = fake, reason
        cls.lease_ttl_ms = int(cls.requested_ttl_ms or (FAKE_TTL_MS if fake else REAL_TTL_MS))
        cls._preflight()
        cls._prepared = True

    @classmethod
    def _busy(cls, what: str, call: Callable[[], Any]) -> Any:
        try:
            return retry_busy_boot(call, what, count=cls.stats.busy)
        except BusyExhausted as exc:
            raise _inconclusive(exc) from exc

    @classmethod
    def _open(cls, location: str, clock: FakeClock | None) -> Any:
        extra = {"clock": clock} if clock is not None else {}
        return cls._busy(f"opening claim store {cls.target.spec}",
                         lambda: cls.target.open(location, cls.lease_ttl_ms, **extra))

    @classmethod
    def _preflight(cls) -> None:
        """A claim store opened over a fresh location must not see another location's claims."""
        first, second = tempfile.mkdtemp(prefix="soak-claims-model-"), tempfile.mkdtemp(prefix="soak-claims-model-")
        clock = FakeClock() if cls.fake_clock else None
        who = Claimant("soak-preflight", "soak-preflight")
        try:
            store = cls._open(first, clock)
            try:
                held = cls._busy("preflight claim", lambda: store.claim("soak-preflight", "t", who))
                other = cls._open(second, clock)
                try:
                    seen = cls._busy("preflight get", lambda: other.get("soak-preflight", "t"))
                finally:
                    other.close()
                cls._busy("preflight release", lambda: store.release("soak-preflight", "t", who, held.lease_epoch))
            finally:
                store.close()
        finally:
            shutil.rmtree(first, ignore_errors=True)
            shutil.rmtree(second, ignore_errors=True)
        if seen is not None:
            raise StoreBootError(f"claim store {cls.target.spec} shares claims between locations, but the model "
                                 "needs an empty store per program: use a spec that keeps its data inside the "
                                 "location (sqlite:, not sqlite:///path)")

    def teardown(self) -> None:
        try:
            if self.store is not None:
                self.store.close()
        finally:
            shutil.rmtree(self.location, ignore_errors=True)

    # -- plumbing -----------------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock.now if self.clock is not None else time.monotonic() - self._epoch0

    @property
    def _slack(self) -> float:
        return _FAKE_SLACK if self.clock is not None else 0.03 + self._slowest

    def _exercise(self, *clauses: str) -> None:
        for clause in clauses:
            self.run_stats.exercised[clause] += 1

    def _fail(self, clause: str, message: str) -> None:
        __tracebackhide__ = True
        if self.run_stats.first_violation is None:
            self.run_stats.first_violation = (clause, message)
        raise ClaimViolation(clause, message)

    def _call(self, what: str, fn: Callable[[], Any]) -> _Out:
        """One store call, busy answers retried; every other exception is an outcome to judge."""
        out = _Out(t0=self._now())
        started = time.monotonic()

        def attempt() -> Any:
            out.t0 = self._now()  # a busy attempt before this one wrote nothing
            return fn()

        try:
            out.value = retry_busy(attempt, what, count=self.run_stats.busy)
        except BusyExhausted as exc:
            raise _inconclusive(exc) from exc
        except Exception as exc:  # noqa: BLE001 - judged by the rule
            out.error = exc
        out.t1 = self._now()
        self._slowest = max(self._slowest, time.monotonic() - started)
        return out

    def _read(self, what: str, fn: Callable[[], Any]) -> Any:
        out = self._call(what, fn)
        if not out.ok:
            self._indeterminate(what, out)
            self._fail("typed-refusal", f"indeterminate: the read {what} {out.describe()}; a read is never refused")
        return out.value

    def _indeterminate(self, what: str, out: _Out) -> None:
        """An exception the contract does not name: nothing can be judged from it, so the run fails on it."""
        if out.error is not None and not isinstance(out.error, CheckoutConflictError):
            self._exercise("typed-refusal")
            self._fail("typed-refusal", f"indeterminate: {what} {out.describe()}; a claim store refuses only with "
                                        "CheckoutConflictError (StoreBusyError is retried), so this outcome "
                                        "cannot be judged")

    def _oracle_now(self, out: _Out) -> float:
        return self.clock.now if self.clock is not None else out.t0

    def _m(self, claim: Any) -> Any:
        """A claim as the model compares it (renewed_at only where the clock is shared)."""
        if not isinstance(claim, Claim):
            return claim
        stamp = round(claim.renewed_at, 6) if self.clock is not None else None
        return (claim.project_id, claim.task_id, claim.owner, claim.lease_epoch, stamp)

    def _mt(self, row: Any, project_id: str = "", task_id: str = "") -> Any:
        """A task row as the model compares it: worktree present or not, absent rows as fresh ones."""
        if row is None and project_id:
            row = fresh_task(project_id, task_id)
        if not isinstance(row, TaskRow):
            return row
        stamp = row.checkout_lease_renewed_at
        stamp = (round(stamp, 6) if self.clock is not None else "set") if stamp is not None else None
        return (row.project_id, row.task_id, row.status, row.step, row.worktree is not None, row.checked_out_by,
                row.checkout_node_id, row.checkout_run_id, row.checkout_lease_epoch, stamp)

    def _epoch(self, p: str, t: str) -> int:
        cur = self.oracle.get(p, t)
        return cur.lease_epoch if cur is not None else 0

    def _expect(self, fn: Callable[[], Any]) -> tuple[Any, CheckoutConflictError | None]:
        try:
            return fn(), None
        except CheckoutConflictError as exc:
            return None, exc

    def _conflict(self, what: str, out: _Out, before: Claim | None) -> None:
        """A refusal the oracle also refuses: a CheckoutConflictError naming the holder at the time."""
        self._indeterminate(what, out)
        self._exercise("conflict-holder")
        holder = getattr(out.error, "current_holder", None)
        allowed = [self._m(before)]
        if before is not None and before.owner is None:
            allowed.append(None)  # a released row has no holder: naming the row or None both say so
        if self._m(holder) not in allowed:
            self._fail("conflict-holder", f"{what} raised CheckoutConflictError naming {holder!r}; the central "
                                          f"row then was {before!r}")

    def _wrongly_refused(self, what: str, out: _Out, clause: str, why: str) -> None:
        self._indeterminate(what, out)
        self._fail(clause, f"{what} was refused ({out.describe()}) though {why}")

    # -- the claim calls ------------------------------------------------------------------------

    @rule(p=_P, t=_T, c=_C)
    def claim(self, p: str, t: str, c: Claimant) -> None:
        what = f"claim({p!r}, {t!r}, {c!r})"
        before = self.oracle.get(p, t)
        out = self._call(what, lambda: self.store.claim(p, t, c))
        want, conflict = self._expect(lambda: self.oracle.claim(p, t, c, self._oracle_now(out)))
        if conflict is None:
            self._exercise("claim-live-accepted", "claim-epoch-step")
            self._last = (what, "claim-live-accepted", False)
            if not out.ok:
                self._wrongly_refused(what, out, "claim-live-accepted",
                                      "the task was free" if before is None or before.owner is None
                                      else f"{_who(c)} already held it (a renewal)")
            if self._m(out.value) != self._m(want):
                epoch = getattr(out.value, "lease_epoch", None)
                self._fail("claim-epoch-step" if epoch != want.lease_epoch else "claim-live-accepted",
                           f"{what} returned {out.value!r}; expected {want!r}")
            self._stamps[(p, t)] = (out.t0, out.t1)
            return
        self._exercise("claim-epoch-once", "claim-lease-protected")
        self._last = (f"refused {what}", "claim-epoch-once", True)
        if out.ok:
            epoch = getattr(out.value, "lease_epoch", None)
            self._fail("claim-epoch-once" if epoch == before.lease_epoch else "claim-lease-protected",
                       f"{what} was granted ({out.value!r}) while {_who(before.owner)} held epoch "
                       f"{before.lease_epoch}")
        self._conflict(what, out, before)

    def _fenced(self, verb: str, p: str, t: str, c: Claimant, d: int, call: Callable[[int], Any],
                oracle_call: Callable[[int, float], Any], fence_clause: str, extra: str = "") -> tuple[_Out, Any]:
        """Heartbeat, release or progress write at the current epoch + d: judged against the oracle."""
        epoch = self._epoch(p, t) + d
        what = f"{verb}({p!r}, {t!r}, {c!r}, epoch={epoch}{extra})"
        before = self.oracle.get(p, t)
        out = self._call(what, lambda: call(epoch))
        want, conflict = self._expect(lambda: oracle_call(epoch, self._oracle_now(out)))
        if conflict is None:
            self._exercise("claim-live-accepted")
            self._last = (what, "claim-live-accepted", False)
            if not out.ok:
                self._wrongly_refused(what, out, "claim-live-accepted", f"{_who(c)} holds epoch {epoch}")
            return out, want
        self._exercise(fence_clause)
        self._last = (f"refused {what}", fence_clause, True)
        if out.ok:
            held = "nobody" if before is None or before.owner is None else _who(before.owner)
            self._fail(fence_clause, f"{what} was accepted, but {held} holds the task at epoch "
                                     f"{0 if before is None else before.lease_epoch}")
        self._conflict(what, out, before)
        return out, None

    @rule(p=_P, t=_T, c=_C, d=_D)
    def heartbeat(self, p: str, t: str, c: Claimant, d: int) -> None:
        out, want = self._fenced("heartbeat", p, t, c, d, lambda e: self.store.heartbeat(p, t, c, e),
                                 lambda e, now: self.oracle.heartbeat(p, t, c, e, now), "heartbeat-fenced")
        if want is not None:
            if self._m(out.value) != self._m(want):
                epoch = getattr(out.value, "lease_epoch", None)
                self._fail("claim-epoch-step" if epoch != want.lease_epoch else "claim-live-accepted",
                           f"heartbeat({p!r}, {t!r}, {c!r}) returned {out.value!r}; expected {want!r}")
            self._stamps[(p, t)] = (out.t0, out.t1)

    @rule(p=_P, t=_T, c=_C, d=_D)
    def release(self, p: str, t: str, c: Claimant, d: int) -> None:
        self._exercise("progress-preserved")
        self._fenced("release", p, t, c, d, lambda e: self.store.release(p, t, c, e),
                     lambda e, now: self.oracle.release(p, t, c, e) or True, "heartbeat-fenced")

    @rule(p=_P, t=_T, c=_C, d=_D, bump=st.integers(1, 3))
    def record_progress(self, p: str, t: str, c: Claimant, d: int, bump: int) -> None:
        row = self.oracle.task(p, t)
        step = (row.step if row is not None else 0) + bump
        self._fenced("record_progress", p, t, c, d, lambda e: self.store.record_progress(p, t, c, e, step),
                     lambda e, now: self.oracle.record_progress(p, t, c, e, step) or True, "progress-fenced",
                     extra=f", step={step}")

    @rule(p=_P, t=_T, d=_D, by=_C)
    def recover(self, p: str, t: str, d: int, by: Claimant) -> None:
        epoch = self._epoch(p, t) + d
        what = f"recover({p!r}, {t!r}, epoch={epoch}, by={by!r})"
        before = self.oracle.get(p, t)
        out = self._call(what, lambda: self.store.recover(p, t, epoch, by, "soak model"))
        held = before is not None and before.owner is not None and before.lease_epoch == epoch
        if not held:
            self._exercise("claim-lease-protected")
            self._last = (f"refused {what}", "claim-lease-protected", True)
            if out.ok:
                self._fail("recovery-audited" if before is None or before.owner is None else "claim-lease-protected",
                           f"{what} was accepted, but epoch {epoch} is not the current held claim ({before!r})")
            self._conflict(what, out, before)
            return
        s0, s1 = self._stamps[(p, t)]
        ttl = self.lease_ttl_ms / 1000.0
        live_sure = out.t1 - s0 < ttl - self._slack
        expired_sure = out.t0 - s1 > ttl + self._slack
        if not out.ok:
            self._last = (f"refused {what}", "claim-lease-protected", True)
            if live_sure:
                self._exercise("claim-lease-protected")
            if expired_sure:
                self._wrongly_refused(what, out, "claim-live-accepted",
                                      f"epoch {epoch} is held and its lease expired (recovery must be accepted)")
            self._conflict(what, out, before)
            return
        if live_sure:
            self._fail("claim-lease-protected", f"{what} was accepted while {_who(before.owner)} was within its "
                                                f"lease (renewed {out.t1 - s0:.3f} s before, ttl {ttl:g} s)")
        self._exercise("recovery-audited", "progress-preserved")
        self._last = (what, "recovery-audited", False)
        # past the lease (or at its edge, where the store may take it): the oracle follows the store
        now = max(self._oracle_now(out), before.renewed_at + ttl + 1e-3)
        want = self.oracle.recover(p, t, epoch, by, "soak model", now)
        self._stamps.pop((p, t), None)
        if self._mt(out.value) != self._mt(want):
            clause = "progress-preserved" if getattr(out.value, "step", None) != want.step else "rows-reconciled"
            self._fail(clause, f"{what} returned {out.value!r}; expected {want!r} (back to todo, step kept, "
                               "worktree dropped)")

    def _held(self, pick: int) -> tuple[str, str, Claim]:
        held = [(k, c) for k, c in sorted(self.oracle.claims.items()) if c.owner is not None]
        (p, t), cur = held[pick % len(held)]
        return p, t, cur

    @precondition(lambda self: any(c.owner is not None for c in self.oracle.claims.values()))
    @rule(pick=st.integers(0, 3), c=_C)
    def contend(self, pick: int, c: Claimant) -> None:
        """A claim of a held task (by another claimant, or a renewal by its owner)."""
        p, t, _ = self._held(pick)
        self.claim(p, t, c)

    @precondition(lambda self: any(c.owner is not None for c in self.oracle.claims.values()))
    @rule(pick=st.integers(0, 3), bump=st.integers(1, 3))
    def owner_progress(self, pick: int, bump: int) -> None:
        """A progress write by a held claim's owner at its epoch (read off the model)."""
        p, t, cur = self._held(pick)
        self.record_progress(p, t, cur.owner, 0, bump)

    @precondition(lambda self: any(c.owner is not None for c in self.oracle.claims.values()))
    @rule(pick=st.integers(0, 3), d=_D)
    def owner_heartbeat(self, pick: int, d: int) -> None:
        """A heartbeat by a held claim's owner, at its epoch or either side of it (read off the model)."""
        p, t, cur = self._held(pick)
        self.heartbeat(p, t, cur.owner, d)

    @precondition(lambda self: any(c.owner is not None for c in self.oracle.claims.values()))
    @rule(pick=st.integers(0, 3))
    def owner_release(self, pick: int) -> None:
        """A release by a held claim's owner at its epoch (read off the model)."""
        p, t, cur = self._held(pick)
        self.release(p, t, cur.owner, 0)

    @precondition(lambda self: any(c.owner is not None for c in self.oracle.claims.values()))
    @rule(pick=st.integers(0, 3), by=_C)
    def recover_held(self, pick: int, by: Claimant) -> None:
        """A recovery of a held claim at its epoch, whether or not its lease ran out (read off the model)."""
        p, t, _ = self._held(pick)
        self.recover(p, t, 0, by)

    @precondition(lambda self: any(c.owner is not None for c in self.oracle.claims.values()))
    @rule(pick=st.integers(0, 3), by=_C, work=st.booleans())
    def outlive_then_recover(self, pick: int, by: Claimant, work: bool = False) -> None:
        """Let a held claim's lease run out (its owner first writing progress, where `work`), then recover it at
        its epoch (read off the model): the unreachable owner's task of CONTRACT section 2."""
        p, t, cur = self._held(pick)
        if work:
            self.record_progress(p, t, cur.owner, 0, 1)
        self.let_time_pass(1.5)
        self.recover(p, t, 0, by)

    @rule(p=_P)
    def reconcile(self, p: str) -> None:
        what = f"reconcile({p!r})"
        out = self._call(what, lambda: self.store.reconcile(p))
        self._indeterminate(what, out)
        if out.error is not None:
            self._fail("rows-reconciled", f"{what} {out.describe()}")
        self._exercise("rows-reconciled")
        self._last = (what, "rows-reconciled", False)
        known = set(TASKS)
        if not isinstance(out.value, (list, tuple)) or not set(out.value) <= known:
            self._fail("rows-reconciled", f"{what} returned {out.value!r}; expected a list of task ids of {p!r}")

    @rule(p=_P, t=_T)
    def read(self, p: str, t: str) -> None:
        """get and task at an arbitrary point (also on tasks never claimed)."""
        self._check_task(p, t)

    # -- time -----------------------------------------------------------------------------------

    @rule(ttls=st.sampled_from([0.25, 0.5, 1.5, 3.0]))
    def let_time_pass(self, ttls: float) -> None:
        """Advance the shared fake clock, or sleep (real time), by a multiple of the ttl."""
        if self.clock is not None:
            self.clock.advance(ttls * self.lease_ttl_ms / 1000.0)
        else:
            time.sleep(min(ttls, 1.5) * self.lease_ttl_ms / 1000.0)

    # -- the state invariant --------------------------------------------------------------------

    def _differs(self, kind: str, got: Any, want: Any, *, epoch: bool = False, step: bool = False) -> None:
        what, clause, refused = self._last
        if not refused:
            if epoch:
                clause = "claim-epoch-step"
            elif step and (what.startswith("release(") or what.startswith("recover(")):
                clause = "progress-preserved"
        self._fail(clause, f"after {what}: {kind} = {got!r}, model expects {want!r}")

    def _check_task(self, p: str, t: str) -> None:
        got = self._read(f"get({p!r}, {t!r})", lambda: self.store.get(p, t))
        want = self.oracle.get(p, t)
        if self._m(got) != self._m(want):
            self._differs(f"get({p!r}, {t!r})", got, want,
                          epoch=getattr(got, "lease_epoch", None) != getattr(want, "lease_epoch", None))
        row = self._read(f"task({p!r}, {t!r})", lambda: self.store.task(p, t))
        if row is not None and isinstance(row, TaskRow) and not row.mirrors(got) and want is not None:
            self._exercise("rows-reconciled")
            self._fail("rows-reconciled", f"after {self._last[0]}: task({p!r}, {t!r}) = {row!r} does not mirror "
                                          f"its central row {got!r}")
        want_row = self.oracle.task(p, t)
        if self._mt(row, p, t) != self._mt(want_row, p, t):
            self._differs(f"task({p!r}, {t!r})", row, want_row,
                          step=getattr(row, "step", 0) != getattr(want_row, "step", 0))

    @invariant()
    def state_matches_oracle(self) -> None:
        for p in PROJECTS:
            for t in TASKS:
                self._check_task(p, t)
            claims = self._read(f"claims({p!r})", lambda: self.store.claims(p))
            got = sorted((self._m(c) for c in claims), key=repr)
            want = sorted((self._m(c) for c in self.oracle.project_claims(p)), key=repr)
            if got != want:
                self._differs(f"claims({p!r})", claims, self.oracle.project_claims(p))
            rows = self._read(f"tasks({p!r})", lambda: self.store.tasks(p))
            fresh = {self._mt(fresh_task(p, t)) for t in TASKS}
            got = sorted((m for m in (self._mt(r) for r in rows) if m not in fresh), key=repr)
            want = sorted((self._mt(r) for r in self.oracle.project_tasks(p)), key=repr)
            if got != want:
                self._differs(f"tasks({p!r})", rows, self.oracle.project_tasks(p))
            events = self._read(f"audit({p!r})", lambda: self.store.audit(p))
            shape = [(e.project_id, e.task_id, e.kind, e.epoch, e.node_id) for e in events]
            want_events = [(e.project_id, e.task_id, e.kind, e.epoch, e.node_id) for e in self.oracle.audit(p)]
            if shape != want_events:
                self._fail("recovery-audited", f"after {self._last[0]}: audit({p!r}) = {shape!r}, model expects "
                                               f"{want_events!r} (project, task, kind, epoch, node)")


# -- running it ---------------------------------------------------------------------------------

def claims_machine_for(spec: str | StoreTarget | Callable[..., Any], *, lease_ttl_ms: int | None = None,
                       clock: str = "auto", seed: int | None = None) -> type[ClaimsMachine]:
    """A `ClaimsMachine` subclass bound to one claim store (spec string, target or factory callable).

    `clock` is `auto` (a fake clock where the store declares `injectable_clock = True`, else real time), `fake`
    (a usage error for a store that does not declare it) or `real`. `seed` fixes Hypothesis' random seed."""
    target = spec if isinstance(spec, StoreTarget) else resolve_claims(spec)
    if target.kind != "claims":
        raise ScenarioError(f"{target.spec} is a {target.kind} store target; the claims model needs a claim store "
                            "(soak.claims.resolve_claims)")
    if clock not in ("auto", "fake", "real"):
        raise ScenarioError(f"clock must be auto, fake or real, got {clock!r}")
    attrs: dict[str, Any] = {
        "target": target, "clock_mode": clock, "requested_ttl_ms": lease_ttl_ms, "stats": ClaimsRunStats(),
        "__module__": ClaimsMachine.__module__,
        "_hypothesis_internal_add_digest": f"claims|{target.spec}|{clock}|{lease_ttl_ms}".encode(),
    }
    if seed is not None:
        attrs["_hypothesis_internal_use_seed"] = int(seed)
    return type("ClaimsMachine", (ClaimsMachine,), attrs)


@dataclass(frozen=True)
class ClaimsModelOutcome:
    """What `run_claims_model` concluded: `verdict` pass, fail (with `clause`, `error` and the minimal failing
    `program`) or inconclusive (with `reason`); always the clock used, busy retries and the clauses exercised."""

    verdict: str
    program: tuple[str, ...] = ()
    clause: str | None = None
    error: str = ""
    reason: str = ""
    busy_retries: int = 0
    clock: str = ""
    clock_reason: str = ""
    lease_ttl_ms: int = 0
    examples: int = 0
    seed: int | None = None
    exercised: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def inconclusive(self) -> bool:
        return self.verdict == "inconclusive"

    @property
    def steps(self) -> int:
        """Rule calls in the failing program."""
        return sum(1 for line in self.program if _is_step(line) and "state_matches_oracle" not in line)


def run_claims_model(spec: str | StoreTarget | Callable[..., Any], *, max_examples: int | None = None,
                     seed: int | None = None, profile: str | None = None, settings: Settings | None = None,
                     lease_ttl_ms: int | None = None, clock: str = "auto") -> ClaimsModelOutcome:
    """Run the claims model on one claim store and return its outcome; set-up problems (a bad spec, a store that
    does not boot) raise `HarnessError` with one line naming the fix."""
    machine = claims_machine_for(spec, lease_ttl_ms=lease_ttl_ms, clock=clock, seed=seed)
    chosen = settings or model_settings(profile)
    if max_examples is not None:
        if max_examples < 1:
            raise ScenarioError(f"max_examples must be at least 1, got {max_examples}")
        chosen = Settings(chosen, max_examples=max_examples)

    def outcome(verdict: str, **fields: Any) -> ClaimsModelOutcome:
        stats = machine.stats
        return ClaimsModelOutcome(
            verdict, busy_retries=stats.busy.retries,
            clock={True: "fake", False: "real"}.get(machine.fake_clock, "unknown"),
            clock_reason=machine.clock_reason or "not settled: the run ended before the store's declaration was read",
            lease_ttl_ms=machine.lease_ttl_ms, examples=chosen.max_examples, seed=seed,
            exercised=dict(sorted(stats.exercised.items())), **fields)

    try:
        machine.prepare()
        run_state_machine_as_test(machine, settings=chosen)
    except ModelInconclusive as exc:
        seen = machine.stats.first_violation
        if seen is not None:  # a proven violation outranks a later replay that stayed busy
            clause, message = seen
            return outcome("fail", clause=clause, error=f"ClaimViolation: [{clause}] {message}; its replay then "
                                                        f"ended inconclusive ({exc})")
        return outcome("inconclusive", reason=" ".join(str(exc).split()))
    except HarnessError:
        raise
    except Exception as exc:  # noqa: BLE001 - a failing program
        harness = _find(exc, HarnessError)
        if harness is not None:
            raise harness from exc
        violation = _find(exc, ContractViolation)
        return outcome("fail", program=_program_from(exc), clause=violation.clause if violation else None,
                       error=" ".join(f"{type(exc).__name__}: {exc}".split()))
    if not machine.stats.exercised:  # programs that made no decided call exercised nothing: never a pass
        return outcome("inconclusive", reason="the programs exercised no clause (no call of theirs was decided); "
                                              "run more examples")
    return outcome("pass")
