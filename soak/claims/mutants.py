"""The claim store mutant catalogue: `sqlite:` claim stores that each break one clause of `CLAIM_CLAUSES`.

Each mutant is the reference `SqliteClaimStore` with one thing changed, the way a real implementation gets it
wrong (no sleeps or other help a real bug would not have), selectable as `mutant:NAME` in a claim store spec.
They exist to prove that claims conformance catches every defect class: each must fail it naming its clause.
Nothing here is fit to hold claims.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from soak.claims._sqlite import SqliteClaimStore, open_sqlite_claims
from soak.claims._types import Claim, Claimant
from soak.spi import StoreBusyError

__all__ = ["CLAIM_MUTANTS", "Mutant", "open_claim_mutant"]


class EpochResetOnRelease(SqliteClaimStore):
    """Release deletes the central row instead of clearing its owner, so the next claim starts at epoch 1."""

    def _clear_owner(self, conn: sqlite3.Connection, project_id: str, task_id: str, epoch: int, now: float) -> None:
        conn.execute("DELETE FROM task_claims WHERE project_id = ? AND task_id = ?", (project_id, task_id))


class RenewBumpsEpoch(SqliteClaimStore):
    """A renewal by the same owner is treated as a new grant: the epoch rises."""

    def _claim_epoch(self, cur: Claim | None, renewal: bool) -> int:
        return (cur.lease_epoch if cur is not None else 0) + 1


class ConflictWithoutHolder(SqliteClaimStore):
    """A refused call raises CheckoutConflictError without the current holder."""

    def _conflict(self, project_id, task_id, seen, why):
        return super()._conflict(project_id, task_id, None, why)


class ConflictWrongHolder(SqliteClaimStore):
    """A refused claim names the claimant it refused as the holder (built from the call's arguments)."""

    def _claim_central(self, conn, project_id, task_id, claimant: Claimant, now):
        try:
            return super()._claim_central(conn, project_id, task_id, claimant, now)
        except Exception as exc:
            holder = getattr(exc, "current_holder", None)
            if holder is not None:
                exc.current_holder = Claim(project_id, task_id, claimant, holder.lease_epoch, now)
            raise


class TwoTransactionClaim(SqliteClaimStore):
    """The precondition is read in one transaction and the claim written in the next, unconditionally."""

    def claim(self, project_id: str, task_id: str, claimant: Claimant) -> Claim:
        with self._lock:
            self._project(project_id)
            try:  # the check: a plain read, outside the write transaction
                cur = self._central_row(self._conn(), project_id, task_id)
            except sqlite3.OperationalError as exc:
                raise StoreBusyError(f"sqlite busy: {exc}") from exc
            if cur is not None and cur.owner is not None and not claimant.same_owner(cur.owner):
                raise self._conflict(project_id, task_id, cur, f"held by {cur.owner.node_id}/{cur.owner.agent_id}")
            renewal = cur is not None and cur.owner is not None
            epoch = self._claim_epoch(cur, renewal)
            owner = cur.owner if renewal else claimant
            now = self._clock()
            with self._tx(self._conn(), "claim (write)") as conn:
                conn.execute(
                    "INSERT INTO task_claims (project_id, task_id, owner_node_id, owner_agent_id, owner_run_id,"
                    " lease_epoch, lease_renewed_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (project_id, task_id) DO UPDATE SET owner_node_id = excluded.owner_node_id,"
                    " owner_agent_id = excluded.owner_agent_id, owner_run_id = excluded.owner_run_id,"
                    " lease_epoch = excluded.lease_epoch, lease_renewed_at = excluded.lease_renewed_at,"
                    " updated_at = excluded.updated_at",
                    (project_id, task_id, owner.node_id, owner.agent_id, owner.run_id, epoch, now, now, now))
            self._mirror(project_id, task_id)
            return Claim(project_id, task_id, owner, epoch, now)


class StaleHeartbeatAccepted(SqliteClaimStore):
    """A heartbeat renews the task's claim without checking owner or epoch."""

    def _heartbeat_central(self, conn, project_id, task_id, claimant, epoch, now):
        conn.execute("UPDATE task_claims SET lease_renewed_at = ?, updated_at = ? WHERE project_id = ?"
                     " AND task_id = ?", (now, now, project_id, task_id))
        cur = self._central_row(conn, project_id, task_id)
        if cur is None:
            raise self._conflict(project_id, task_id, None, "no claim to renew")
        return cur


class UnfencedProgress(SqliteClaimStore):
    """A progress write goes to the task row without checking owner and epoch."""

    def _progress_check(self, conn, project_id, task_id, claimant, epoch):
        cur = self._central_row(conn, project_id, task_id)
        return cur if cur is not None else Claim(project_id, task_id, claimant, epoch, self._clock())


class RecoverySkipsAudit(SqliteClaimStore):
    """A recovery releases the claim but writes no audit event."""

    @staticmethod
    def _audit_recovery(conn, cur, by, reason, now) -> None:
        return None


class RecoveryLosesProgress(SqliteClaimStore):
    """A recovery resets the task row's step progress along with its checkout fields."""

    def recover(self, project_id, task_id, epoch, by, reason):
        row = super().recover(project_id, task_id, epoch, by, reason)
        project = self._project(project_id)
        with self._tx(project, "recover (reset)"):
            project.execute("UPDATE tasks SET step = 0 WHERE project_id = ? AND task_id = ?", (project_id, task_id))
        return self._task_row(project, project_id, task_id) or row


class RecoverWithinLease(SqliteClaimStore):
    """A recovery ignores the owner's lease: any held claim at the named epoch is recovered."""

    def _expired(self, cur: Claim, now: float) -> bool:
        return True


class NeverReconciled(SqliteClaimStore):
    """The reconciler repairs nothing, and a claim's task-row write only touches the fields its call changed
    (a renewal only `checkout_lease_renewed_at`), so a row a split write left stale stays stale."""

    def reconcile(self, project_id: str) -> list[str]:
        self._conn()
        return []

    def claim(self, project_id: str, task_id: str, claimant: Claimant) -> Claim:
        with self._lock:
            self._project(project_id)
            with self._tx(self._conn(), "claim") as conn:
                before = self._central_row(conn, project_id, task_id)
                new = self._claim_central(conn, project_id, task_id, claimant, self._clock())
            if before is not None and before.owner is not None:  # a renewal: only the renewal time
                project = self._project(project_id)
                with self._tx(project, "the task-row write"):
                    project.execute("UPDATE tasks SET checkout_lease_renewed_at = ? WHERE project_id = ?"
                                    " AND task_id = ?", (new.renewed_at, project_id, task_id))
            else:
                self._mirror(project_id, task_id)
            return new


@dataclass(frozen=True)
class Mutant:
    """One catalogue entry: what it changes and the claim clause it breaks."""

    cls: type[SqliteClaimStore]
    summary: str
    clause: str


#: mutant name -> Mutant
CLAIM_MUTANTS: dict[str, Mutant] = {
    "epoch-reset-on-release": Mutant(EpochResetOnRelease, "release deletes the claim row, so epochs restart at 1",
                                     "claim-epoch-step"),
    "renew-bumps-epoch": Mutant(RenewBumpsEpoch, "a same-owner renewal bumps the epoch", "claim-epoch-step"),
    "conflict-without-holder": Mutant(ConflictWithoutHolder, "conflicts carry no current holder", "conflict-holder"),
    "conflict-wrong-holder": Mutant(ConflictWrongHolder, "a refused claim names the refused claimant as holder",
                                    "conflict-holder"),
    "two-transaction-claim": Mutant(TwoTransactionClaim, "claim checks in one transaction and writes in another",
                                    "claim-atomic"),
    "stale-heartbeat-accepted": Mutant(StaleHeartbeatAccepted, "heartbeats renew without checking owner or epoch",
                                       "heartbeat-fenced"),
    "unfenced-progress": Mutant(UnfencedProgress, "progress writes skip the owner and epoch check",
                                "progress-fenced"),
    "recovery-skips-audit": Mutant(RecoverySkipsAudit, "recovery writes no audit event", "recovery-audited"),
    "recovery-loses-progress": Mutant(RecoveryLosesProgress, "recovery resets the task's step progress",
                                      "progress-preserved"),
    "recover-within-lease": Mutant(RecoverWithinLease, "recovery ignores the owner's lease expiry",
                                   "claim-lease-protected"),
    "never-reconciled": Mutant(NeverReconciled, "stale task rows are never repaired", "rows-reconciled"),
}


def open_claim_mutant(location: str, *, lease_ttl_ms: int, mutant: str, clock: Callable[[], float] | None = None,
                      **options: str) -> SqliteClaimStore:
    """Factory for `mutant:NAME` claim stores (the sqlite claim store options apply)."""
    if mutant not in CLAIM_MUTANTS:
        raise ValueError(f"no claim store mutant named {mutant!r}; mutants are {', '.join(sorted(CLAIM_MUTANTS))}")
    return open_sqlite_claims(location, lease_ttl_ms=lease_ttl_ms, clock=clock, cls=CLAIM_MUTANTS[mutant].cls,
                              **options)
