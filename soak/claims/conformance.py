"""Claims conformance: contract checks a claim store vendor calls from its own tests (CONTRACT section 2).

`run_claims_conformance(spec_or_target)` runs checks derived from the claim clauses of `soak.clauses`
(`CLAIM_CLAUSES`, plus `concurrent-boot`, `call-returns` and `no-crash`) against fresh locations it owns and
removes, and returns a `ClaimsConformanceReport`: per check a status (`pass`, `fail`, `error`, `inconclusive`,
`not-exercised`) and a one-line evidence, per clause the worst of its checks, and a verdict (`pass`, `fail`,
`inconclusive`; exit codes 0, 1, 3: an `error` is soak's inability to decide, never a pass).

What the checks do:

- sequential contract checks (the seed's section 2.8 unit test: a claim held by A refuses B and names A; the
  conflict names the current row; epochs step by one per owner change, never on renewal, never reset by release;
  heartbeats, releases and progress writes from a superseded owner or epoch are refused and change nothing,
  the live owner's are accepted; recovery is refused within the lease and for any other epoch, writes exactly
  one audit event, keeps step progress and drops the worktree). Time is the store's clock: an injected
  `soak.clock.FakeClock` where the store declares `injectable_clock = True`, else real time with sleeps of a
  ttl or two (a real-time result a slow call could have caused is `inconclusive`, never a fail);
- the barrier race (seed section 2.8): N processes released at once by a barrier claim one fresh task, round
  after round: exactly one winner, every loser's conflict names the winner, the epoch rose once, the central
  row names the winner's `(node_id, agent_id)`;
- the fence race: while one process, the owner, writes progress (and heartbeats) in a loop, a second one
  recovers its claim (expired by the second process's clock, or after real time has let it expire) and takes
  the task over; no write of the superseded owner may land after the takeover returned (a store that checks the
  fence in one transaction and writes in the next fails it);
- interleavings: a `claim`, `record_progress` or `heartbeat` is stopped at the k-th profile event of its call
  (k swept over its steps) while a second, already opened process takes the task over, then let go on: never
  two winners, and no write of the superseded owner after the takeover returned (deterministic, where the two
  races above depend on the scheduler);
- split writes: a process is killed (SIGKILL) at the k-th profile event (`sys.setprofile`, calls and returns,
  C-level ones included) inside `claim`, `release` or `recover`, k swept over the call's step count; then the
  suite re-claims some of the stale tasks (a claim must re-mirror its own row) and calls `reconcile`, after which
  every task row must mirror its central row; a recovery must have written its audit event exactly when the
  claim it recovered is released;
- concurrent bootstrap: 16 processes open one fresh location at once and claim, then 16 reopen it and find every
  claim (the migration is idempotent and loses nothing).

`StoreBusyError` is retried everywhere (bounded, counted; a call busy on every attempt is `inconclusive`).
Every store call of the suite is made in a child process (spawn) under a watchdog: a call past the bound is a
`call-returns` fail, a child that dies inside a store call a `no-crash` fail, and the suite goes on in a fresh
child. The multi-process checks fork helper processes from that child while it holds no store object open.
A `single_process` target (`memory:`) skips the multi-process checks (`not-exercised`, and the report says
why); a target dill cannot pickle runs in this process without the watchdog (liveness not exercised).
`handoff-policy` is the handoff policy's clause, not a store's: it is reported `not-exercised` here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from soak.claims._types import RECOVER_EVENT, CheckoutConflictError, Claim, Claimant
from soak.clauses import CLAIM_CLAUSES, default_call_bound_s
from soak.clock import FakeClock
from soak.conformance._report import ERROR, FAIL, INCONCLUSIVE, NOT_EXERCISED, PASS, CheckResult
from soak.conformance._watch import KIND_OPEN, Board, Watch
from soak.errors import HarnessError, StoreBootError, StoreSpecError
from soak.retry import BusyCount, BusyExhausted, retry_busy
from soak.spi import StoreBusyError
from soak.stores import StoreTarget, declares_injectable_clock, redact, resolve

__all__ = ["CHOICE", "CLAIM_CHECK_CLAUSES", "ClaimsConformanceReport", "EXIT_CODES", "STATUSES", "list_checks",
           "render", "run_claims_conformance", "run_claims_cli"]

CHOICE = "choice"
#: Every status a check can end in (`choice`: the contract allows either reading; the detail names the store's).
STATUSES: tuple[str, ...] = (PASS, FAIL, ERROR, INCONCLUSIVE, NOT_EXERCISED, CHOICE)
_RANK = {NOT_EXERCISED: 0, CHOICE: 1, PASS: 1, INCONCLUSIVE: 2, FAIL: 3, ERROR: 4}
#: verdict -> exit code
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
#: The clauses a claims conformance run reports on.
CLAIM_CHECK_CLAUSES: tuple[str, ...] = (*CLAIM_CLAUSES, "concurrent-boot", "call-returns", "no-crash")
_MULTI = "multi-process"
_POLL_S = 0.02
#: the checks' process is given up on after this long without a message while no store call is in flight
_STUCK_S = 300.0
#: how long a takeover may wait for a call the suite stopped mid-way before the call is let go on
_PAUSE_S = 0.05
_OPEN_TIMEOUT_S = 60.0
_RECOVERER = Claimant("node-recoverer", "handoff-policy")
#: how far a stored renewal time may be from the injected clock's reading (a store may keep milliseconds)
_CLOCK_SLACK_S = 0.001
#: the racers of a barrier round start this long after the round is sent (the barrier has let them all through)
_RACE_LEAD_S = 0.01


# -- the report -----------------------------------------------------------------------------------

@dataclass(slots=True)
class ClaimsConformanceReport:
    """Per-check results of one claims conformance run, per-clause statuses and the verdict."""

    store: str
    lease_ttl_ms: int
    timing: str = ""
    results: list[CheckResult] = field(default_factory=list)
    elapsed_s: float = 0.0
    call_bound_s: float = 0.0
    isolation: str = "child process"
    busy: BusyCount = field(default_factory=BusyCount)
    calls: int = 0  # store calls the watchdog saw

    @property
    def verdict(self) -> str:
        """`fail` on any fail; else `inconclusive` on any error or inconclusive, or when nothing passed."""
        statuses = {r.status for r in self.results}
        if FAIL in statuses:
            return FAIL
        if statuses & {ERROR, INCONCLUSIVE} or PASS not in statuses:
            return INCONCLUSIVE
        return PASS

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def clause_status(self) -> dict[str, str]:
        """clause id -> the worst status of its checks (error > fail > inconclusive > pass/choice > not-exercised)."""
        out: dict[str, str] = {}
        for r in self.results:
            if r.clause not in out or _RANK[r.status] > _RANK[out[r.clause]]:
                out[r.clause] = r.status
        return out

    def failed_clauses(self) -> set[str]:
        return {r.clause for r in self.results if r.status == FAIL}

    def evidence(self, clause: str) -> str:
        """One line: the detail of the clause's worst check."""
        worst = None
        for r in self.results:
            if r.clause == clause and (worst is None or _RANK[r.status] > _RANK[worst.status]):
                worst = r
        return worst.detail if worst is not None else ""

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "lease_ttl_ms": self.lease_ttl_ms, "timing": self.timing,
                "call_bound_s": self.call_bound_s, "isolation": self.isolation, "verdict": self.verdict,
                "elapsed_s": round(self.elapsed_s, 3),
                "busy": {"retries": self.busy.retries, "exhausted": self.busy.exhausted},
                "clauses": {c: {"status": s, "evidence": self.evidence(c)} for c, s in self.clause_status().items()},
                "results": [asdict(r) for r in self.results]}

    def render(self) -> str:
        return render(self)


def render(report: ClaimsConformanceReport) -> str:
    """The report as a text table: one line per check, then one per clause, busy retries and the verdict."""
    lines = [f"soak claims conformance: {report.store}  ttl {report.lease_ttl_ms} ms  timing: {report.timing}  "
             f"call bound {report.call_bound_s:g} s  ({report.isolation})"]
    cw = max((len(r.clause) for r in report.results), default=10)
    kw = max((len(r.check) for r in report.results), default=10)
    for r in report.results:
        lines.append(f"  {r.status.upper():13}  {r.clause:<{cw}}  {r.check:<{kw}}  {r.detail}")
    lines.append("clauses:")
    for clause, status in report.clause_status().items():
        lines.append(f"  {status.upper():13}  {clause}")
    lines.append(f"busy: {report.busy.summary()}")
    verdict = report.verdict
    named = sorted(report.failed_clauses()) if verdict == FAIL else sorted(
        c for c, s in report.clause_status().items() if s in (ERROR, INCONCLUSIVE))
    tail = verdict.upper() + (f" ({', '.join(named)})" if named else "")
    lines.append(f"{len(report.clause_status())} clauses, {len(report.results)} checks in {report.elapsed_s:.1f} s: "
                 f"{tail}")
    return "\n".join(lines)


# -- what a check gets ------------------------------------------------------------------------------

class Failed(AssertionError):
    """A clause observed broken: `clause` and a one-line detail."""

    def __init__(self, clause: str, detail: str) -> None:
        super().__init__(detail)
        self.clause = clause


class Undecided(Exception):
    """The check could not decide (the message says why)."""


class NotApplicable(Exception):
    """The check needs something the target lacks (the message says what)."""


def _one_line(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split())
    return (text[:240] + "...") if len(text) > 240 else (text or "(no message)")


@dataclass
class Settings:
    """What the runner child needs, sent from the parent."""

    ttl_ms: int
    root: str
    clock_ok: bool | None
    rounds: int
    processes: int
    boot_processes: int
    call_bound_s: float
    checks: list[str]
    #: why the multi-process checks cannot run ("" where they can)
    single_reason: str


class _Watched:
    """A claim store object seen through the watch: every call published, timed and busy-retried."""

    _CALLS = ("claim", "heartbeat", "release", "get", "record_progress", "recover", "task", "tasks", "claims",
              "audit", "reconcile")

    def __init__(self, store: Any, watch: Watch) -> None:
        self._store = store
        self._watch = watch

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._store, name)
        if name in self._CALLS:
            return lambda *args: self._watch.call(fn, name, *args)
        return fn

    def close(self) -> None:
        self._watch.call(self._store.close, "close")


