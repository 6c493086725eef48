"""The mutant catalogue: SQLite stores that each break exactly one clause of the contract.

Each mutant is the reference `SqliteStore` with one thing changed, selectable as
`mutant:NAME`. They exist to prove that soak catches every defect class (`soak selftest`),
so each names the clause it breaks. Nothing here is fit to store data.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from soak.spi import JournalEntry, Lease, LeaseHeldError, RunMeta
from soak.stores.sqlite import SqliteStore, _pin_args, _SqliteBlobs

__all__ = ["MUTANTS", "Mutant", "open_mutant"]


class _UnleasedBlobs(_SqliteBlobs):
    """Blob puts or deletes that drop the lease before reaching the fence."""

    drop_put = False
    drop_delete = False

    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None:
        super().put(ref, blob, None if self.drop_put else lease)

    def delete(self, ref: str, lease: Lease | None = None) -> None:
        super().delete(ref, None if self.drop_delete else lease)


class UnfencedAppend(SqliteStore):
    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        super().append(run_id, entry, None)


class UnfencedMeta(SqliteStore):
    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        super().put_meta(meta, None)


class UnfencedDelete(SqliteStore):
    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        super().delete(run_id, None)


class UnfencedBlobPut(SqliteStore):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transcripts = _UnleasedBlobs(self)
        self.transcripts.drop_put = True


class UnfencedBlobDelete(SqliteStore):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transcripts = _UnleasedBlobs(self)
        self.transcripts.drop_delete = True


class SplitFence(SqliteStore):
    """F3: the fence is checked in one transaction and the mutation commits in the next."""

    @contextmanager
    def _fenced(self, run_id: str, lease: Lease | None) -> Iterator[sqlite3.Connection]:
        if lease is not None:
            with self._tx() as conn:
                self._check(conn, run_id, lease, self._clock())
        with self._tx() as conn:
            yield conn

    @staticmethod
    def _guard(lease: Lease | None) -> tuple[str, tuple]:
        return ("1", ())


class CheckThenWrite(SplitFence):
    """F3 as the seed found it: the fence is read in an autocommit statement, without the write
    lock, and the mutation then waits for the lock and commits without checking again."""

    @contextmanager
    def _fenced(self, run_id: str, lease: Lease | None) -> Iterator[sqlite3.Connection]:
        if lease is not None:
            with self._lock:
                self._check(self._connection(), run_id, lease, self._clock())
        with self._tx() as conn:
            yield conn


class StaleReleaseKillsSuccessor(SqliteStore):
    """A release that ends whatever tenure is current, not only its own."""

    def release(self, lease: Lease) -> None:
        with self._tx() as conn:
            conn.execute("UPDATE leases SET released = 1 WHERE run_id = ?", (lease.run_id,))


class StaleRenewExtendsSuccessor(SqliteStore):
    """A renew that extends whatever tenure is current, not only its own."""

    def renew(self, lease: Lease) -> Lease:
        with self._tx() as conn:
            conn.execute(
                "UPDATE leases SET expires_at = ? WHERE run_id = ?", (self._clock() + self._ttl_s(), lease.run_id)
            )
        return lease


class EpochResetOnRelease(SqliteStore):
    """A release that forgets the epoch high-water mark."""

    def release(self, lease: Lease) -> None:
        super().release(lease)
        with self._tx() as conn:
            conn.execute("DELETE FROM leases WHERE run_id = ? AND released = 1", (lease.run_id,))


class EpochResetOnDelete(SqliteStore):
    """A run deletion that also deletes the lease row (and so the epoch high-water mark)."""

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        super().delete(run_id, lease)
        with self._tx() as conn:
            conn.execute("DELETE FROM leases WHERE run_id = ?", (run_id,))


class NoRunMatch(SqliteStore):
    """The fence checks the lease against its own run, not the run it is used on."""

    def _check(self, conn, run_id, lease, now, *, allow_expired: bool = False):
        super()._check(conn, lease.run_id, lease, now, allow_expired=allow_expired)


class AcquireWhileLive(SqliteStore):
    """Acquire grants a new tenure even while another is live."""

    def _holder(self, run_id, row, now):
        return None


class BootRace(SqliteStore):
    """Bootstrap with no busy timeout, the journal mode switched first, and no retry."""

    def _boot(self, boot_timeout_ms: int) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        for stmt in self._schema():
            conn.execute(stmt)
        conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
        return conn

    @staticmethod
    def _schema():
        from soak.stores.sqlite import _SCHEMA

        return _SCHEMA


class DroppedAppend(SqliteStore):
    """An append that reports success but writes nothing when it had to wait for the lock."""

    _contended = False
    _appending = False

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        start = time.monotonic()
        with super()._tx() as conn:
            self._contended = time.monotonic() - start > 0.0002  # it had to wait for the lock
            yield conn

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        self._appending = True
        try:
            super().append(run_id, entry, lease)
        finally:
            self._appending = False

    def _guard(self, lease: Lease | None) -> tuple[str, tuple]:
        if self._appending and self._contended:
            return ("0", ())
        return SqliteStore._guard(lease)

    def _pinned(self, cur, run_id, lease) -> None:
        if not (self._appending and self._contended):
            SqliteStore._pinned(cur, run_id, lease)


class NoOrderGuard(SqliteStore):
    """No seq check: an append at or below the tail overwrites (an upsert where an insert belongs)."""

    _APPEND_SQL = "INSERT OR REPLACE INTO journal (run_id, seq, payload) SELECT ?, ?, ? WHERE "

    @staticmethod
    def _order_guard(conn, run_id, entry) -> None:
        return None


class UntypedRefusal(SqliteStore):
    """The fence refuses with a plain RuntimeError instead of LeaseHeldError."""

    def _check(self, conn, run_id, lease, now, *, allow_expired: bool = False):
        try:
            super()._check(conn, run_id, lease, now, allow_expired=allow_expired)
        except LeaseHeldError as exc:
            raise RuntimeError(f"lease check failed: {exc}") from None


class _TranscodingBlobs(_SqliteBlobs):
    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None:
        super().put(ref, bytes(blob).decode("utf-8", "replace").encode("utf-8"), lease)


class AlteredBlob(SqliteStore):
    """Blobs round-trip through UTF-8 text, so binary payloads come back altered."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transcripts = _TranscodingBlobs(self)


