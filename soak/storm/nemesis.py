"""The nemesis: real pauses (SIGSTOP, then SIGCONT after more than the ttl) and crashes (SIGKILL).

Driven by the orchestrator's loop on a seeded schedule; every action is an event in
`history/nemesis.jsonl` naming the target process, its pid, whether it was inside a store call
(`in_call`, read from the worker's shared state *after* the stop took effect, so the flag is the
frozen truth) and the op index and surface in flight. Cooperative stalls are the workload's.

Strikes (`soak.storm.strike`) are stops a worker's own timer or profile hook lands inside one
store call. The nemesis finds the stopped worker; a stop that landed outside the call is let go
at once, one inside it is held (a `pause` event with `strike: true`, with the step k of n of a
step-mode strike) past the lease; one hold at a time (a strike that stops while another is held is
continued at once: `overlapped`). Once the lease has expired a worker without a tenure is asked
(shared `WANTED` slot) to take the run over, and the holder is let go when the first of these
holds:
- a successor holds the run and has started its third call since the grant (its reads of the
  journal and meta are done; a workload may ask for more, `successor_calls`: the runs workload waits for
  its taker's whole first read, the journal, the meta and every blob): `successor`;
- the held call visibly blocks the store, before its lease's expiry too: the others have started no
  call for a sixth of the ttl (at least 20 ms), two of the others that run are stuck inside a call
  begun that long ago or more (one where only one runs), and no other worker is stopped inside a call
  (that stop may be what blocks them): `blocked`;
- twice the pause length past the lease's expiry: `cap`.
"""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from soak._procstat import proc_state
from soak.history import HistoryWriter, now_ns
from soak.storm.strike import AIMED, HELD_SLOT, PLAIN, TRIED, board_index, gaps, untried
from soak.workloads.context import MODES
from soak.storm.worker import (
    AGAIN,
    AGAIN_IO,
    BLOCKED,
    IN_CALL,
    OP_INDEX,
    PHASE,
    RUNNING,
    SINCE_NS,
    STRIKE,
    STRIKE_STEP,
    STRIKE_STEPS,
    SURFACE,
    TENURE_EPOCH,
    TENURE_EXPIRES_NS,
    TENURE_KEY,
    TENURE_OP,
    WANTED,
    signal_worker,
    WITNESSED,
)

__all__ = ["Nemesis", "RemoteTenure", "WorkerHandle", "call_elapsed_ns", "call_state"]

_AIM_S = 0.05  # how long an aimed strike watches for a worker inside a store call
_SUCCESSOR_CALLS = 3  # calls a successor starts after its grant before a struck holder is let go


@dataclass(frozen=True)
class RemoteTenure:
    """A worker on another host holding a tenure, as the orchestrator relays it (a storm across hosts,
    `soak.cluster`): the held worker's successor may run there. `calls`: calls it started since its grant."""

    name: str
    key: int
    epoch: int
    calls: int


@dataclass(eq=False)
class _Still:
    """What the blocked rule watches of a worker stopped inside a call: since when the others have stood still."""

    expires_ns: int  # the latest its lease can expire (published by the worker)
    idle_ns: int  # how long the others must stand still
    progress: int = -1  # the other workers' op indices summed, and since when unchanged
    progress_ns: int = 0


@dataclass(eq=False)
class _Hold(_Still):
    """Why a struck worker is held: its tenure, and what lets it go."""

    key: int = -1
    epoch: int = 0
    cap_ns: int = 0
    successor: Any = None  # the worker seen holding a later epoch of the run (a handle, or a RemoteTenure)
    asked: bool = False  # a worker was asked to take the run over


@dataclass(eq=False)
class WorkerHandle:
    """The orchestrator's view of one worker incarnation."""

    name: str
    slot: int
    incarnation: int
    seed: int
    process: Any  # multiprocess Process
    state: Any  # shared array (see soak.storm.worker)
    surfaces: tuple[str, ...] = ()  # what its SURFACE codes name (`soak.storm.worker.surface_codes`)
    paused_since: int | None = None  # monotonic ns of the SIGSTOP
    hold: _Hold | None = None  # set while a strike is held
    watch: _Still | None = None  # set while a pause stopped it inside a call: what the blocked rule tracks
    pause_credit: dict[int, int] = field(default_factory=dict)  # op index -> ns spent paused
    killed: bool = False
    reaped: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return not self.reaped and self.process.is_alive()

    def running(self) -> bool:
        return self.alive() and not self.killed and self.state[PHASE] == RUNNING