class Ctx:
    """One check: fresh locations, the store's time, the store objects it opened, its results."""

    def __init__(self, suite: Suite, name: str) -> None:
        self.suite = suite
        self.name = name
        self.ttl_ms = suite.settings.ttl_ms
        self.ttl = self.ttl_ms / 1000.0
        self.clock: FakeClock | None = FakeClock() if suite.clock_ok else None
        self.stores: list[_Watched] = []
        self.results: list[tuple[str, str, str]] = []

    @property
    def injected(self) -> bool:
        return self.clock is not None

    def location(self) -> str:
        return tempfile.mkdtemp(prefix=f"{self.name}-", dir=self.suite.settings.root)

    def open(self, location: str, clock: Callable[[], float] | None | bool = True) -> _Watched:
        """A store object over `location`, with this check's clock (`clock=False`: none passed)."""
        extra: dict[str, Any] = {}
        if clock is True and self.clock is not None:
            extra["clock"] = self.clock
        elif callable(clock):
            extra["clock"] = clock
        store = self.suite.watch.open(lambda: open_retrying(self.suite.target, location, self.ttl_ms, **extra),
                                      "open (the store factory)")
        watched = _Watched(store, self.suite.watch)
        self.stores.append(watched)
        return watched

    def close(self, store: _Watched | None) -> None:
        """Close one store object this check opened (None: nothing)."""
        if store is not None and store in self.stores:
            self.stores.remove(store)
            with contextlib.suppress(Exception):
                store.close()

    def close_all(self) -> None:
        while self.stores:
            store = self.stores.pop()
            with contextlib.suppress(Exception):
                store.close()

    def advance(self, seconds: float) -> None:
        """Move the store's time forward: the injected clock, or real time."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)

    def now(self) -> float | None:
        return self.clock.now if self.clock is not None else None

    def ok(self, clause: str, detail: str) -> None:
        self.results.append((clause, PASS, detail))

    def record(self, clause: str, status: str, detail: str) -> None:
        self.results.append((clause, status, detail))


def open_retrying(target: StoreTarget, location: str, ttl_ms: int, **extra: Any) -> Any:
    """`target.open`, retried while the factory fails with `StoreBusyError` (bootstrap contention)."""
    return target.open_retrying(location, ttl_ms, timeout_s=None, **extra)


class Suite:
    """The runtime shared by the checks of one runner process."""

    def __init__(self, target: StoreTarget, settings: Settings, watch: Watch) -> None:
        self.target = target
        self.settings = settings
        self.watch = watch
        self.clock_ok = bool(settings.clock_ok)


# -- assertions -----------------------------------------------------------------------------------

def _who(c: Claimant | None) -> str:
    return "nobody" if c is None else f"{c.node_id}/{c.agent_id}" + (f" (run {c.run_id})" if c.run_id else "")


def _desc(claim: Claim | None) -> str:
    return "no row" if claim is None else f"owner {_who(claim.owner)} epoch {claim.lease_epoch}"


def accepted(clause: str, what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, which the contract says must be accepted."""
    try:
        return fn(*args)
    except CheckoutConflictError as exc:
        raise Failed(clause, f"{what} was refused: CheckoutConflictError {_one_line(exc)}") from exc


def refused(clause: str, what: str, fn: Callable[..., Any], *args: Any) -> CheckoutConflictError:
    """The `CheckoutConflictError` of `fn(*args)`, which the contract says must be refused."""
    try:
        result = fn(*args)
    except CheckoutConflictError as exc:
        return exc
    raise Failed(clause, f"{what} was accepted (returned {result!r}); it must raise CheckoutConflictError")


def names(exc: CheckoutConflictError, want: Claim | None, what: str) -> None:
    """The conflict names the central row `want` (owner and epoch; a released or absent row may be None)."""
    got = exc.current_holder
    if want is None or want.owner is None:
        if got is None or (got.owner is None and (want is None or got.lease_epoch == want.lease_epoch)):
            return
        raise Failed("conflict-holder", f"{what}: the conflict names {_desc(got)}, but the task was {_desc(want)}")
    if got is None:
        raise Failed("conflict-holder", f"{what}: CheckoutConflictError carries no current_holder; the task was held "
                                        f"by {_desc(want)}")
    if got.owner != want.owner or got.lease_epoch != want.lease_epoch:
        raise Failed("conflict-holder", f"{what}: the conflict names {_desc(got)}, but the holder then was "
                                        f"{_desc(want)}")


def unchanged(clause: str, what: str, store: _Watched, p: str, t: str, before: tuple[Any, Any]) -> None:
    """The claim and the task row are what they were before a refused call."""
    after = (store.get(p, t), store.task(p, t))
    if after[0] != before[0]:
        raise Failed(clause, f"{what} was refused but changed the claim: {before[0]} -> {after[0]}")
    if after[1] != before[1]:
        raise Failed(clause, f"{what} was refused but changed the task row: {before[1]} -> {after[1]}")


def snap(store: _Watched, p: str, t: str) -> tuple[Any, Any]:
    return (store.get(p, t), store.task(p, t))


def mirrored(store: _Watched, p: str, what: str) -> None:
    """After `reconcile`, every task row of `p` mirrors its central row (`rows-reconciled`)."""
    store.reconcile(p)
    for claim in store.claims(p):
        row = store.task(p, claim.task_id)
        if row is None or not row.mirrors(claim):
            raise Failed("rows-reconciled", f"{what}: after reconcile the task row of {claim.task_id!r} ({row}) does "
                                            f"not mirror its central row ({_desc(claim)})")


# -- the sequential checks --------------------------------------------------------------------------

A = Claimant("node-a", "agent-a", "run-a1")
B = Claimant("node-b", "agent-b", "run-b1")
C = Claimant("node-c", "agent-c", "run-c1")


def check_seed_unit(ctx: Ctx) -> None:
    """Seed section 2.8: a pre-seeded claim of owner A refuses B's claim, naming A; nothing changes."""
    s = ctx.open(ctx.location())
    p, t = "proj-unit", "task-1"
    seeded = accepted("claim-live-accepted", "A's first claim", s.claim, p, t, A)
    before = snap(s, p, t)
    exc = refused("claim-lease-protected", "B's claim of a task A holds within its lease", s.claim, p, t, B)
    names(exc, before[0], "B's claim of A's task")
    unchanged("claim-atomic", "B's claim", s, p, t, before)
    ctx.ok("conflict-holder", f"B's claim of A's task raised CheckoutConflictError naming {_desc(seeded)}")


def check_conflict_current(ctx: Ctx) -> None:
    """Every refusal names the central row as it is now, not an earlier owner or the caller."""
    s = ctx.open(ctx.location())
    p, t = "proj-holder", "task-1"
    a = accepted("claim-live-accepted", "A's claim", s.claim, p, t, A)
    accepted("claim-live-accepted", "A's release", s.release, p, t, A, a.lease_epoch)
    b = accepted("claim-live-accepted", "B's claim of the released task", s.claim, p, t, B)
    cur = s.get(p, t)
    for clause, what, fn, args in (
            ("claim-lease-protected", "C's claim", s.claim, (p, t, C)),
            ("heartbeat-fenced", "A's stale heartbeat", s.heartbeat, (p, t, A, a.lease_epoch)),
            ("heartbeat-fenced", "A's stale release", s.release, (p, t, A, a.lease_epoch)),
            ("progress-fenced", "A's stale progress write", s.record_progress, (p, t, A, a.lease_epoch, 3)),
            ("heartbeat-fenced", "C's heartbeat at B's epoch", s.heartbeat, (p, t, C, b.lease_epoch))):
        exc = refused(clause, what, fn, *args)
        names(exc, cur, what)
    exc = refused("heartbeat-fenced", "a heartbeat of a task never claimed", s.heartbeat, p, "task-none", A, 1)
    names(exc, None, "a heartbeat of a task never claimed")
    ctx.ok("conflict-holder", f"5 refusals named the current row ({_desc(cur)}), not the earlier owner or the caller")


def check_epochs(ctx: Ctx) -> None:
    """Epoch 1 at first, +1 per owner change, unchanged on renewal, kept (never reset) by release."""
    s = ctx.open(ctx.location())
    p, t = "proj-epochs", "task-1"
    grants: list[tuple[int, str]] = []
    c1 = accepted("claim-live-accepted", "A's first claim", s.claim, p, t, A)
    if c1.lease_epoch != 1:
        raise Failed("claim-epoch-step", f"the first claim of a task was granted epoch {c1.lease_epoch}, not 1")
    grants.append((1, _who(A)))
    ctx.advance(ctx.ttl * 0.2)
    again = Claimant(A.node_id, A.agent_id, "run-a2")
    r = accepted("claim-live-accepted", "A's renewal claim (same node and agent, another run)", s.claim, p, t, again)
    if r.lease_epoch != 1 or s.get(p, t).lease_epoch != 1:
        raise Failed("claim-epoch-step", f"a renewal by the same owner moved the epoch 1 -> {r.lease_epoch}")
    if ctx.injected and abs(r.renewed_at - ctx.now()) > _CLOCK_SLACK_S:
        raise Failed("claim-live-accepted", f"a renewal set renewed_at {r.renewed_at}, not the store clock's "
                                            f"{ctx.now()}")
    ctx.advance(ctx.ttl * 0.2)
    h = accepted("claim-live-accepted", "A's heartbeat at epoch 1", s.heartbeat, p, t, A, 1)
    if h.lease_epoch != 1 or s.get(p, t).lease_epoch != 1:
        raise Failed("claim-epoch-step", f"a heartbeat moved the epoch 1 -> {s.get(p, t).lease_epoch}")
    if ctx.injected and abs(s.get(p, t).renewed_at - ctx.now()) > _CLOCK_SLACK_S:
        raise Failed("claim-live-accepted", "a heartbeat did not set renewed_at to the store clock's now")
    accepted("claim-live-accepted", "A's release at epoch 1", s.release, p, t, A, 1)
    after = s.get(p, t)
    if after is None or after.owner is not None or after.lease_epoch != 1:
        raise Failed("claim-epoch-step", f"after A released epoch 1 the central row is {_desc(after)}, not a released "
                                         "row keeping epoch 1")
    expect = 1
    for who in (B, A, A, C):
        expect += 1
        c = accepted("claim-live-accepted", f"{_who(who)}'s claim of the released task", s.claim, p, t, who)
        if c.lease_epoch != expect:
            raise Failed("claim-epoch-step", f"owner change #{expect} was granted epoch {c.lease_epoch}, not {expect} "
                                             f"(grants so far {grants})")
        if any(e == c.lease_epoch for e, _ in grants):
            raise Failed("claim-epoch-once", f"epoch {c.lease_epoch} was granted again, to {_who(who)}")
        grants.append((c.lease_epoch, _who(who)))
        accepted("claim-live-accepted", f"{_who(who)}'s release", s.release, p, t, who, c.lease_epoch)
    mirrored(s, p, "after the epoch steps")
    ctx.ok("claim-epoch-step", f"epochs {[e for e, _ in grants]} over 5 owner changes, renewal and heartbeat kept "
                               "the epoch, release kept it")
    ctx.ok("claim-epoch-once", f"each epoch granted once ({len(grants)} grants)")
    ctx.ok("claim-live-accepted", "the current owner's claim, renewal, heartbeat and release were accepted")
    ctx.ok("rows-reconciled", "task rows mirror their central rows after reconcile (no split write)")


