"""Broken run stores written from CONTRACT section 1 alone, as an outsider would (issue 18).

Each class breaks exactly one clause on one combination of surface and lease relation and is
otherwise the `sqlite:` reference store. They were written without reading soak's mutant
catalogue or the runs worker and checker, so what they break is what a vendor could get wrong,
not what the storm already knows to look for.

Every store is named by a spec string, `tests.redteam_stores:open_<name>` (the `open_*`
factories at the bottom), importable from the storm's worker processes when the repository
root is on `PYTHONPATH` (pytest puts it there; from a shell: `PYTHONPATH=. soak storm ...`).
`REDTEAM` maps a store's name to (factory spec, clause it breaks, cell it breaks it in).
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable

from soak.spi import JournalEntry, Lease, LeaseHeldError, RunMeta, StoreBusyError, ref_run
from soak.stores.sqlite import SqliteStore, _SqliteBlobs

__all__ = ["REDTEAM"]

# Side tables a few stores need to tell lease relations apart (kept beside the reference schema).
_EXTRA_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS rt_released (run_id TEXT NOT NULL, epoch INTEGER NOT NULL,"
    " PRIMARY KEY (run_id, epoch))",
    "CREATE TABLE IF NOT EXISTS rt_acquired (run_id TEXT NOT NULL, epoch INTEGER NOT NULL,"
    " at REAL NOT NULL, PRIMARY KEY (run_id, epoch))",
)

# Lease relations, as the CONTRACT's clauses distinguish them.
LIVE = "live own"
SUPERSEDED = "superseded"
RELEASED = "released, not superseded"
RELEASED_SUPERSEDED = "released, then superseded"
EXPIRED = "expired, unsuperseded"
OTHER_OWNER = "same epoch, another owner"
NEVER_ISSUED = "an epoch never issued"
OTHER_RUN = "a lease of another run"


class _Blobs(_SqliteBlobs):
    """Blob store that tells the run store which surface is being fenced."""

    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None:
        with self._store._on("blob_put"):
            super().put(ref, blob, lease)

    def delete(self, ref: str, lease: Lease | None = None) -> None:
        with self._store._on("blob_delete"):
            super().delete(ref, lease)


class _Surface:
    def __init__(self, store: _Redteam, name: str) -> None:
        self.store, self.name = store, name

    def __enter__(self) -> None:
        self.store._surface, self.store._bypass = self.name, False

    def __exit__(self, *exc) -> None:
        self.store._surface, self.store._bypass = None, False


class _Redteam(SqliteStore):
    """The reference store with a hook: `accepts(conn, run_id, lease, relation)` lets one cell through."""

    SURFACE: str | None = None  # append, put_meta, delete, blob_put, blob_delete

    def __init__(self, *args, **kwargs) -> None:
        self._surface: str | None = None
        self._bypass = False
        super().__init__(*args, **kwargs)
        self.transcripts = _Blobs(self)
        with self._tx() as conn:
            for stmt in _EXTRA_SCHEMA:
                conn.execute(stmt)

    def _on(self, surface: str) -> _Surface:
        return _Surface(self, surface)

    def relation(self, conn: sqlite3.Connection, run_id: str, lease: Lease, now: float) -> str:
        """Which of the contract's lease relations `lease` has to the current tenure of `run_id`."""
        if lease.run_id != run_id:
            return OTHER_RUN
        row = self._tenure(conn, run_id)
        if row is None or lease.epoch > row[1]:
            return NEVER_ISSUED
        released_once = conn.execute(
            "SELECT 1 FROM rt_released WHERE run_id = ? AND epoch = ?", (run_id, lease.epoch)
        ).fetchone() is not None
        if lease.epoch < row[1]:
            return RELEASED_SUPERSEDED if released_once else SUPERSEDED
        if lease.owner != row[0]:
            return OTHER_OWNER
        if row[3]:
            return RELEASED
        return EXPIRED if now >= row[2] else LIVE

    def accepts(self, conn: sqlite3.Connection, run_id: str, lease: Lease, relation: str) -> bool:
        """True where this store's bug lets a fenced mutation through."""
        return False

    def _check(self, conn, run_id, lease, now, *, allow_expired=False):
        if self._surface is not None and self._surface == self.SURFACE:
            if self.accepts(conn, run_id, lease, self.relation(conn, run_id, lease, now)):
                self._bypass = True
                return
        super()._check(conn, run_id, lease, now, allow_expired=allow_expired)

    def _guard(self, lease):  # type: ignore[override]
        return ("1", ()) if self._bypass else SqliteStore._guard(lease)

    def _pinned(self, cur, run_id, lease):  # type: ignore[override]
        if not self._bypass:
            SqliteStore._pinned(cur, run_id, lease)

    def acquire(self, run_id: str, owner: str) -> Lease:
        lease = super().acquire(run_id, owner)
        self._note_acquired(lease)
        return lease

    def _note_acquired(self, lease: Lease) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO rt_acquired (run_id, epoch, at) VALUES (?, ?, ?)",
                (lease.run_id, lease.epoch, self._clock()),
            )

    def release(self, lease: Lease) -> None:
        with self._on("release"):
            super().release(lease)
        with self._tx() as conn:
            conn.execute("INSERT OR IGNORE INTO rt_released (run_id, epoch) VALUES (?, ?)", (lease.run_id, lease.epoch))

    def renew(self, lease: Lease) -> Lease:
        with self._on("renew"):
            return super().renew(lease)

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        with self._on("append"):
            super().append(run_id, entry, lease)

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        with self._on("put_meta"):
            super().put_meta(meta, lease)

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        with self._on("delete"):
            super().delete(run_id, lease)


