"""Strikes: a worker stops itself (SIGSTOP) at a random point inside one store call.

The nemesis cannot aim a signal inside a store call that lasts tens of microseconds: it polls
shared memory every few milliseconds. So a worker about to make a call the workload wants
struck arms a stop of its own, in one of two modes:

- `step`: the stop lands between two steps of the store's own code. While the call runs, a
  profile hook (`sys.setprofile`) counts the calls and returns it makes, C-level ones included
  (a statement, a commit, a lock, a socket send); at the k-th the worker stops itself. k sweeps
  every step of the surface's calls, as conformance does: n is the median number of boundaries
  this surface's recent struck calls made, and k walks 1..n in an order shuffled from the
  storm's seed (a new cycle when n changes), so every boundary is struck once per cycle however
  long a step waits for a lock or a reply: a store that checks its fence in one step and writes
  in the next leaves its window open at one of them. `position` is the (k, n) of the strike
  armed last (the nemesis records them in its `pause` event). A position where a successor took
  the run over while the call was held there (the nemesis says so as it lets the call go: the
  takeover got in mid-call, where a window can be) is struck again, ahead of the sweep, the next
  times the surface is struck (`REPEATS` times, while n stays the same); `again` is True while the
  armed strike is such a repeat. Positions where the held call blocked the store are not repeated.
- `kernel`: the stop lands at a random instant. An alarm (`SIGALRM`) after a random lead starts,
  from its Python handler (so after the wait that often opens a call has ended), a POSIX timer
  (`timer_create`, `SIGEV_SIGNAL`, `SIGSTOP`) with a random delay: the kernel stops the process
  wherever it then is, inside C code or a system call too. This reaches stores written in C.

Neither knows anything about the store. The nemesis finds the stopped worker, reads the frozen
call state and holds it past its lease while a successor takes the run over (see
`soak.storm.nemesis`). Linux only (`timer_create` in glibc); elsewhere `available` is False and
no strike is armed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import random
import signal
import sys
from collections import deque

from soak.workloads.context import MODES, Strike

__all__ = ["MODES", "REPEATS", "Strike", "StrikeTimer"]


_CLOCK_MONOTONIC = 1
_SIGEV_SIGNAL = 0
_DEFAULT_STEPS = 64  # boundaries assumed in a call before any struck call of its surface was counted
#: How many more times a step position where a takeover got in mid-call is struck, ahead of the sweep.
REPEATS = 2


class _SigEvent(ctypes.Structure):
    # struct sigevent on Linux: sigval (8), signo, notify, then a 48-byte union (64 bytes in all)
    _fields_ = [("sigev_value", ctypes.c_void_p), ("sigev_signo", ctypes.c_int), ("sigev_notify", ctypes.c_int),
                ("_pad", ctypes.c_int * 12)]


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    for name in (None, ctypes.util.find_library("rt")):
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            lib.timer_create  # noqa: B018 - probe the symbol
            return lib
        except (OSError, AttributeError):
            continue
    return None


class StrikeTimer:
    """One worker process's strikes (create it in the main thread: it owns `SIGALRM`)."""

    def __init__(self) -> None:
        self._lib = _libc()
        self._timer = ctypes.c_void_p()
        self._stage = 0  # kernel mode: 1 while the lead alarm is pending
        self._delay_ns = 0
        self._steps: dict[str, deque[int]] = {}  # surface -> boundaries counted in recent struck calls
        self._counting: tuple[str, int] | None = None  # step mode: (surface, stop at this boundary)
        self._seen = 0
        self._cycles: dict[str, tuple[int, list[int]]] = {}  # surface -> (n, the boundaries left in this cycle)
        self.position = (0, 0)  # (k, n) of the step-mode strike armed last; (0, 0) for kernel mode
        self.again = False  # the strike armed last repeats a position where a takeover got in mid-call
        # surface -> [k, n, strikes left] of positions where a takeover got in mid-call, oldest first
        self._repeat: dict[str, list[list[int]]] = {}
        self.available = False
        if self._lib is None:
            return
        ev = _SigEvent()
        ev.sigev_notify = _SIGEV_SIGNAL
        ev.sigev_signo = int(signal.SIGSTOP)
        if self._lib.timer_create(_CLOCK_MONOTONIC, ctypes.byref(ev), ctypes.byref(self._timer)) == 0:
            signal.signal(signal.SIGALRM, self._on_alarm)
            self.available = True

    # -- kernel mode --------------------------------------------------------------------------

    def _on_alarm(self, signum: int, frame: object) -> None:
        if self._stage == 1:
            self._stage = 0
            self._set(self._delay_ns)

    def _set(self, delay_ns: int) -> None:
        spec = _ITimerSpec()
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(max(0, delay_ns), 1_000_000_000)
        self._lib.timer_settime(self._timer, 0, ctypes.byref(spec), None)

    # -- step mode ----------------------------------------------------------------------------

    def _on_event(self, frame, event: str, arg) -> None:
        self._seen += 1
        if self._counting is not None and self._seen == self._counting[1]:
            os.kill(os.getpid(), signal.SIGSTOP)

    # -- both -----------------------------------------------------------------------------------

    def arm(self, strike: Strike) -> None:
        """Arm `strike` for the store call that starts now."""
        if not self.available:
            return
        surface, mode, lead_ns, delay_ns, u = strike
        if mode == "step":
            k, n, self.again = self.plan_step(surface, u)
            self.position = (k, n)
            self.count_to(surface, k)
        else:
            self.position, self.again = (0, 0), False
            self._delay_ns, self._stage = max(1, delay_ns), 1
            signal.setitimer(signal.ITIMER_REAL, max(1, lead_ns) / 1e9)

    def count_to(self, surface: str, k: int) -> None:
        """Step mode: stop this process at the `k`-th boundary of the code that runs from now on (`stop_counting`
        ends it). A wire server counts its own handling of a request with it (`soak.stores.wire_server`)."""
        self._seen = 0
        self._counting = (surface, k)
        sys.setprofile(self._on_event)

    def stop_counting(self) -> int:
        """End a `count_to`; the boundaries counted."""
        sys.setprofile(None)
        self._counting = None
        return self._seen

    def note_steps(self, surface: str, seen: int) -> None:
        """Record the boundaries a struck call of `surface` made (the n of the next sweep is their median)."""
        recent = self._steps.get(surface)
        if recent is None:
            recent = self._steps[surface] = deque(maxlen=9)
        recent.append(seen)

    def note_witnessed(self, surface: str) -> None:
        """The nemesis held the step strike that just ended and a successor took its run over meanwhile: strike its
        position again, `REPEATS` times ahead of the sweep (unless it already was such a repeat)."""
        if not self.again:
            k, n = self.position
            self._repeat.setdefault(surface, []).append([k, n, REPEATS])

    def plan_step(self, surface: str, u: float) -> tuple[int, int, bool]:
        """The next boundary of the surface's sweep, the n it sweeps (`u`, from the seeded plan, shuffles a new
        cycle), and whether it repeats a position where a takeover got in mid-call (those come first)."""
        counts = sorted(self._steps.get(surface, ())) or [_DEFAULT_STEPS]
        n = max(1, counts[len(counts) // 2])
        repeat = [r for r in self._repeat.get(surface, ()) if r[1] == n and r[2] > 0]
        self._repeat[surface] = repeat
        if repeat:
            repeat[0][2] -= 1
            k = repeat[0][0]
            if not repeat[0][2]:
                repeat.pop(0)
            return k, n, True
        cycle_n, left = self._cycles.get(surface, (0, []))
        if cycle_n != n or not left:
            left = list(range(1, n + 1))
            random.Random(int(u * 2**32)).shuffle(left)
            self._cycles[surface] = (n, left)
        return left.pop(), n, False

    def disarm(self, witnessed: bool = False) -> None:
        """End the strike of the call that just returned (a stop not yet landed never will). `witnessed`: the
        nemesis held the call and a successor took its run over meanwhile; a step position is then struck again."""
        if not self.available:
            return
        if self._counting is not None:
            surface = self._counting[0]
            if witnessed:
                self.note_witnessed(surface)
            self.note_steps(surface, self.stop_counting())
            return
        if self._stage:  # the lead alarm has not fired yet
            self._stage = 0
            signal.setitimer(signal.ITIMER_REAL, 0)
        self._set(0)