def call_state(handle: WorkerHandle) -> dict[str, Any]:
    """What the worker published about the store call in flight."""
    st = handle.state
    in_call = bool(st[IN_CALL])
    code = int(st[SURFACE])
    return {
        "in_call": in_call,
        "op": int(st[OP_INDEX]) if in_call else None,
        "surface": handle.surfaces[code] if in_call and 0 <= code < len(handle.surfaces) else None,
        "call_ms": round((now_ns() - int(st[SINCE_NS])) / 1e6, 3) if in_call else None,
    }


def call_elapsed_ns(handle: WorkerHandle, now: int) -> int:
    """How long the worker's store call in flight has run, not counting the time the nemesis held it paused
    (0 when it is not inside a call)."""
    st = handle.state
    if not st[IN_CALL]:
        return 0
    paused = now - handle.paused_since if handle.paused_since is not None else 0
    return now - int(st[SINCE_NS]) - handle.pause_credit.get(int(st[OP_INDEX]), 0) - paused


def _syscall(pid: int) -> str:
    """Where a stopped process was: `user`, or the number of the system call it was in (as the
    kernel shows it in /proc/PID/syscall)."""
    try:
        with open(f"/proc/{pid}/syscall") as fh:
            first = fh.read().split()[:1]
    except OSError:
        return "?"
    if not first:
        return "?"
    return "user" if first[0] in ("-1", "running") else first[0]


