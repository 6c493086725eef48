"""`sqlite:` — the embedded reference store, safe across processes over one file.

Design (each line answers a clause of CONTRACT section 1):
- WAL journal, `synchronous=NORMAL` by default (durable across process crashes; pass
  `synchronous=FULL` for power-loss durability).
- Every fenced mutation and every lease operation is one `BEGIN IMMEDIATE` transaction that
  reads the clock, checks the fence and mutates; the mutation's own statement pins owner and
  epoch again (`atomic-fence`, defence in depth against a check that drifts from the write).
- One `leases` row per run is never deleted: it is the epoch high-water mark that survives
  release and delete (`epoch-monotonic`).
- Expiry is judged by the store's clock, read inside the write lock (`store-clock`); the factory
  takes `clock=` and the store declares `injectable_clock = True`, so suites can drive it.
- Blobs live in the same database, so a blob write and its fence commit together.
- SQLite's busy and locked errors become `StoreBusyError` here and nowhere else; the
  transaction is rolled back first, so nothing was written.
- A transaction waits for the write lock by polling it (`_waiting`: 20 us doubling to 1 ms, up to
  `busy_timeout_ms`), not in SQLite's own busy handler, whose 1-100 ms sleeps leave the lock idle while
  its holder works between calls (docs/performance.md; `SOAK_SQLITE_POLL=0` restores the handler).
- Bootstrap sets `busy_timeout` before switching to WAL and retries as a unit under a
  wall-clock bound, so many processes may open one fresh file at once (`concurrent-boot`).
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
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

__all__ = ["SqliteStore", "open_sqlite", "is_busy"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS leases (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL,"
    " epoch INTEGER NOT NULL, expires_at REAL NOT NULL, released INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS journal (run_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " payload BLOB NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (run_id TEXT PRIMARY KEY, status TEXT NOT NULL,"
    " segments INTEGER NOT NULL, payload BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS blobs (ref TEXT PRIMARY KEY, run_id TEXT NOT NULL, data BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS blobs_by_run ON blobs (run_id)",
)

# The fence pinned into a mutation's own statement: the row must still name this tenure.
_PIN = "EXISTS (SELECT 1 FROM leases WHERE run_id = ? AND owner = ? AND epoch = ? AND released = 0)"

_BUSY_CODES = {5, 6, 261, 262, 517}  # SQLITE_BUSY, SQLITE_LOCKED and their extended codes


_POLL = os.environ.get("SOAK_SQLITE_POLL", "1") != "0"


def is_busy(exc: BaseException) -> bool:
    """True for SQLite's transient lock contention errors."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code in _BUSY_CODES
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _pin_args(lease: Lease) -> tuple[str, str, int]:
    return (lease.run_id, lease.owner, lease.epoch)


class _SqliteBlobs:
    """The transcript blob store sharing the run store's connection and fencing domain."""

    fenced_writes = True

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None:
        run_id = ref_run(ref)
        with self._store._fenced(run_id, lease) as conn:
            pin, args = self._store._guard(lease)
            cur = conn.execute(
                "INSERT INTO blobs (ref, run_id, data) SELECT ?, ?, ? WHERE " + pin
                + " ON CONFLICT (ref) DO UPDATE SET data = excluded.data",
                (ref, run_id, bytes(blob), *args),
            )
            self._store._pinned(cur, run_id, lease)

    def get(self, ref: str) -> bytes | None:
        row = self._store._read("SELECT data FROM blobs WHERE ref = ?", (ref,), one=True)
        return None if row is None else bytes(row[0])

    def list(self, run_id: str) -> list[str]:
        rows = self._store._read("SELECT ref FROM blobs WHERE run_id = ? ORDER BY ref", (run_id,))
        return [r[0] for r in rows]

    def delete(self, ref: str, lease: Lease | None = None) -> None:
        run_id = ref_run(ref)
        with self._store._fenced(run_id, lease) as conn:
            pin, args = self._store._guard(lease)
            conn.execute("DELETE FROM blobs WHERE ref = ? AND " + pin, (ref, *args))