def check_stale_fenced(ctx: Ctx) -> None:
    """Heartbeats and releases of a superseded owner or epoch are refused and change nothing."""
    s = ctx.open(ctx.location())
    p, t = "proj-fence", "task-1"
    a = accepted("claim-live-accepted", "A's claim", s.claim, p, t, A)
    accepted("claim-live-accepted", "A's release", s.release, p, t, A, a.lease_epoch)
    b = accepted("claim-live-accepted", "B's claim", s.claim, p, t, B)
    other = Claimant(B.node_id, "agent-other", B.run_id)
    tries = [("A's heartbeat at its superseded epoch", s.heartbeat, (p, t, A, a.lease_epoch)),
             ("B's heartbeat at the wrong epoch", s.heartbeat, (p, t, B, a.lease_epoch)),
             ("B's heartbeat at a future epoch", s.heartbeat, (p, t, B, b.lease_epoch + 1)),
             ("another agent of B's node heartbeating B's epoch", s.heartbeat, (p, t, other, b.lease_epoch)),
             ("A's release at its superseded epoch", s.release, (p, t, A, a.lease_epoch)),
             ("B's release at the wrong epoch", s.release, (p, t, B, a.lease_epoch)),
             ("another agent of B's node releasing B's epoch", s.release, (p, t, other, b.lease_epoch))]
    for what, fn, args in tries:
        before = snap(s, p, t)
        refused("heartbeat-fenced", what, fn, *args)
        unchanged("heartbeat-fenced", what, s, p, t, before)
    accepted("claim-live-accepted", "B's release", s.release, p, t, B, b.lease_epoch)
    for what, fn, args in (("B's heartbeat after its release", s.heartbeat, (p, t, B, b.lease_epoch)),
                           ("B's second release", s.release, (p, t, B, b.lease_epoch))):
        before = snap(s, p, t)
        refused("heartbeat-fenced", what, fn, *args)
        unchanged("heartbeat-fenced", what, s, p, t, before)
    a2 = accepted("claim-live-accepted", "A's new claim", s.claim, p, t, A)
    before = snap(s, p, t)
    refused("heartbeat-fenced", "A's heartbeat at its own old epoch", s.heartbeat, p, t, A, a.lease_epoch)
    unchanged("heartbeat-fenced", "A's heartbeat at its own old epoch", s, p, t, before)
    accepted("claim-live-accepted", "A's heartbeat at its current epoch", s.heartbeat, p, t, A, a2.lease_epoch)
    ctx.ok("heartbeat-fenced", f"{len(tries) + 3} heartbeats and releases of superseded owners or epochs were refused "
                               "and changed nothing")


def check_progress_fenced(ctx: Ctx) -> None:
    """Progress writes: only the current owner at its epoch; a refused one leaves the step alone."""
    s = ctx.open(ctx.location())
    p, t = "proj-progress", "task-1"
    a = accepted("claim-live-accepted", "A's claim", s.claim, p, t, A)
    accepted("claim-live-accepted", "A's progress write", s.record_progress, p, t, A, a.lease_epoch, 1)
    row = s.task(p, t)
    if row is None or row.step != 1:
        raise Failed("claim-live-accepted", f"A's accepted progress write left the task row {row}, not step 1")
    accepted("claim-live-accepted", "A's release", s.release, p, t, A, a.lease_epoch)
    b = accepted("claim-live-accepted", "B's claim", s.claim, p, t, B)
    other = Claimant(B.node_id, "agent-other")
    tries = [("A's progress write at its superseded epoch", (A, a.lease_epoch, 7)),
             ("B's progress write at the wrong epoch", (B, a.lease_epoch, 7)),
             ("B's progress write at a future epoch", (B, b.lease_epoch + 1, 7)),
             ("another agent's progress write at B's epoch", (other, b.lease_epoch, 7))]
    for what, args in tries:
        before = snap(s, p, t)
        refused("progress-fenced", what, s.record_progress, p, t, *args)
        unchanged("progress-fenced", what, s, p, t, before)
    accepted("claim-live-accepted", "B's progress write", s.record_progress, p, t, B, b.lease_epoch, 4)
    if s.task(p, t).step != 4:
        raise Failed("claim-live-accepted", f"B's accepted progress write left the step at {s.task(p, t).step}")
    accepted("claim-live-accepted", "B's release", s.release, p, t, B, b.lease_epoch)
    before = snap(s, p, t)
    refused("progress-fenced", "B's progress write after its release", s.record_progress, p, t, B, b.lease_epoch, 9)
    unchanged("progress-fenced", "B's progress write after its release", s, p, t, before)
    ctx.ok("progress-fenced", f"{len(tries) + 1} progress writes of superseded or wrong owners and epochs were "
                              "refused and left the step")
    ctx.ok("claim-live-accepted", "the current owner's progress writes were accepted and stored")


def check_lease_protected(ctx: Ctx) -> None:
    """A claim within its owner's lease is not recovered (nor is another epoch, nor a released claim)."""
    s = ctx.open(ctx.location())
    p, t = "proj-lease", "task-1"
    t0 = time.monotonic()
    a = accepted("claim-live-accepted", "A's claim", s.claim, p, t, A)

    def within(what: str, since: float) -> None:
        before = snap(s, p, t)
        try:
            row = s.recover(p, t, a.lease_epoch, _RECOVERER, "conformance: within the lease")
        except CheckoutConflictError:
            unchanged("claim-lease-protected", what, s, p, t, before)
            return
        if not ctx.injected and time.monotonic() - since >= ctx.ttl * 0.9:
            raise Undecided(f"{what} was accepted, but {time.monotonic() - since:.3f} s of real time had passed "
                            f"(ttl {ctx.ttl_ms} ms): the lease may have expired")
        raise Failed("claim-lease-protected", f"{what} was accepted ({row}); the owner was within its lease")

    within("a recovery right after the claim", t0)
    ctx.advance(ctx.ttl * 0.5)
    t1 = time.monotonic()
    accepted("claim-live-accepted", "A's heartbeat", s.heartbeat, p, t, A, a.lease_epoch)
    if ctx.injected:
        ctx.advance(ctx.ttl * 0.8)  # past the claim's own expiry, within the heartbeat's
        within("a recovery 1.3 ttl after the claim, 0.8 ttl after a heartbeat", t1)
        ctx.advance(ctx.ttl * 1.0)
    else:
        within("a recovery right after a heartbeat", t1)
        ctx.advance(ctx.ttl * 1.6)
    before = snap(s, p, t)
    exc = refused("claim-lease-protected", "a recovery naming another epoch", s.recover, p, t, a.lease_epoch + 1,
                  _RECOVERER, "conformance: wrong epoch")
    names(exc, before[0], "a recovery naming another epoch")
    unchanged("claim-lease-protected", "a recovery naming another epoch", s, p, t, before)
    row = accepted("claim-live-accepted", "a recovery of the expired claim", s.recover, p, t, a.lease_epoch,
                   _RECOVERER, "conformance: expired")
    if row.status != "todo":
        raise Failed("claim-lease-protected", f"a recovery returned a task row with status {row.status!r}, not todo")
    before = snap(s, p, t)
    refused("claim-lease-protected", "a recovery of the released claim", s.recover, p, t, a.lease_epoch,
            _RECOVERER, "conformance: again")
    unchanged("claim-lease-protected", "a recovery of the released claim", s, p, t, before)
    ctx.ok("claim-lease-protected", "recoveries within the lease (also one renewed by a heartbeat), of another epoch "
                                    "and of a released claim were refused; the expired claim was recovered")


def check_recovery(ctx: Ctx) -> None:
    """A recovery: one audit event, owner cleared with the epoch kept, task todo, step kept, worktree dropped."""
    s = ctx.open(ctx.location())
    p, t = "proj-recover", "task-1"
    a = accepted("claim-live-accepted", "A's claim", s.claim, p, t, A)
    accepted("claim-live-accepted", "A's progress write", s.record_progress, p, t, A, a.lease_epoch, 5)
    held_row = s.task(p, t)
    ctx.advance(ctx.ttl * 1.6)
    row = accepted("claim-live-accepted", "the recovery of A's expired claim", s.recover, p, t, a.lease_epoch,
                   _RECOVERER, "node-a offline")
    stored = s.task(p, t)
    for label, r in (("the row recover returned", row), ("the stored task row", stored)):
        if r is None or r.step != 5:
            raise Failed("progress-preserved", f"after recovery {label} has step {getattr(r, 'step', None)}, not 5")
        if r.status != "todo" or r.checked_out_by is not None or r.checkout_node_id is not None:
            raise Failed("rows-reconciled", f"after recovery {label} is {r}, not todo with the checkout cleared")
        if r.worktree is not None:
            raise Failed("rows-reconciled", f"after recovery {label} keeps worktree {r.worktree!r}")
    c = s.get(p, t)
    if c is None or c.owner is not None or c.lease_epoch != a.lease_epoch:
        raise Failed("claim-epoch-step", f"after recovery the central row is {_desc(c)}, not released at epoch "
                                         f"{a.lease_epoch}")
    events = [e for e in s.audit(p) if e.kind == RECOVER_EVENT and e.task_id == t]
    if len(events) != 1:
        raise Failed("recovery-audited", f"one recovery wrote {len(events)} {RECOVER_EVENT} events")
    e = events[0]
    if e.epoch != a.lease_epoch or e.node_id != _RECOVERER.node_id:
        raise Failed("recovery-audited", f"the recovery's audit event names epoch {e.epoch} and node {e.node_id!r}, not "
                                         f"epoch {a.lease_epoch} and the recovering node {_RECOVERER.node_id!r}")
    refused("claim-lease-protected", "a second recovery of the same epoch", s.recover, p, t, a.lease_epoch,
            _RECOVERER, "again")
    if len([e for e in s.audit(p) if e.kind == RECOVER_EVENT and e.task_id == t]) != 1:
        raise Failed("recovery-audited", "a refused second recovery wrote another audit event")
    b = accepted("claim-live-accepted", "B's claim of the recovered task", s.claim, p, t, B)
    row_b = s.task(p, t)
    if row_b.step != 5:
        raise Failed("progress-preserved", f"B's claim of the recovered task reset the step 5 -> {row_b.step}")
    if held_row is not None and row_b.worktree is not None and row_b.worktree == held_row.worktree:
        raise Failed("rows-reconciled", f"B's claim reuses A's worktree {row_b.worktree!r}")
    accepted("claim-live-accepted", "B's progress write", s.record_progress, p, t, B, b.lease_epoch, 6)
    accepted("claim-live-accepted", "B's release", s.release, p, t, B, b.lease_epoch)
    if s.task(p, t).step != 6:
        raise Failed("progress-preserved", f"release reset the step 6 -> {s.task(p, t).step}")
    accepted("claim-live-accepted", "A's claim after B's release", s.claim, p, t, A)
    if s.task(p, t).step != 6:
        raise Failed("progress-preserved", f"a claim after a release reset the step 6 -> {s.task(p, t).step}")
    ctx.ok("recovery-audited", f"one recovery wrote exactly one {RECOVER_EVENT} event (epoch {e.epoch}, node "
                               f"{e.node_id}); a refused second one wrote none")
    ctx.ok("progress-preserved", "step progress survived recovery, the next claim, a release and a claim after it")


