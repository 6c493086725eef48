"""Process targets for the claim store tests (importable by spawned children)."""

from __future__ import annotations

import os
import signal

from soak.claims import CheckoutConflictError, Claimant
from soak.claims._sqlite import SqliteClaimStore, open_sqlite_claims
from soak.retry import retry_busy


def racer(location: str, index: int, barrier, conn) -> None:
    """Open one store; each round, wait at the barrier and claim the round's task; report the outcome."""
    store = retry_busy(lambda: open_sqlite_claims(location, lease_ttl_ms=5000), "open")
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            break
        project, task = msg
        me = Claimant(f"node-{index}", f"agent-{index}", f"run-{task}")
        barrier.wait(30)
        try:
            claim = retry_busy(lambda: store.claim(project, task, me), "claim")
            conn.send(("won", index, claim.lease_epoch))
        except CheckoutConflictError as exc:
            h = exc.current_holder
            conn.send(("lost", index, None if h is None else (h.owner.node_id, h.owner.agent_id, h.lease_epoch)))
    store.close()


def booter(location: str, index: int, barrier, conn) -> None:
    """Open the store at the barrier (a fresh or existing location), claim one task, report what it saw."""
    barrier.wait(60)
    try:
        store = open_sqlite_claims(location, lease_ttl_ms=5000)
        seen = len(retry_busy(lambda: store.claims("boot"), "claims"))
        retry_busy(lambda: store.claim("boot", f"task-{os.getpid()}-{index}", Claimant(f"n{index}", "a")), "claim")
        store.close()
        conn.send(("ok", seen))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


class KilledBetweenCommits(SqliteClaimStore):
    """The reference store, its process killed right after a call's central commit (before the task-row write)."""

    def _mirror(self, project_id: str, task_id: str) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


def split_writer(location: str, op: str, args: tuple) -> None:
    store = KilledBetweenCommits(location, 5000)
    getattr(store, op)(*args)


class HangingHeartbeat(SqliteClaimStore):
    """A claim store whose heartbeat never returns (a lost lock wakeup)."""

    def heartbeat(self, project_id, task_id, claimant, epoch):
        import time

        while True:
            time.sleep(0.05)


class ExitingRelease(SqliteClaimStore):
    """A claim store that ends its caller's process inside release."""

    def release(self, project_id, task_id, claimant, epoch):
        os._exit(7)


class BusyEveryOtherCall(SqliteClaimStore):
    """A correct claim store that fails fast with StoreBusyError (nothing written) on every other call."""

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if name in ("claim", "heartbeat", "release", "get", "record_progress", "recover", "task", "tasks", "claims",
                    "audit", "reconcile"):
            from soak.spi import StoreBusyError

            def busy_or_call(*args):
                n = object.__getattribute__(self, "__dict__").setdefault("_n", [0])
                n[0] += 1
                if n[0] % 2:
                    raise StoreBusyError("busy (fails fast)")
                return attr(*args)

            return busy_or_call
        return attr


def open_hanging(location, *, lease_ttl_ms, clock=None):
    return open_sqlite_claims(location, lease_ttl_ms=lease_ttl_ms, clock=clock, cls=HangingHeartbeat)


def open_exiting(location, *, lease_ttl_ms, clock=None):
    return open_sqlite_claims(location, lease_ttl_ms=lease_ttl_ms, clock=clock, cls=ExitingRelease)


def open_busy(location, *, lease_ttl_ms, clock=None):
    return open_sqlite_claims(location, lease_ttl_ms=lease_ttl_ms, clock=clock, cls=BusyEveryOtherCall)


def open_no_clock(location, *, lease_ttl_ms):
    """A correct store that does not declare an injectable clock: conformance runs it in real time."""
    store = open_sqlite_claims(location, lease_ttl_ms=lease_ttl_ms)
    store.injectable_clock = False
    return store


class ProgressCheckThenWrite(SqliteClaimStore):
    """A broken store: the progress fence is checked in one central transaction and the step written after it
    ended, so a takeover can land between them."""

    def record_progress(self, project_id, task_id, claimant, epoch, step):
        project = self._project(project_id)
        with self._tx(self._conn(), "record_progress") as conn:
            cur = self._progress_check(conn, project_id, task_id, claimant, int(epoch))
        self._write_step(project, cur, int(step))


class HeartbeatCheckThenWrite(SqliteClaimStore):
    """A broken store: a heartbeat checks owner and epoch in one transaction and renews in the next, unpinned."""

    def heartbeat(self, project_id, task_id, claimant, epoch):
        from soak.claims import Claim

        with self._tx(self._conn(), "heartbeat (check)") as conn:
            cur = self._held(conn, project_id, task_id, claimant, int(epoch), "heartbeat")
        now = self._clock()
        with self._tx(self._conn(), "heartbeat (write)") as conn:
            conn.execute("UPDATE task_claims SET lease_renewed_at = ? WHERE project_id = ? AND task_id = ?",
                         (now, project_id, task_id))
        self._mirror(project_id, task_id)
        return Claim(project_id, task_id, cur.owner, cur.lease_epoch, now)


def open_progress_check_then_write(location, *, lease_ttl_ms, clock=None):
    return open_sqlite_claims(location, lease_ttl_ms=lease_ttl_ms, clock=clock, cls=ProgressCheckThenWrite)


def open_heartbeat_check_then_write(location, *, lease_ttl_ms, clock=None):
    return open_sqlite_claims(location, lease_ttl_ms=lease_ttl_ms, clock=clock, cls=HeartbeatCheckThenWrite)
