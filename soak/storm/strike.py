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
  Half the step strikes (`IO_SHARE`) are aimed at the call's *exchanges* with what lies outside the process
  instead: a C call that sends, receives, reads, writes or runs a statement (a socket, an `sqlite3` connection
  or cursor, a file, `os`, `select` and `fcntl` I/O), or a driver's Python-level statement call (PEP 249's
  `execute`, `fetchall`, `commit`, ...: psycopg's round trips run in libpq, out of the hook's sight), counted
  once however deep it goes. The stop lands just before the j-th exchange of the call or just as it returns; a
  call with no visible exchange is stopped just after its j-th wait of `SLOW_NS` or more instead. A fence check and a write that are not one
  unit are two exchanges, so the window between them opens at one of these few positions (a Redis call makes
  about 600 boundaries and 6 exchanges), and a position counted by exchange stays the same position however
  the driver's own steps around it vary from call to call. `io` is True while the armed strike is aimed so;
  its `position` is (`io_position(kind, j)`, the exchanges of the surface's calls).
  Positions where the held call blocked the store (it held the store's lock, so no successor could take over
  and no stale write can land from there) are skipped by every later sweep of every worker: the nemesis marks
  them on the storm's shared strike board. The n of a surface is learnt before its first strike: a worker
  counts its first call of each surface without stopping (`wants_count`).
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
import io
import os
import random
import signal
import sys
import time
from collections import deque
from typing import Any

from soak.workloads.context import MODES, Strike

__all__ = ["MODES", "REPEATS", "Strike", "StrikeTimer"]


_CLOCK_MONOTONIC = 1
_SIGEV_SIGNAL = 0
_DEFAULT_STEPS = 64  # boundaries assumed in a call before any struck call of its surface was counted
#: How many more times a step position where a takeover got in mid-call is struck, ahead of the sweep.
REPEATS = 2
#: The share of step strikes that sweep the boundaries next to the call's exchanges (`io` positions).
IO_SHARE = 0.5
#: A gap of this many ns between two boundaries of a counted call is a wait (a round trip, a lock).
SLOW_NS = 50_000
#: Step positions per surface and sweep on the storm's shared strike board (a position past it is never skipped).
BOARD_SPAN = 4096
#: The rows of the strike board per surface: positions that blocked the store (of the plain sweep, of the aimed
#: one), and the aimed positions tried storm-wide (`TRIED`: a hold there ended with a successor holding the run,
#: or blocked the store); slot 0 of the `TRIED` row holds the surface's exchanges (or waits) + 1, as a worker last
#: counted them (-(waits + 1) where the calls show no exchange, so -1: nothing to aim at).
PLAIN, AIMED, TRIED = 0, 1, 2
BOARD_ROWS = 3
#: The board's slot 0 (position 0 of the first surface's `PLAIN` row, never a position) holds the key + 1 of the run
#: whose call the nemesis holds struck, 0 while none is held: a worker granted that run is its taker.
HELD_SLOT = 0
#: The kinds of aimed position: just before the j-th exchange, just as it returns, just after the j-th wait.
BEFORE, AFTER, WAIT = 0, 1, 2
_KIND_SPAN = 512  # exchanges or waits of one call an aimed position can name


def io_position(kind: int, j: int) -> int:
    """The position number of an aimed strike (kind `BEFORE`, `AFTER` or `WAIT`, the j-th, from 1)."""
    return kind * _KIND_SPAN + j


def board_index(code: int, row: int, k: int) -> int | None:
    """Where the strike board keeps position `k` of surface `code`'s `row` (`PLAIN`, `AIMED` or `TRIED`; slot 0
    of `TRIED` is its header)."""
    lo = 0 if row == TRIED else 1
    return (code * BOARD_ROWS + row) * BOARD_SPAN + k if lo <= k < BOARD_SPAN else None


def gaps(count: int, exchanges: bool) -> list[tuple[int, ...]]:
    """The gaps an aimed sweep strikes in a call with `count` exchanges (or, `exchanges` False, `count` waits), each
    as its one or two positions: before the first exchange, then between the j-th and the next (just as the j-th
    returns, or just before the next: one point of the store's state either way), never after the last (the call
    has nothing left to change there); after each wait where no exchange is visible."""
    last = min(count, _KIND_SPAN - 1)
    if exchanges:
        return [(io_position(BEFORE, 1),)] + [(io_position(AFTER, j), io_position(BEFORE, j + 1))
                                               for j in range(1, last)]
    return [(io_position(WAIT, j),) for j in range(1, last + 1)]


def untried(board: Any, code: int) -> list[tuple[int, ...]] | None:
    """The gaps of surface `code`'s aimed sweep no hold has tried yet storm-wide (`TRIED` row), or None while no
    worker has counted the surface's calls. A gap is tried once a hold at either of its positions ended with a
    successor holding the run or blocked the store (at whatever count of exchanges: a call that waited for a lock
    makes one more, the gaps of the fence and the write stay where they are)."""
    head = board_index(code, TRIED, 0)
    if board is None or head + BOARD_SPAN > len(board) or not board[head]:
        return None
    value = int(board[head])
    return [g for g in gaps(abs(value) - 1, value > 0) if not any(board[head + k] for k in g)]


def publish_count(board: Any, code: int, exchanges: int, waits: int) -> None:
    """Write the `TRIED` row's header of surface `code`: its calls' exchanges + 1, or, with none, -(waits + 1)."""
    head = board_index(code, TRIED, 0)
    if board is not None and head + BOARD_SPAN <= len(board):
        board[head] = exchanges + 1 if exchanges else -(waits + 1)
_IO_NAMES = frozenset({
    "send", "sendall", "sendto", "sendmsg", "recv", "recv_into", "recvfrom", "recvfrom_into", "recvmsg",
    "read", "readinto", "readline", "write", "pread", "pwrite", "readv", "writev", "fsync", "fdatasync",
    "execute", "executemany", "executescript", "commit", "rollback", "fetchone", "fetchmany", "fetchall",
    "select", "poll", "epoll", "flock", "lockf", "open", "replace", "rename", "unlink", "remove", "link"})
#: Python-level calls of a database driver that each run one statement or end a transaction (PEP 249's names): a
#: driver whose round trips run in compiled code (psycopg's libpq) shows no C-level exchange, but these.
_STATEMENT_CALLS = frozenset({"execute", "executemany", "executescript", "commit", "rollback", "fetchone",
                              "fetchmany", "fetchall", "callproc"})
_MEMORY_IO = (io.BytesIO, io.StringIO)
_IO_MODULES = frozenset({"posix", "select", "fcntl", "_socket", "socket", "io", "_io", "builtins"})


def _close(a: int, b: int) -> bool:
    """Two counts of one surface's boundaries are of the same path through the store (a call's count varies by a
    step or two with what it finds)."""
    return abs(a - b) <= max(2, min(a, b) // 50)


def _io_types() -> tuple[type, ...]:
    import socket
    import sqlite3
    return socket.socket, sqlite3.Connection, sqlite3.Cursor, io.IOBase


def _exchange(arg: object, io_types: tuple[type, ...]) -> bool:
    """Whether the C function a `c_call` event names exchanges with something outside the process."""
    name = getattr(arg, "__name__", "")
    if name not in _IO_NAMES:
        return False
    owner = getattr(arg, "__self__", None)
    if isinstance(owner, _MEMORY_IO):  # a buffer in memory (a driver's reply parser): no exchange
        return False
    if isinstance(owner, io_types):
        return True
    module = getattr(owner, "__name__", None) if type(owner).__name__ == "module" else None
    return module in _IO_MODULES


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
    """One worker process's strikes (create it in the main thread: it owns `SIGALRM`).

    `board` is the storm's shared strike board (`BOARD_SPAN` ints per surface, `codes` maps a surface to its row):
    the nemesis writes there the n of the calls whose held strike at a position blocked the store, so every worker
    and every later incarnation skips it; without one, a timer remembers only its own."""

    def __init__(self, board: Any = None, codes: dict[str, int] | None = None) -> None:
        self._board = board
        self._codes = codes or {}
        self._lib = _libc()
        self._timer = ctypes.c_void_p()
        self._stage = 0  # kernel mode: 1 while the lead alarm is pending
        self._delay_ns = 0
        self._steps: dict[str, deque[int]] = {}  # surface -> boundaries counted in recent struck calls
        self._counting: tuple[str, int] | None = None  # step mode: (surface, stop at this boundary)
        self._seen = 0
        self._last_ns = 0
        self._exchanges = self._waits = 0  # in the call being counted
        self._open: list[tuple[Any, int]] = []  # the driver's statement calls in progress (frame, exchange j)
        self._after_exchange = False  # the last boundary was the start of an exchange
        self._attempt: Any = None  # the C function of the exchange that started at the last boundary
        self._aim: tuple[int, int] | None = None  # an aimed strike: (kind, j)
        self._stop_next = False  # an AFTER aim: stop at the next boundary (the exchange's return)
        self._learning = False  # the call being counted is counted before the surface's first strike
        self._io_types = _io_types()
        # surface -> (exchanges, waits) of the latest counted call whose n was the surface's median
        self._io: dict[str, tuple[int, int]] = {}
        self._provisional: dict[str, tuple[int, int, int]] = {}  # surface -> (n, exchanges, waits) before a strike
        self._io_done: dict[str, dict[int, int]] = {}  # surface -> {aimed position struck in this sweep: its count}
        # (surface, aimed) -> {position that blocked the store: the n (or count of exchanges) it had}
        self._blocked: dict[tuple[str, bool], dict[int, int]] = {}
        self._cycles: dict[str, tuple[int, list[int]]] = {}  # surface -> (n, the boundaries left in this cycle)
        self.position = (0, 0)  # (k, n) of the step-mode strike armed last; (0, 0) for kernel mode
        self.again = False  # the strike armed last repeats a position where a takeover got in mid-call
        self.io = False  # the strike armed last is of the sweep over the boundaries next to exchanges
        # surface -> [k, n, strikes left, aimed] of positions where a takeover got in mid-call, oldest first
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
        now = time.perf_counter_ns()
        waited = now - self._last_ns >= SLOW_NS and self._seen > 1 and not self._after_exchange
        self._last_ns = now
        self._after_exchange = False
        attempt, self._attempt = self._attempt, None
        if event == "c_exception" and attempt is not None and arg is attempt:
            # the exchange just counted raised (a lock attempt answered busy, to be tried again): it changed
            # nothing, so it is not counted, and the j-th exchange stays the same step of the call however often
            # the store had to retry before it
            self._exchanges -= 1
            self._stop_next = False  # an AFTER aim waits for the attempt that returns
            if self._counting is not None and self._seen == self._counting[1]:
                self._stop()
            return
        if self._stop_next:  # the exchange an AFTER aim names has just returned
            self._stop_next = False
            self._stop()
            return
        aim = self._aim
        if waited:  # a wait between the last boundary and this one, not inside a visible exchange
            self._waits += 1
            if aim is not None and aim[0] == WAIT and self._waits == aim[1]:
                self._stop()
                return
        x = self._open
        if event == "return" and x and x[-1][0] is frame:  # a driver's statement call returns
            j = x.pop()[1]
            if not x and aim is not None and aim == (AFTER, j):
                self._stop()
                return
        elif not x and (event == "c_call" and _exchange(arg, self._io_types)
                        or event == "call" and frame.f_code.co_name in _STATEMENT_CALLS):
            self._exchanges += 1
            j = self._exchanges
            if event == "call":  # counted once, however deep the driver's own calls go, until it returns
                x.append((frame, j))
            else:
                self._after_exchange = True
                self._attempt = arg
            if aim is not None and aim[0] != WAIT and j == aim[1]:
                if aim[0] == BEFORE:
                    self._aim = None  # one stop: the attempt may fail and be counted again
                    self._stop()
                    self._after_exchange = event == "c_call"
                    return
                self._stop_next = event == "c_call"
        elif x and event == "call" and frame.f_code.co_name in _STATEMENT_CALLS:
            x.append((frame, 0))  # a statement call inside another: part of the same exchange
        if self._counting is not None and self._seen == self._counting[1]:
            self._stop()

    def _stop(self) -> None:
        os.kill(os.getpid(), signal.SIGSTOP)
        self._last_ns = time.perf_counter_ns()  # the hold is no wait of the store's

    # -- both -----------------------------------------------------------------------------------

    def arm(self, strike: Strike) -> None:
        """Arm `strike` for the store call that starts now."""
        if not self.available:
            return
        surface, mode, lead_ns, delay_ns, u = strike
        if mode == "step":
            k, n, self.again = self.plan_step(surface, u, io=True)
            self.position = (k, n)
            if self.io:
                self.count_to(surface, 0)
                self._aim = divmod(k, _KIND_SPAN)
            else:
                self.count_to(surface, k)
        else:
            self.position, self.again, self.io = (0, 0), False, False
            self._delay_ns, self._stage = max(1, delay_ns), 1
            signal.setitimer(signal.ITIMER_REAL, max(1, lead_ns) / 1e9)

    def count_to(self, surface: str, k: int) -> None:
        """Step mode: stop this process at the `k`-th boundary of the code that runs from now on (`stop_counting`
        ends it). A wire server counts its own handling of a request with it (`soak.stores.wire_server`)."""
        self._seen = self._exchanges = self._waits = 0
        self._open = []
        self._after_exchange = self._stop_next = False
        self._attempt = None
        self._aim = None
        self._learning = False
        self._counting = (surface, k)
        self._last_ns = time.perf_counter_ns()
        sys.setprofile(self._on_event)

    def learn(self, surface: str) -> None:
        """Count the call that starts now without stopping it (see `wants_count`; `disarm` ends it)."""
        self.count_to(surface, 0)
        self._learning = True

    def stop_counting(self) -> int:
        """End a `count_to`; the boundaries counted."""
        sys.setprofile(None)
        self._counting = None
        self._aim = None
        self._stop_next = False
        return self._seen

    def wants_count(self, surface: str) -> bool:
        """No call of `surface` was counted yet: count the next one (`count_to(surface, 0)` never stops, `disarm`
        ends it), so the first strike of the surface sweeps real boundaries, not an assumed number. Such a count is
        provisional: a surface's calls take different paths (a probe's, a tenure's own write), and once a struck call
        was counted, only struck calls (the kind the workload strikes) set the sweep."""
        return (self.available and self._counting is None and surface not in self._steps
                and surface not in self._provisional)

    def note_steps(self, surface: str, seen: int, exchanges: int | None = None, waits: int | None = None,
                   provisional: bool = False) -> None:
        """Record the boundaries a counted call of `surface` made (the n of the next sweep is their median) and its
        exchanges and waits (by default those of the call just counted here); `provisional`: of a call counted
        before the surface's first strike (`wants_count`)."""
        if provisional:
            self._provisional[surface] = (seen, self._exchanges if exchanges is None else exchanges,
                                          self._waits if waits is None else waits)
            self._publish(surface, *self._provisional[surface][1:])
            return
        recent = self._steps.get(surface)
        if recent is None:
            recent = self._steps[surface] = deque(maxlen=9)
        recent.append(seen)
        counts = sorted(recent)
        if seen == counts[len(counts) // 2]:
            self._io[surface] = (self._exchanges if exchanges is None else exchanges,
                                 self._waits if waits is None else waits)
            self._publish(surface, *self._io[surface])

    def _publish(self, surface: str, exchanges: int, waits: int) -> None:
        """Tell the storm how many exchanges (or waits) the surface's calls make (the `TRIED` row's header)."""
        if self._board is not None and surface in self._codes:
            publish_count(self._board, self._codes[surface], exchanges, waits)

    def untried_gaps(self, surface: str) -> list[tuple[int, ...]]:
        """The gaps of the surface's aimed sweep no hold has tried yet storm-wide (none without a board)."""
        if self._board is None or surface not in self._codes:
            return []
        return untried(self._board, self._codes[surface]) or []

    def note_witnessed(self, surface: str) -> None:
        """The nemesis held the step strike that just ended and a successor took its run over meanwhile: strike its
        position again, `REPEATS` times ahead of the sweep (unless it already was such a repeat)."""
        if not self.again:
            k, n = self.position
            self._repeat.setdefault(surface, []).append([k, n, REPEATS, int(self.io)])

    def note_blocked(self, surface: str) -> None:
        """The nemesis let the step strike that just ended go because the held call blocked the store (it held the
        store's lock: no successor could take over, so no stale write can land from there): the sweeps skip its
        position from now on, while the surface's calls keep about the same n (the nemesis also marks it on the
        shared board, for every worker)."""
        k, n = self.position
        if k:
            self._blocked.setdefault((surface, self.io), {})[k] = n

    def _skip(self, surface: str, io: bool, k: int, n: int) -> bool:
        """Whether position `k` of a sweep over `n` boundaries (or of an aimed sweep over `n` exchanges) blocked the
        store before."""
        was = self._blocked.get((surface, io), {}).get(k)
        if was is None and self._board is not None and surface in self._codes:
            i = board_index(self._codes[surface], int(io), k)
            was = (int(self._board[i]) or None) if i is not None and i < len(self._board) else None
        return was is not None and (was == n if io else _close(was, n))

    def _forget_blocked(self, surface: str, io: bool) -> None:
        self._blocked.pop((surface, io), None)
        if self._board is not None and surface in self._codes:
            row = board_index(self._codes[surface], int(io), 1) - 1
            for i in range(row, min(row + BOARD_SPAN, len(self._board))):
                self._board[i] = 0

    def _aimed(self, surface: str, seed: int, n: int) -> int | None:
        """An aimed position of the surface's calls not struck in this sweep and not known to block, or None.

        The sweep goes gap by gap: before the first exchange, then between the j-th and the next (just as the j-th
        returns, or just before the next: one point of the store's state either way), never after the last (the
        call has nothing left to change there). A gap is skipped once either of its positions blocked the store,
        so a transaction's gaps are learnt in half the strikes."""
        exchanges, waits = self._io.get(surface, self._provisional.get(surface, (0, 0, 0))[1:])
        count = exchanges or waits
        if not count:
            return None
        every = gaps(count, bool(exchanges))
        rnd = random.Random(seed)
        fresh = [g for g in self.untried_gaps(surface) if g in every]
        if fresh:  # the storm's sweep first: a gap no hold has tried yet, whoever strikes it
            # the gap before the first exchange last: nothing of the call has reached the store there, so a takeover
            # there meets a call that has not checked anything yet (the stale probes' case), never a split one
            gap = rnd.choice([g for g in fresh if g != every[0]] or fresh)
            return rnd.choice(gap)
        open_ = [g for g in every if not any(self._skip(surface, True, k, count) for k in g)]
        if not open_:
            self._forget_blocked(surface, True)
            open_ = every
        done = self._io_done.setdefault(surface, {})
        left = [g for g in open_ if done.get(g[0]) != count]
        if not left:
            done.clear()
            left = open_
        gap = rnd.choice(left)
        done[gap[0]] = count
        return rnd.choice(gap)

    def plan_step(self, surface: str, u: float, io: bool = False) -> tuple[int, int, bool]:
        """The next boundary of the surface's sweep, the n it sweeps (`u`, from the seeded plan, shuffles a new
        cycle), and whether it repeats a position where a takeover got in mid-call (those come first). With `io`
        (the boundaries are counted in this process), `IO_SHARE` of the plans are aimed at the call's exchanges
        instead (`self.io` says so; the k is then an `io_position`, the n the surface's exchanges or waits). Both
        sweeps skip positions that blocked the store."""
        first = self._provisional.get(surface, (_DEFAULT_STEPS, 0, 0))
        counts = sorted(self._steps.get(surface, ())) or [first[0]]
        n = max(1, counts[len(counts) // 2])
        self.io = False
        exchanges, waits = self._io.get(surface, first[1:])
        aimed_n = exchanges or waits
        repeat = [r for r in self._repeat.get(surface, ()) if r[1] == (aimed_n if r[3] else n) and r[2] > 0]
        self._repeat[surface] = repeat
        if repeat and (io or not repeat[0][3]):
            repeat[0][2] -= 1
            k, rn, self.io = repeat[0][0], repeat[0][1], bool(repeat[0][3])
            if not repeat[0][2]:
                repeat.pop(0)
            return k, rn, True
        seed = int(u * 2**32)
        # every step strike is aimed while the storm's sweep of the surface's gaps is not complete, then IO_SHARE
        share = 1.0 if io and aimed_n and self.untried_gaps(surface) else IO_SHARE
        if io and aimed_n and random.Random(seed ^ 0x5EED).random() < share:
            k = self._aimed(surface, seed, n)
            if k is not None:
                self.io = True
                return k, aimed_n, False
        for _ in range(2):
            cycle_n, left = self._cycles.get(surface, (0, []))
            if cycle_n != n or not left:
                left = list(range(1, n + 1))
                random.Random(seed).shuffle(left)
                self._cycles[surface] = (n, left)
            while left:
                k = left.pop()
                if not self._skip(surface, False, k, n):
                    return k, n, False
            self._forget_blocked(surface, False)  # every position blocked: the store changed, learn them again
        return 1, n, False

    def disarm(self, witnessed: bool = False, blocked: bool = False, counted: bool = True) -> None:
        """End the strike of the call that just returned (a stop not yet landed never will). `witnessed`: the
        nemesis held the call and a successor took its run over meanwhile; a step position is then struck again.
        `blocked`: the nemesis let it go because it blocked the store; the sweeps skip its position. `counted`: the
        call's boundaries count for the sweep (it returned: a refused call's path is not the one that writes)."""
        if not self.available:
            return
        if self._counting is not None:
            surface = self._counting[0]
            if witnessed:
                self.note_witnessed(surface)
            elif blocked and self.position[0]:
                self.note_blocked(surface)
            learning = self._learning
            seen = self.stop_counting()
            if counted:
                self.note_steps(surface, seen, provisional=learning)
            return
        if self._stage:  # the lead alarm has not fired yet
            self._stage = 0
            signal.setitimer(signal.ITIMER_REAL, 0)
        self._set(0)