# -- multi-process checks (helpers forked from the runner while it holds no store open) -----------------

def _fork_ctx() -> Any:
    return multiprocessing.get_context("fork")


def _die_with_parent() -> None:
    """A helper process goes when the runner that forked it goes (Linux), so a killed runner leaves nothing."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


def _start_at(when: float) -> None:
    """Wait until `when` (time.monotonic): asleep until the last millisecond, which is spun for precision (so that
    waiting racers leave the CPU to the processes still on their way)."""
    rest = when - time.monotonic() - 0.001
    if rest > 0:
        time.sleep(rest)
    while time.monotonic() < when:
        pass


def _race_worker(target: StoreTarget, location: str, ttl_ms: int, index: int, barrier: Any, conn: Any) -> None:
    _die_with_parent()
    try:
        store = open_retrying(target, location, ttl_ms)
    except BaseException as exc:  # noqa: BLE001
        conn.send(("open-error", f"{type(exc).__name__}: {_one_line(exc)}"))
        return
    conn.send(("ready",))
    while True:
        if not conn.poll(120):
            return
        msg = conn.recv()
        if msg[0] == "stop":
            break
        _, p, t, rnd, go_at = msg
        me = Claimant(f"node-{index}", f"agent-{index}", f"run-{rnd}")
        try:
            barrier.wait(30)
        except Exception as exc:  # noqa: BLE001
            conn.send(("barrier", _one_line(exc)))
            continue
        _start_at(go_at)  # a barrier wakes its waiters one by one: start together, on the clock
        try:
            claim = retry_busy(lambda: store.claim(p, t, me), "claim")
            conn.send(("won", index, claim.owner, claim.lease_epoch))
        except CheckoutConflictError as exc:
            h = exc.current_holder
            conn.send(("lost", index, None if h is None else h.owner, None if h is None else h.lease_epoch))
        except BusyExhausted as exc:
            conn.send(("busy", index, _one_line(exc)))
        except Exception as exc:  # noqa: BLE001 - indeterminate
            conn.send(("error", index, f"{type(exc).__name__}: {_one_line(exc)}"))
    with contextlib.suppress(Exception):
        store.close()


def _gather(conns: list[Any], procs: list[Any], bound: float, what: str) -> list[tuple]:
    """One message from every helper within `bound` seconds, else a liveness failure."""
    out: list[tuple] = []
    deadline = time.monotonic() + bound
    for conn, proc in zip(conns, procs):
        while True:
            dead = not proc.is_alive()  # read before the poll: a helper may answer and exit in between
            if conn.poll(_POLL_S):
                try:
                    out.append(conn.recv())
                except EOFError:
                    proc.join(1)
                    raise Failed("no-crash", f"{what}: a helper process died inside a store call (exit "
                                             f"{proc.exitcode})") from None
                break
            if dead:
                raise Failed("no-crash", f"{what}: a helper process died inside a store call (exit {proc.exitcode})")
            if time.monotonic() > deadline:
                raise Failed("call-returns", f"{what}: a store call made no answer within {bound:g} s")
    return out


def _stop(procs: list[Any]) -> None:
    for proc in procs:
        proc.join(2)
        if proc.is_alive():
            proc.kill()
            proc.join(2)


def check_barrier_race(ctx: Ctx) -> None:
    """Seed section 2.8's race: N processes released by a barrier claim one task; exactly one wins."""
    st = ctx.suite.settings
    if st.single_reason:
        raise NotApplicable(f"{st.single_reason}: the barrier race needs processes")
    n, rounds = st.processes, st.rounds
    location = ctx.location()
    mp = _fork_ctx()
    barrier = mp.Barrier(n)
    pipes = [mp.Pipe() for _ in range(n)]
    procs = [mp.Process(target=_race_worker, args=(ctx.suite.target, location, ctx.ttl_ms, i, barrier, child),
                        daemon=True) for i, (_, child) in enumerate(pipes)]
    for proc in procs:
        proc.start()
    conns = [parent for parent, _ in pipes]
    bound = st.call_bound_s + 30
    try:
        for msg in _gather(conns, procs, 60 + bound, "the race's store opens"):
            if msg[0] != "ready":
                raise Failed("concurrent-boot", f"a racing process could not open the store: {msg[1]}")
        s = ctx.open(location, clock=False)
        p = "proj-race"
        busy = 0
        for rnd in range(rounds):
            t = f"task-{rnd}"
            initial = 0
            if rnd % 2:  # a task released before the race: its epoch must rise from there
                seed = accepted("claim-live-accepted", "the seeding claim", s.claim, p, t, C)
                accepted("claim-live-accepted", "the seeding release", s.release, p, t, C, seed.lease_epoch)
                initial = seed.lease_epoch
            go_at = time.monotonic() + _RACE_LEAD_S
            for conn in conns:
                conn.send(("race", p, t, rnd, go_at))
            msgs = _gather(conns, procs, bound, f"race round {rnd}")
            if any(m[0] == "barrier" for m in msgs):
                raise Undecided(f"round {rnd}: the barrier broke ({[m for m in msgs if m[0] == 'barrier'][0][1]})")
            won = [m for m in msgs if m[0] == "won"]
            lost = [m for m in msgs if m[0] == "lost"]
            if any(m[0] == "busy" for m in msgs):
                busy += 1
            errs = [m for m in msgs if m[0] == "error"]
            final = s.get(p, t)
            if len(won) > 1:
                epochs = sorted(m[3] for m in won)
                detail = (f"round {rnd}: {len(won)} of {n} racing claims won ({', '.join(_who(m[2]) for m in won)}; "
                          f"epochs {epochs}); the central row ends {_desc(final)}")
                if len(set(epochs)) < len(epochs):
                    ctx.record("claim-epoch-once", FAIL, detail)
                raise Failed("claim-atomic", detail)
            if not won:
                if errs or busy:
                    raise Undecided(f"round {rnd}: no claim won and {len(errs)} ended indeterminate "
                                    f"({errs[0][2] if errs else 'busy'})")
                raise Failed("claim-atomic", f"round {rnd}: all {n} racing claims of a free task were refused")
            w = won[0]
            if w[3] != initial + 1:
                raise Failed("claim-epoch-step", f"round {rnd}: the winner got epoch {w[3]}, not {initial + 1}")
            if final is None or final.owner is None or (final.owner.node_id, final.owner.agent_id) != (
                    w[2].node_id, w[2].agent_id) or final.lease_epoch != initial + 1:
                raise Failed("claim-atomic", f"round {rnd}: the winner was {_who(w[2])} at epoch {w[3]} but the "
                                             f"central row ends {_desc(final)}")
            for m in lost:
                if m[2] != final.owner or m[3] != final.lease_epoch:
                    raise Failed("conflict-holder", f"round {rnd}: a loser's conflict names "
                                                    f"{_who(m[2])} at epoch {m[3]}, but the winner was {_desc(final)}")
        ctx.ok("claim-atomic", f"{rounds} rounds of {n} processes released by a barrier: one winner each, its "
                               "owner and epoch+1 in the central row")
        ctx.ok("claim-epoch-once", f"no epoch granted twice over {rounds} races")
        ctx.ok("conflict-holder", f"every loser of {rounds} races named the winner")
    finally:
        ctx.close_all()
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.send(("stop",))
        _stop(procs)


def _fence_owner(target: StoreTarget, location: str, ttl_ms: int, clock_at: float | None, heartbeats: bool,
                 barrier: Any, stolen: Any, conn: Any) -> None:
    """The owner of the fence race: claims each round's task, then writes progress (and heartbeats) until refused."""
    _die_with_parent()
    kw = {"clock": FakeClock(clock_at)} if clock_at is not None else {}
    try:
        store = open_retrying(target, location, ttl_ms, **kw)
    except BaseException as exc:  # noqa: BLE001
        conn.send(("open-error", f"{type(exc).__name__}: {_one_line(exc)}"))
        return
    conn.send(("ready",))
    while conn.poll(120):
        msg = conn.recv()
        if msg[0] == "stop":
            break
        _, p, t = msg
        try:
            epoch = retry_busy(lambda: store.claim(p, t, A), "claim").lease_epoch
        except Exception as exc:  # noqa: BLE001
            conn.send(("error", f"claim: {type(exc).__name__}: {_one_line(exc)}"))
            continue
        conn.send(("claimed", epoch))
        try:
            barrier.wait(30)
        except Exception as exc:  # noqa: BLE001
            conn.send(("barrier", _one_line(exc)))
            continue
        outcome: tuple = ("never-refused",)
        try:
            for i in range(1, 200_000):
                after = stolen.is_set()
                what = "heartbeat" if heartbeats and i % 2 == 0 else "progress write"
                try:
                    if what == "heartbeat":
                        retry_busy(lambda: store.heartbeat(p, t, A, epoch), "heartbeat")
                    else:
                        retry_busy(lambda i=i: store.record_progress(p, t, A, epoch, i), "record_progress")
                except CheckoutConflictError:
                    outcome = ("refused", i)
                    break
                if after:
                    outcome = ("late", what, i)
                    break
        except Exception as exc:  # noqa: BLE001 - indeterminate
            outcome = ("error", f"{type(exc).__name__}: {_one_line(exc)}")
        conn.send(outcome)
    with contextlib.suppress(Exception):
        store.close()