class SqliteStore:
    """The fenced run store over one SQLite file, safe across processes."""

    fenced_writes = True
    #: the factory takes `clock=` and expiry is judged by it alone (CONTRACT: an injectable clock)
    injectable_clock = True
    _APPEND_SQL = "INSERT INTO journal (run_id, seq, payload) SELECT ?, ?, ? WHERE "

    def __init__(
        self,
        path: str,
        lease_ttl_ms: int = 250,
        *,
        busy_timeout_ms: int = 5000,
        boot_timeout_ms: int = 15000,
        synchronous: str = "NORMAL",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.path = str(path)
        self.lease_ttl_ms = int(lease_ttl_ms)
        self.busy_timeout_ms = int(busy_timeout_ms)
        self.synchronous = synchronous.upper()
        self._clock = clock
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = self._boot(int(boot_timeout_ms))
        self.transcripts = _SqliteBlobs(self)

    # -- connection plumbing ----------------------------------------------------------------

    def _boot(self, boot_timeout_ms: int) -> sqlite3.Connection:
        deadline = time.monotonic() + boot_timeout_ms / 1000.0
        delay = 0.002
        while True:
            conn = None
            try:
                conn = sqlite3.connect(
                    self.path, timeout=self.busy_timeout_ms / 1000.0, isolation_level=None, check_same_thread=False
                )
                conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")  # before the journal mode
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise sqlite3.OperationalError(f"database is locked (journal_mode stayed {mode})")
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in _SCHEMA:
                        conn.execute(stmt)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                if _POLL:
                    conn.execute("PRAGMA busy_timeout = 0")  # the store waits for the lock itself (`_waiting`)
                return conn
            except sqlite3.OperationalError as exc:
                if conn is not None:
                    conn.close()
                if not is_busy(exc) or time.monotonic() >= deadline:
                    if is_busy(exc):
                        raise StoreBusyError(
                            f"sqlite bootstrap of {self.path} stayed busy for {boot_timeout_ms} ms: {exc}"
                        ) from exc
                    raise
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.1)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError("store is closed")
        return self._conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction; busy errors roll back and become StoreBusyError."""
        with self._lock:
            conn = self._connection()
            try:
                self._waiting(lambda: conn.execute("BEGIN IMMEDIATE"))
            except sqlite3.OperationalError as exc:
                if is_busy(exc):
                    raise StoreBusyError(f"sqlite busy: {exc}") from exc
                raise
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if is_busy(exc):
                    raise StoreBusyError(f"sqlite busy: {exc}") from exc
                raise

    def _waiting(self, statement: Callable[[], sqlite3.Cursor]) -> sqlite3.Cursor:
        """`statement()`, tried again while SQLite answers busy, for at most `busy_timeout_ms`.

        SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between tries, while a write holds the lock for some
        50 us: every waiter sleeps through dozens of writes, and the lock sits free while its holder does the work
        around its calls. Polled from here every 20 us at first (doubling to 1 ms, with jitter), whoever is running
        when the lock frees takes it."""
        if not _POLL:
            return statement()
        deadline = 0.0
        delay = 20e-6
        while True:
            try:
                return statement()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                now = time.monotonic()
                if not deadline:
                    deadline = now + self.busy_timeout_ms / 1000.0
                elif now >= deadline:
                    raise
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 1e-3)

    def _read(self, sql: str, args: tuple, *, one: bool = False):
        with self._lock:
            try:
                cur = self._waiting(lambda: self._connection().execute(sql, args))
                return cur.fetchone() if one else cur.fetchall()
            except sqlite3.OperationalError as exc:
                if is_busy(exc):
                    raise StoreBusyError(f"sqlite busy: {exc}") from exc
                raise

    def _tenure(self, conn: sqlite3.Connection, run_id: str):
        return conn.execute(
            "SELECT owner, epoch, expires_at, released FROM leases WHERE run_id = ?", (run_id,)
        ).fetchone()

    def _holder(self, run_id: str, row, now: float) -> Lease | None:
        if row is None or row[3] or now >= row[2]:
            return None
        return Lease(run_id, row[0], row[1])

    def _check(self, conn: sqlite3.Connection, run_id: str, lease: Lease, now: float, *, allow_expired: bool = False):
        row = self._tenure(conn, run_id)
        if lease.run_id != run_id:
            raise LeaseHeldError(
                run_id, self._holder(run_id, row, now), f"lease for run {lease.run_id!r} used on run {run_id!r}"
            )
        if row is None or row[3] or (row[0], row[1]) != (lease.owner, lease.epoch):
            raise LeaseHeldError(run_id, self._holder(run_id, row, now), f"lease {lease} is not the current tenure")
        if not allow_expired and now >= row[2]:
            raise LeaseHeldError(run_id, None, f"lease {lease} has expired")

    @contextmanager
    def _fenced(self, run_id: str, lease: Lease | None) -> Iterator[sqlite3.Connection]:
        with self._tx() as conn:
            if lease is not None:
                self._check(conn, run_id, lease, self._clock())
            yield conn

    @staticmethod
    def _guard(lease: Lease | None) -> tuple[str, tuple]:
        """The fence pinned into a mutation's own statement (always true without a lease)."""
        return ("1", ()) if lease is None else (_PIN, _pin_args(lease))

    @staticmethod
    def _pinned(cur: sqlite3.Cursor, run_id: str, lease: Lease | None) -> None:
        if lease is not None and cur.rowcount != 1:
            raise LeaseHeldError(run_id, None, f"lease {lease} lost its tenure inside the transaction")

    def _ttl_s(self) -> float:
        """How long a grant or renewal lasts on the store's clock."""
        return self.lease_ttl_ms / 1000.0

    # -- leases -----------------------------------------------------------------------------

    def acquire(self, run_id: str, owner: str) -> Lease:
        with self._tx() as conn:
            now = self._clock()
            row = self._tenure(conn, run_id)
            live = self._holder(run_id, row, now)
            if live is not None:
                raise LeaseHeldError(run_id, live)
            epoch = (row[1] if row else 0) + 1
            conn.execute(
                "INSERT INTO leases (run_id, owner, epoch, expires_at, released) VALUES (?, ?, ?, ?, 0)"
                " ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch,"
                " expires_at = excluded.expires_at, released = 0",
                (run_id, owner, epoch, now + self._ttl_s()),
            )
            return Lease(run_id, owner, epoch)

    def renew(self, lease: Lease) -> Lease:
        with self._tx() as conn:
            now = self._clock()
            self._check(conn, lease.run_id, lease, now)
            cur = conn.execute(
                "UPDATE leases SET expires_at = ? WHERE run_id = ? AND owner = ? AND epoch = ? AND released = 0",
                (now + self._ttl_s(), *_pin_args(lease)),
            )
            self._pinned(cur, lease.run_id, lease)
            return lease

    def release(self, lease: Lease) -> None:
        with self._tx() as conn:
            now = self._clock()
            # An expired tenure nobody superseded may still be released: it ends only itself.
            self._check(conn, lease.run_id, lease, now, allow_expired=True)
            cur = conn.execute(
                "UPDATE leases SET released = 1 WHERE run_id = ? AND owner = ? AND epoch = ? AND released = 0",
                _pin_args(lease),
            )
            self._pinned(cur, lease.run_id, lease)

    # -- journal and meta -------------------------------------------------------------------

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        with self._fenced(run_id, lease) as conn:
            self._order_guard(conn, run_id, entry)
            pin, args = self._guard(lease)
            cur = conn.execute(
                self._APPEND_SQL + pin,
                (run_id, entry.seq, bytes(entry.payload), *args),
            )
            self._pinned(cur, run_id, lease)

    @staticmethod
    def _order_guard(conn: sqlite3.Connection, run_id: str, entry: JournalEntry) -> None:
        tail = conn.execute("SELECT MAX(seq) FROM journal WHERE run_id = ?", (run_id,)).fetchone()[0] or 0
        if entry.seq <= tail:
            raise JournalOrderError(f"append seq {entry.seq} to run {run_id!r} is not above the tail {tail}")

    def load(self, run_id: str) -> list[JournalEntry]:
        rows = self._read("SELECT seq, payload FROM journal WHERE run_id = ? ORDER BY seq", (run_id,))
        return [JournalEntry(seq, bytes(payload)) for seq, payload in rows]

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        if meta.status not in RUN_STATUSES:
            raise ValueError(f"RunMeta.status {meta.status!r} is not one of {RUN_STATUSES}")
        with self._fenced(meta.run_id, lease) as conn:
            pin, args = self._guard(lease)
            cur = conn.execute(
                "INSERT INTO meta (run_id, status, segments, payload) SELECT ?, ?, ?, ? WHERE " + pin
                + " ON CONFLICT (run_id) DO UPDATE SET status = excluded.status,"
                " segments = excluded.segments, payload = excluded.payload",
                (meta.run_id, meta.status, meta.segments, bytes(meta.payload), *args),
            )
            self._pinned(cur, meta.run_id, lease)

    def get_meta(self, run_id: str) -> RunMeta | None:
        row = self._read("SELECT status, segments, payload FROM meta WHERE run_id = ?", (run_id,), one=True)
        return None if row is None else RunMeta(run_id, row[0], row[1], bytes(row[2]))

    def list_runs(self) -> list[RunMeta]:
        rows = self._read("SELECT run_id, status, segments, payload FROM meta ORDER BY run_id", ())
        return [RunMeta(r, s, n, bytes(p)) for r, s, n, p in rows]

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        with self._fenced(run_id, lease) as conn:
            pin, args = self._guard(lease)
            conn.execute("DELETE FROM journal WHERE run_id = ? AND " + pin, (run_id, *args))
            conn.execute("DELETE FROM meta WHERE run_id = ? AND " + pin, (run_id, *args))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def open_sqlite(
    location: str,
    *,
    lease_ttl_ms: int,
    path: str | None = None,
    busy_timeout_ms: str | int = 5000,
    boot_timeout_ms: str | int = 15000,
    synchronous: str = "NORMAL",
    clock: Callable[[], float] | None = None,
) -> SqliteStore:
    """Factory for `sqlite:` (a `store.db` inside the location) and `sqlite:///abs/path.db`."""
    target = path or os.path.join(location, "store.db")
    return SqliteStore(
        target,
        lease_ttl_ms,
        busy_timeout_ms=int(busy_timeout_ms),
        boot_timeout_ms=int(boot_timeout_ms),
        synchronous=synchronous,
        clock=clock or time.time,
    )
