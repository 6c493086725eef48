"""Small stores for the conformance and boot-storm tests of the contract's edges (issue 15).

Some are correct stores that make a choice the contract leaves open, or that were written the way an outside
vendor would write one (`sqlite3` with its defaults, no injectable clock); they must pass. Others misbehave the
way real stores do (answer busy forever, hang in a call, kill their process); the suite must say so by the
right clause, and keep going. The tests name them by spec (`tests.contract_stores:open_...`).
"""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

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
from soak.stores.sqlite import SqliteStore, _SqliteBlobs


# -- correct stores ---------------------------------------------------------------------------------

class DeleteEndsTenure(SqliteStore):
    """The reference store, except that a fenced delete also ends the deleting tenure (marks its lease row
    released in the same transaction): the other reading of `delete` the contract allows. The row stays, so the
    epoch high-water mark survives."""

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        with self._fenced(run_id, lease) as conn:
            pin, args = self._guard(lease)
            conn.execute("DELETE FROM journal WHERE run_id = ? AND " + pin, (run_id, *args))
            conn.execute("DELETE FROM meta WHERE run_id = ? AND " + pin, (run_id, *args))
            if lease is not None:
                cur = conn.execute("UPDATE leases SET released = 1 WHERE run_id = ? AND owner = ? AND epoch = ?"
                                   " AND released = 0", (run_id, lease.owner, lease.epoch))
                self._pinned(cur, run_id, lease)


def open_delete_ends_tenure(location: str, *, lease_ttl_ms: int, clock=None) -> DeleteEndsTenure:
    """`DeleteEndsTenure` over `store.db` in the location (it declares the injectable clock, as its base does)."""
    return DeleteEndsTenure(os.path.join(location, "store.db"), lease_ttl_ms, clock=clock or time.time)


class NoClockSqlite(SqliteStore):
    """The reference store without the injectable-clock declaration: suites must run it in real time."""

    injectable_clock = False


class NoClockSplitFence(NoClockSqlite):
    """The split-fence mutant (fence in one transaction, mutation in the next) without the clock declaration:
    the real-time positioning of a takeover must still catch it."""

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


def open_no_clock(location: str, *, lease_ttl_ms: int) -> NoClockSqlite:
    """`NoClockSqlite` over `store.db` in the location."""
    return NoClockSqlite(os.path.join(location, "store.db"), lease_ttl_ms)


def open_no_clock_split_fence(location: str, *, lease_ttl_ms: int) -> NoClockSplitFence:
    """`NoClockSplitFence` over `store.db` in the location."""
    return NoClockSplitFence(os.path.join(location, "store.db"), lease_ttl_ms)


class LateAnswers(NoClockSqlite):
    """A correct store in real time whose acquire and renew answer 1.2 ttl after they took effect, as a child
    process starved of CPU does: every tenure the harness is handed has lapsed, so a real-time check cannot tell
    whether the store kept it live for the ttl. The suite must say it could not decide, never that the store
    failed."""

    def acquire(self, run_id: str, owner: str) -> Lease:
        lease = super().acquire(run_id, owner)
        time.sleep(1.2 * self.lease_ttl_ms / 1000.0)
        return lease

    def renew(self, lease: Lease) -> Lease:
        out = super().renew(lease)
        time.sleep(1.2 * self.lease_ttl_ms / 1000.0)
        return out


def open_late_answers(location: str, *, lease_ttl_ms: int) -> LateAnswers:
    """`LateAnswers` over `store.db` in the location."""
    return LateAnswers(os.path.join(location, "store.db"), lease_ttl_ms)


def open_no_clock_mutant(location: str, *, lease_ttl_ms: int, mutant: str) -> SqliteStore:
    """`mutant:NAME` without the injectable-clock declaration: the suite must catch it in real time."""
    from soak.stores.mutants import MUTANTS

    cls = type(f"NoClock{MUTANTS[mutant].store.__name__}", (MUTANTS[mutant].store,), {"injectable_clock": False})
    return cls(os.path.join(location, "store.db"), lease_ttl_ms)