def _fence_thief(target: StoreTarget, location: str, ttl_ms: int, clock_at: float | None, ttl: float,
                 barrier: Any, stolen: Any, conn: Any) -> None:
    """The successor of the fence race: recovers the owner's expired claim, claims the task, reads its step."""
    _die_with_parent()
    kw = {"clock": FakeClock(clock_at)} if clock_at is not None else {}
    try:
        store = open_retrying(target, location, ttl_ms, **kw)
    except BaseException as exc:  # noqa: BLE001
        conn.send(("open-error", f"{type(exc).__name__}: {_one_line(exc)}"))
        return
    conn.send(("ready",))
    while conn.poll(120):
        msg = conn.recv()
        if msg[0] == "stop":
            break
        _, p, t, epoch, delay = msg
        try:
            barrier.wait(30)
        except Exception as exc:  # noqa: BLE001
            conn.send(("barrier", _one_line(exc)))
            continue
        if clock_at is None:
            time.sleep(ttl * 1.6)  # real time: let the owner's claim expire while it writes progress
        _start_at(time.monotonic() + delay)
        try:
            retry_busy(lambda: store.recover(p, t, epoch, _RECOVERER, "conformance: fence race"), "recover")
            retry_busy(lambda: store.claim(p, t, B), "claim")
            claim = retry_busy(lambda: store.get(p, t), "get")  # as the store reads it back (its own precision)
            row = retry_busy(lambda: store.task(p, t), "task")
            reply: tuple = ("stole", claim, None if row is None else row.step)
        except CheckoutConflictError as exc:
            reply = ("refused", _one_line(exc))
        except Exception as exc:  # noqa: BLE001
            reply = ("error", f"{type(exc).__name__}: {_one_line(exc)}")
        stolen.set()  # before the reply: the runner clears it for the next round only once it has the reply
        conn.send(reply)
    with contextlib.suppress(Exception):
        store.close()