def _child_syscalls(pid: int) -> dict[str, Any]:
    """Where the processes a worker started for its store (a wire store's child) were stopped, as `_syscall` says:
    with an adapter the store's code runs there, not in the worker."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            children = [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        return {}
    return {"child_syscall": _syscall(children[0])} if len(children) == 1 else {}


def _is_stopped(pid: int) -> bool:
    return _wait_stopped(pid, 0.0)


def _wait_stopped(pid: int, timeout_s: float = 0.2) -> bool:
    """Wait until the kernel reports the process stopped (state T), so shared state is frozen."""
    deadline = time.monotonic() + timeout_s
    path = f"/proc/{pid}/stat"
    while True:
        try:
            with open(path, "rb") as fh:
                stat = fh.read()
            state = stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3]
            if state in (b"T", b"t"):
                return True
        except (OSError, ValueError):
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)


class Nemesis:
    """A seeded schedule of pauses and kills over the live workers."""

    def __init__(self, scenario: Any, rng: random.Random, writer: HistoryWriter, *, start_ns: int | None = None,
                 surfaces: tuple[str, ...] = (), mutations: frozenset[str] = frozenset(),
                 kill_surfaces: frozenset[str] | None = None, strike_board: Any = None,
                 successor_calls: int | None = None, blocked_pauses_end: bool = False):
        self.sc = scenario
        # a pause inside a call that visibly blocks the store ends once the lease has expired (the workload's choice)
        self.blocked_pauses_end = blocked_pauses_end
        self.successor_calls = successor_calls or _SUCCESSOR_CALLS  # the workload's (`successor_calls`), if any
        self.strike_board = strike_board  # shared with the workers' strike timers (soak.storm.strike.BOARD_SPAN)
        self.surfaces = surfaces
        self.swept: set[str] = set()  # surfaces whose aimed sweep is complete (`note_swept`)
        self._swept_check_ns = 0
        # where a stop between fence check and commit breaks a non-atomic fence: the workload's mutations
        self.mutation_codes = frozenset(i for i, f in enumerate(surfaces) if f in mutations)
        # where an aimed kill lands: the workload's `kill_surfaces` (where a kill between two commits leaves a split
        # write), else its mutations
        self.kill_codes = (frozenset(i for i, f in enumerate(surfaces) if f in kill_surfaces)
                           if kill_surfaces else self.mutation_codes)
        self.rng = rng
        self.writer = writer
        start = start_ns if start_ns is not None else now_ns()
        self.next_pause = self._after(start, scenario.pause_interval_s)
        self.next_kill = self._after(start, scenario.kill_interval_s)
        self.pause_ns = scenario.effective_pause_ms * 1_000_000
        # how long the others must stand still before a stop is judged to block the store: a sixth of the ttl, >= 20 ms
        self.idle_ns = max(20_000_000, scenario.lease_ttl_ms * 1_000_000 // 6)
        self.paused: list[WorkerHandle] = []
        self.strikes = {"held": 0, "missed": 0}
        self.strike_kills: list[WorkerHandle] = []  # workers a kill strike crashed, for the orchestrator to replace
        # across hosts: the other hosts' tenures, relayed by the orchestrator (a successor may run there)
        self.remote: tuple[RemoteTenure, ...] = ()

    def _after(self, t: int, mean_s: float) -> int | None:
        if mean_s <= 0:
            return None
        # jittered interval (0.5x .. 1.5x the mean): regular enough to act in a short storm
        return t + int(mean_s * self.rng.uniform(0.5, 1.5) * 1e9)

    def log(self, kind: str, value: dict[str, Any]) -> None:
        self.writer.event(kind, value)

    def _strike(self, workers: list[WorkerHandle], bias: float,
                aim: frozenset[int] | None = None) -> tuple[WorkerHandle, int] | None:
        """SIGSTOP a live worker and return it stopped, with the number of aimed attempts.

        Blind (probability 1 - `bias`): a random worker, wherever it is. Aimed: store calls
        last well under a millisecond on a fast store, so a blind signal rarely lands inside
        one; watch the shared call flags for up to `_AIM_S`, stop a worker seen inside a
        mutation (where a stop between fence check and commit breaks a non-atomic fence) or
        else inside any call, and if the stop landed outside the call, continue it at once
        (a stop of microseconds) and try again. The recorded `in_call` is always read after
        the kernel reports the process stopped: it is the truth, not the aim.
        """
        # A call that has run past the ttl is waiting out a held lock, or hangs: leave it to run to the call-returns
        # bound, where a hang is proved, instead of cutting it short unknown.
        now = now_ns()
        stuck = self.sc.lease_ttl_ms * 1_000_000
        candidates = [w for w in workers if w.running() and w.paused_since is None and call_elapsed_ns(w, now) < stuck]
        if not candidates:
            return None
        attempts = 0
        if self.rng.random() < bias:
            deadline = time.monotonic() + _AIM_S
            while time.monotonic() < deadline:
                in_call = [w for w in candidates if w.state[IN_CALL]]
                codes = self.mutation_codes if aim is None else aim
                mutating = [w for w in in_call if int(w.state[SURFACE]) in codes]
                # Two places a non-atomic store leaves a takeover window open: between its
                # own steps while it runs (check, then write), and while it waits for a lock or
                # a reply after a check made without it. Aim at either, at random.
                want = (b"R",) if self.rng.random() < 0.5 else (b"S", b"D")
                poised = [w for w in mutating if proc_state(w.pid) in want]
                target = self.rng.choice(poised or mutating or in_call) if in_call else None
                if target is None:
                    time.sleep(0.0001)
                    continue
                attempts += 1
                if not self._stop(target):
                    self._cont(target)
                    continue
                if target.state[IN_CALL]:
                    return target, attempts
                self._cont(target)  # landed outside the call: let it go, aim again
        target = self.rng.choice(candidates)
        if not self._stop(target):
            self._cont(target)
            return None
        return target, attempts

    @staticmethod
    def _stop(w: WorkerHandle) -> bool:
        try:
            signal_worker(w.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        return _wait_stopped(w.pid)

    @staticmethod
    def _cont(w: WorkerHandle) -> None:
        try:
            signal_worker(w.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def step(self, workers: list[WorkerHandle]) -> list[WorkerHandle]:
        """Act on the schedule; returns the workers killed (the orchestrator replaces them)."""
        now = now_ns()
        killed: list[WorkerHandle] = []
        self.find_strikes(workers, now)
        if now >= self._swept_check_ns:  # a surface whose calls show nothing to aim at is swept at once
            self._swept_check_ns = now + 100_000_000
            self.note_swept()
        killed.extend(self.strike_kills)
        self.strike_kills.clear()
        for w in list(self.paused):
            if w.hold is not None:
                why = self._let_go(w, workers, now)
                if why:
                    self.resume(w, why)
            elif w.paused_since is not None and now - w.paused_since >= self.pause_ns:
                self.resume(w)
            elif (w.watch is not None and self._blocked(w, w.watch, self._others(w, workers), now, alone=False)
                  and now >= w.watch.expires_ns):
                # paused inside a call past its lease, and the call visibly blocks the store: holding it longer
                # only freezes every worker (no successor can take over while it holds the lock). Judged even while
                # another worker is stopped inside a call (a pause cut short loses nothing), so a hold beside it is
                # judged alone once it ends.
                self.resume(w, "blocked")
        if self.next_pause is not None and now >= self.next_pause:
            struck = self._strike(workers, self.sc.pause_in_call_bias)
            if struck is not None:
                self.pause(*struck)
            self.next_pause = self._after(now, self.sc.pause_interval_s)
        if self.next_kill is not None and now >= self.next_kill:
            struck = self._strike(workers, self.sc.kill_in_call_bias, self.kill_codes)
            if struck is not None:
                self.kill(struck[0], attempts=struck[1])
                killed.append(struck[0])
            self.next_kill = self._after(now, self.sc.kill_interval_s)
        return killed

    def find_strikes(self, workers: list[WorkerHandle], now: int) -> None:
        """Hold the workers a strike stopped inside a store call; let every other stray stop go."""
        for w in workers:
            if w.paused_since is not None or w.killed or not w.alive() or not _is_stopped(w.pid):
                continue
            st = w.state
            if st[STRIKE] < 0:  # a kill strike: crash the worker where it stopped, if that is inside the call
                if st[IN_CALL]:
                    self.strikes["killed"] = self.strikes.get("killed", 0) + 1
                    self.kill(w, strike=True, strike_mode=MODES[-int(st[STRIKE]) - 1])
                    self.strike_kills.append(w)
                else:
                    self._cont(w)
                    self.strikes["missed"] += 1
                continue
            key = int(st[TENURE_KEY])
            if not (st[STRIKE] and st[IN_CALL] and key >= 0):
                # landed after the call (or the timer raced its disarm): a stop of microseconds
                self._cont(w)
                self.strikes["missed"] += 1
                continue
            if any(o.hold is not None for o in self.paused):
                # one hold at a time: the successor and the let-go rules then concern one struck call alone
                self._cont(w)
                self.strikes["overlapped"] = self.strikes.get("overlapped", 0) + 1
                continue
            expires = int(st[TENURE_EXPIRES_NS])
            w.hold = _Hold(expires, self.idle_ns, key=key, epoch=int(st[TENURE_EPOCH]),
                           cap_ns=max(expires, now) + 2 * self.pause_ns)
            if self.strike_board is not None:
                self.strike_board[HELD_SLOT] = key + 1  # whoever is granted the run next is its taker
            w.paused_since = now
            self.paused.append(w)
            self.strikes["held"] += 1
            self.log("pause", {"target": w.name, "pid": w.pid, "stopped": True, "strike": True,
                               "strike_mode": MODES[int(st[STRIKE]) - 1], "syscall": _syscall(w.pid),
                               **_child_syscalls(w.pid),
                               **({"step": int(st[STRIKE_STEP]), "steps": int(st[STRIKE_STEPS])}
                                  if st[STRIKE_STEPS] else {}),
                               **({"again": True} if int(st[AGAIN]) & 1 else {}),
                               **({"io": True} if int(st[AGAIN]) & AGAIN_IO else {}),
                               "lease_left_ms": round((expires - now) / 1e6, 3), **call_state(w)})

    def _let_go(self, w: WorkerHandle, workers: list[WorkerHandle], now: int) -> str | None:
        """Why a struck worker may go now: a successor works its run, nobody moves, or the cap."""
        h = w.hold
        if now >= h.cap_ns:
            return "cap"
        others = self._others(w, workers)
        if now < h.expires_ns:
            # before the expiry only the blocked rule may let it go: a call that holds the store's lock keeps every
            # successor out however long it is held, and there is no successor to wait for yet
            return self._blocked(w, h, others, now)
        if not h.asked:  # ask a worker without a tenure to take the run over
            free = [o for o in others if o.paused_since is None and int(o.state[TENURE_KEY]) < 0]
            if free:
                min(free, key=lambda o: o.slot).state[WANTED] = h.key + 1
                h.asked = True
        successor = next(((o, int(o.state[OP_INDEX]) - int(o.state[TENURE_OP])) for o in others
                          if int(o.state[TENURE_KEY]) == h.key and int(o.state[TENURE_EPOCH]) > h.epoch),
                         None) or next(((r, r.calls) for r in self.remote if r.key == h.key and r.epoch > h.epoch),
                                       None)
        if successor is not None:
            h.successor = successor[0]
            if successor[1] >= self.successor_calls:
                return "successor"
        elif h.successor is not None:
            return "successor-ended"
        return self._blocked(w, h, others, now)

    @staticmethod
    def _others(w: WorkerHandle, workers: list[WorkerHandle]) -> list[WorkerHandle]:
        return [o for o in workers if o is not w and not o.killed and o.alive()]

    @staticmethod
    def _blocked(w: WorkerHandle, h: _Still, others: list[WorkerHandle], now: int, alone: bool = True) -> str | None:
        """`blocked` where the held call visibly blocks the store, else None (`alone`: and no other stop may)."""
        # the held call blocks the store (holds its lock): the others have started no call for a while, and two of
        # them are stuck inside a call they began after the stop. They may have gone on for a while after it (reads
        # that do not wait for the lock, a worker that woke up to write): what counts is that they stand still now.
        total = sum(int(o.state[OP_INDEX]) for o in others)
        if total != h.progress:
            h.progress, h.progress_ns = total, now
        if alone and any(o.paused_since is not None and o.state[IN_CALL] for o in others):
            h.progress_ns = now  # another worker stopped inside a call may be what blocks the store: watch afresh
            return None
        quiet = now - h.idle_ns
        # two stuck where two or more others run (one alone could be a call starved of CPU on a loaded machine)
        running = [o for o in others if o.paused_since is None]
        stuck = sum(1 for o in running
                    if o.state[IN_CALL] and max(int(o.state[SINCE_NS]), w.paused_since) <= quiet)
        if h.progress_ns <= quiet and stuck >= min(2, len(running)) and stuck:
            return "blocked"
        return None

    def pause(self, w: WorkerHandle, attempts: int = 0) -> None:
        """Hold a worker stopped (already stopped by `_strike`, or stop it now) for `pause_ms`."""
        if not attempts and not _is_stopped(w.pid):
            self._stop(w)
        w.paused_since = now_ns()
        self.paused.append(w)
        if self.blocked_pauses_end and w.state[IN_CALL]:  # the blocked rule may end it once its lease has expired
            w.watch = _Still(int(w.state[TENURE_EXPIRES_NS]) if int(w.state[TENURE_KEY]) >= 0 else w.paused_since,
                             self.idle_ns)
        self.log("pause", {"target": w.name, "pid": w.pid, "stopped": _is_stopped(w.pid),
                           "ms": self.sc.effective_pause_ms, "attempts": attempts, **call_state(w)})

    def resume(self, w: WorkerHandle, why: str | None = None) -> None:
        if w.paused_since is None:
            return
        k, n, code = int(w.state[STRIKE_STEP]), int(w.state[STRIKE_STEPS]), int(w.state[SURFACE])
        aimed = bool(int(w.state[AGAIN]) & AGAIN_IO)
        if w.hold is not None and w.hold.successor is not None and w.state[IN_CALL]:
            # a takeover got in while the struck call was held: the worker strikes that position again
            w.state[WITNESSED] = 1
            self.strikes["witnessed"] = self.strikes.get("witnessed", 0) + 1
            if aimed:
                self._tried(code, k, n)
        elif w.hold is not None and why == "blocked" and w.state[IN_CALL]:
            # the held call blocked the store: every worker's sweep skips that position of the surface's calls
            w.state[WITNESSED] = BLOCKED
            self._mark(code, AIMED if aimed else PLAIN, k, n)
            if aimed:
                self._tried(code, k, n)
        elif w.hold is not None and why == "cap" and w.hold.asked and w.state[IN_CALL] and aimed:
            # held to the cap while a taker asked at the expiry never got the run: the store kept it out the whole
            # time (a store that answers busy at once instead of waiting for its lock shows no worker stuck, so the
            # blocked rule cannot see it), so the gap is tried, though no sweep skips it
            self._tried(code, k, n)
        try:
            signal_worker(w.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        if w.hold is not None and self.strike_board is not None:
            self.strike_board[HELD_SLOT] = 0
        paused_ns = now_ns() - w.paused_since
        if w.state[IN_CALL]:
            op = int(w.state[OP_INDEX])
            w.pause_credit[op] = w.pause_credit.get(op, 0) + paused_ns
        w.paused_since = None
        hold, w.hold, w.watch = w.hold, None, None
        if w in self.paused:
            self.paused.remove(w)
        extra: dict[str, Any] = {"why": why} if why else {}
        if hold is not None:
            extra = {"successor": None if hold.successor is None else hold.successor.name, "why": why}
        self.log("resume", {"target": w.name, "pid": w.pid, "paused_ms": round(paused_ns / 1e6, 3), **extra})

    def _mark(self, code: int, row: int, k: int, n: int) -> None:
        i = board_index(code, row, k)
        if self.strike_board is not None and n and i is not None and i < len(self.strike_board):
            self.strike_board[i] = n

    def _tried(self, code: int, k: int, n: int) -> None:
        """An aimed hold at position `k` ended with a successor holding the run, or blocked the store: its gap of the
        surface's calls is tried (`soak.storm.strike.untried`)."""
        self._mark(code, TRIED, k, n)
        self.note_swept()

    def note_swept(self) -> None:
        """Log a `swept` event for each surface whose aimed sweep every worker shares is complete: a hold has tried
        every gap between its calls' exchanges (or calls that show no exchange nor wait: nothing to aim at). The
        quorum's `swept_<surface>` counts it, so a storm is not judged before a takeover was tried at every gap."""
        if self.strike_board is None:
            return
        for code, surface in enumerate(self.surfaces):
            if not surface or surface in self.swept:
                continue
            left = untried(self.strike_board, code)
            if left is not None and not left:
                head = int(self.strike_board[board_index(code, TRIED, 0)])
                self.swept.add(surface)
                self.log("swept", {"surface": surface, "gaps": len(gaps(abs(head) - 1, head > 0)),
                                   "exchanges": max(0, head - 1), "strikes_held": self.strikes["held"]})

    def resume_all(self, workers: list[WorkerHandle] = ()) -> None:
        """Continue every held worker, and any other worker found stopped (a strike not yet seen)."""
        for w in list(self.paused):
            self.resume(w)
        for w in workers:
            if not w.killed and w.alive() and _is_stopped(w.pid):
                self._cont(w)

    def kill(self, w: WorkerHandle, kind: str = "kill", **extra: Any) -> None:
        """SIGKILL a worker mid-operation; the call in flight stays unknown in its history."""
        was_paused = w.paused_since is not None
        try:
            # stop it first so the call state read below is exactly where the kill lands
            signal_worker(w.pid, signal.SIGSTOP)
            _wait_stopped(w.pid)
        except ProcessLookupError:
            pass
        st = call_state(w)
        try:
            signal_worker(w.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        w.killed = True
        if w.hold is not None and self.strike_board is not None:
            self.strike_board[HELD_SLOT] = 0
        if was_paused and w in self.paused:
            self.paused.remove(w)
        w.paused_since = None
        w.hold = None
        self.log(kind, {"target": w.name, "pid": w.pid, "paused": was_paused, **st, **extra})
