"""`sqlite:` claim store: the embedded reference claim store, safe across processes over one directory.

Layout inside the location directory (or the `path` option, a directory):

- `central.db` — the authority. `task_claims` keyed by `(project_id, task_id)`: `owner_node_id`,
  `owner_agent_id`, `owner_run_id` (a NULL owner is a released claim), `lease_epoch`, `lease_renewed_at`,
  `created_at`, `updated_at`. A row is never deleted, so the epoch survives release and recovery.
  `audit_events` (insertion order by `seq`) and `schema_migrations` (the applied bootstrap versions).
- `projects/<name>.db` — one per project, table `tasks`: `status` (`todo` or `in-progress`), `step`,
  `worktree` and the checkout fields mirroring the central row. `<name>` is the project id with every byte
  outside `[a-z0-9_-]` written `%XX` (so distinct ids never share a file, also on case-insensitive file
  systems), prefixed `p`; a very long id is cut and suffixed with a hash.

How each call commits (CONTRACT section 2, seed section 2):

- `claim`: one `BEGIN IMMEDIATE` transaction on `central.db` reads the row and writes it with
  `INSERT ... ON CONFLICT (project_id, task_id) DO UPDATE ... WHERE <released or same owner>` (the
  precondition pinned in the statement as well). A loser's `CheckoutConflictError` names the row read in that
  same transaction, and nothing is written. Then, as a separate transaction on the project db, the task row is
  written: the split-write window. A process killed between the two commits leaves the task row stale; the
  central row is the authority and `reconcile` (or the next claim of the task) repairs it.
- `heartbeat`, `release`: one central transaction matching owner `(node_id, agent_id)` and epoch, then the
  task-row mirror. Release clears the owner and keeps the epoch; the task row goes to `todo` with the checkout
  fields and worktree cleared and its step kept.
- `record_progress`: fenced and atomic across processes: the central write lock is taken (`BEGIN IMMEDIATE`),
  owner and epoch are checked, the step is committed to the project db, and only then is the central
  transaction ended, so no takeover lands between the check and the write.
- `recover`: one central transaction that checks the claim is held at exactly `epoch` and expired by the
  store's clock (`now - renewed_at > ttl`), clears the owner (epoch kept) and inserts the one
  `task:auto-recover-node-unreachable` audit event; then the task row goes to `todo`, worktree dropped, step
  kept.
- Every task-row write copies the central row as it is committed when the project db's write lock is held, so
  mirror writes of racing calls converge on the latest central row whatever order they land in.
- `reconcile(project_id)` holds the central write lock while it repairs every task row of the project that
  disagrees with its central row (`TaskRow.mirrors`), and returns the repaired task ids.

Lock order is central, then project; no call holds a project lock while it waits for the central one.
SQLite's busy and locked errors become `StoreBusyError` at the call boundary, only where nothing was written;
a task-row write that stays busy after the central commit is left to the reconciler and the call returns its
central result. Expiry is judged only by the store clock (`clock=`, default `time.time`;
`injectable_clock = True`). Bootstrap (WAL, `busy_timeout` first, `CREATE TABLE IF NOT EXISTS`, a
`schema_migrations` row) retries as a unit under a wall-clock bound, so many processes may open one fresh
location at once and a rerun over an existing one loses nothing. One connection per db file per store object;
a store object is used from one thread.

Options (strings, as a spec's `?key=value`): `path` (a directory used instead of the location),
`busy_timeout_ms` (default 5000), `boot_timeout_ms` (default 15000), `synchronous` (`NORMAL` by default).
"""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from soak.claims._types import RECOVER_EVENT, AuditEvent, CheckoutConflictError, Claim, Claimant, TaskRow
from soak.claims.oracle import worktree_name
from soak.spi import StoreBusyError
from soak.stores.sqlite import is_busy

__all__ = ["SQLITE_OPTIONS", "SqliteClaimStore", "open_sqlite_claims", "project_file_name"]

#: The options `sqlite:` claim stores take (as strings).
SQLITE_OPTIONS: tuple[str, ...] = ("path", "busy_timeout_ms", "boot_timeout_ms", "synchronous")

SCHEMA_VERSION = 1