def check_fence_race(ctx: Ctx) -> None:
    """The fence across processes: while the owner writes progress (and heartbeats), a second process recovers
    its expired claim and takes the task over. No write of the superseded owner may land after the takeover."""
    st = ctx.suite.settings
    if st.single_reason:
        raise NotApplicable(f"{st.single_reason}: the fence race needs processes")
    rounds = max(1, st.rounds // 2) if ctx.injected else min(5, st.rounds)
    location = ctx.location()
    mp = _fork_ctx()
    barrier, stolen = mp.Barrier(2), mp.Event()
    t0 = FakeClock().now
    owner_at, thief_at = (t0, t0 + 10 * ctx.ttl) if ctx.injected else (None, None)
    (oa, ob), (ta, tb) = mp.Pipe(), mp.Pipe()
    procs = [mp.Process(target=_fence_owner, args=(ctx.suite.target, location, ctx.ttl_ms, owner_at, ctx.injected,
                                                    barrier, stolen, ob), daemon=True),
             mp.Process(target=_fence_thief, args=(ctx.suite.target, location, ctx.ttl_ms, thief_at, ctx.ttl,
                                                    barrier, stolen, tb), daemon=True)]
    for proc in procs:
        proc.start()
    bound = st.call_bound_s + 30 + 2 * ctx.ttl
    s = None
    try:
        for msg in _gather([oa, ta], procs, 60 + bound, "the fence race's store opens"):
            if msg[0] != "ready":
                raise Failed("concurrent-boot", f"a fence race process could not open the store: {msg[1]}")
        s = ctx.open(location, clock=False)
        p = "proj-fence-race"
        late = 0
        for rnd in range(rounds):
            t = f"task-{rnd}"
            stolen.clear()
            oa.send(("round", p, t))
            (claimed,) = _gather([oa], procs[:1], bound, f"fence race round {rnd}")
            if claimed[0] != "claimed":
                raise Undecided(f"fence race round {rnd}: the owner's claim ended {claimed}")
            ta.send(("round", p, t, claimed[1], (rnd % 8) * 0.0002))
            owner, thief = _gather([oa, ta], procs, bound, f"fence race round {rnd}")
            if "barrier" in (owner[0], thief[0]):
                raise Undecided(f"fence race round {rnd}: the barrier broke")
            if thief[0] != "stole":
                raise Undecided(f"fence race round {rnd}: the takeover ended {thief[0]} ({thief[1]})")
            if owner[0] == "late":
                clause = "heartbeat-fenced" if owner[1] == "heartbeat" else "progress-fenced"
                raise Failed(clause, f"fence race round {rnd}: a {owner[1]} of the superseded owner was accepted "
                                     f"after the successor's claim had returned (epoch {claimed[1]} -> "
                                     f"{thief[1].lease_epoch})")
            if owner[0] != "refused":
                raise Undecided(f"fence race round {rnd}: the owner's writes ended {owner}")
            claim, step_then = thief[1], thief[2]
            final, row = s.get(p, t), s.task(p, t)
            if final != claim:
                raise Failed("heartbeat-fenced", f"fence race round {rnd}: the successor's claim {_desc(claim)} "
                                                 f"renewed at {claim.renewed_at} became {_desc(final)} renewed at "
                                                 f"{getattr(final, 'renewed_at', None)} with no call of the successor: "
                                                 "a heartbeat of the superseded owner landed after the takeover")
            if row is not None and step_then is not None and row.step != step_then:
                raise Failed("progress-fenced", f"fence race round {rnd}: the task's step moved {step_then} -> "
                                                f"{row.step} after the successor's claim had returned, with no write "
                                                "of the successor: a superseded owner's progress write landed after "
                                                "the takeover")
            late += owner[1]
        what = "progress writes and heartbeats" if ctx.injected else "progress writes"
        ctx.ok("progress-fenced", f"{rounds} takeovers raced an owner's {what} ({late} calls): none landed after "
                                  "the takeover")
        if ctx.injected:
            ctx.ok("heartbeat-fenced", f"{rounds} takeovers raced an owner's heartbeats: none landed after the "
                                       "takeover")
    finally:
        ctx.close_all()
        for conn in (oa, ta):
            with contextlib.suppress(Exception):
                conn.send(("stop",))
        _stop(procs)


def _paused(target: StoreTarget, location: str, ttl_ms: int, clock_at: float | None, op: tuple, k: int | None,
            conn: Any) -> None:
    """Open a store, then make one call that stops at its k-th profile event until the runner says go on."""
    _die_with_parent()
    kw = {"clock": FakeClock(clock_at)} if clock_at is not None else {}
    try:
        store = open_retrying(target, location, ttl_ms, **kw)
    except BaseException as exc:  # noqa: BLE001
        conn.send(("open-error", f"{type(exc).__name__}: {_one_line(exc)}"))
        return
    count = [0]

    def hook(frame: Any, event: str, arg: Any) -> None:
        count[0] += 1
        if k is not None and count[0] == k:
            conn.send(("paused",))
            conn.recv()

    fn = getattr(store, op[0])
    outcome: tuple = ("busy",)
    sys.setprofile(hook)
    try:
        for _ in range(60):  # a busy answer wrote nothing: the call is made again (its steps count on)
            try:
                fn(*op[1:])
            except StoreBusyError:
                sys.setprofile(None)
                time.sleep(0.005)
                sys.setprofile(hook)
                continue
            outcome = ("ok",)
            break
    except CheckoutConflictError:
        outcome = ("conflict",)
    except Exception as exc:  # noqa: BLE001
        outcome = ("error", f"{type(exc).__name__}: {_one_line(exc)}")
    finally:
        sys.setprofile(None)
    conn.send(("done", count[0], *outcome))
    with contextlib.suppress(Exception):
        store.close()


def _successor(target: StoreTarget, location: str, ttl_ms: int, clock_at: float | None, p: str, t: str,
               recover_epoch: int | None, conn: Any) -> None:
    """Open a store, wait for the word, then take the task over (recovering epoch `recover_epoch` first, where
    given) and read back what it left. Opened in advance, so only the takeover itself runs while a call is stopped."""
    _die_with_parent()
    kw = {"clock": FakeClock(clock_at)} if clock_at is not None else {}
    try:
        store = open_retrying(target, location, ttl_ms, **kw)
    except BaseException as exc:  # noqa: BLE001
        conn.send(("open-error", f"{type(exc).__name__}: {_one_line(exc)}"))
        return
    conn.send(("ready",))
    if not conn.poll(120):
        return
    conn.recv()
    conn.send(("calling",))
    try:
        if recover_epoch is not None:
            retry_busy(lambda: store.recover(p, t, recover_epoch, _RECOVERER, "conformance: interleaving"), "recover")
        retry_busy(lambda: store.claim(p, t, B), "claim")
        claim = retry_busy(lambda: store.get(p, t), "get")
        row = retry_busy(lambda: store.task(p, t), "task")
        conn.send(("took", claim, None if row is None else row.step))
    except CheckoutConflictError as exc:
        conn.send(("conflict", exc.current_holder))
    except BaseException as exc:  # noqa: BLE001
        conn.send(("error", f"{type(exc).__name__}: {_one_line(exc)}"))
    with contextlib.suppress(Exception):
        store.close()


def _recv_within(conn: Any, proc: Any, seconds: float) -> tuple | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        dead = not proc.is_alive()  # read before the poll: a helper may answer and exit in between
        if conn.poll(_POLL_S / 4):
            try:
                return conn.recv()
            except EOFError:
                return None
        if dead:
            return None
    return None


def check_interleavings(ctx: Ctx) -> None:
    """A call stopped at each of its steps in turn while a second process takes the task over, then let go on:
    a claim's check and write, a progress write's or heartbeat's fence and write, must not let the takeover in
    between (deterministic where the races above are probabilistic)."""
    st = ctx.suite.settings
    if st.single_reason:
        raise NotApplicable(f"{st.single_reason}: stopping a caller mid-call needs processes")
    if not ctx.injected:
        raise NotApplicable("the store does not declare injectable_clock: a takeover of a live owner's claim needs "
                            "the successor's clock ahead (the fence race above covers it in real time)")
    location = ctx.location()
    p = "proj-interleave"
    t0 = FakeClock().now
    ahead = t0 + 10 * ctx.ttl
    mp = _fork_ctx()
    bound = st.call_bound_s + _OPEN_TIMEOUT_S
    tally: dict[str, int] = {}

    def setup(kind: str, t: str) -> tuple:
        if kind == "claim":
            return ("claim", p, t, A)
        s = ctx.open(location, clock=FakeClock(t0))
        try:
            e = accepted("claim-live-accepted", "the owner's claim", s.claim, p, t, A).lease_epoch
        finally:
            ctx.close(s)
        return ("record_progress", p, t, A, e, 7) if kind == "progress" else ("heartbeat", p, t, A, e)

    def one(kind: str, t: str, k: int | None) -> tuple:
        op = setup(kind, t)
        succ = sa = None
        if k is not None:  # the successor opens its store first: a stopped call may hold a lock its boot needs
            sa, sb = mp.Pipe()
            epoch = None if kind == "claim" else op[4]
            succ = mp.Process(target=_successor, args=(ctx.suite.target, location, ctx.ttl_ms, ahead, p, t, epoch,
                                                       sb), daemon=True)
            succ.start()
            ready = _recv_within(sa, succ, bound)
            if ready is None or ready[0] != "ready":
                _stop([succ])
                raise Undecided(f"the successor racing a stopped {op[0]} could not open the store: {ready}")
        went = False
        va, vb = mp.Pipe()
        victim = mp.Process(target=_paused, args=(ctx.suite.target, location, ctx.ttl_ms, t0, op, k, vb),
                            daemon=True)
        victim.start()
        try:
            first = _recv_within(va, victim, bound)
            if first is None:
                raise Failed("no-crash" if not victim.is_alive() else "call-returns",
                             f"{op[0]} stopped at step {k} made no answer")
            if first[0] == "open-error":
                raise Failed("concurrent-boot", f"a process could not open the store: {first[1]}")
            took = None
            if first[0] == "paused":
                went = True
                sa.send(("go",))
                _recv_within(sa, succ, bound)  # "calling"
                took = _recv_within(sa, succ, _PAUSE_S)  # a successor blocked by the stopped call: let that go on
                va.send(("go",))
                done = _recv_within(va, victim, bound)
                if took is None:
                    took = _recv_within(sa, succ, bound)
                    took = ("after", *took) if took is not None else None
                else:
                    took = ("before", *took)
                if took is None:
                    raise Failed("call-returns", f"the takeover racing a stopped {op[0]} made no answer")
            else:
                done = first
            if done is None or done[0] != "done":
                raise Failed("no-crash", f"a process calling {op[0]} (stopped at step {k}) died: exit "
                                         f"{victim.exitcode}")
            return op, done, took
        finally:
            if succ is not None and not went:
                succ.kill()  # never told to go: nothing of it ran
            for proc in (victim, succ):
                if proc is not None:
                    proc.join(2)
                    if proc.is_alive():
                        proc.kill()
                        proc.join(2)

    s_read = None
    for kind in ("claim", "progress", "heartbeat"):
        op, done, _ = one(kind, f"{kind}-count", None)
        if done[2] != "ok":
            raise Undecided(f"the uninterrupted {op[0]} ended {done[2:]}, so its steps could not be swept")
        n = done[1]
        pts = _points(n, 20)
        tally[kind] = 0
        for k in pts:
            t = f"{kind}-{k}"
            op, done, took = one(kind, t, k)
            if took is None:
                continue
            tally[kind] += 1
            when, what = took[0], took[1]
            s_read = s_read or ctx.open(location, clock=False)
            final, row = s_read.get(p, t), s_read.task(p, t)
            if kind == "claim":
                ctx.close(s_read)
                s_read = None
                if done[2] == "ok" and what == "took":
                    raise Failed("claim-atomic", f"a claim stopped at step {k} of {n} and a second "
                                                 f"claim made while it was stopped both won (the second "
                                                 f"{_desc(took[2])}; the central row ends {_desc(final)})")
                continue
            if what != "took" or when != "before":
                continue  # the takeover waited for the stopped call: nothing landed between its check and write
            clause = "progress-fenced" if kind == "progress" else "heartbeat-fenced"
            if kind == "progress" and row is not None and took[3] is not None and row.step != took[3]:
                raise Failed(clause, f"a progress write stopped at step {k} and let go on after a takeover had "
                                     f"returned moved the step {took[3]} -> {row.step}: it was checked before the "
                                     "takeover and written after it")
            if kind == "heartbeat" and final != took[2]:
                raise Failed(clause, f"a heartbeat stopped at step {k} and let go on after a takeover had returned "
                                     f"changed the successor's claim ({_desc(took[2])} renewed at "
                                     f"{took[2].renewed_at} -> renewed at {getattr(final, 'renewed_at', None)})")
            ctx.close(s_read)
            s_read = None
        ctx.close(s_read)
        s_read = None
    detail = ", ".join(f"{k} {v} stops" for k, v in tally.items())
    ctx.ok("claim-atomic", f"claims stopped at each swept step while a second claim was made: never two winners "
                           f"({detail})")
    ctx.ok("progress-fenced", "progress writes stopped at each swept step while the task was taken over: none "
                              "landed after the takeover")
    ctx.ok("heartbeat-fenced", "heartbeats stopped at each swept step while the task was taken over: none landed "
                               "after the takeover")


_KILL_PROFILE_EXIT = 3  # a victim whose call finished before the k-th event


def _victim(target: StoreTarget, location: str, ttl_ms: int, clock_at: float | None, op: tuple, k: int | None,
            conn: Any) -> None:
    """Open a store, then make one call with a profile hook that SIGKILLs this process at the k-th event."""
    _die_with_parent()
    kw = {"clock": FakeClock(clock_at)} if clock_at is not None else {}
    try:
        store = open_retrying(target, location, ttl_ms, **kw)
    except BaseException as exc:  # noqa: BLE001
        conn.send(("open-error", f"{type(exc).__name__}: {_one_line(exc)}"))
        return
    name, args = op[0], op[1:]
    fn = getattr(store, name)
    count = [0]
    pid = os.getpid()

    def hook(frame: Any, event: str, arg: Any) -> None:
        count[0] += 1
        if k is not None and count[0] >= k:
            os.kill(pid, signal.SIGKILL)

    outcome = "busy"
    sys.setprofile(hook)
    try:
        for _ in range(60):  # a busy answer wrote nothing: the call is made again (its steps count on)
            try:
                fn(*args)
            except StoreBusyError:
                sys.setprofile(None)
                time.sleep(0.005)
                sys.setprofile(hook)
                continue
            outcome = "ok"
            break
    except CheckoutConflictError:
        outcome = "conflict"
    except Exception as exc:  # noqa: BLE001
        outcome = f"error {type(exc).__name__}: {_one_line(exc)}"
    finally:
        sys.setprofile(None)
    conn.send(("done", count[0], outcome))
    with contextlib.suppress(Exception):
        store.close()


def _run_victim(ctx: Ctx, location: str, clock_at: float | None, op: tuple, k: int | None) -> tuple:
    """('killed',) or ('done', events, outcome); a victim that dies otherwise is the store's crash."""
    mp = _fork_ctx()
    parent, child = mp.Pipe()
    proc = mp.Process(target=_victim, args=(ctx.suite.target, location, ctx.ttl_ms, clock_at, op, k, child),
                      daemon=True)
    proc.start()
    child.close()
    deadline = time.monotonic() + ctx.suite.settings.call_bound_s + _OPEN_TIMEOUT_S
    msg = None
    while time.monotonic() < deadline:
        dead = not proc.is_alive()  # read before the poll: a victim may answer and exit in between
        if parent.poll(_POLL_S):
            try:
                msg = parent.recv()
            except EOFError:
                msg = None
            break
        if dead:
            break
    else:
        proc.kill()
        proc.join(2)
        raise Failed("call-returns", f"{op[0]} in a victim process made no answer within the bound")
    proc.join(10)
    if msg is not None:
        if msg[0] == "open-error":
            raise Failed("concurrent-boot", f"a victim process could not open the store: {msg[1]}")
        return msg
    if proc.exitcode == -signal.SIGKILL and k is not None:
        return ("killed",)
    raise Failed("no-crash", f"a process calling {op[0]} died with exit {proc.exitcode}, not by the suite's kill")


def _points(n: int, cap: int) -> list[int]:
    """Kill points 1..n, every one where n <= cap, else `cap` spread evenly (always 1 and n)."""
    if n <= cap:
        return list(range(1, n + 1))
    return sorted({1 + round(i * (n - 1) / (cap - 1)) for i in range(cap)})


def check_split_writes(ctx: Ctx) -> None:
    """Kill a process inside claim, release and recover at each step; reconcile must repair every task row."""
    st = ctx.suite.settings
    if st.single_reason:
        raise NotApplicable(f"{st.single_reason}: killing a caller needs processes")
    location = ctx.location()
    p = "proj-split"
    V = Claimant("node-v", "agent-v", "run-v")
    dead = Claimant("node-dead", "agent-dead", "run-dead")
    t0 = FakeClock().now
    kinds: dict[str, list[int]] = {}
    sweeps = 0
    recovered_tasks: list[str] = []

    def setup(kind: str, t: str) -> tuple:
        s = ctx.open(location, clock=FakeClock(t0) if ctx.injected else False)
        try:
            if kind == "claim-fresh":
                return ("claim", p, t, V)
            if kind == "claim-released":
                c = accepted("claim-live-accepted", "the seeding claim", s.claim, p, t, C)
                accepted("claim-live-accepted", "the seeding release", s.release, p, t, C, c.lease_epoch)
                return ("claim", p, t, V)
            if kind == "release":
                c = accepted("claim-live-accepted", "the victim's claim", s.claim, p, t, V)
                return ("release", p, t, V, c.lease_epoch)
            c = accepted("claim-live-accepted", "the dead owner's claim", s.claim, p, t, dead)
            recovered_tasks.append(t)
            return ("recover", p, t, c.lease_epoch, _RECOVERER, "conformance: killed mid-recovery")
        finally:
            ctx.close_all()

    later = t0 + 3 * ctx.ttl if ctx.injected else None
    for kind in ("claim-fresh", "claim-released", "release", "recover"):
        t = f"{kind}-count"
        op = setup(kind, t)
        if kind == "recover" and not ctx.injected:
            time.sleep(ctx.ttl * 1.6)
        msg = _run_victim(ctx, location, later if kind == "recover" else None, op, None)
        if msg[2] != "ok":
            raise Undecided(f"the uninterrupted {op[0]} ({kind}) ended {msg[2]}, so its steps could not be swept")
        n = msg[1]
        pts = _points(n, 40)
        kinds[kind] = [n, 0]
        ops = [(k, setup(kind, f"{kind}-{k}")) for k in pts]
        if kind == "recover" and not ctx.injected:
            time.sleep(ctx.ttl * 1.6)
        for k, op in ops:
            res = _run_victim(ctx, location, later if kind == "recover" else None, op, k)
            sweeps += 1
            if res[0] == "killed":
                kinds[kind][1] += 1
    s = ctx.open(location, clock=FakeClock(later) if ctx.injected else False)
    claims = {c.task_id: c for c in s.claims(p)}
    stale = sorted(t for t, c in claims.items() if not _agrees(s.task(p, t), c))
    events = [e for e in s.audit(p) if e.kind == RECOVER_EVENT]
    for t in recovered_tasks:
        n_ev = sum(e.task_id == t for e in events)
        c = claims.get(t)
        released = c is not None and c.owner is None
        if n_ev != (1 if released else 0):
            raise Failed("recovery-audited", f"a recovery killed mid-call left the claim {_desc(c)} with {n_ev} "
                                             f"{RECOVER_EVENT} events: the release and its event must commit together")
    reclaimed = [t for t in stale[::2] if claims[t].owner is not None and len(stale) > 1]
    for t in reclaimed:
        owner = claims[t].owner
        accepted("claim-live-accepted", "the owner's renewal claim of a task a split write left stale", s.claim, p, t,
                 owner)
        row = s.task(p, t)
        if row is None or not row.mirrors(s.get(p, t)):
            raise Failed("rows-reconciled", f"a claim by the owner of {t!r}, whose task row a killed call left stale, "
                                            f"did not re-mirror the row ({row}; central {_desc(s.get(p, t))})")
    repaired = set(s.reconcile(p))
    left = [t for t in stale if t not in reclaimed]
    for claim in s.claims(p):
        row = s.task(p, claim.task_id)
        if row is None or not row.mirrors(claim):
            raise Failed("rows-reconciled", f"after reconcile the task row of {claim.task_id!r} ({row}) still does not "
                                            f"mirror its central row ({_desc(claim)}), left by a call killed mid-way")
    missing = sorted(set(left) - repaired)
    if missing:
        raise Failed("rows-reconciled", f"reconcile repaired {sorted(repaired)} but not {missing}, whose rows it fixed "
                                        "without reporting them")
    tally = "; ".join(f"{k} {v[0]} steps, {v[1]} kills" for k, v in kinds.items())
    ctx.ok("rows-reconciled", f"{sweeps} calls killed at a swept step ({tally}): {len(stale)} stale task rows, "
                              f"{len(reclaimed)} re-mirrored by the owner's claim, the rest repaired by reconcile"
           if stale else f"{sweeps} calls killed at a swept step ({tally}): no kill left a stale task row")
    ctx.ok("recovery-audited", f"{len(recovered_tasks) - 1} recoveries killed mid-call: each released claim has its one "
                               "audit event, each held claim none")


def _agrees(row: Any, claim: Claim | None) -> bool:
    """A task row agrees with its central row (no row agrees only with no claim)."""
    return claim is None if row is None else row.mirrors(claim)


def _boot_worker(target: StoreTarget, location: str, ttl_ms: int, index: int, n: int, rnd: int, barrier: Any,
                 conn: Any) -> None:
    _die_with_parent()
    try:
        barrier.wait(60)
    except Exception as exc:  # noqa: BLE001
        conn.send(("barrier", _one_line(exc)))
        return
    try:
        store = open_retrying(target, location, ttl_ms)
    except BaseException as exc:  # noqa: BLE001
        conn.send(("open-error", f"{type(exc).__name__}: {_one_line(exc)}"))
        return
    try:
        me = Claimant(f"node-{index}", f"agent-{index}")
        missing = []
        for r in range(rnd):
            for j in range(n):
                c = retry_busy(lambda: store.get("proj-boot", f"task-{r}-{j}"), "get")
                if c is None or c.owner is None or c.owner.node_id != f"node-{j}":
                    missing.append(f"task-{r}-{j}: {_desc(c)}")
        retry_busy(lambda: store.claim("proj-boot", f"task-{rnd}-{index}", me), "claim")
        conn.send(("ok", missing[:3], len(missing)))
    except BaseException as exc:  # noqa: BLE001
        conn.send(("error", f"{type(exc).__name__}: {_one_line(exc)}"))
    finally:
        with contextlib.suppress(Exception):
            store.close()


def check_concurrent_boot(ctx: Ctx) -> None:
    """16 processes open one fresh location at once; then 16 reopen it and find every claim."""
    st = ctx.suite.settings
    if st.single_reason:
        raise NotApplicable(f"{st.single_reason}: a concurrent bootstrap needs processes")
    location = ctx.location()
    n = st.boot_processes
    mp = _fork_ctx()
    for rnd in range(2):
        barrier = mp.Barrier(n)
        pipes = [mp.Pipe() for _ in range(n)]
        procs = [mp.Process(target=_boot_worker, args=(ctx.suite.target, location, ctx.ttl_ms, i, n, rnd, barrier,
                                                       child), daemon=True) for i, (_, child) in enumerate(pipes)]
        for proc in procs:
            proc.start()
        try:
            msgs = _gather([a for a, _ in pipes], procs, _OPEN_TIMEOUT_S + st.call_bound_s * 4, f"boot round {rnd}")
        finally:
            _stop(procs)
        bad = [m for m in msgs if m[0] in ("open-error", "error")]
        if any(m[0] == "barrier" for m in msgs):
            raise Undecided(f"boot round {rnd}: the start barrier broke")
        if bad:
            what = "a fresh location" if rnd == 0 else "an existing location (rerun)"
            raise Failed("concurrent-boot", f"{len(bad)} of {n} processes opening {what} at once failed: {bad[0][1]}")
        lost = [m for m in msgs if m[2]]
        if lost:
            raise Failed("concurrent-boot", f"reopening the location lost claims: {lost[0][1]} ({lost[0][2]} missing)")
    s = ctx.open(location, clock=False)
    got = len([c for c in s.claims("proj-boot") if c.owner is not None])
    if got != 2 * n:
        raise Failed("concurrent-boot", f"after two boots of {n} processes, {got} claims exist, not {2 * n}")
    ctx.ok("concurrent-boot", f"{n} processes opened a fresh location at once and claimed; {n} more reopened it and "
                              f"found all {n} claims ({2 * n} in the end)")


def check_handoff(ctx: Ctx) -> None:
    raise NotApplicable("the handoff policy is soak.claims' decide_handoff, not a store call; the claims storm and "
                        "the policy tests hold it")


#: (name, the clauses it reports on, function), in run order
CHECKS: list[tuple[str, tuple[str, ...], Callable[[Ctx], None]]] = [
    ("seed-unit-conflict", ("conflict-holder",), check_seed_unit),
    ("conflict-names-current", ("conflict-holder",), check_conflict_current),
    ("epoch-steps", ("claim-epoch-step", "claim-epoch-once", "claim-live-accepted", "rows-reconciled"), check_epochs),
    ("stale-heartbeat-release", ("heartbeat-fenced",), check_stale_fenced),
    ("progress-fence", ("progress-fenced", "claim-live-accepted"), check_progress_fenced),
    ("lease-protected", ("claim-lease-protected",), check_lease_protected),
    ("recovery", ("recovery-audited", "progress-preserved"), check_recovery),
    ("barrier-race", ("claim-atomic", "claim-epoch-once", "conflict-holder"), check_barrier_race),
    ("fence-race", ("progress-fenced", "heartbeat-fenced"), check_fence_race),
    ("interleavings", ("claim-atomic", "progress-fenced", "heartbeat-fenced"), check_interleavings),
    ("split-writes", ("rows-reconciled", "recovery-audited"), check_split_writes),
    ("concurrent-boot", ("concurrent-boot",), check_concurrent_boot),
    ("handoff-policy", ("handoff-policy",), check_handoff),
]
_MULTI_CHECKS = {"barrier-race", "fence-race", "interleavings", "split-writes", "concurrent-boot"}


def list_checks() -> list[tuple[str, tuple[str, ...]]]:
    """(check name, the clauses it reports on), in run order."""
    return [(name, clauses) for name, clauses, _ in CHECKS]


# -- running the checks -------------------------------------------------------------------------------

def _run_one(suite: Suite, name: str, emit: Callable[[tuple], None]) -> None:
    clauses, fn = next((c, f) for n, c, f in CHECKS if n == name)
    ctx = Ctx(suite, name)
    suite.watch.where = name
    t0 = time.monotonic()
    try:
        fn(ctx)
    except Failed as exc:
        ctx.record(exc.clause, FAIL, str(exc))
    except (BusyExhausted, Undecided) as exc:
        ctx.record(clauses[0], INCONCLUSIVE, _one_line(exc))
    except NotApplicable as exc:
        for clause in clauses:
            ctx.record(clause, NOT_EXERCISED, str(exc))
    except Exception as exc:  # noqa: BLE001 - the check could not decide
        ctx.record(clauses[0], ERROR, f"unexpected {type(exc).__name__}: {_one_line(exc)}")
    finally:
        ctx.close_all()
    took = time.monotonic() - t0
    for clause, status, detail in ctx.results:
        if detail:
            emit(("result", clause, name, status, detail, took))
    emit(("busy", suite.watch.busy.retries, suite.watch.busy.exhausted))


def _run_checks(target: StoreTarget, settings: Settings, watch: Watch, emit: Callable[[tuple], None]) -> None:
    if settings.clock_ok is None:
        location = tempfile.mkdtemp(prefix="probe-", dir=settings.root)
        try:
            store = watch.open(lambda: open_retrying(target, location, settings.ttl_ms), "open (the store factory)")
        except (StoreBootError, BusyExhausted) as exc:
            emit(("boot-error", _one_line(exc)))
            return
        settings.clock_ok = declares_injectable_clock(store)
        with contextlib.suppress(Exception):
            store.close()
        emit(("probe", settings.clock_ok))
    suite = Suite(target, settings, watch)
    for name in settings.checks:
        emit(("start", name))
        _run_one(suite, name, emit)
        emit(("done", name))


def _runner_main(payload: bytes, settings: Settings, buffer: Any, conn: Any) -> None:
    """The child process that runs the checks and streams every result to the parent."""
    import dill

    target = dill.loads(payload)

    def emit(msg: tuple) -> None:
        try:
            conn.send(msg)
        except OSError:
            raise SystemExit(0) from None

    watch = Watch(Board(buffer), settings.call_bound_s, BusyCount())
    try:
        _run_checks(target, settings, watch, emit)
    except Exception as exc:  # noqa: BLE001 - a harness bug: one line to the parent
        emit(("harness-error", f"{type(exc).__name__}: {_one_line(exc)}"))
        return
    emit(("bye",))
    conn.close()


class _Collector:
    def __init__(self, report: ClaimsConformanceReport) -> None:
        self.report = report
        self.current: str | None = None
        self.done: set[str] = set()
        self.clock_ok: bool | None = None
        self.boot_error: str | None = None
        self.harness_error: str | None = None
        self.busy_base = (0, 0)
        self.calls = 0

    def take(self, msg: tuple) -> bool:
        """Record one message; True at the end of the run."""
        kind = msg[0]
        if kind == "start":
            self.current = msg[1]
        elif kind == "result":
            _, clause, check, status, detail, took = msg
            self.report.results.append(CheckResult(clause, check, status, detail, round(took, 3)))
        elif kind == "done":
            self.done.add(msg[1])
            self.current = None
        elif kind == "probe":
            self.clock_ok = msg[1]
        elif kind == "busy":
            self.report.busy.retries = self.busy_base[0] + msg[1]
            self.report.busy.exhausted = self.busy_base[1] + msg[2]
        elif kind == "boot-error":
            self.boot_error = msg[1]
            return True
        elif kind == "harness-error":
            self.harness_error = msg[1]
            return True
        elif kind == "bye":
            return True
        return False


def _first_clause(check: str | None) -> str:
    return next((clauses[0] for name, clauses, _ in CHECKS if name == check), "no-crash")


def _run_watched(target: StoreTarget, settings: Settings,
                 report: ClaimsConformanceReport) -> list[tuple[str, str]]:
    """Run the checks in spawned children under the watchdog; the liveness failures found."""
    import dill
    import multiprocess

    payload = dill.dumps(target, recurse=True)
    mp = multiprocess.get_context("spawn")
    col = _Collector(report)
    liveness: list[tuple[str, str]] = []
    remaining = list(settings.checks)
    while remaining:
        settings.checks = remaining
        settings.clock_ok = col.clock_ok
        buffer = mp.RawArray("B", Board.size())
        board = Board(buffer)
        recv, send = mp.Pipe(duplex=False)
        proc = mp.Process(target=_runner_main, args=(payload, settings, buffer, send), daemon=False,
                          name="soak-claims-conformance")
        proc.start()
        send.close()
        finished = False
        hung: str | None = None
        stuck = False
        last = time.monotonic()
        try:
            while True:
                dead = not proc.is_alive()  # read before the poll: the child may answer and exit in between
                if recv.poll(_POLL_S):
                    try:
                        msg = recv.recv()
                    except EOFError:
                        msg = None
                    if msg is not None:
                        last = time.monotonic()
                        if col.take(msg):
                            finished = True
                            break
                        continue
                if dead:
                    break
                for _slot, kind, name, charged in board.in_flight():
                    bound = _OPEN_TIMEOUT_S + 5 if kind == KIND_OPEN else settings.call_bound_s
                    if charged > bound:
                        hung = f"{name} did not return within {bound:g} s"
                        proc.kill()
                        break
                if hung is not None:
                    break
                if time.monotonic() - last > _STUCK_S + settings.call_bound_s and not board.in_flight():
                    stuck = True  # the checks' process made no progress outside any store call: soak's problem
                    proc.kill()
                    break
        finally:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            col.calls += board.totals()[0]
            col.busy_base = (report.busy.retries, report.busy.exhausted)
        if col.boot_error:
            raise StoreBootError(f"store {redact(target.spec)} failed to boot: {col.boot_error}")
        if col.harness_error:
            report.results.append(CheckResult(_first_clause(col.current), col.current or "runner", ERROR,
                                              f"soak's runner failed: {col.harness_error}"))
            return liveness
        if finished:
            remaining = []
            break
        # the child died, or the watchdog killed it for a call past the bound
        if col.clock_ok is None:  # while opening the first store: nothing to go on with
            what = hung or f"the store's first open ended its process (exit {proc.exitcode})"
            raise StoreBootError(f"store {redact(target.spec)} failed to boot: {what}")
        where = col.current or "the checks' process"
        if hung is not None:
            liveness.append(("call-returns", f"{where}: {hung}"))
        else:
            flight = [f for f in board.in_flight()]
            if flight and not stuck:
                liveness.append(("no-crash", f"{where}: {flight[0][2]} ended its process (exit {proc.exitcode})"))
            else:
                why = (f"made no progress for {_STUCK_S:g} s outside any store call" if stuck else
                       f"died outside any store call (exit {proc.exitcode})")
                report.results.append(CheckResult(_first_clause(col.current), where, ERROR,
                                                  f"the checks' process {why}: soak could not decide"))
        if col.current is not None:
            col.done.add(col.current)
        remaining = [c for c in remaining if c not in col.done]
    report.timing = "injected clock" if col.clock_ok else "real time"
    report.calls = col.calls
    return liveness


def run_claims_conformance(spec_or_target: str | StoreTarget | Callable[..., Any], *, lease_ttl_ms: int = 200,
                           rounds: int = 300, processes: int = 8, boot_processes: int = 16,
                           call_bound_s: float | None = None, checks: list[str] | None = None,
                           location: str | None = None) -> ClaimsConformanceReport:
    """Run the claims conformance checks against a claim store and return the report.

    `spec_or_target`: a claim store spec (`sqlite:`, `memory:`, `mutant:NAME`, `package.module:callable`), a
    `StoreTarget` of kind `claims`, or a factory `(location, *, lease_ttl_ms, **options)`. `rounds` barrier races
    of `processes` processes; `boot_processes` open one fresh location at once. `checks` limits the run to those
    check names (`list_checks()`); `location` is the parent of the fresh locations (default a temp directory)."""
    target = spec_or_target if isinstance(spec_or_target, StoreTarget) else resolve(spec_or_target, kind="claims")
    if target.kind != "claims":
        raise StoreSpecError(f"{redact(target.spec)} is a run store target; claims conformance needs a claim store "
                             "(resolve(spec, kind='claims'))")
    if "path" in target.options:
        raise StoreSpecError(f"claims conformance needs a fresh location per check, but {redact(target.spec)} names "
                             "one fixed directory; use the plain scheme (e.g. sqlite:)")
    if lease_ttl_ms < 20:
        raise HarnessError(f"--ttl-ms {lease_ttl_ms} is too short to time reliably; use 20 or more")
    bound = default_call_bound_s(int(lease_ttl_ms)) if call_bound_s is None else float(call_bound_s)
    if not bound > 0:
        raise HarnessError(f"--call-bound {call_bound_s} bounds no call; use a number of seconds above 0")
    known = [n for n, _, _ in CHECKS]
    wanted = known if not checks else [n for n in known if n in set(checks)]
    unknown = sorted(set(checks or ()) - set(known))
    if unknown:
        raise StoreSpecError(f"unknown claims check {unknown[0]!r}; checks are {', '.join(known)}")
    if location is not None:
        os.makedirs(location, exist_ok=True)
    root = tempfile.mkdtemp(prefix="soak-claims-conformance-", dir=location)
    settings = Settings(int(lease_ttl_ms), root, None, int(rounds), int(processes), int(boot_processes), bound,
                        list(wanted), f"{target.spec} is single-process" if target.single_process else "")
    name = redact(spec_or_target.strip()) if isinstance(spec_or_target, str) else redact(target.spec)
    report = ClaimsConformanceReport(name, int(lease_ttl_ms), call_bound_s=bound)
    t0 = time.monotonic()
    try:
        try:
            import dill

            dill.dumps(target, recurse=True)
            watched = True
        except Exception:  # noqa: BLE001 - a factory that cannot be sent to a child: run it here
            watched = False
        if watched:
            liveness = _run_watched(target, settings, report)
            calls = report.calls
            for clause in ("call-returns", "no-crash"):
                found = [d for c, d in liveness if c == clause]
                if found:
                    report.results.append(CheckResult(clause, "watchdog", FAIL, found[0]))
                elif clause not in {r.clause for r in report.results if r.status == FAIL}:
                    report.results.append(CheckResult(clause, "watchdog", PASS,
                                                      f"{calls} watched store calls all returned" if clause ==
                                                      "call-returns" else "no store call ended its process"))
        else:
            report.isolation = "this process (the target cannot be sent to a child)"
            settings.single_reason = settings.single_reason or ("the target cannot be sent to a child process, so "
                                                                "no process is forked from this one")
            col = _Collector(report)
            buf = bytearray(Board.size())
            _run_checks(target, settings, Watch(Board(buf), bound, report.busy), col.take)
            if col.boot_error:
                raise StoreBootError(f"store {redact(target.spec)} failed to boot: {col.boot_error}")
            report.timing = "injected clock" if settings.clock_ok else "real time"
            for clause in ("call-returns", "no-crash"):
                report.results.append(CheckResult(clause, "watchdog", NOT_EXERCISED,
                                                  "the target cannot be sent to a child process: no watchdog"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seen = {r.clause for r in report.results}
    for clause in CLAIM_CHECK_CLAUSES:
        if clause not in seen:
            report.results.append(CheckResult(clause, "-", NOT_EXERCISED,
                                              "no check reached it (a failure above ended the checks that do)"))
    report.elapsed_s = time.monotonic() - t0
    return report


# -- command line (`soak conformance --workload claims`) -------------------------------------------------

def run_claims_cli(args: argparse.Namespace) -> int:
    """`soak conformance --workload claims --store SPEC`: the report as a table (or JSON); the verdict's exit code."""
    report = run_claims_conformance(args.store, lease_ttl_ms=args.ttl_ms, call_bound_s=args.call_bound)
    print(json.dumps(report.to_dict(), indent=2) if args.json else render(report))
    sys.stdout.flush()
    return report.exit_code
