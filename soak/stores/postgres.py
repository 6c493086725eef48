"""`postgresql://...` — the networked reference store over PostgreSQL (psycopg 3).

Design (each line answers a clause of CONTRACT section 1):
- The location names a schema, `soak_<hash of the location's real path>`, created by an idempotent
  bootstrap under a transaction-level advisory lock (`concurrent-boot`); the schema's comment is the
  location, so `cleanup(root)` drops every schema of a location at or under `root`.
- Every call is one statement in autocommit mode, so it is one transaction. A fenced mutation's
  statement starts with a CTE that reads the caller's tenure row `FOR SHARE`: under READ COMMITTED
  the row is locked and its predicate (owner, epoch, not released, unexpired) re-checked on the
  newest version before the write, and a takeover (which updates that row) waits until the write
  commits (`atomic-fence`). The statement returns whether the fence held, so a refusal is typed.
- The journal's order guard is a `tails` row per run, upserted only where the new seq is above it:
  the check and the insert are one statement on a locked row (`journal-a5`).
- One `leases` row per run is never deleted: the epoch high-water mark (`epoch-monotonic`).
- Expiry is judged by the database's clock, `clock_timestamp()` at the statement (`store-clock`):
  the store declares no injectable clock.
- Driver errors are mapped here and nowhere else: serialization failure, deadlock and lock
  timeout end the statement, so nothing was written (`StoreBusyError`); a connection lost while a
  statement was in flight (it may have committed) is re-raised as it is, indeterminate, and the next
  call reconnects.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import Any

import psycopg
from psycopg import errors as pgerr

from soak.spi import (
    RUN_STATUSES,
    JournalEntry,
    JournalOrderError,
    Lease,
    LeaseHeldError,
    RunMeta,
    StoreBusyError,
)
from soak.stores._blobs import SharedBlobs

__all__ = ["PostgresStore", "cleanup_postgres", "namespace", "open_postgres"]

#: store options a spec may carry; every other `?key=value` is a libpq connection parameter
STORE_OPTIONS = ("boot_timeout_ms", "connect_timeout_s", "lock_timeout_ms")

_TABLES = (
    "CREATE TABLE IF NOT EXISTS {s}.leases (run_id text PRIMARY KEY, owner text NOT NULL,"
    " epoch bigint NOT NULL, expires_at timestamptz NOT NULL, released boolean NOT NULL DEFAULT false)",
    "CREATE TABLE IF NOT EXISTS {s}.journal (run_id text NOT NULL, seq bigint NOT NULL, payload bytea NOT NULL,"
    " PRIMARY KEY (run_id, seq))",
    "CREATE TABLE IF NOT EXISTS {s}.tails (run_id text PRIMARY KEY, tail bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.meta (run_id text PRIMARY KEY, status text NOT NULL, segments bigint NOT NULL,"
    " payload bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.blobs (ref text PRIMARY KEY, run_id text NOT NULL, data bytea NOT NULL)",
    "CREATE INDEX IF NOT EXISTS blobs_by_run ON {s}.blobs (run_id)",
)

#: the tenure row, locked and re-checked on its newest version: the fence of every leased mutation
_FENCE = ("SELECT 1 FROM leases WHERE run_id = %(fr)s AND owner = %(fo)s AND epoch = %(fe)s AND NOT released"
          " AND expires_at > {now} FOR SHARE")
_NO_FENCE = "SELECT 1"

#: SQLSTATEs that end the statement (and so its transaction) with nothing written
_BUSY = (pgerr.SerializationFailure, pgerr.DeadlockDetected, pgerr.LockNotAvailable)


def namespace(location: str) -> str:
    """The schema a location's data lives in."""
    return "soak_" + hashlib.sha256(os.path.realpath(location).encode()).hexdigest()[:24]


def _connect(dsn: str, schema: str | None, connect_timeout_s: float, lock_timeout_ms: int) -> psycopg.Connection:
    options = f"-c lock_timeout={int(lock_timeout_ms)}"
    if schema:
        options += f" -c search_path={schema}"
    return psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, round(connect_timeout_s)),
                           application_name=f"soak:{schema or 'admin'}", options=options)


