"""A fenced run store over one JSON-lines file, written from the soak contract alone.

Every mutation is one JSON line appended to `<location>/log.jsonl` while the process holds an
exclusive `flock` on that file; the fence check (reading the current tenure) happens under the
same lock, so check and commit are one unit across processes (`atomic-fence`). Each store
object keeps the state the log describes in memory and, under the lock, first catches up on
the lines other processes appended since it last looked. A line is the commit: a writer killed
mid-line leaves a torn tail without a newline, which the next writer cuts off before it writes.

Leases are judged by this store's clock (`time.time` unless a `clock=` callable is passed, as
tests do). The log is never compacted: this is a worked example, not a production store.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from soak.spi import (
    RUN_STATUSES,
    JournalEntry,
    JournalOrderError,
    Lease,
    LeaseHeldError,
    RunMeta,
    StoreBusyError,
    ref_run,
)

__all__ = ["KvFenceStore", "open_store"]

LOG_NAME = "log.jsonl"


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


@dataclass
class _Tenure:
    owner: str
    epoch: int
    expires: float
    released: bool = False


@dataclass
class _State:
    """What the log says so far: replaying a line is the only way state changes."""

    journals: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    meta: dict[str, tuple[str, int, bytes]] = field(default_factory=dict)
    tenures: dict[str, _Tenure] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)

    def apply(self, rec: dict[str, Any]) -> None:
        op, run = rec["op"], rec.get("run", "")
        if op == "acquire":
            self.tenures[run] = _Tenure(rec["owner"], rec["epoch"], rec["expires"])
        elif op == "renew":
            self.tenures[run].expires = rec["expires"]
        elif op == "release":
            self.tenures[run].released = True
        elif op == "append":
            self.journals.setdefault(run, []).append((rec["seq"], _unb64(rec["payload"])))
        elif op == "meta":
            self.meta[run] = (rec["status"], rec["segments"], _unb64(rec["payload"]))
        elif op == "delete":
            # The tenure (and so the epoch high-water mark) survives a delete.
            self.journals.pop(run, None)
            self.meta.pop(run, None)
        elif op == "blob_put":
            self.blobs[rec["ref"]] = _unb64(rec["blob"])
        elif op == "blob_delete":
            self.blobs.pop(rec["ref"], None)
        else:
            raise ValueError(f"unknown log record {op!r}")


class _Blobs:
    """The transcript blobs of the same log (one fencing domain)."""

    fenced_writes = True

    def __init__(self, store: KvFenceStore) -> None:
        self._store = store

    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None:
        self._store._mutate(ref_run(ref), lease, {"op": "blob_put", "ref": ref, "blob": _b64(blob)})

    def get(self, ref: str) -> bytes | None:
        with self._store._locked(exclusive=False) as state:
            return state.blobs.get(ref)

    def list(self, run_id: str) -> list[str]:
        with self._store._locked(exclusive=False) as state:
            return sorted(r for r in state.blobs if ref_run(r) == run_id)

    def delete(self, ref: str, lease: Lease | None = None) -> None:
        self._store._mutate(ref_run(ref), lease, {"op": "blob_delete", "ref": ref})


class KvFenceStore:
    """One fencing domain over `<location>/log.jsonl`, safe across processes and threads."""

    fenced_writes = True
    #: `clock=` from the factory judges expiry (CONTRACT: the injectable clock capability)
    injectable_clock = True

    def __init__(self, location: str, lease_ttl_ms: int, *, lock_timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.lease_ttl_ms = int(lease_ttl_ms)
        self.path = os.path.join(location, LOG_NAME)
        self._clock = clock
        self._lock_timeout_s = lock_timeout_s
        self._mutex = threading.RLock()  # flock does not exclude threads sharing one descriptor
        # O_CREAT without O_EXCL: any number of processes may open a fresh location at once.
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._state = _State()
        self._offset = 0  # bytes of the log already applied to _state
        self.transcripts = _Blobs(self)

    # -- the log -----------------------------------------------------------------------------

    def _flock(self, fd: int, mode: int) -> None:
        """Take the file lock, waiting at most lock_timeout_s (then: busy, nothing written)."""
        deadline = time.monotonic() + self._lock_timeout_s
        delay = 0.0005
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
            if time.monotonic() >= deadline:
                raise StoreBusyError(f"{self.path} stayed locked for {self._lock_timeout_s} s")
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.02)

    def _catch_up(self, fd: int, *, repair: bool) -> None:
        """Apply complete lines past our offset; with `repair`, cut a torn tail a dead writer left."""
        size = os.fstat(fd).st_size
        if size < self._offset:
            raise RuntimeError(f"{self.path} shrank below what this process already read")
        if size == self._offset:
            return
        data = os.pread(fd, size - self._offset, self._offset)
        end = data.rfind(b"\n") + 1  # complete lines only
        for line in data[:end].splitlines():
            self._state.apply(json.loads(line))
        self._offset += end
        if repair and end < len(data):
            os.ftruncate(fd, self._offset)

    @contextmanager
    def _locked(self, *, exclusive: bool) -> Iterator[_State]:
        with self._mutex:
            if self._fd is None:
                raise ValueError("store is closed")
            fd = self._fd
            self._flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                self._catch_up(fd, repair=exclusive)
                yield self._state
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _commit(self, rec: dict[str, Any]) -> None:
        """Append one record (call with the exclusive lock held); the written line is the commit."""
        line = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
        written = os.write(self._fd, line)
        if written != len(line):  # a short write is a torn tail: cut it, nothing was committed
            os.ftruncate(self._fd, self._offset)
            raise OSError(f"short write to {self.path}")
        self._offset += len(line)
        self._state.apply(rec)

    # -- the fence ---------------------------------------------------------------------------

    @staticmethod
    def _holder(run_id: str, t: _Tenure | None, now: float) -> Lease | None:
        if t is None or t.released or now >= t.expires:
            return None
        return Lease(run_id, t.owner, t.epoch)

    def _check(self, state: _State, run_id: str, lease: Lease, *, allow_expired: bool = False) -> None:
        now = self._clock()
        t = state.tenures.get(run_id)
        if lease.run_id != run_id:
            raise LeaseHeldError(run_id, self._holder(run_id, t, now),
                                 f"lease for run {lease.run_id!r} used on run {run_id!r}")
        if t is None or t.released or (t.owner, t.epoch) != (lease.owner, lease.epoch):
            raise LeaseHeldError(run_id, self._holder(run_id, t, now), f"lease {lease} is not the current tenure")
        if not allow_expired and now >= t.expires:
            raise LeaseHeldError(run_id, None, f"lease {lease} has expired")

    def _mutate(self, run_id: str, lease: Lease | None, rec: dict[str, Any],
                guard: Callable[[_State], None] | None = None) -> None:
        with self._locked(exclusive=True) as state:
            if lease is not None:
                self._check(state, run_id, lease)
            if guard is not None:
                guard(state)
            self._commit({**rec, "run": run_id})

    # -- leases ------------------------------------------------------------------------------

    def acquire(self, run_id: str, owner: str) -> Lease:
        with self._locked(exclusive=True) as state:
            now = self._clock()
            t = state.tenures.get(run_id)
            live = self._holder(run_id, t, now)
            if live is not None:
                raise LeaseHeldError(run_id, live)
            epoch = (t.epoch if t else 0) + 1
            self._commit({"op": "acquire", "run": run_id, "owner": owner, "epoch": epoch,
                          "expires": now + self.lease_ttl_ms / 1000.0})
            return Lease(run_id, owner, epoch)

    def renew(self, lease: Lease) -> Lease:
        with self._locked(exclusive=True) as state:
            self._check(state, lease.run_id, lease)
            self._commit({"op": "renew", "run": lease.run_id,
                          "expires": self._clock() + self.lease_ttl_ms / 1000.0})
            return lease

    def release(self, lease: Lease) -> None:
        with self._locked(exclusive=True) as state:
            # An expired tenure nobody superseded may still end itself (the contract allows both).
            self._check(state, lease.run_id, lease, allow_expired=True)
            self._commit({"op": "release", "run": lease.run_id})

    # -- journal, meta, delete ---------------------------------------------------------------

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        def order_guard(state: _State) -> None:
            journal = state.journals.get(run_id)
            tail = journal[-1][0] if journal else 0
            if entry.seq <= tail:
                raise JournalOrderError(f"append seq {entry.seq} to run {run_id!r} is not above the tail {tail}")

        self._mutate(run_id, lease, {"op": "append", "seq": int(entry.seq), "payload": _b64(entry.payload)},
                     order_guard)

    def load(self, run_id: str) -> list[JournalEntry]:
        with self._locked(exclusive=False) as state:
            return [JournalEntry(seq, payload) for seq, payload in state.journals.get(run_id, ())]

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        if meta.status not in RUN_STATUSES:
            raise ValueError(f"RunMeta.status {meta.status!r} is not one of {RUN_STATUSES}")
        self._mutate(meta.run_id, lease, {"op": "meta", "status": meta.status, "segments": int(meta.segments),
                                          "payload": _b64(meta.payload)})

    def get_meta(self, run_id: str) -> RunMeta | None:
        with self._locked(exclusive=False) as state:
            row = state.meta.get(run_id)
        return None if row is None else RunMeta(run_id, *row)

    def list_runs(self) -> list[RunMeta]:
        with self._locked(exclusive=False) as state:
            return [RunMeta(run, *row) for run, row in sorted(state.meta.items())]

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        self._mutate(run_id, lease, {"op": "delete"})

    def close(self) -> None:
        with self._mutex:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def open_store(location: str, *, lease_ttl_ms: int, lock_timeout_s: str | float = 5.0,
               clock: Callable[[], float] | None = None) -> KvFenceStore:
    """The factory soak calls: `kvfence.store:open_store` (options arrive as strings)."""
    if not os.path.isdir(location):
        raise FileNotFoundError(f"location {location!r} is not a directory; soak creates it before the first call")
    return KvFenceStore(location, lease_ttl_ms, lock_timeout_s=float(lock_timeout_s), clock=clock or time.time)
