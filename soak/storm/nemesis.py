"""The nemesis: real pauses (SIGSTOP, then SIGCONT after more than the ttl) and crashes (SIGKILL).

Driven by the orchestrator's loop on a seeded schedule; every action is an event in
`history/nemesis.jsonl` naming the target process, its pid, whether it was inside a store call
(`in_call`, read from the worker's shared state *after* the stop took effect, so the flag is the
frozen truth) and the op index and surface in flight. Cooperative stalls are the workload's.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from soak.history import MUTATIONS, HistoryWriter, now_ns
from soak.storm.worker import IN_CALL, OP_INDEX, PHASE, RUNNING, SINCE_NS, SURFACE, SURFACES

__all__ = ["Nemesis", "WorkerHandle", "call_state"]

_AIM_S = 0.05  # how long an aimed strike watches for a worker inside a store call
_MUTATION_CODES = frozenset(SURFACES.index(f) for f in MUTATIONS)


@dataclass(eq=False)
class WorkerHandle:
    """The orchestrator's view of one worker incarnation."""

    name: str
    slot: int
    incarnation: int
    seed: int
    process: Any  # multiprocess Process
    state: Any  # shared array (see soak.storm.worker)
    paused_since: int | None = None  # monotonic ns of the SIGSTOP
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
        "surface": SURFACES[code] if in_call and 0 <= code < len(SURFACES) else None,
        "call_ms": round((now_ns() - int(st[SINCE_NS])) / 1e6, 3) if in_call else None,
    }


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

    def __init__(self, scenario: Any, rng: random.Random, writer: HistoryWriter, *, start_ns: int | None = None):
        self.sc = scenario
        self.rng = rng
        self.writer = writer
        start = start_ns if start_ns is not None else now_ns()
        self.next_pause = self._after(start, scenario.pause_interval_s)
        self.next_kill = self._after(start, scenario.kill_interval_s)
        self.pause_ns = scenario.effective_pause_ms * 1_000_000
        self.paused: list[WorkerHandle] = []

    def _after(self, t: int, mean_s: float) -> int | None:
        if mean_s <= 0:
            return None
        # jittered interval (0.5x .. 1.5x the mean): regular enough to act in a short storm
        return t + int(mean_s * self.rng.uniform(0.5, 1.5) * 1e9)

    def log(self, kind: str, value: dict[str, Any]) -> None:
        self.writer.event(kind, value)

    def _pick(self, workers: list[WorkerHandle], bias: float) -> WorkerHandle | None:
        """A random live worker; with probability `bias`, one caught inside a store call.

        Store calls last well under a millisecond on a fast store, so a blind signal rarely
        lands inside one: to aim, watch the shared call flags for up to `_AIM_S` and strike
        the first worker seen inside a mutation (where a pause between fence check and commit
        breaks a non-atomic fence), else inside any call. The recorded `in_call` is read again
        after the stop took effect, so it is the truth, not the aim.
        """
        candidates = [w for w in workers if w.running() and w.paused_since is None]
        if not candidates:
            return None
        if self.rng.random() < bias:
            deadline = time.monotonic() + _AIM_S
            while True:
                in_call = [w for w in candidates if w.state[IN_CALL]]
                mutating = [w for w in in_call if int(w.state[SURFACE]) in _MUTATION_CODES]
                if mutating:
                    return self.rng.choice(mutating)
                if time.monotonic() > deadline:
                    if in_call:
                        return self.rng.choice(in_call)
                    break
                time.sleep(0.0001)
        return self.rng.choice(candidates)

    def step(self, workers: list[WorkerHandle]) -> list[WorkerHandle]:
        """Act on the schedule; returns the workers killed (the orchestrator replaces them)."""
        now = now_ns()
        killed: list[WorkerHandle] = []
        for w in list(self.paused):
            if w.paused_since is not None and now - w.paused_since >= self.pause_ns:
                self.resume(w)
        if self.next_pause is not None and now >= self.next_pause:
            target = self._pick(workers, self.sc.pause_in_call_bias)
            if target is not None:
                self.pause(target)
            self.next_pause = self._after(now, self.sc.pause_interval_s)
        if self.next_kill is not None and now >= self.next_kill:
            target = self._pick(workers, self.sc.kill_in_call_bias)
            if target is not None:
                self.kill(target)
                killed.append(target)
            self.next_kill = self._after(now, self.sc.kill_interval_s)
        return killed

    def pause(self, w: WorkerHandle) -> None:
        try:
            os.kill(w.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        w.paused_since = now_ns()
        stopped = _wait_stopped(w.pid)
        self.paused.append(w)
        self.log("pause", {"target": w.name, "pid": w.pid, "stopped": stopped,
                           "ms": self.sc.effective_pause_ms, **call_state(w)})

    def resume(self, w: WorkerHandle) -> None:
        if w.paused_since is None:
            return
        try:
            os.kill(w.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        paused_ns = now_ns() - w.paused_since
        if w.state[IN_CALL]:
            op = int(w.state[OP_INDEX])
            w.pause_credit[op] = w.pause_credit.get(op, 0) + paused_ns
        w.paused_since = None
        if w in self.paused:
            self.paused.remove(w)
        self.log("resume", {"target": w.name, "pid": w.pid, "paused_ms": round(paused_ns / 1e6, 3)})

    def resume_all(self) -> None:
        for w in list(self.paused):
            self.resume(w)

    def kill(self, w: WorkerHandle, kind: str = "kill", **extra: Any) -> None:
        """SIGKILL a worker mid-operation; the call in flight stays unknown in its history."""
        was_paused = w.paused_since is not None
        try:
            # stop it first so the call state read below is exactly where the kill lands
            os.kill(w.pid, signal.SIGSTOP)
            _wait_stopped(w.pid)
        except ProcessLookupError:
            pass
        st = call_state(w)
        try:
            os.kill(w.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        w.killed = True
        if was_paused and w in self.paused:
            self.paused.remove(w)
        w.paused_since = None
        self.log(kind, {"target": w.name, "pid": w.pid, "paused": was_paused, **st, **extra})