class PostgresStore:
    """The fenced run store over one PostgreSQL schema, safe across processes and hosts."""

    fenced_writes = True
    #: how the store reads the time at a statement (a mutant reads the caller's)
    NOW = "clock_timestamp()"

    def __init__(self, dsn: str, location: str, lease_ttl_ms: int = 250, *, lock_timeout_ms: int = 2000,
                 connect_timeout_s: float = 10.0, boot_timeout_ms: int = 30000) -> None:
        self.dsn = dsn
        self.schema = namespace(location)
        self.location = os.path.realpath(location)
        self.lease_ttl_ms = int(lease_ttl_ms)
        self.lock_timeout_ms = int(lock_timeout_ms)
        self.connect_timeout_s = float(connect_timeout_s)
        self._conn: psycopg.Connection | None = None
        self._closed = False
        self._boot(int(boot_timeout_ms))
        self.transcripts = SharedBlobs(self)

    # -- connection plumbing ----------------------------------------------------------------

    def _boot(self, boot_timeout_ms: int) -> None:
        """Create the schema and its tables if missing; many processes may boot one location at once."""
        conn = self._connection()
        if conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.blobs",)).fetchone()[0] is not None:
            return
        deadline = time.monotonic() + boot_timeout_ms / 1000.0
        while True:
            try:
                with conn.transaction():
                    # one booter at a time per schema; the lock ends with the transaction
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('soak-boot'), hashtext(%s))", (self.schema,))
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
                    for stmt in _TABLES:
                        conn.execute(stmt.format(s=self.schema))
                    conn.execute(f"COMMENT ON SCHEMA {self.schema} IS {_literal(self.location)}")
                return
            except _BUSY as exc:
                if time.monotonic() >= deadline:
                    raise StoreBusyError(f"postgresql bootstrap of {self.schema} stayed busy: {exc}") from exc
                time.sleep(0.01)

    def _connection(self) -> psycopg.Connection:
        if self._closed:
            raise ValueError("store is closed")
        if self._conn is not None and self._conn.broken:
            self._conn.close()
            self._conn = None
        if self._conn is None:
            try:
                self._conn = _connect(self.dsn, self.schema, self.connect_timeout_s, self.lock_timeout_ms)
            except psycopg.OperationalError as exc:
                # nothing was sent: the call surely wrote nothing
                raise StoreBusyError(f"postgresql connection failed: {_one_line(exc)}") from exc
        return self._conn

    def _execute(self, sql: str, params: dict[str, Any]) -> list[tuple]:
        """One statement, one transaction; driver errors mapped at this boundary."""
        conn = self._connection()
        try:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description is not None else []
        except _BUSY as exc:
            raise StoreBusyError(f"postgresql {type(exc).__name__}: {_one_line(exc)}") from exc
        except psycopg.OperationalError as exc:
            self._drop()
            return self._lost(exc)

    def _drop(self) -> None:
        """Forget the connection after a driver error: the next call connects afresh. psycopg does not always mark
        such a connection broken: after `connection socket closed` it answered every later statement `another
        command is already in progress`, so a storm judged a superseded holder's untyped answers, long after the
        cut, as refusals of the wrong type."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a connection already failed; closing it is a courtesy
                pass

    def _lost(self, exc: psycopg.OperationalError) -> Any:
        """A statement whose connection failed may have committed: indeterminate (reconnect on the next call)."""
        raise exc

    def _read(self, sql: str, params: dict[str, Any], *, one: bool = False):
        rows = self._execute(sql, params)
        return (rows[0] if rows else None) if one else rows

    def _now_params(self) -> dict[str, Any]:
        return {}

    def _fence_sql(self, lease: Lease | None) -> str:
        return _NO_FENCE if lease is None else _FENCE.format(now=self.NOW)

    def _mutate(self, run_id: str, lease: Lease | None, writes: str, params: dict[str, Any]) -> int:
        """One statement: the CTE `fence`, then `writes` (CTEs reading it, the last named `w`); LeaseHeldError when the fence refused, else the rows `w` returned."""
        self._run_match(run_id, lease)
        sql = (f"WITH fence AS MATERIALIZED ({self._fence_sql(lease)}), {writes}"
               " SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM w)")
        fenced, written = self._execute(sql, {**params, **self._fence_params(lease)})[0]
        if not fenced:
            raise LeaseHeldError(run_id, self._holder(run_id), f"lease {lease} is not the current live tenure")
        return written

    def _fence_params(self, lease: Lease | None) -> dict[str, Any]:
        if lease is None:
            return {}
        return {"fr": lease.run_id, "fo": lease.owner, "fe": lease.epoch, **self._now_params()}

    def _run_match(self, run_id: str, lease: Lease | None) -> None:
        if lease is not None and lease.run_id != run_id:
            raise LeaseHeldError(run_id, self._holder(run_id), f"lease for run {lease.run_id!r} used on run {run_id!r}")

    def _holder(self, run_id: str) -> Lease | None:
        row = self._read(f"SELECT owner, epoch FROM leases WHERE run_id = %(r)s AND NOT released AND expires_at > {self.NOW}",
                         {"r": run_id, **self._now_params()}, one=True)
        return None if row is None else Lease(run_id, row[0], row[1])

    def _expiry(self) -> str:
        return f"{self.NOW} + %(ttl)s * interval '1 millisecond'"

    # -- leases -----------------------------------------------------------------------------

    def acquire(self, run_id: str, owner: str) -> Lease:
        rows = self._execute(
            f"INSERT INTO leases (run_id, owner, epoch, expires_at, released) VALUES (%(r)s, %(o)s, 1, {self._expiry()}, false)"
            f" ON CONFLICT (run_id) DO UPDATE SET owner = EXCLUDED.owner, epoch = leases.epoch + 1,"
            f" expires_at = {self._expiry()}, released = false"
            f" WHERE leases.released OR leases.expires_at <= {self.NOW} RETURNING epoch",
            {"r": run_id, "o": owner, "ttl": self.lease_ttl_ms, **self._now_params()},
        )
        if not rows:
            raise LeaseHeldError(run_id, self._holder(run_id))
        return Lease(run_id, owner, rows[0][0])

    def renew(self, lease: Lease) -> Lease:
        rows = self._execute(
            f"UPDATE leases SET expires_at = {self._expiry()} WHERE run_id = %(r)s AND owner = %(o)s AND epoch = %(e)s"
            f" AND NOT released AND expires_at > {self.NOW} RETURNING 1",
            {"r": lease.run_id, "o": lease.owner, "e": lease.epoch, "ttl": self.lease_ttl_ms, **self._now_params()},
        )
        if not rows:
            raise LeaseHeldError(lease.run_id, self._holder(lease.run_id), f"lease {lease} is not the current live tenure")
        return lease

    def release(self, lease: Lease) -> None:
        # An expired tenure nobody superseded may still be released: it ends only itself.
        rows = self._execute(
            "UPDATE leases SET released = true WHERE run_id = %(r)s AND owner = %(o)s AND epoch = %(e)s"
            " AND NOT released RETURNING 1",
            {"r": lease.run_id, "o": lease.owner, "e": lease.epoch},
        )
        if not rows:
            raise LeaseHeldError(lease.run_id, self._holder(lease.run_id), f"lease {lease} is not the current tenure")

    # -- journal and meta -------------------------------------------------------------------

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        # the order guard: the run's tail row moves up only where the new seq is above it, on the locked row
        written = self._mutate(
            run_id, lease,
            "guard AS (INSERT INTO tails (run_id, tail) SELECT %(r)s, %(s)s FROM fence WHERE %(s)s > 0"
            " ON CONFLICT (run_id) DO UPDATE SET tail = EXCLUDED.tail WHERE tails.tail < EXCLUDED.tail RETURNING 1),"
            " w AS (INSERT INTO journal (run_id, seq, payload) SELECT %(r)s, %(s)s, %(p)s FROM guard RETURNING 1)",
            {"r": run_id, "s": entry.seq, "p": bytes(entry.payload)},
        )
        if not written:
            tail = self._read("SELECT tail FROM tails WHERE run_id = %(r)s", {"r": run_id}, one=True)
            raise JournalOrderError(f"append seq {entry.seq} to run {run_id!r} is not above the tail "
                                    f"{tail[0] if tail else 0}")

    def load(self, run_id: str) -> list[JournalEntry]:
        rows = self._read("SELECT seq, payload FROM journal WHERE run_id = %(r)s ORDER BY seq", {"r": run_id})
        return [JournalEntry(seq, bytes(payload)) for seq, payload in rows]

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        if meta.status not in RUN_STATUSES:
            raise ValueError(f"RunMeta.status {meta.status!r} is not one of {RUN_STATUSES}")
        self._mutate(
            meta.run_id, lease,
            "w AS (INSERT INTO meta (run_id, status, segments, payload) SELECT %(r)s, %(st)s, %(n)s, %(p)s FROM fence"
            " ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status, segments = EXCLUDED.segments,"
            " payload = EXCLUDED.payload RETURNING 1)",
            {"r": meta.run_id, "st": meta.status, "n": meta.segments, "p": bytes(meta.payload)},
        )

    def get_meta(self, run_id: str) -> RunMeta | None:
        row = self._read("SELECT status, segments, payload FROM meta WHERE run_id = %(r)s", {"r": run_id}, one=True)
        return None if row is None else RunMeta(run_id, row[0], row[1], bytes(row[2]))

    def list_runs(self) -> list[RunMeta]:
        rows = self._read("SELECT run_id, status, segments, payload FROM meta ORDER BY run_id", {})
        return [RunMeta(r, s, n, bytes(p)) for r, s, n, p in rows]

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        self._mutate(
            run_id, lease,
            "j AS (DELETE FROM journal WHERE run_id = %(r)s AND EXISTS (SELECT 1 FROM fence) RETURNING 1),"
            " t AS (DELETE FROM tails WHERE run_id = %(r)s AND EXISTS (SELECT 1 FROM fence) RETURNING 1),"
            " w AS (DELETE FROM meta WHERE run_id = %(r)s AND EXISTS (SELECT 1 FROM fence) RETURNING 1)",
            {"r": run_id},
        )

    # -- blobs (store.transcripts) ----------------------------------------------------------

    def _blob_put(self, run_id: str, ref: str, blob: bytes, lease: Lease | None) -> None:
        self._mutate(run_id, lease, "w AS (INSERT INTO blobs (ref, run_id, data) SELECT %(ref)s, %(r)s, %(d)s FROM fence"
                     " ON CONFLICT (ref) DO UPDATE SET data = EXCLUDED.data RETURNING 1)",
                     {"ref": ref, "r": run_id, "d": blob})

    def _blob_get(self, run_id: str, ref: str) -> bytes | None:
        row = self._read("SELECT data FROM blobs WHERE ref = %(ref)s", {"ref": ref}, one=True)
        return None if row is None else bytes(row[0])

    def _blob_list(self, run_id: str) -> list[str]:
        return [r[0] for r in self._read("SELECT ref FROM blobs WHERE run_id = %(r)s ORDER BY ref", {"r": run_id})]

    def _blob_delete(self, run_id: str, ref: str, lease: Lease | None) -> None:
        self._mutate(run_id, lease, "w AS (DELETE FROM blobs WHERE ref = %(ref)s AND EXISTS (SELECT 1 FROM fence)"
                     " RETURNING 1)", {"ref": ref})

    def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def open_postgres(location: str, *, lease_ttl_ms: int, dsn: str, lock_timeout_ms: str | int = 2000,
                  connect_timeout_s: str | float = 10, boot_timeout_ms: str | int = 30000,
                  cls: type[PostgresStore] = PostgresStore) -> PostgresStore:
    """Factory for `postgresql://...`: the location's own schema in the database the spec names."""
    return cls(dsn, location, lease_ttl_ms, lock_timeout_ms=int(lock_timeout_ms),
               connect_timeout_s=float(connect_timeout_s), boot_timeout_ms=int(boot_timeout_ms))


