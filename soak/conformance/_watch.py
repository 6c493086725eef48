"""Every store call a conformance check makes goes through here: a busy retry, a timer and a board entry.

The board is one block of memory the watchdog can read while the checks run: in the child process that runs
them it is shared memory the parent made, so it survives the child. Its header counts calls and keeps the
slowest; each call in flight holds a slot naming the call and when it began (`time.monotonic_ns`, one clock
for every process on the machine). The parent reads the slots to find a call past the bound (and kills the
child), or the call a dead child died inside.

Time the harness itself holds a call up (the atomic-fence check pausing a victim inside its call, and every
takeover attempt blocked behind it) is kept on the board and not charged to the store.

The atomic-fence check numbers the points where a victim's call returns from a function with `sys.setprofile`.
This module's frames, `soak.retry`'s and the injected clock's are the harness's: `HARNESS_FILES` lets the
profiler skip them, and nothing here calls a Python function of another module while a store call is being
published, so the proxy adds no points and hides none of the store's.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import soak.clock
import soak.retry
from soak.retry import BUSY_ATTEMPTS, BusyCount, BusyExhausted, retry_busy
from soak.stores import retry_busy_boot
from soak.spi import JournalEntry, Lease, RunMeta, StoreBusyError

__all__ = ["Abandoned", "Board", "HARNESS_FILES", "KIND_CALL", "KIND_OPEN", "STUCK_AFTER", "StillBusy", "Watch",
           "WatchedStore"]

#: Files whose frames are the harness's own, never a point inside a store call. The injected clock's frames run
#: inside the store's clock read, which is itself point 0 (nothing of the store's runs between them).
HARNESS_FILES = frozenset({__file__, soak.retry.__file__, soak.clock.__file__})

SLOTS = 128
_HEAD = struct.Struct("<QQqqQQ")  # calls, slowest_ns, paused_total_ns, pause_since_ns, opens, spare
_SLOT = struct.Struct("<IIqq")  # state (0 free, 1 in flight), kind, start_ns, paused_total_ns at start
_NAME = 96
HEADER_SIZE = _HEAD.size + _NAME  # the slowest call's name follows the counters
SLOT_SIZE = _SLOT.size + _NAME
BOARD_SIZE = HEADER_SIZE + SLOTS * SLOT_SIZE

KIND_CALL, KIND_OPEN = 1, 2


#: After this many calls in a row were busy on every attempt, each call gets one attempt until one is answered
#: otherwise: a store stuck answering busy is found undecided in seconds, not in minutes.
STUCK_AFTER = 3


class StillBusy(BusyExhausted):
    """A call that answered busy again while the store was stuck answering busy (see `STUCK_AFTER`)."""

    def __init__(self, what: str, streak: int, last: StoreBusyError) -> None:
        Exception.__init__(self, f"{what} answered StoreBusyError again, after {streak} calls in a row were busy on every "
                           f"one of their {BUSY_ATTEMPTS} attempts (last: {last}); the store never got past its "
                           "contention, so nothing could be concluded from it")
        self.what, self.attempts, self.last = what, 1, last


class Abandoned(BaseException):
    """Raised at the next store call of checks the watchdog gave up on (a hung call in this process)."""


class Board:
    """The shared block: header counters, then `SLOTS` slots of calls in flight."""

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer
        self.view = memoryview(buffer).cast("B")
        if len(self.view) < BOARD_SIZE:
            raise ValueError(f"board needs {BOARD_SIZE} bytes, got {len(self.view)}")

    @staticmethod
    def size() -> int:
        return BOARD_SIZE

    # -- reading (the watchdog) -------------------------------------------------------------

    def totals(self) -> tuple[int, int, int, str]:
        """(calls, opens, slowest call ns, slowest call's name)."""
        calls, slowest, _, _, opens, _ = _HEAD.unpack_from(self.view, 0)
        return calls, opens, slowest, _text(self.view[_HEAD.size:HEADER_SIZE])

    def in_flight(self, now_ns: int | None = None) -> list[tuple[int, int, str, float]]:
        """Calls in flight: (slot, kind, name, seconds charged to the store so far)."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        _, _, paused_total, pause_since, _, _ = _HEAD.unpack_from(self.view, 0)
        out = []
        for i in range(SLOTS):
            base = HEADER_SIZE + i * SLOT_SIZE
            state, kind, start, paused_at_start = _SLOT.unpack_from(self.view, base)
            if state != 1:
                continue
            name = _text(self.view[base + _SLOT.size:base + SLOT_SIZE])
            out.append((i, kind, name, _charged(now, start, paused_at_start, paused_total, pause_since) / 1e9))
        return out


def _charged(now: int, start: int, paused_at_start: int, paused_total: int, pause_since: int) -> int:
    """Nanoseconds of a call's run charged to the store: the harness's pauses during it are not."""
    paused = max(0, paused_total - paused_at_start)
    if pause_since:
        paused += max(0, now - max(pause_since, start))
    return max(0, now - start - paused)


def _text(raw: memoryview) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")


def _encode(name: str) -> bytes:
    return name.encode("utf-8", "replace")[:_NAME - 1]


def _arg(value: Any) -> str:
    """A short, call-free description of one argument (no dataclass __repr__: that is a Python frame)."""
    if isinstance(value, str):
        return "'" + value[:40] + "'"
    if isinstance(value, Lease):
        return f"lease {value.run_id[:30]}/{value.owner[:12]}#{value.epoch}"
    if isinstance(value, RunMeta):
        return f"meta {value.run_id[:30]} {value.status}"
    if isinstance(value, JournalEntry):
        return f"seq {value.seq}"
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value)} bytes"
    if value is None:
        return "None"
    return type(value).__name__


class Watch:
    """The child's side of the board: publishes each store call, times it, retries busy answers.

    `where` names the check and sub-check in progress; `late` collects calls that returned after the bound
    (the runner reports them); `busy` counts busy answers retried."""

    def __init__(self, board: Board, bound_s: float, busy: BusyCount) -> None:
        self.board = board
        self.bound_ns = int(bound_s * 1e9)
        self.busy = busy
        self.where = ""
        self.late: list[tuple[str, str, float]] = []  # (where, call, seconds)
        self.abandoned = False
        self.busy_streak = 0  # calls in a row that were busy on every attempt
        self._lock = threading.Lock()
        self._free = list(range(SLOTS - 1, -1, -1))
        self._view = board.view

    # -- pauses the harness makes inside a call ---------------------------------------------

    def pause_begin(self) -> None:
        struct.pack_into("<q", self._view, 24, time.monotonic_ns())

    def pause_end(self) -> None:
        calls, slowest, paused_total, pause_since, opens, spare = _HEAD.unpack_from(self._view, 0)
        if pause_since:
            paused_total += time.monotonic_ns() - pause_since
        struct.pack_into("<qq", self._view, 16, paused_total, 0)

    # -- calls ------------------------------------------------------------------------------

    def call(self, fn: Callable[..., Any], name: str, *args: Any) -> Any:
        """`fn(*args)`, published as `name(args)` while in flight, its `StoreBusyError` answers retried."""
        label = name + "(" + ", ".join([_arg(a) for a in args]) + ")"
        if name == "close":  # says nothing about contention: retried, but no part of the busy streak
            return retry_busy(lambda: self._once(fn, label, args, KIND_CALL), label, count=self.busy)
        if self.busy_streak >= STUCK_AFTER:
            try:
                result = self._once(fn, label, args, KIND_CALL)
            except StoreBusyError as exc:
                self.busy.exhausted += 1
                raise StillBusy(label, self.busy_streak, exc) from exc
            except Exception:
                self.busy_streak = 0
                raise
        else:
            try:
                result = retry_busy(lambda: self._once(fn, label, args, KIND_CALL), label, count=self.busy)
            except BusyExhausted:
                self.busy_streak += 1
                raise
            except Exception:
                self.busy_streak = 0
                raise
        self.busy_streak = 0
        return result

    def open(self, fn: Callable[[], Any], label: str) -> Any:
        """A store factory call: published (a crash inside it is the store's); a factory that answers
        `StoreBusyError` is retried like any call (CONTRACT: busy is always retryable, at boot too)."""
        return retry_busy_boot(lambda: self._once(fn, label, (), KIND_OPEN), label, count=self.busy)

    def _once(self, fn: Callable[..., Any], label: str, args: tuple, kind: int) -> Any:
        if self.abandoned:
            raise Abandoned(label)
        where = self.where
        full = (where + ": " + label) if where else label
        slot = self._take(full, kind)
        start = time.monotonic_ns()
        struct.pack_into("<q", self._view, HEADER_SIZE + slot * SLOT_SIZE + 8, start)
        struct.pack_into("<I", self._view, HEADER_SIZE + slot * SLOT_SIZE, 1)
        try:
            result = fn(*args)
        except Exception:
            self._give(slot, start, full, kind, where, label)
            raise
        # A BaseException (SystemExit, KeyboardInterrupt) leaves the slot in flight: if it ends the process,
        # the watchdog names this call.
        self._give(slot, start, full, kind, where, label)
        return result

    def _take(self, full: str, kind: int) -> int:
        with self._lock:
            slot = self._free.pop() if self._free else SLOTS - 1
            _, _, paused_total, _, _, _ = _HEAD.unpack_from(self._view, 0)
        base = HEADER_SIZE + slot * SLOT_SIZE
        name = _encode(full)
        self._view[base + _SLOT.size:base + SLOT_SIZE] = name + bytes(_NAME - len(name))
        _SLOT.pack_into(self._view, base, 0, kind, 0, paused_total)
        return slot

    def _give(self, slot: int, start: int, full: str, kind: int, where: str, label: str) -> None:
        now = time.monotonic_ns()
        base = HEADER_SIZE + slot * SLOT_SIZE
        with self._lock:
            struct.pack_into("<I", self._view, base, 0)
            if slot not in self._free:
                self._free.append(slot)
            calls, slowest, paused_total, pause_since, opens, spare = _HEAD.unpack_from(self._view, 0)
            _, _, _, paused_at_start = _SLOT.unpack_from(self._view, base)
            took = _charged(now, start, paused_at_start, paused_total, pause_since)
            if kind == KIND_OPEN:
                opens += 1
            else:
                calls += 1
                if took > slowest:
                    slowest = took
                    name = _encode(full)
                    self._view[_HEAD.size:HEADER_SIZE] = name + bytes(_NAME - len(name))
            struct.pack_into("<QQ", self._view, 0, calls, slowest)
            struct.pack_into("<Q", self._view, 32, opens)
            if kind == KIND_CALL and took > self.bound_ns:
                self.late.append((where, label, took / 1e9))


class _WatchedBlobs:
    """`store.transcripts` through the watch."""

    def __init__(self, blobs: Any, watch: Watch) -> None:
        self._blobs = blobs
        self._watch = watch

    @property
    def fenced_writes(self) -> bool:
        return self._blobs.fenced_writes

    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None:
        return self._watch.call(self._blobs.put, "transcripts.put", ref, blob, lease)

    def get(self, ref: str) -> bytes | None:
        return self._watch.call(self._blobs.get, "transcripts.get", ref)

    def list(self, run_id: str) -> list[str]:
        return self._watch.call(self._blobs.list, "transcripts.list", run_id)

    def delete(self, ref: str, lease: Lease | None = None) -> None:
        return self._watch.call(self._blobs.delete, "transcripts.delete", ref, lease)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._blobs, name)


class WatchedStore:
    """A store object seen through the watch: the same members, each call published, timed and busy-retried."""

    def __init__(self, store: Any, watch: Watch) -> None:
        self._store = store
        self._watch = watch
        self.transcripts = _WatchedBlobs(store.transcripts, watch)

    @property
    def lease_ttl_ms(self) -> int:
        return self._store.lease_ttl_ms

    @property
    def fenced_writes(self) -> bool:
        return self._store.fenced_writes

    def acquire(self, run_id: str, owner: str) -> Lease:
        return self._watch.call(self._store.acquire, "acquire", run_id, owner)

    def renew(self, lease: Lease) -> Lease:
        return self._watch.call(self._store.renew, "renew", lease)

    def release(self, lease: Lease) -> None:
        return self._watch.call(self._store.release, "release", lease)

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        return self._watch.call(self._store.append, "append", run_id, entry, lease)

    def load(self, run_id: str) -> list[JournalEntry]:
        return self._watch.call(self._store.load, "load", run_id)

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        return self._watch.call(self._store.put_meta, "put_meta", meta, lease)

    def get_meta(self, run_id: str) -> RunMeta | None:
        return self._watch.call(self._store.get_meta, "get_meta", run_id)

    def list_runs(self) -> list[RunMeta]:
        return self._watch.call(self._store.list_runs, "list_runs")

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        return self._watch.call(self._store.delete, "delete", run_id, lease)

    def close(self) -> None:
        return self._watch.call(self._store.close, "close")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