class ShortTtl(SqliteStore):
    """Tenures expire after a third of the advertised ttl."""

    def _ttl_s(self) -> float:
        return self.lease_ttl_ms / 3000.0


class LongTtl(SqliteStore):
    """Tenures last four times the advertised ttl, so takeovers come late."""

    def _ttl_s(self) -> float:
        return self.lease_ttl_ms * 4 / 1000.0


# -- mutants of the read path: a per-process read cache with a short expiry and no invalidation -----------------

#: How long a cached read is answered from the cache (monotonic seconds).
_CACHE_S = 0.02


class _ReadCache:
    """Reads answered from this process's cache for `_CACHE_S` after the store was last read: writes, this process's
    own included, do not invalidate it (a read-through cache without invalidation)."""

    def __init__(self, read) -> None:
        self.read = read
        self.cached: dict[str, tuple[float, object]] = {}

    def __call__(self, key: str):
        now = time.monotonic()
        hit = self.cached.get(key)
        if hit is not None and now - hit[0] < _CACHE_S:
            return hit[1]
        value = self.read(key)
        self.cached[key] = (now, value)
        return value


class _CachedRead(SqliteStore):
    """The store with its read method `_cached` answered through a `_ReadCache`."""

    _cached = ""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        setattr(self, self._cached, _ReadCache(getattr(super(), self._cached)))


class CachedMeta(_CachedRead):
    """`get_meta` answers from a per-process cache up to 20 ms old: a write, even the caller's own, is not seen."""

    _cached = "get_meta"


class _CachedBlobs(_SqliteBlobs):
    def __init__(self, store) -> None:
        super().__init__(store)
        self.get = _ReadCache(super().get)


class CachedBlob(SqliteStore):
    """Blob reads answer from a per-process cache up to 20 ms old: a put or delete, even the caller's own, is not
    seen."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transcripts = _CachedBlobs(self)


class CachedJournal(_CachedRead):
    """`load` answers from a per-process cache up to 20 ms old: an append, even the caller's own, is not seen."""

    _cached = "load"


class SwappedLoad(SqliteStore):
    """`load` returns the last two entries swapped once a journal holds three (an ORDER BY lost on a page split)."""

    def load(self, run_id: str) -> list[JournalEntry]:
        entries = super().load(run_id)
        if len(entries) >= 3:
            entries[-1], entries[-2] = entries[-2], entries[-1]
        return entries


class DeleteKeepsMeta(SqliteStore):
    """A run delete removes the journal but leaves the meta."""

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        with self._fenced(run_id, lease) as conn:
            pin, args = self._guard(lease)
            conn.execute("DELETE FROM journal WHERE run_id = ? AND " + pin, (run_id, *args))


# -- mutants breaking one relation of the probe coverage table (soak.workloads.runs.coverage) ------------------