_CENTRAL_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS task_claims (project_id TEXT NOT NULL, task_id TEXT NOT NULL,"
    " owner_node_id TEXT, owner_agent_id TEXT, owner_run_id TEXT, lease_epoch INTEGER NOT NULL,"
    " lease_renewed_at REAL NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,"
    " PRIMARY KEY (project_id, task_id))",
    "CREATE TABLE IF NOT EXISTS audit_events (seq INTEGER PRIMARY KEY AUTOINCREMENT, project_id TEXT NOT NULL,"
    " task_id TEXT NOT NULL, kind TEXT NOT NULL, epoch INTEGER NOT NULL, node_id TEXT NOT NULL,"
    " detail TEXT NOT NULL, created_at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS audit_by_project ON audit_events (project_id, seq)",
)
_PROJECT_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tasks (project_id TEXT NOT NULL, task_id TEXT NOT NULL,"
    " status TEXT NOT NULL CHECK (status IN ('todo', 'in-progress')), step INTEGER NOT NULL DEFAULT 0,"
    " worktree TEXT, checked_out_by TEXT, checkout_node_id TEXT, checkout_run_id TEXT,"
    " checkout_lease_epoch INTEGER NOT NULL DEFAULT 0, checkout_lease_renewed_at REAL,"
    " PRIMARY KEY (project_id, task_id))",
)

_CLAIM_COLS = "owner_node_id, owner_agent_id, owner_run_id, lease_epoch, lease_renewed_at"
_TASK_COLS = ("status, step, worktree, checked_out_by, checkout_node_id, checkout_run_id, checkout_lease_epoch,"
              " checkout_lease_renewed_at")
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_MAX_NAME = 180


def project_file_name(project_id: str) -> str:
    """The file name of a project's db: injective over project ids, safe on any file system."""
    text = "".join(ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in project_id)
    if len(text) > _MAX_NAME:  # '~' never appears in an escaped id, so a cut name never equals a short one
        text = text[:120] + "~" + hashlib.sha256(project_id.encode("utf-8")).hexdigest()
    return f"p{text}.db"


def _busy(exc: BaseException, what: str) -> StoreBusyError:
    return StoreBusyError(f"sqlite busy during {what}: {exc}")