def cleanup_postgres(root: str, options: dict[str, Any]) -> int:
    """Drop the schema of `root` and of every location under it (their comments name them); returns how many.

    Sessions still open on those schemas (a killed worker's backend that has not noticed yet) are ended
    first, so the drop does not wait on their locks."""
    root = os.path.realpath(root)
    with _connect(options["dsn"], None, float(options.get("connect_timeout_s", 10)), 10000) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'soak\\_%%'"
            " AND (obj_description(oid, 'pg_namespace') = %(root)s"
            " OR starts_with(obj_description(oid, 'pg_namespace'), %(under)s))",
            {"root": root, "under": root.rstrip("/") + "/"},
        ).fetchall()
        for (schema,) in rows:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
                         " AND pid <> pg_backend_pid()", (f"soak:{schema}",))
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return len(rows)


if __name__ == "__main__":  # pragma: no cover - `python -m soak.stores.postgres DSN ROOT`: drop leftovers by hand
    print(cleanup_postgres(sys.argv[2], {"dsn": sys.argv[1]}))


def spec_target(url: str, options: dict[str, str], *, factory: Any = None, extra: dict[str, Any] | None = None,
                description: str = "networked PostgreSQL reference store") -> Any:
    """The `StoreTarget` of a `postgresql://` spec: store options apart, the rest passed to libpq (checked here)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from soak.errors import StoreSpecError
    from soak.stores import StoreTarget, redact

    ours = {k: v for k, v in options.items() if k in STORE_OPTIONS}
    libpq = {k: v for k, v in options.items() if k not in STORE_OPTIONS}
    try:
        dsn = make_conninfo(url, **libpq)
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise StoreSpecError(f"postgresql spec {redact(url)!r} is malformed ({_one_line(exc)}); write "
                             f"postgresql://HOST:PORT/DATABASE, with store options {', '.join(STORE_OPTIONS)} "
                             "or libpq parameters after ?") from exc
    for key in ("lock_timeout_ms", "boot_timeout_ms", "connect_timeout_s"):
        if key in ours:
            try:
                float(ours[key])
            except ValueError:
                raise StoreSpecError(f"postgresql option {key}={ours[key]!r} is not a number; pass e.g. {key}=2000") from None
    spec = url + ("?" + "&".join(f"{k}={v}" for k, v in options.items()) if options else "")
    return StoreTarget(spec, factory or open_postgres, {"dsn": dsn, **ours, **(extra or {})},
                       description=description, remove=cleanup_postgres)