# -- stale-rejected: one mutation surface accepts one kind of dead lease ---------------------


class AppendSuperseded(_Redteam):
    """stale-rejected on (append, superseded): an append under a tenure a later epoch replaced is accepted."""

    SURFACE = "append"

    def accepts(self, conn, run_id, lease, relation):
        return relation == SUPERSEDED


class MetaReleased(_Redteam):
    """stale-rejected on (put_meta, released, not superseded): the releasing holder may still write meta."""

    SURFACE = "put_meta"

    def accepts(self, conn, run_id, lease, relation):
        return relation == RELEASED


class DeleteReleasedSuperseded(_Redteam):
    """stale-rejected on (delete, released then superseded): a released tenure's delete lands on the successor."""

    SURFACE = "delete"

    def accepts(self, conn, run_id, lease, relation):
        return relation == RELEASED_SUPERSEDED


class BlobPutSuperseded(_Redteam):
    """stale-rejected on (blob put, superseded): a blob put under a replaced tenure is accepted."""

    SURFACE = "blob_put"

    def accepts(self, conn, run_id, lease, relation):
        return relation == SUPERSEDED


class BlobDeleteReleased(_Redteam):
    """stale-rejected on (blob delete, released, not superseded): the releasing holder may still delete blobs."""

    SURFACE = "blob_delete"

    def accepts(self, conn, run_id, lease, relation):
        return relation == RELEASED


class BlobDeleteOtherOwner(_Redteam):
    """stale-rejected on (blob delete, same epoch another owner): the fence compares the epoch, not the owner."""

    SURFACE = "blob_delete"

    def accepts(self, conn, run_id, lease, relation):
        return relation == OTHER_OWNER


class AppendNeverIssued(_Redteam):
    """stale-rejected on (append, an epoch never issued): an append under a future epoch is accepted."""

    SURFACE = "append"

    def accepts(self, conn, run_id, lease, relation):
        return relation == NEVER_ISSUED


class ReleaseKeepsExpiry(_Redteam):
    """stale-rejected on (every mutation, released, not superseded): release frees the run for the next
    acquire, but the fence judges the released tenure by its expiry alone, so its holder keeps writing
    until the ttl runs out or a successor arrives."""

    SURFACE = None

    def _check(self, conn, run_id, lease, now, *, allow_expired=False):
        if self._surface in ("append", "put_meta", "delete", "blob_put", "blob_delete"):
            if self.relation(conn, run_id, lease, now) == RELEASED and now < self._tenure(conn, run_id)[2]:
                self._bypass = True
                return
        super()._check(conn, run_id, lease, now, allow_expired=allow_expired)