class SqliteClaimStore:
    """The reference claim store: a central SQLite authority plus one SQLite db of task rows per project."""

    #: the factory takes `clock=` and expiry is judged by it alone
    injectable_clock = True

    def __init__(self, directory: str, lease_ttl_ms: int = 1000, *, busy_timeout_ms: int = 5000,
                 boot_timeout_ms: int = 15000, synchronous: str = "NORMAL",
                 clock: Callable[[], float] | None = None) -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.directory = str(directory)
        self.lease_ttl_ms = int(lease_ttl_ms)
        self.busy_timeout_ms = int(busy_timeout_ms)
        self.boot_timeout_ms = int(boot_timeout_ms)
        self.synchronous = synchronous.upper()
        self._clock = clock or time.time
        self._lock = threading.RLock()
        self._closed = False
        self._projects: dict[str, sqlite3.Connection] = {}
        os.makedirs(os.path.join(self.directory, "projects"), exist_ok=True)
        self._central: sqlite3.Connection | None = self._boot(os.path.join(self.directory, "central.db"),
                                                              _CENTRAL_SCHEMA)

    # -- bootstrap and connections ------------------------------------------------------------

    def _boot(self, path: str, schema: tuple[str, ...]) -> sqlite3.Connection:
        """Open one db file and apply the idempotent migration, retried as a unit while it is busy."""
        deadline = time.monotonic() + self.boot_timeout_ms / 1000.0
        delay = 0.002
        while True:
            conn = None
            try:
                conn = sqlite3.connect(path, timeout=self.busy_timeout_ms / 1000.0, isolation_level=None,
                                       check_same_thread=False)
                conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")  # before the journal mode
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise sqlite3.OperationalError(f"database is locked (journal_mode stayed {mode})")
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in schema:
                        conn.execute(stmt)
                    conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)"
                                 " ON CONFLICT (version) DO NOTHING", (SCHEMA_VERSION, time.time()))
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                return conn
            except sqlite3.OperationalError as exc:
                if conn is not None:
                    conn.close()
                if not is_busy(exc) or time.monotonic() >= deadline:
                    if is_busy(exc):
                        raise StoreBusyError(f"sqlite bootstrap of {path} stayed busy for "
                                             f"{self.boot_timeout_ms} ms: {exc}") from exc
                    raise
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.1)

    def _conn(self) -> sqlite3.Connection:
        if self._central is None:
            raise ValueError("claim store is closed")
        return self._central

    def _project(self, project_id: str) -> sqlite3.Connection:
        conn = self._projects.get(project_id)
        if conn is None:
            self._conn()
            path = os.path.join(self.directory, "projects", project_file_name(project_id))
            conn = self._projects[project_id] = self._boot(path, _PROJECT_SCHEMA)
        return conn

    @contextmanager
    def _tx(self, conn: sqlite3.Connection, what: str) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction; a busy error rolls back and becomes StoreBusyError."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                raise _busy(exc, what) from exc
            raise
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if is_busy(exc):
                raise _busy(exc, what) from exc
            raise

    def _read(self, conn: sqlite3.Connection, sql: str, args: tuple, what: str) -> list[Any]:
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                raise _busy(exc, what) from exc
            raise

    # -- rows ---------------------------------------------------------------------------------

    @staticmethod
    def _claim_of(project_id: str, task_id: str, row: Any) -> Claim | None:
        if row is None:
            return None
        node, agent, run, epoch, renewed = row
        owner = None if node is None else Claimant(node, agent, run)
        return Claim(project_id, task_id, owner, int(epoch), float(renewed))

    def _central_row(self, conn: sqlite3.Connection, project_id: str, task_id: str) -> Claim | None:
        row = conn.execute(f"SELECT {_CLAIM_COLS} FROM task_claims WHERE project_id = ? AND task_id = ?",
                           (project_id, task_id)).fetchone()
        return self._claim_of(project_id, task_id, row)

    @staticmethod
    def _task_of(project_id: str, task_id: str, row: Any) -> TaskRow | None:
        if row is None:
            return None
        status, step, worktree, by, node, run, epoch, renewed = row
        return TaskRow(project_id, task_id, status, int(step), worktree, by, node, run, int(epoch),
                       None if renewed is None else float(renewed))

    def _task_row(self, conn: sqlite3.Connection, project_id: str, task_id: str) -> TaskRow | None:
        row = conn.execute(f"SELECT {_TASK_COLS} FROM tasks WHERE project_id = ? AND task_id = ?",
                           (project_id, task_id)).fetchone()
        return self._task_of(project_id, task_id, row)

    def _conflict(self, project_id: str, task_id: str, seen: Claim | None, why: str) -> CheckoutConflictError:
        return CheckoutConflictError(f"{project_id}/{task_id}: {why}", seen, project_id=project_id, task_id=task_id)

    def _held(self, conn: sqlite3.Connection, project_id: str, task_id: str, claimant: Claimant, epoch: int,
              what: str) -> Claim:
        """The central row, read inside the caller's transaction, where `claimant` holds it at `epoch`."""
        cur = self._central_row(conn, project_id, task_id)
        if cur is None or cur.owner is None or not claimant.same_owner(cur.owner) or cur.lease_epoch != epoch:
            raise self._conflict(project_id, task_id, cur, f"{what} by {claimant.node_id}/{claimant.agent_id} at "
                                                           f"epoch {epoch} does not match the current owner")
        return cur

    # -- the task-row mirror --------------------------------------------------------------------

    @staticmethod
    def _mirror_of(claim: Claim, row: TaskRow | None) -> TaskRow:
        """The task row agreeing with `claim` (the authority); step progress is kept."""
        step = row.step if row is not None else 0
        o = claim.owner
        if o is None:
            epoch = row.checkout_lease_epoch if row is not None else claim.lease_epoch
            return TaskRow(claim.project_id, claim.task_id, "todo", step, None, None, None, None, epoch, None)
        return TaskRow(claim.project_id, claim.task_id, "in-progress", step,
                       worktree_name(o, claim.task_id, claim.lease_epoch), o.agent_id, o.node_id, o.run_id,
                       claim.lease_epoch, claim.renewed_at)

    @staticmethod
    def _write_task(conn: sqlite3.Connection, row: TaskRow) -> None:
        conn.execute(
            f"INSERT INTO tasks (project_id, task_id, {_TASK_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (project_id, task_id) DO UPDATE SET status = excluded.status, step = excluded.step,"
            " worktree = excluded.worktree, checked_out_by = excluded.checked_out_by,"
            " checkout_node_id = excluded.checkout_node_id, checkout_run_id = excluded.checkout_run_id,"
            " checkout_lease_epoch = excluded.checkout_lease_epoch,"
            " checkout_lease_renewed_at = excluded.checkout_lease_renewed_at",
            (row.project_id, row.task_id, row.status, row.step, row.worktree, row.checked_out_by,
             row.checkout_node_id, row.checkout_run_id, row.checkout_lease_epoch, row.checkout_lease_renewed_at))

    def _mirror(self, project_id: str, task_id: str) -> None:
        """The second commit of claim, heartbeat, release and recover: copy the central row, as committed now,
        into the task row under the project db's write lock. A write that stays busy is left to the reconciler
        (the central commit already happened, so the call must not answer StoreBusyError; the project db was
        booted before it)."""
        conn = self._project(project_id)
        for attempt in range(3):
            try:
                with self._tx(conn, "the task-row write"):
                    claim = self._central_row(self._conn(), project_id, task_id)
                    if claim is not None:
                        self._sync(conn, claim)
                return
            except StoreBusyError:
                time.sleep(0.01 * (attempt + 1))

    def _sync(self, conn: sqlite3.Connection, claim: Claim) -> bool:
        """Write the mirror of `claim` where the task row disagrees with it (or is missing); True if written."""
        row = self._task_row(conn, claim.project_id, claim.task_id)
        want = self._mirror_of(claim, row)
        if row == want:
            return False
        self._write_task(conn, want)
        return row is None or not row.mirrors(claim)

    # -- the pinned calls -----------------------------------------------------------------------

    def claim(self, project_id: str, task_id: str, claimant: Claimant) -> Claim:
        with self._lock:
            self._project(project_id)  # booted before the central commit: after it, nothing may answer busy
            with self._tx(self._conn(), "claim") as conn:
                new = self._claim_central(conn, project_id, task_id, claimant, self._clock())
            self._mirror(project_id, task_id)
            return new

    def _claim_central(self, conn: sqlite3.Connection, project_id: str, task_id: str, claimant: Claimant,
                       now: float) -> Claim:
        """Inside the claim's one transaction: the precondition read and the write."""
        cur = self._central_row(conn, project_id, task_id)
        if cur is not None and cur.owner is not None and not claimant.same_owner(cur.owner):
            raise self._conflict(project_id, task_id, cur, f"held by {cur.owner.node_id}/{cur.owner.agent_id}")
        renewal = cur is not None and cur.owner is not None
        epoch = self._claim_epoch(cur, renewal)
        owner = cur.owner if renewal else claimant
        row = conn.execute(
            f"INSERT INTO task_claims (project_id, task_id, {_CLAIM_COLS}, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (project_id, task_id) DO UPDATE SET owner_node_id = excluded.owner_node_id,"
            " owner_agent_id = excluded.owner_agent_id, owner_run_id = excluded.owner_run_id,"
            " lease_epoch = excluded.lease_epoch, lease_renewed_at = excluded.lease_renewed_at,"
            " updated_at = excluded.updated_at"
            " WHERE task_claims.owner_node_id IS NULL"
            " OR (task_claims.owner_node_id = excluded.owner_node_id"
            " AND task_claims.owner_agent_id = excluded.owner_agent_id)"
            f" RETURNING {_CLAIM_COLS}",
            (project_id, task_id, owner.node_id, owner.agent_id, owner.run_id, epoch, now, now, now)).fetchone()
        if row is None:  # the pinned precondition refused what the read allowed: never commit such a claim
            raise sqlite3.IntegrityError(f"claim of {project_id}/{task_id}: precondition changed in transaction")
        return self._claim_of(project_id, task_id, row)

    def _claim_epoch(self, cur: Claim | None, renewal: bool) -> int:
        if renewal:
            return cur.lease_epoch
        return (cur.lease_epoch if cur is not None else 0) + 1

    def heartbeat(self, project_id: str, task_id: str, claimant: Claimant, epoch: int) -> Claim:
        with self._lock:
            self._project(project_id)
            with self._tx(self._conn(), "heartbeat") as conn:
                new = self._heartbeat_central(conn, project_id, task_id, claimant, int(epoch), self._clock())
            self._mirror(project_id, task_id)
            return new

    def _heartbeat_central(self, conn: sqlite3.Connection, project_id: str, task_id: str, claimant: Claimant,
                           epoch: int, now: float) -> Claim:
        cur = self._held(conn, project_id, task_id, claimant, epoch, "heartbeat")
        conn.execute("UPDATE task_claims SET lease_renewed_at = ?, updated_at = ? WHERE project_id = ?"
                     " AND task_id = ? AND owner_node_id = ? AND owner_agent_id = ? AND lease_epoch = ?",
                     (now, now, project_id, task_id, cur.owner.node_id, cur.owner.agent_id, epoch))
        return Claim(project_id, task_id, cur.owner, cur.lease_epoch, now)

    def release(self, project_id: str, task_id: str, claimant: Claimant, epoch: int) -> None:
        with self._lock:
            self._project(project_id)
            with self._tx(self._conn(), "release") as conn:
                self._release_central(conn, project_id, task_id, claimant, int(epoch), self._clock())
            self._mirror(project_id, task_id)

    def _release_central(self, conn: sqlite3.Connection, project_id: str, task_id: str, claimant: Claimant,
                         epoch: int, now: float) -> None:
        self._held(conn, project_id, task_id, claimant, epoch, "release")
        self._clear_owner(conn, project_id, task_id, epoch, now)

    @staticmethod
    def _clear_owner(conn: sqlite3.Connection, project_id: str, task_id: str, epoch: int, now: float) -> None:
        conn.execute("UPDATE task_claims SET owner_node_id = NULL, owner_agent_id = NULL, owner_run_id = NULL,"
                     " updated_at = ? WHERE project_id = ? AND task_id = ? AND lease_epoch = ?",
                     (now, project_id, task_id, epoch))

    def get(self, project_id: str, task_id: str) -> Claim | None:
        with self._lock:
            rows = self._read(self._conn(), f"SELECT {_CLAIM_COLS} FROM task_claims WHERE project_id = ?"
                              " AND task_id = ?", (project_id, task_id), "get")
            return self._claim_of(project_id, task_id, rows[0]) if rows else None

    def record_progress(self, project_id: str, task_id: str, claimant: Claimant, epoch: int, step: int) -> None:
        with self._lock:
            project = self._project(project_id)
            with self._tx(self._conn(), "record_progress") as conn:
                # the central write lock is held from the check until the step is committed
                cur = self._progress_check(conn, project_id, task_id, claimant, int(epoch))
                self._write_step(project, cur, int(step))

    def _progress_check(self, conn: sqlite3.Connection, project_id: str, task_id: str, claimant: Claimant,
                        epoch: int) -> Claim:
        return self._held(conn, project_id, task_id, claimant, epoch, "progress write")

    def _write_step(self, project: sqlite3.Connection, claim: Claim, step: int) -> None:
        with self._tx(project, "the progress write"):
            updated = project.execute("UPDATE tasks SET step = ? WHERE project_id = ? AND task_id = ?",
                                      (step, claim.project_id, claim.task_id)).rowcount
            if not updated:  # a split write left no task row: write the mirror with the step
                self._write_task(project, replace(self._mirror_of(claim, None), step=step))

    def recover(self, project_id: str, task_id: str, epoch: int, by: Claimant, reason: str) -> TaskRow:
        with self._lock:
            self._project(project_id)
            with self._tx(self._conn(), "recover") as conn:
                self._recover_central(conn, project_id, task_id, int(epoch), by, reason, self._clock())
            self._mirror(project_id, task_id)
            row = self._task_row(self._project(project_id), project_id, task_id)
            if row is None or not row.mirrors(self._central_row(self._conn(), project_id, task_id)):
                claim = self._central_row(self._conn(), project_id, task_id)
                row = self._mirror_of(claim, row)  # the task-row write stayed busy: what the reconciler will write
            return row

    def _recover_central(self, conn: sqlite3.Connection, project_id: str, task_id: str, epoch: int, by: Claimant,
                         reason: str, now: float) -> None:
        cur = self._central_row(conn, project_id, task_id)
        if cur is None or cur.owner is None or cur.lease_epoch != epoch:
            raise self._conflict(project_id, task_id, cur,
                                 f"recovery of epoch {epoch}: that epoch is not the current held claim")
        if not self._expired(cur, now):
            raise self._conflict(project_id, task_id, cur, f"recovery of epoch {epoch}: the owner is within its lease")
        self._clear_owner(conn, project_id, task_id, epoch, now)
        self._audit_recovery(conn, cur, by, reason, now)

    def _expired(self, cur: Claim, now: float) -> bool:
        return now - cur.renewed_at > self.lease_ttl_ms / 1000.0

    @staticmethod
    def _audit_recovery(conn: sqlite3.Connection, cur: Claim, by: Claimant, reason: str, now: float) -> None:
        conn.execute("INSERT INTO audit_events (project_id, task_id, kind, epoch, node_id, detail, created_at)"
                     " VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (cur.project_id, cur.task_id, RECOVER_EVENT, cur.lease_epoch, by.node_id,
                      f"from {cur.owner.node_id}/{cur.owner.agent_id}: {reason}", now))

    # -- reads and the reconciler ---------------------------------------------------------------

    def task(self, project_id: str, task_id: str) -> TaskRow | None:
        with self._lock:
            rows = self._read(self._project(project_id), f"SELECT {_TASK_COLS} FROM tasks WHERE project_id = ?"
                              " AND task_id = ?", (project_id, task_id), "task")
            return self._task_of(project_id, task_id, rows[0]) if rows else None

    def tasks(self, project_id: str) -> list[TaskRow]:
        with self._lock:
            rows = self._read(self._project(project_id), f"SELECT task_id, {_TASK_COLS} FROM tasks"
                              " WHERE project_id = ? ORDER BY task_id", (project_id,), "tasks")
            return [self._task_of(project_id, r[0], r[1:]) for r in rows]

    def claims(self, project_id: str) -> list[Claim]:
        with self._lock:
            rows = self._read(self._conn(), f"SELECT task_id, {_CLAIM_COLS} FROM task_claims WHERE project_id = ?"
                              " ORDER BY task_id", (project_id,), "claims")
            return [self._claim_of(project_id, r[0], r[1:]) for r in rows]

    def audit(self, project_id: str) -> list[AuditEvent]:
        with self._lock:
            rows = self._read(self._conn(), "SELECT task_id, kind, epoch, node_id, detail FROM audit_events"
                              " WHERE project_id = ? ORDER BY seq", (project_id,), "audit")
            return [AuditEvent(project_id, t, k, int(e), n, d) for t, k, e, n, d in rows]

    def reconcile(self, project_id: str) -> list[str]:
        """Repair every task row of the project that disagrees with its central row; the repaired task ids."""
        with self._lock:
            project = self._project(project_id)
            repaired: list[str] = []
            with self._tx(self._conn(), "reconcile") as conn:  # no claim commits while the rows are repaired
                claims = [self._claim_of(project_id, r[0], r[1:]) for r in conn.execute(
                    f"SELECT task_id, {_CLAIM_COLS} FROM task_claims WHERE project_id = ? ORDER BY task_id",
                    (project_id,)).fetchall()]
                with self._tx(project, "reconcile"):
                    for claim in claims:
                        if self._sync(project, claim):
                            repaired.append(claim.task_id)
            return repaired

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for conn in self._projects.values():
                conn.close()
            self._projects.clear()
            if self._central is not None:
                self._central.close()
                self._central = None


def open_sqlite_claims(location: str, *, lease_ttl_ms: int, clock: Callable[[], float] | None = None,
                       path: str | None = None, busy_timeout_ms: str | int = 5000, boot_timeout_ms: str | int = 15000,
                       synchronous: str = "NORMAL", cls: type[SqliteClaimStore] = SqliteClaimStore) -> SqliteClaimStore:
    """Factory for `sqlite:` (files inside the location) and `sqlite:///abs/dir` (files inside that directory)."""
    try:
        busy, boot = int(busy_timeout_ms), int(boot_timeout_ms)
    except ValueError as exc:
        raise ValueError(f"busy_timeout_ms and boot_timeout_ms take whole milliseconds ({exc})") from None
    return cls(path or location, lease_ttl_ms, busy_timeout_ms=busy, boot_timeout_ms=boot,
               synchronous=str(synchronous), clock=clock)
