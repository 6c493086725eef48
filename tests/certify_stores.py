"""Stores for the certify and model tests, each a reference store with one choice or fault.

Kept apart from the test modules so the processes a certification spawns import only this.
"""

from __future__ import annotations

import os
import time

from soak.spi import StoreBusyError
from soak.stores.sqlite import SqliteStore, _SqliteBlobs


class _UnleasedBlobs(_SqliteBlobs):
    fenced_writes = False

    def put(self, ref, blob, lease=None):
        super().put(ref, blob, None)

    def delete(self, ref, lease=None):
        super().delete(ref, None)


class _SingleWriterStore(SqliteStore):
    """A store that makes no fencing claim: every mutation ignores its lease."""

    fenced_writes = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.transcripts = _UnleasedBlobs(self)

    def append(self, run_id, entry, lease=None):
        super().append(run_id, entry, None)

    def put_meta(self, meta, lease=None):
        super().put_meta(meta, None)

    def delete(self, run_id, lease=None):
        super().delete(run_id, None)


def open_single_writer(location: str, *, lease_ttl_ms: int, clock=None) -> _SingleWriterStore:
    return _SingleWriterStore(os.path.join(location, "store.db"), lease_ttl_ms, clock=clock or time.time)


class DeleteEndsTenureStore(SqliteStore):
    """The other conformant delete: a fenced delete ends the deleting holder's tenure with the run.

    The lease row is marked released inside the delete's own transaction (the epoch stays: the row
    is the high-water mark), so renew, release and fenced writes under that lease are refused
    afterwards and another owner may acquire at once."""

    def delete(self, run_id, lease=None):
        with self._fenced(run_id, lease) as conn:
            pin, args = self._guard(lease)
            conn.execute("DELETE FROM journal WHERE run_id = ? AND " + pin, (run_id, *args))
            conn.execute("DELETE FROM meta WHERE run_id = ? AND " + pin, (run_id, *args))
            if lease is not None:
                cur = conn.execute(
                    "UPDATE leases SET released = 1 WHERE run_id = ? AND owner = ? AND epoch = ? AND released = 0",
                    (run_id, lease.owner, lease.epoch),
                )
                self._pinned(cur, run_id, lease)


def open_delete_ends_tenure(location: str, *, lease_ttl_ms: int, clock=None) -> DeleteEndsTenureStore:
    return DeleteEndsTenureStore(os.path.join(location, "store.db"), lease_ttl_ms, clock=clock or time.time)


class NoClockStore(SqliteStore):
    """A correct store that declares no injectable clock; its factory takes and ignores `**options`
    (so a `clock=` passed to it would be ignored too, and expiry follows the store's own clock)."""

    injectable_clock = False


def open_no_clock(location: str, *, lease_ttl_ms: int, **options) -> NoClockStore:
    return NoClockStore(os.path.join(location, "store.db"), lease_ttl_ms)


class AlwaysBusyStore(SqliteStore):
    """Every call named in `BUSY` answers StoreBusyError (nothing written): nothing can be concluded
    from them. It boots, and declares what the reference store declares."""

    BUSY = ("acquire", "renew", "release", "append", "load", "put_meta", "get_meta", "list_runs", "delete")

    def __getattribute__(self, name):
        if name in type(self).BUSY:
            def busy(*args, **kwargs):
                raise StoreBusyError(f"{name}: always busy")

            return busy
        return super().__getattribute__(name)


class BusyAcquireStore(AlwaysBusyStore):
    """Only acquire is always busy: every program's first step stays busy."""

    BUSY = ("acquire",)


def open_always_busy(location: str, *, lease_ttl_ms: int, clock=None) -> AlwaysBusyStore:
    return AlwaysBusyStore(os.path.join(location, "store.db"), lease_ttl_ms, clock=clock or time.time)


def open_busy_acquire(location: str, *, lease_ttl_ms: int, clock=None) -> BusyAcquireStore:
    return BusyAcquireStore(os.path.join(location, "store.db"), lease_ttl_ms, clock=clock or time.time)