# -- a store written from CONTRACT section 1 by an outside vendor -------------------------------------

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS leases (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, epoch INTEGER NOT NULL,"
    " expires_at REAL NOT NULL, released INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS journal (run_id TEXT NOT NULL, seq INTEGER NOT NULL, payload BLOB NOT NULL,"
    " PRIMARY KEY (run_id, seq))",
    "CREATE TABLE IF NOT EXISTS meta (run_id TEXT PRIMARY KEY, status TEXT NOT NULL, segments INTEGER NOT NULL,"
    " payload BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS blobs (ref TEXT PRIMARY KEY, run_id TEXT NOT NULL, data BLOB NOT NULL)",
)


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


class VendorBlobs:
    """Blobs in the same database file, fenced by the run their ref names."""

    fenced_writes = True

    def __init__(self, store: VendorStore) -> None:
        self._store = store

    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None:
        run_id = ref_run(ref)
        with self._store._write(run_id, lease) as conn:
            conn.execute("INSERT OR REPLACE INTO blobs (ref, run_id, data) VALUES (?, ?, ?)", (ref, run_id, bytes(blob)))

    def get(self, ref: str) -> bytes | None:
        rows = self._store._read("SELECT data FROM blobs WHERE ref = ?", (ref,))
        return bytes(rows[0][0]) if rows else None

    def list(self, run_id: str) -> list[str]:
        return [r[0] for r in self._store._read("SELECT ref FROM blobs WHERE run_id = ? ORDER BY ref", (run_id,))]

    def delete(self, ref: str, lease: Lease | None = None) -> None:
        with self._store._write(ref_run(ref), lease) as conn:
            conn.execute("DELETE FROM blobs WHERE ref = ?", (ref,))