# -- run-match ---------------------------------------------------------------------------------


class MetaOtherRun(_Redteam):
    """run-match on (put_meta, a live lease of another run): the fence checks the lease against its own run."""

    SURFACE = "put_meta"

    def accepts(self, conn, run_id, lease, relation):
        return relation == OTHER_RUN and self.relation(conn, lease.run_id, lease, self._clock()) == LIVE


class BlobPutRefOtherRun(_Redteam):
    """run-match on (blob put, a ref naming another run than its lease): the fence reads the lease's run,
    not the ref's."""

    def _check(self, conn, run_id, lease, now, *, allow_expired=False):
        if self._surface == "blob_put" and lease.run_id != run_id:
            run_id = lease.run_id  # the bug: fence the lease's own run
            self._bypass = True
            try:
                super()._check(conn, run_id, lease, now, allow_expired=allow_expired)
            except BaseException:
                self._bypass = False
                raise
            return
        super()._check(conn, run_id, lease, now, allow_expired=allow_expired)


class AppendEpochOnly(_Redteam):
    """run-match on (append, a lease of another run, live or stale): a cross-run lease is accepted whenever
    its epoch number equals the target run's current epoch (the fence compares epochs only)."""

    SURFACE = "append"

    def accepts(self, conn, run_id, lease, relation):
        row = self._tenure(conn, run_id)
        return relation == OTHER_RUN and row is not None and row[1] == lease.epoch


# -- stale-lease-ops ---------------------------------------------------------------------------


class RenewSuperseded(_Redteam):
    """stale-lease-ops on (renew, superseded): a renew under a replaced tenure returns the lease instead of
    raising (it touches nothing)."""

    def renew(self, lease: Lease) -> Lease:
        with self._tx() as conn:
            if self.relation(conn, lease.run_id, lease, self._clock()) in (SUPERSEDED, RELEASED_SUPERSEDED):
                return lease
        return super().renew(lease)


class ReleaseSuperseded(_Redteam):
    """stale-lease-ops on (release, superseded): a release under a replaced tenure releases the successor."""

    def release(self, lease: Lease) -> None:
        with self._tx() as conn:
            if self.relation(conn, lease.run_id, lease, self._clock()) == SUPERSEDED:
                conn.execute("UPDATE leases SET released = 1 WHERE run_id = ?", (lease.run_id,))
                return
        super().release(lease)


class ReleaseOtherOwner(_Redteam):
    """stale-lease-ops on (release, same epoch another owner): release matches the epoch and ignores the
    owner, so a forged lease ends the holder's tenure."""

    def release(self, lease: Lease) -> None:
        with self._tx() as conn:
            if self.relation(conn, lease.run_id, lease, self._clock()) == OTHER_OWNER:
                conn.execute("UPDATE leases SET released = 1 WHERE run_id = ?", (lease.run_id,))
                return
        super().release(lease)


# -- lease-exclusive, epoch-monotonic, ttl-honoured, live-accepted -----------------------------


class AcquireReentrant(_Redteam):
    """lease-exclusive on (acquire, live own): acquire by the holder's own owner while its tenure is live
    is granted (same epoch, expiry extended) instead of refused."""

    def acquire(self, run_id: str, owner: str) -> Lease:
        with self._tx() as conn:
            now = self._clock()
            live = self._holder(run_id, self._tenure(conn, run_id), now)
            if live is not None and live.owner == owner:
                conn.execute("UPDATE leases SET expires_at = ? WHERE run_id = ?", (now + self._ttl_s(), run_id))
                return live
        return super().acquire(run_id, owner)