_PIN_EPOCH = "EXISTS (SELECT 1 FROM leases WHERE run_id = ? AND epoch = ? AND released = 0)"
_PIN_AHEAD = "EXISTS (SELECT 1 FROM leases WHERE run_id = ? AND owner = ? AND epoch <= ? AND released = 0)"
_PIN_UNRELEASED = "EXISTS (SELECT 1 FROM leases WHERE run_id = ? AND owner = ? AND epoch = ?)"


class EpochOnlyFence(SqliteStore):
    """The fence compares the epoch alone: another owner presenting the live tenure's epoch may write (an
    impostor). Renew and release still pin the owner."""

    def _check(self, conn, run_id, lease, now, *, allow_expired: bool = False):
        row = self._tenure(conn, run_id)
        if row is not None and lease.run_id == run_id and lease.epoch == row[1]:
            lease = Lease(lease.run_id, row[0], lease.epoch)
        super()._check(conn, run_id, lease, now, allow_expired=allow_expired)

    @staticmethod
    def _guard(lease: Lease | None) -> tuple[str, tuple]:
        return ("1", ()) if lease is None else (_PIN_EPOCH, (lease.run_id, lease.epoch))


class FutureEpochAccepted(SqliteStore):
    """The fence refuses only epochs below the current one: the holder presenting an epoch never issued may
    write. Renew and release still pin the epoch."""

    def _check(self, conn, run_id, lease, now, *, allow_expired: bool = False):
        row = self._tenure(conn, run_id)
        if row is not None and lease.run_id == run_id and lease.owner == row[0] and lease.epoch > row[1]:
            lease = Lease(lease.run_id, lease.owner, row[1])
        super()._check(conn, run_id, lease, now, allow_expired=allow_expired)

    @staticmethod
    def _guard(lease: Lease | None) -> tuple[str, tuple]:
        return ("1", ()) if lease is None else (_PIN_AHEAD, (lease.run_id, lease.owner, lease.epoch))


class RenewRevivesReleased(SqliteStore):
    """A renew under a released tenure that nobody superseded revives it (un-released, a fresh expiry)."""

    def renew(self, lease: Lease) -> Lease:
        with self._tx() as conn:
            row = self._tenure(conn, lease.run_id)
            if row is not None and row[3] and (row[0], row[1]) == (lease.owner, lease.epoch):
                conn.execute("UPDATE leases SET released = 0, expires_at = ? WHERE run_id = ?",
                             (self._clock() + self._ttl_s(), lease.run_id))
                return lease
        return super().renew(lease)


class ReleasedStillWrites(SqliteStore):
    """The fence ignores the released mark: a released tenure's holder may write until its ttl runs out.
    Renew and release still require an unreleased tenure."""

    def _check(self, conn, run_id, lease, now, *, allow_expired: bool = False):
        row = self._tenure(conn, run_id)
        if lease.run_id == run_id and row is not None and row[3] and (row[0], row[1]) == (lease.owner, lease.epoch):
            if now >= row[2]:
                raise LeaseHeldError(run_id, None, f"lease {lease} has expired")
            return
        super()._check(conn, run_id, lease, now, allow_expired=allow_expired)

    @staticmethod
    def _guard(lease: Lease | None) -> tuple[str, tuple]:
        return ("1", ()) if lease is None else (_PIN_UNRELEASED, _pin_args(lease))


class _LeaseRunBlobs(_SqliteBlobs):
    def delete(self, ref: str, lease: Lease | None = None) -> None:
        if lease is None:
            return super().delete(ref, None)
        with self._store._fenced(lease.run_id, lease) as conn:  # the lease's run, not the ref's
            pin, args = self._store._guard(lease)
            conn.execute("DELETE FROM blobs WHERE ref = ? AND " + pin, (ref, *args))