class VendorStore:
    """A fenced run store over one SQLite file as someone outside the team wrote it from the contract alone:
    `sqlite3.connect(path)` with its defaults (same-thread check on, default isolation level, 5 s busy timeout,
    rollback journal), `BEGIN IMMEDIATE` around every fence check and its mutation, `time.time()` for expiry, a
    lease row per run that is never deleted (the epoch high-water mark), no injectable clock. Its choices: an
    operation under an expired tenure is refused; a fenced delete keeps the tenure."""

    fenced_writes = True

    def __init__(self, location: str, lease_ttl_ms: int) -> None:
        self.lease_ttl_ms = int(lease_ttl_ms)
        self._path = os.path.join(location, "vendor.db")
        self._conn: sqlite3.Connection | None = self._connect()
        self.transcripts = VendorBlobs(self)

    def _connect(self) -> sqlite3.Connection:
        deadline = time.monotonic() + 30
        while True:
            conn = sqlite3.connect(self._path)
            try:
                conn.execute("BEGIN IMMEDIATE")
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                conn.commit()
                return conn
            except sqlite3.OperationalError as exc:
                conn.close()
                if not _locked(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError("store is closed")
        return self._conn

    @contextmanager
    def _write(self, run_id: str, lease: Lease | None) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction: the fence is checked and the mutation made under the write lock."""
        conn = self._db
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _locked(exc):
                raise StoreBusyError(f"database is locked: {exc}") from exc
            raise
        try:
            if lease is not None:
                self._fence(conn, run_id, lease, time.time())
            yield conn
            conn.commit()
        except BaseException as exc:
            conn.rollback()
            if _locked(exc):
                raise StoreBusyError(f"database is locked: {exc}") from exc
            raise

    def _read(self, sql: str, args: tuple) -> list:
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if _locked(exc):
                raise StoreBusyError(f"database is locked: {exc}") from exc
            raise

    @staticmethod
    def _row(conn: sqlite3.Connection, run_id: str):
        return conn.execute("SELECT owner, epoch, expires_at, released FROM leases WHERE run_id = ?",
                            (run_id,)).fetchone()

    @staticmethod
    def _live(run_id: str, row, now: float) -> Lease | None:
        if row is None or row[3] or now >= row[2]:
            return None
        return Lease(run_id, row[0], row[1])

    def _fence(self, conn: sqlite3.Connection, run_id: str, lease: Lease, now: float) -> None:
        row = self._row(conn, run_id)
        if lease.run_id != run_id:
            raise LeaseHeldError(run_id, self._live(run_id, row, now), f"a lease for {lease.run_id!r} used on {run_id!r}")
        if self._live(run_id, row, now) != lease:
            raise LeaseHeldError(run_id, self._live(run_id, row, now), f"{lease} is not the live tenure")

    def acquire(self, run_id: str, owner: str) -> Lease:
        with self._write(run_id, None) as conn:
            now = time.time()
            row = self._row(conn, run_id)
            live = self._live(run_id, row, now)
            if live is not None:
                raise LeaseHeldError(run_id, live)
            epoch = (row[1] if row else 0) + 1
            conn.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, 0)",
                         (run_id, owner, epoch, now + self.lease_ttl_ms / 1000.0))
            return Lease(run_id, owner, epoch)

    def renew(self, lease: Lease) -> Lease:
        with self._write(lease.run_id, lease) as conn:
            conn.execute("UPDATE leases SET expires_at = ? WHERE run_id = ?",
                         (time.time() + self.lease_ttl_ms / 1000.0, lease.run_id))
        return lease

    def release(self, lease: Lease) -> None:
        with self._write(lease.run_id, lease) as conn:
            conn.execute("UPDATE leases SET released = 1 WHERE run_id = ?", (lease.run_id,))

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        with self._write(run_id, lease) as conn:
            tail = conn.execute("SELECT MAX(seq) FROM journal WHERE run_id = ?", (run_id,)).fetchone()[0]
            if tail is not None and entry.seq <= tail:
                raise JournalOrderError(f"seq {entry.seq} is not above the tail {tail} of {run_id!r}")
            if tail is None and entry.seq <= 0:
                raise JournalOrderError(f"seq {entry.seq} is not above the tail 0 of {run_id!r}")
            conn.execute("INSERT INTO journal VALUES (?, ?, ?)", (run_id, entry.seq, bytes(entry.payload)))

    def load(self, run_id: str) -> list[JournalEntry]:
        rows = self._read("SELECT seq, payload FROM journal WHERE run_id = ? ORDER BY seq", (run_id,))
        return [JournalEntry(seq, bytes(p)) for seq, p in rows]

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        if meta.status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {meta.status!r}")
        with self._write(meta.run_id, lease) as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?, ?, ?)",
                         (meta.run_id, meta.status, meta.segments, bytes(meta.payload)))

    def get_meta(self, run_id: str) -> RunMeta | None:
        rows = self._read("SELECT status, segments, payload FROM meta WHERE run_id = ?", (run_id,))
        return RunMeta(run_id, rows[0][0], rows[0][1], bytes(rows[0][2])) if rows else None

    def list_runs(self) -> list[RunMeta]:
        rows = self._read("SELECT run_id, status, segments, payload FROM meta ORDER BY run_id", ())
        return [RunMeta(r, s, n, bytes(p)) for r, s, n, p in rows]

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        with self._write(run_id, lease) as conn:
            conn.execute("DELETE FROM journal WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM meta WHERE run_id = ?", (run_id,))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def open_store(location: str, *, lease_ttl_ms: int, **options: str) -> VendorStore:
    """The vendor's factory: it takes (and ignores) any option, as factories written with `**options` do."""
    return VendorStore(location, lease_ttl_ms)


# -- stores that misbehave ----------------------------------------------------------------------------

class _Busy:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        raise StoreBusyError("always busy")


class AlwaysBusy:
    """Opens fine, then answers `StoreBusyError` to every call (close aside): nothing can ever be decided."""

    fenced_writes = True

    def __init__(self, lease_ttl_ms: int) -> None:
        self.lease_ttl_ms = lease_ttl_ms
        busy = _Busy()
        for name in ("acquire", "renew", "release", "append", "load", "put_meta", "get_meta", "list_runs", "delete"):
            setattr(self, name, busy)
        self.transcripts = type("BusyBlobs", (), {"fenced_writes": True, "put": busy, "get": busy, "list": busy,
                                                  "delete": busy})()

    def close(self) -> None:
        pass


def open_always_busy(location: str, *, lease_ttl_ms: int) -> AlwaysBusy:
    """`AlwaysBusy`."""
    return AlwaysBusy(lease_ttl_ms)


_boots = {"n": 0}


def open_busy_at_boot(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    """The reference store behind a factory that answers `StoreBusyError` to every other open in a process (the
    first included): bootstrap contention reported the way the contract allows, which every caller must retry."""
    _boots["n"] += 1
    if _boots["n"] % 2:
        raise StoreBusyError("bootstrap busy: another process is creating the schema")
    extra = {"clock": clock} if clock is not None else {}
    return SqliteStore(os.path.join(location, "store.db"), lease_ttl_ms=lease_ttl_ms, **extra)


class HangingPutMeta(SqliteStore):
    """The reference store whose `put_meta` never returns (a lost reply, a lock never granted)."""

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        threading.Event().wait()


class HangingCancelledMeta(SqliteStore):
    """The reference store whose `put_meta` of a `cancelled` status never returns: a hang on a small share of
    calls (conformance writes that status once, in meta-last-write's fenced-meta)."""

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        if meta.status == "cancelled":
            threading.Event().wait()
        super().put_meta(meta, lease)


class SegfaultOnBlobDelete(SqliteStore):
    """The reference store whose blob delete kills its process with SIGSEGV (a crash in a native driver)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transcripts = _SegfaultingBlobs(self)


class _SegfaultingBlobs(_SqliteBlobs):
    def delete(self, ref: str, lease: Lease | None = None) -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # leave no core file behind
        os.kill(os.getpid(), signal.SIGSEGV)


class ExitOnRenew(SqliteStore):
    """The reference store whose `renew` ends its process with `os._exit(3)` (a driver that exits on error)."""

    def renew(self, lease: Lease) -> Lease:
        os._exit(3)


def _factory(cls: type[SqliteStore], name: str):
    def open_it(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
        return cls(os.path.join(location, "store.db"), lease_ttl_ms, clock=clock or time.time)

    open_it.__name__ = open_it.__qualname__ = name  # pickles by reference into the conformance child
    open_it.__doc__ = cls.__doc__
    return open_it


open_hanging_put_meta = _factory(HangingPutMeta, "open_hanging_put_meta")
open_hanging_cancelled_meta = _factory(HangingCancelledMeta, "open_hanging_cancelled_meta")
open_segfault_on_blob_delete = _factory(SegfaultOnBlobDelete, "open_segfault_on_blob_delete")
open_exit_on_renew = _factory(ExitOnRenew, "open_exit_on_renew")


class MixedDelete(SqliteStore):
    """A fenced delete that ends the deleting tenure for runs with one-letter names and keeps it for the others:
    a store that makes neither choice of the contract consistently."""

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        super().delete(run_id, lease)
        if lease is not None and len(run_id) == 1:
            with self._tx() as conn:
                conn.execute("UPDATE leases SET released = 1 WHERE run_id = ? AND owner = ? AND epoch = ?",
                             (run_id, lease.owner, lease.epoch))


open_mixed_delete = _factory(MixedDelete, "open_mixed_delete")


class SlowFirstAppend(SqliteStore):
    """The reference store whose first append on each store object waits out twice the ttl before it runs, so the
    tenure it carries has lapsed and is refused (as the reference store refuses an expired tenure): the boot
    storm's round trip must make the trip again, not count a failure."""

    _waited = False

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        if not self._waited:
            self._waited = True
            time.sleep(2 * self.lease_ttl_ms / 1000.0)
        super().append(run_id, entry, lease)


class RefusesLiveAppend(SqliteStore):
    """The reference store whose leased append is refused at once, although the tenure is live (live-accepted):
    a boot-storm round trip refused within the ttl is a failure."""

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        if lease is not None:
            raise LeaseHeldError(run_id, None, "refused for no reason")
        super().append(run_id, entry, lease)


open_slow_first_append = _factory(SlowFirstAppend, "open_slow_first_append")
open_refuses_live_append = _factory(RefusesLiveAppend, "open_refuses_live_append")


def open_misdeclared_clock(location: str, *, lease_ttl_ms: int) -> SqliteStore:
    """The reference store (which declares `injectable_clock = True`) from a factory that takes no `clock=`:
    a declaration the factory does not honour, which suites must refuse as a boot error naming the fix."""
    return SqliteStore(os.path.join(location, "store.db"), lease_ttl_ms)


class SlowBlobPut(NoClockSqlite):
    """A correct store in real time whose blob put takes 80 ms before it writes (as a loaded machine makes it): longer
    than the 60 ms real-time tenure of the atomic-fence trials, so each one's setup blob put is refused, rightly."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        put = self.transcripts.put

        def slow_put(ref, blob, lease=None):
            time.sleep(0.08)
            put(ref, blob, lease)

        self.transcripts.put = slow_put  # type: ignore[method-assign]


def open_slow_blob_put(location: str, *, lease_ttl_ms: int) -> SlowBlobPut:
    return SlowBlobPut(os.path.join(location, "store.db"), lease_ttl_ms)