class EpochReuseAfterRelease(_Redteam):
    """epoch-monotonic on (acquire, released, not superseded): the acquire after a release re-issues the
    released epoch instead of the next one."""

    def acquire(self, run_id: str, owner: str) -> Lease:
        with self._tx() as conn:
            now = self._clock()
            row = self._tenure(conn, run_id)
            if row is not None and row[3]:
                conn.execute(
                    "UPDATE leases SET owner = ?, expires_at = ?, released = 0 WHERE run_id = ?",
                    (owner, now + self._ttl_s(), run_id),
                )
                lease = Lease(run_id, owner, row[1])
            else:
                lease = None
        return lease if lease is not None else super().acquire(run_id, owner)


class EpochLostOnEmptyDelete(_Redteam):
    """epoch-monotonic on (delete, a run with no journal): deleting a run that never had an entry drops its
    lease row too, so the next acquire starts again at epoch 1."""

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        with self._tx() as conn:
            empty = conn.execute("SELECT COUNT(*) FROM journal WHERE run_id = ?", (run_id,)).fetchone()[0] == 0
        super().delete(run_id, lease)
        if empty:
            with self._tx() as conn:
                conn.execute("DELETE FROM leases WHERE run_id = ?", (run_id,))


class RenewFromOldExpiry(_Redteam):
    """ttl-honoured on (renew, live own): renew extends the old expiry by the ttl instead of setting it to
    now + ttl, so an early renew keeps the tenure live far past the ttl."""

    def renew(self, lease: Lease) -> Lease:
        with self._tx() as conn:
            now = self._clock()
            self._check(conn, lease.run_id, lease, now)
            conn.execute(
                "UPDATE leases SET expires_at = expires_at + ? WHERE run_id = ? AND owner = ? AND epoch = ?",
                (self._ttl_s(), lease.run_id, lease.owner, lease.epoch),
            )
            return lease


class TtlTriple(_Redteam):
    """ttl-honoured on (acquire, expired unrenewed): acquire grants three times the ttl it declares."""

    def _ttl_s(self) -> float:
        return 3 * self.lease_ttl_ms / 1000.0


class MetaAcquireClock(_Redteam):
    """live-accepted on (put_meta, live own after a renew): the put_meta fence judges expiry from the acquire
    time, ignoring renewals, so a renewed live holder is refused once acquire + ttl has passed."""

    def _check(self, conn, run_id, lease, now, *, allow_expired=False):
        super()._check(conn, run_id, lease, now, allow_expired=allow_expired)
        if self._surface == "put_meta" and not self._bypass:
            row = conn.execute(
                "SELECT at FROM rt_acquired WHERE run_id = ? AND epoch = ?", (run_id, lease.epoch)
            ).fetchone()
            if row is not None and now >= row[0] + self._ttl_s():
                raise LeaseHeldError(run_id, None, f"lease {lease} has expired")


# -- typed-refusal and busy ------------------------------------------------------------------


class BlobPutRefusalMutates(_Redteam):
    """typed-refusal on (blob put, expired unsuperseded): the store refuses (which it may), but only after
    it wrote the blob."""

    def _check(self, conn, run_id, lease, now, *, allow_expired=False):
        if self._surface == "blob_put" and self.relation(conn, run_id, lease, now) == EXPIRED:
            self._write_anyway = True
        super()._check(conn, run_id, lease, now, allow_expired=allow_expired)

    def __init__(self, *args, **kwargs) -> None:
        self._write_anyway = False
        super().__init__(*args, **kwargs)
        blobs = self.transcripts
        put = blobs.put

        def leaky_put(ref: str, blob: bytes, lease: Lease | None = None) -> None:
            self._write_anyway = False
            try:
                put(ref, blob, lease)
            except LeaseHeldError:
                if self._write_anyway:
                    put(ref, blob, None)  # the bug: the refused write lands anyway
                raise

        blobs.put = leaky_put  # type: ignore[method-assign]


class RenewUntypedRefusal(_Redteam):
    """typed-refusal on (renew, superseded): the refusal is a RuntimeError, not LeaseHeldError (renew only)."""

    def renew(self, lease: Lease) -> Lease:
        with self._tx() as conn:
            if self.relation(conn, lease.run_id, lease, self._clock()) in (SUPERSEDED, RELEASED_SUPERSEDED):
                raise RuntimeError(f"lease {lease} is stale")
        return super().renew(lease)


