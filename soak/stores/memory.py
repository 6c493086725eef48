"""`memory:` — the in-process reference store: the oracle behind a lock and a real clock.

Single process only: it is the simplest correct reading of the contract and the executable
twin of `soak.oracle` in tests. Store objects opened over one location in one process share
that location's state (one fencing domain, as the contract asks of every store), each with its
own ttl and clock; the state is freed when the last object over the location closes. A
`MemoryStore` made directly, without a location, is a domain of its own.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from soak.oracle import Oracle, State
from soak.spi import JournalEntry, Lease, RunMeta

__all__ = ["MemoryStore", "open_memory"]


class _Domain:
    """The state of one location and the lock every object over it takes for each call."""

    def __init__(self) -> None:
        self.state = State()
        self.lock = threading.Lock()
        self.objects = 0


_DOMAINS: dict[str, _Domain] = {}
_DOMAINS_LOCK = threading.Lock()


def _attach(location: str) -> tuple[str, _Domain]:
    key = os.path.abspath(location)
    with _DOMAINS_LOCK:
        domain = _DOMAINS.get(key)
        if domain is None:
            domain = _DOMAINS[key] = _Domain()
        domain.objects += 1
    return key, domain


def _detach(key: str, domain: _Domain) -> None:
    with _DOMAINS_LOCK:
        domain.objects -= 1
        if domain.objects <= 0 and _DOMAINS.get(key) is domain:
            del _DOMAINS[key]


class _MemoryBlobs:
    fenced_writes = True

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None:
        with self._store._lock:
            self._store._oracle.blob_put(ref, blob, lease, self._store._clock())

    def get(self, ref: str) -> bytes | None:
        with self._store._lock:
            return self._store._oracle.blob_get(ref)

    def list(self, run_id: str) -> list[str]:
        with self._store._lock:
            return self._store._oracle.blob_list(run_id)

    def delete(self, ref: str, lease: Lease | None = None) -> None:
        with self._store._lock:
            self._store._oracle.blob_delete(ref, lease, self._store._clock())


class MemoryStore:
    """The fenced run store contract held in one process's memory."""

    fenced_writes = True
    injectable_clock = True

    def __init__(self, lease_ttl_ms: int = 250, *, clock: Callable[[], float] = time.monotonic,
                 location: str | None = None):
        self.lease_ttl_ms = int(lease_ttl_ms)
        self._oracle = Oracle(self.lease_ttl_ms)  # this object's ttl, over the location's shared state
        self._clock = clock
        self._domain: tuple[str, _Domain] | None = None
        if location is None:
            self._lock = threading.Lock()
        else:
            self._domain = _attach(location)
            self._oracle.state = self._domain[1].state
            self._lock = self._domain[1].lock
        self.transcripts = _MemoryBlobs(self)

    def acquire(self, run_id: str, owner: str) -> Lease:
        with self._lock:
            return self._oracle.acquire(run_id, owner, self._clock())

    def renew(self, lease: Lease) -> Lease:
        with self._lock:
            return self._oracle.renew(lease, self._clock())

    def release(self, lease: Lease) -> None:
        with self._lock:
            self._oracle.release(lease, self._clock())

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        with self._lock:
            self._oracle.append(run_id, entry, lease, self._clock())

    def load(self, run_id: str) -> list[JournalEntry]:
        with self._lock:
            return self._oracle.load(run_id)

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        with self._lock:
            self._oracle.put_meta(meta, lease, self._clock())

    def get_meta(self, run_id: str) -> RunMeta | None:
        with self._lock:
            return self._oracle.get_meta(run_id)

    def list_runs(self) -> list[RunMeta]:
        with self._lock:
            return self._oracle.list_runs()

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        with self._lock:
            self._oracle.delete(run_id, lease, self._clock())

    def close(self) -> None:
        """Detach from the location (idempotent); its state goes with the last object over it."""
        domain, self._domain = self._domain, None
        if domain is not None:
            _detach(*domain)


def open_memory(location: str, *, lease_ttl_ms: int, clock: Callable[[], float] | None = None) -> MemoryStore:
    """Factory for `memory:`: objects over one location in this process share its state (nothing is written
    to the location itself)."""
    return MemoryStore(lease_ttl_ms, clock=clock or time.monotonic, location=location)