class BlobDeleteLeaseRun(SqliteStore):
    """A blob delete fenced by the lease's run instead of the run its ref names."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transcripts = _LeaseRunBlobs(self)


class AcquireReentrant(SqliteStore):
    """Acquire by the live holder of a run is granted (a new epoch), as if a holder could not block itself."""

    def acquire(self, run_id: str, owner: str) -> Lease:
        with self._tx() as conn:
            row = self._tenure(conn, run_id)
            if row is not None and row[0] == owner and self._holder(run_id, row, self._clock()) is not None:
                lease = Lease(run_id, owner, row[1] + 1)
                conn.execute("UPDATE leases SET epoch = ?, expires_at = ? WHERE run_id = ?",
                             (lease.epoch, self._clock() + self._ttl_s(), run_id))
                return lease
        return super().acquire(run_id, owner)


@dataclass(frozen=True)
class Mutant:
    name: str
    store: type[SqliteStore]
    clause: str
    summary: str


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant("unfenced-append", UnfencedAppend, "stale-rejected", "append ignores the lease"),
        Mutant("unfenced-meta", UnfencedMeta, "stale-rejected", "put_meta ignores the lease (seed F1)"),
        Mutant("unfenced-blob-put", UnfencedBlobPut, "stale-rejected", "blob put ignores the lease (seed F2)"),
        Mutant("unfenced-blob-delete", UnfencedBlobDelete, "stale-rejected", "blob delete ignores the lease"),
        Mutant("unfenced-delete", UnfencedDelete, "stale-rejected", "run delete ignores the lease (seed F4)"),
        Mutant("split-fence", SplitFence, "atomic-fence", "fence checked in one transaction, mutation in the next (seed F3)"),
        Mutant("check-then-write", CheckThenWrite, "atomic-fence",
               "fence read without the write lock, then the mutation commits unchecked (seed F3)"),
        Mutant("stale-release", StaleReleaseKillsSuccessor, "stale-lease-ops", "a stale release ends the successor's tenure"),
        Mutant("stale-renew", StaleRenewExtendsSuccessor, "stale-lease-ops", "a stale renew extends the successor's tenure"),
        Mutant("epoch-reset-release", EpochResetOnRelease, "epoch-monotonic", "release forgets the epoch high-water"),
        Mutant("epoch-reset-delete", EpochResetOnDelete, "epoch-monotonic", "delete forgets the epoch high-water"),
        Mutant("no-run-match", NoRunMatch, "run-match", "a lease for one run is accepted on another"),
        Mutant("acquire-while-live", AcquireWhileLive, "lease-exclusive", "acquire granted while a live lease exists"),
        Mutant("boot-race", BootRace, "concurrent-boot", "bootstrap dies when processes open a fresh file at once"),
        Mutant("dropped-append", DroppedAppend, "journal-a1", "an append reports success but is dropped under contention"),
        Mutant("no-order-guard", NoOrderGuard, "journal-a5", "no seq check: an append at or below the tail overwrites"),
        Mutant("untyped-refusal", UntypedRefusal, "typed-refusal", "the fence refuses with RuntimeError"),
        Mutant("altered-blob", AlteredBlob, "journal-a4", "blob bytes are transcoded through UTF-8"),
        Mutant("short-ttl", ShortTtl, "live-accepted", "tenures expire at a third of the ttl"),
        Mutant("long-ttl", LongTtl, "ttl-honoured", "tenures last four times the ttl"),
        Mutant("impostor-epoch", EpochOnlyFence, "stale-rejected",
               "the fence compares the epoch alone: another owner with the live epoch may write"),
        Mutant("future-epoch", FutureEpochAccepted, "stale-rejected",
               "the fence refuses only lower epochs: the holder may write under an epoch never issued"),
        Mutant("renew-revives", RenewRevivesReleased, "stale-lease-ops",
               "a renew under a released, unsuperseded tenure revives it"),
        Mutant("released-writes", ReleasedStillWrites, "stale-rejected",
               "the fence ignores the released mark until the ttl runs out"),
        Mutant("blob-delete-lease-run", BlobDeleteLeaseRun, "run-match",
               "a blob delete is fenced by the lease's run, not the ref's"),
        Mutant("acquire-reentrant", AcquireReentrant, "lease-exclusive",
               "the live holder's own acquire is granted a new epoch"),
        Mutant("cached-meta", CachedMeta, "meta-last-write",
               "get_meta answers from a per-process cache up to 20 ms old, blind to writes"),
        Mutant("cached-blob", CachedBlob, "blob-semantics",
               "blob reads answer from a per-process cache up to 20 ms old, blind to puts and deletes"),
        Mutant("cached-journal", CachedJournal, "journal-a3",
               "load answers from a per-process cache up to 20 ms old, blind to appends"),
        Mutant("swapped-load", SwappedLoad, "journal-a2", "load returns the last two entries swapped"),
        Mutant("delete-keeps-meta", DeleteKeepsMeta, "delete-semantics", "a run delete leaves the meta behind"),
    )
}


def open_mutant(location: str, *, lease_ttl_ms: int, mutant: str, path: str | None = None,
                busy_timeout_ms: str | int = 5000, clock=None) -> SqliteStore:
    """Factory for `mutant:NAME`: the named mutant over `store.db` in the location."""
    cls = MUTANTS[mutant].store
    return cls(path or os.path.join(location, "store.db"), lease_ttl_ms,
               busy_timeout_ms=int(busy_timeout_ms), clock=clock or time.time)