class AppendBusyAfterWrite(_Redteam):
    """typed-refusal on (append, live own): one append in four commits and then raises StoreBusyError,
    which promises nothing was written."""

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        super().append(run_id, entry, lease)
        if lease is not None and self._rng.random() < 0.25:
            raise StoreBusyError("sqlite busy: database is locked")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._rng = random.Random(os.getpid())


# -- unleased-passthrough and reads ----------------------------------------------------------


class BlobDeleteUnleasedRefused(_Redteam):
    """unleased-passthrough on (blob delete, no lease): an unleased blob delete is refused while the run
    has a live tenure."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        delete = self.transcripts.delete

        def fenced_delete(ref: str, lease: Lease | None = None) -> None:
            if lease is None:
                run_id = ref_run(ref)
                with self._tx() as conn:
                    holder = self._holder(run_id, self._tenure(conn, run_id), self._clock())
                if holder is not None:
                    raise LeaseHeldError(run_id, holder, f"run {run_id!r} is leased; pass the lease")
            delete(ref, lease)

        self.transcripts.delete = fenced_delete  # type: ignore[method-assign]


class LoadCached(_Redteam):
    """journal-a3 on (load, after the caller's own append): each store object answers the two loads of a
    run after a cache miss from its cache, and its own appends do not invalidate it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._cache: dict[str, tuple[int, list[JournalEntry]]] = {}

    def load(self, run_id: str) -> list[JournalEntry]:
        left, entries = self._cache.get(run_id, (0, []))
        if left > 0:
            self._cache[run_id] = (left - 1, entries)
            return list(entries)
        entries = super().load(run_id)
        self._cache[run_id] = (2, entries)
        return list(entries)


class MetaKeepsFirstPayload(_Redteam):
    """meta-last-write on (put_meta, live own): an overwrite updates status and segments but keeps the first
    payload written for the run."""

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        old = self.get_meta(meta.run_id)
        if old is not None:
            meta = RunMeta(meta.run_id, meta.status, meta.segments, old.payload)
        super().put_meta(meta, lease)


# -- factories and the catalogue ----------------------------------------------------------------


def _factory(cls: type[_Redteam]) -> Callable[..., _Redteam]:
    def open_store(location: str, *, lease_ttl_ms: int, clock: Callable[[], float] | None = None,
                   **options: str) -> _Redteam:
        return cls(os.path.join(location, "store.db"), int(lease_ttl_ms), clock=clock or time.time)

    open_store.__name__ = open_store.__qualname__ = f"open_{cls.__name__}"
    open_store.__doc__ = cls.__doc__
    return open_store


_CLASSES: tuple[type[_Redteam], ...] = (
    AppendSuperseded, MetaReleased, DeleteReleasedSuperseded, BlobPutSuperseded, BlobDeleteReleased,
    BlobDeleteOtherOwner, AppendNeverIssued, ReleaseKeepsExpiry, MetaOtherRun, BlobPutRefOtherRun,
    AppendEpochOnly, RenewSuperseded, ReleaseSuperseded, ReleaseOtherOwner, AcquireReentrant,
    EpochReuseAfterRelease, EpochLostOnEmptyDelete, RenewFromOldExpiry, TtlTriple, MetaAcquireClock,
    BlobPutRefusalMutates, RenewUntypedRefusal, AppendBusyAfterWrite, BlobDeleteUnleasedRefused,
    LoadCached, MetaKeepsFirstPayload,
)

for _cls in _CLASSES:
    globals()[f"open_{_cls.__name__}"] = _factory(_cls)


def _clause_and_cell(cls: type[_Redteam]) -> tuple[str, str]:
    first = (cls.__doc__ or "").split(": ", 1)[0]
    clause, _, cell = first.partition(" on ")
    return clause, cell.strip()


#: name -> (factory spec, clause broken, (surface, relation) cell)
REDTEAM: dict[str, tuple[str, str, str]] = {
    cls.__name__: (f"tests.redteam_stores:open_{cls.__name__}", *_clause_and_cell(cls)) for cls in _CLASSES
}
