"""`atomic-fence`, black-box: a takeover positioned at every point inside a victim's fenced call.

The victim's call runs in the check's thread on its own store object. Thieves are long-lived threads, each
owning a store object it opened itself (CONTRACT: a store object is used only by the thread that opened it),
opened before the first trial so an attempt at a pause point costs no open. With an injected clock the
thieves' objects read an offset view of the check's clock, two ttls ahead, so the victim's tenure has lapsed
for them while it is live for the victim; in real time the victim's tenure is short (60 ms) and the victim
sleeps past its expiry at the point where the takeover is tried.

Points: every place where the victim's thread returns from a function of the store (Python, or a C method of a
non-builtin object such as a database connection) is numbered with `sys.setprofile`; the harness's own frames
(the watch proxy, the busy retry, the injected clock, this check's) are skipped, so they neither add points
nor hide any of the store's.
With an injected clock, the victim's first clock read inside the call marks its fence check and is point 0.
From point `start` on, the victim pauses at each point (up to `PAUSE_S`, not charged to the store by the
watchdog) while an idle thief tries to acquire the run and record what it sees, until one gets through. An
atomic store holds its lock across check and mutation, so no thief gets in before the mutation commits; a store
with a gap lets one in, and the victim's write then lands after the successor's grant, which the successor's
own observation proves. Each trial starts just past the point the previous one got through at, until the call
is covered.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from soak.conformance._context import CheckFailed, Ctx, Inconclusive, StoreThread, call, one_line, shares_state
from soak.conformance._watch import HARNESS_FILES
from soak.retry import BusyExhausted
from soak.spi import JournalEntry, Lease, LeaseHeldError, RunMeta

__all__ = ["RACE_SURFACES", "check_atomic_fence"]

RACE_SURFACES = ("append", "put_meta", "delete", "blob-put", "blob-delete", "renew", "release")

#: Modules whose C methods are not store work: returning from them is no place to pause.
_NOT_STORE_C = frozenset({"builtins", "_thread", "time", "threading", "_io", "io"})

#: Frames that are never a point: the watch, the busy retry, the clock, and this check's own (the clock hook, the
#: pause, the victim's call wrapper all return where a store frame or the clock read already marks the place).
_SKIP_FILES = HARNESS_FILES | {__file__}

PAUSE_S = 0.02  # how long the victim waits at a point for a takeover to get through
#: Thieves, each with its own store object (for a networked store, its own connection): a trial tries takeovers at
#: this many consecutive points at most, one thief each (against an atomic store every attempt blocks until the
#: victim's call commits), so a call with more points takes more trials, never more connections.
THIEVES = 8
MAX_TRIALS = 1024  # a trial covers one point at least; a call with more points than this is not covered


def check_atomic_fence(ctx: Ctx) -> None:
    realtime = ctx.clock is None
    # In real time the victim's tenures lapse quickly (short trials) and the thieves' are long, so a
    # successor's tenure outlives the trial.
    victim_ttl_ms, thief_ttl_ms = (60, 10_000) if realtime else (None, None)
    victim = ctx.open(ttl_ms=victim_ttl_ms)
    peer = ctx.open(ttl_ms=thief_ttl_ms)
    if not shares_state(victim, peer):
        for surface in RACE_SURFACES:
            ctx.not_exercised(f"atomic-{surface}", "store objects over one location share no state, so no other "
                              "object can take the run over inside a call (a store object is used only by the thread "
                              "that opened it)")
        return
    if getattr(victim, "code_in_child", False) is True:
        for surface in RACE_SURFACES:
            ctx.not_exercised(f"atomic-{surface}", "the store's code runs in a child process (exec:, docs/wire.md): "
                              "pausing the caller's thread positions no takeover inside the child's call; the storm's "
                              "strikes stop the child there (soak storm, soak certify)")
        return
    thief_clock = ctx.clock.offset(2 * ctx.ttl) if ctx.clock is not None else None
    thieves = [ctx.thread(ttl_ms=thief_ttl_ms, clock=thief_clock, name=f"atomic-thief-{i}") for i in range(THIEVES)]
    for t in thieves:
        t.ready()
    how = "each thief on its own store object in its own thread"
    how += ", real-time expiry of a 60 ms tenure" if realtime else ", injected clock"
    for surface in RACE_SURFACES:
        with ctx.sub(f"atomic-{surface}"):
            start, trials, points, covered, lapsed = 0, 0, 0, False, 0
            while trials < MAX_TRIALS:
                trials += 1
                try:
                    why, through_at, points, tried_to = _race_once(ctx, victim, thieves, surface, start)
                except _Lapsed as exc:
                    lapsed += 1
                    if lapsed > MAX_LAPSED:
                        raise Inconclusive(f"{surface}: {exc} in {lapsed} trials: the machine is too loaded for "
                                           "real-time trials; run conformance when it is quieter") from exc
                    trials -= 1
                    continue
                if why:
                    raise CheckFailed(f"{surface}: {why}")
                start = through_at + 1 if through_at is not None else tried_to
                if start >= points:
                    covered = True
                    break
            if not covered:
                raise Inconclusive(f"{surface}: {trials} trials covered {start} of the {points} return points of the "
                                   "fenced call; the rest were not tried")
            ctx.note(f"takeover tried at each of {points} return points of the fenced {surface} "
                     f"({trials} trials, {how}); none landed")


class _Lapsed(Exception):
    """A trial's setup write came after the victim's short real-time tenure lapsed: the trial is tried again."""


MAX_LAPSED = 20


def _thief_action(thief: Any, surface: str, run: str, ref: str, succ: Lease, box: dict) -> None:
    """What the successor observes or writes right after its grant: the witness for the race."""
    if surface == "append":
        box["seen"] = thief.load(run)
    elif surface == "put_meta":
        thief.put_meta(RunMeta(run, "running", 7, b"thief"), succ)
    elif surface == "delete":
        thief.append(run, JournalEntry(50, b"thief"), succ)
    elif surface == "blob-put":
        box["seen"] = thief.transcripts.get(ref)
    elif surface == "blob-delete":
        thief.transcripts.put(ref, b"thief", succ)


def _victim_op(victim: Any, surface: str, run: str, ref: str, lease: Lease):
    return {
        "append": lambda: victim.append(run, JournalEntry(2, b"victim"), lease),
        "put_meta": lambda: victim.put_meta(RunMeta(run, "failed", 1, b"victim"), lease),
        "delete": lambda: victim.delete(run, lease),
        "blob-put": lambda: victim.transcripts.put(ref, b"victim", lease),
        "blob-delete": lambda: victim.transcripts.delete(ref, lease),
        "renew": lambda: victim.renew(lease),
        "release": lambda: victim.release(lease),
    }[surface]


def _race_once(ctx: Ctx, victim: Any, thieves: list[StoreThread], surface: str,
               start_at: int) -> tuple[str, int | None, int, int]:
    """One trial: the victim's fenced `surface` call, with takeovers tried at the points from `start_at` on, one
    thief per point, as many points as there are thieves.

    Returns (why it is unsafe or '', the point the thief got through at, how many points the call had, the first
    point not tried)."""
    clock = ctx.clock
    watch = ctx.suite.watch
    run = f"af-{surface}-{start_at}"
    ref = f"{run}/t1"
    t_acquire = time.monotonic()
    lease = call(lambda: victim.acquire(run, "victim"), "victim acquire")
    expiry = t_acquire + victim.lease_ttl_ms / 1000.0  # real-time mode only: no later than this

    def setup(fn: Callable[[], Any], what: str) -> None:
        try:
            call(fn, what)
        except CheckFailed as exc:
            # in real time a 60 ms tenure can lapse before a loaded machine gets its setup write in: a refusal
            # that completed past the expiry is the store's right, and the trial is tried again
            if clock is None and isinstance(exc.__cause__, LeaseHeldError) and time.monotonic() >= expiry:
                raise _Lapsed(f"{what} came after the victim's {victim.lease_ttl_ms} ms tenure lapsed") from exc
            raise

    if surface == "delete":
        setup(lambda: victim.append(run, JournalEntry(1, b"v"), lease), "victim append")
    if surface == "blob-delete":
        setup(lambda: victim.transcripts.put(ref, b"v", lease), "victim blob put")
    victim_thread = threading.get_ident()
    done = threading.Event()
    box: dict[str, Any] = {}
    box_lock = threading.Lock()
    attempts: list[Any] = []  # futures of this trial's takeover attempts
    state: dict[str, Any] = {"armed": True, "point": -1, "through_at": None, "tried_to": start_at}

    def attempt(thief: Any) -> None:  # runs in a thief's thread, on its own store object
        try:
            t0 = time.monotonic()
            while True:
                try:
                    succ = thief.acquire(run, "thief")
                    break
                except LeaseHeldError:
                    if "lease" in box:
                        return  # another attempt won
                    # A live victim tenure past its ttl is a ttl-honoured problem, not worth waiting long for here.
                    if time.monotonic() - t0 > 1:
                        raise
                    time.sleep(0.001)
            with box_lock:
                if "lease" in box:  # the first grant cannot have lapsed: a second breaks lease-exclusive
                    box["double"] = (box["lease"], succ)
                    return
                box["lease"] = succ
            _thief_action(thief, surface, run, ref, succ, box)
        except Exception as exc:  # noqa: BLE001 - reported below
            with box_lock:
                box.setdefault("error", exc)
        finally:
            done.set()

    def point() -> None:
        sys.setprofile(None)
        state["point"] += 1
        if start_at <= state["point"] == state["tried_to"] and not done.is_set():
            idle = next((t for t in thieves if t.idle()), None)
            if idle is not None:  # none idle: this point and the rest are left to the next trial
                state["tried_to"] += 1
                watch.pause_begin()
                if clock is None and time.monotonic() < expiry + 0.005:
                    time.sleep(expiry + 0.005 - time.monotonic())  # let the tenure lapse right here
                attempts.append(idle.submit(attempt))
                if done.wait(PAUSE_S):
                    state["through_at"] = state["point"]
                watch.pause_end()
        sys.setprofile(profiler)

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "c_return":
            owner = getattr(arg, "__self__", None)
            if owner is None or type(owner).__module__ in _NOT_STORE_C:
                return
        elif event != "return":
            return
        if frame.f_code.co_filename in _SKIP_FILES:
            return
        if threading.get_ident() == victim_thread and state["armed"]:
            point()

    def hook() -> None:
        if threading.get_ident() == victim_thread and state["armed"] and state["point"] < 0:
            point()  # the clock read is point 0; the profiler numbers the rest

    op = _victim_op(victim, surface, run, ref, lease)
    if clock is None:
        time.sleep(max(0.0, expiry - 0.015 - time.monotonic()))  # call in just before expiry
    try:
        if clock is not None:
            clock.hook = hook
        else:
            sys.setprofile(profiler)
        try:
            op()
            accepted = True
        except LeaseHeldError:
            accepted = False
    finally:
        sys.setprofile(None)
        if clock is not None:
            clock.hook = None
        state["armed"] = False
    for fut in attempts:
        fut.exception()  # wait: a store call that never returns is the watchdog's to end
    points = state["point"] + 1
    through_at = state["through_at"]
    if points == 0:
        raise Inconclusive(f"{surface}: the store declares an injectable clock but never read it inside the victim's "
                           "fenced call, so no takeover could be positioned at its fence check")
    if not attempts:  # start_at lay beyond the call's last point: take over afterwards
        if clock is None:
            time.sleep(max(0.0, expiry + 0.005 - time.monotonic()))

        def takeover(thief: Any) -> None:
            box["lease"] = _acquire_after_expiry(thief, run, victim.lease_ttl_ms, clock is None)
            _thief_action(thief, surface, run, ref, box["lease"], box)

        call(lambda: thieves[0].run(takeover), "takeover after the victim's call")
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, BusyExhausted):
            raise exc
        raise CheckFailed(f"{surface}: the thief's takeover raised {type(exc).__name__}: {one_line(exc)}")
    if "double" in box:
        return (f"two thieves were both granted the run: {box['double'][0]} and {box['double'][1]}", through_at, points,
                state["tried_to"])
    if "lease" not in box:
        raise CheckFailed(f"{surface}: no thief could acquire the run after the victim's tenure expired")
    succ: Lease = box["lease"]
    if succ.epoch <= lease.epoch:
        raise CheckFailed(f"{surface}: the takeover got epoch {succ.epoch}, not above the victim's {lease.epoch}")
    if not accepted:
        return "", through_at, points, state["tried_to"]  # the store re-checked and refused: safe
    why = thieves[0].run(lambda thief: _race_witness(thief, surface, run, ref, succ, box))
    if why and through_at is not None:
        why += f" (takeover at return point {through_at} of {points} in the call)"
    return why, through_at, points, state["tried_to"]


def _acquire_after_expiry(thief: Any, run: str, victim_ttl_ms: int, realtime: bool) -> Lease:
    """Acquire once the victim's tenure has lapsed; in real time a renew inside the call may have
    moved its expiry up to one more ttl, so a refusal is retried until then."""
    deadline = time.monotonic() + 2 * victim_ttl_ms / 1000.0
    while True:
        try:
            return thief.acquire(run, "thief")
        except LeaseHeldError:
            if not realtime or time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def _race_witness(thief: Any, surface: str, run: str, ref: str, succ: Lease, box: dict) -> str:
    """The successor's view after the race: '' if the victim's write is ordered before the grant."""
    if surface == "append":
        if JournalEntry(2, b"victim") in thief.load(run) and JournalEntry(2, b"victim") not in box.get("seen", []):
            return "the victim's append landed after the successor's grant (the successor's load did not see it)"
    elif surface == "put_meta":
        if thief.get_meta(run) == RunMeta(run, "failed", 1, b"victim"):
            return "the victim's put_meta overwrote the successor's later meta"
    elif surface == "delete":
        if JournalEntry(50, b"thief") not in thief.load(run):
            return "the victim's delete removed the successor's later append"
    elif surface == "blob-put":
        if thief.transcripts.get(ref) == b"victim" and box.get("seen") != b"victim":
            return "the victim's blob put landed after the successor's grant (the successor's get did not see it)"
    elif surface == "blob-delete":
        if thief.transcripts.get(ref) != b"thief":
            return "the victim's blob delete removed the successor's later blob"
    elif surface in ("renew", "release"):
        try:
            thief.renew(succ)
        except LeaseHeldError:
            return f"the victim's {surface} ended the successor's tenure"
    return ""
