"""The task claim contract (CONTRACT section 2): types, the conflict error and the store protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from soak.spi import StoreError

__all__ = ["AuditEvent", "CheckoutConflictError", "Claim", "ClaimStore", "Claimant", "RECOVER_EVENT",
           "TASK_STATUSES", "TaskRow"]

#: The audit event every recovery of an unreachable owner's task writes, once (CONTRACT section 2).
RECOVER_EVENT = "task:auto-recover-node-unreachable"
#: The statuses a task row may carry.
TASK_STATUSES: tuple[str, ...] = ("todo", "in-progress")


@dataclass(frozen=True, slots=True)
class Claimant:
    """Who claims a task: a node, an agent on it, and optionally the run doing the work."""

    node_id: str
    agent_id: str
    run_id: str | None = None

    def same_owner(self, other: Claimant | None) -> bool:
        """True where `other` is the same `(node_id, agent_id)` (the run id does not name the owner)."""
        return other is not None and other.node_id == self.node_id and other.agent_id == self.agent_id


@dataclass(frozen=True, slots=True)
class Claim:
    """The central claim row of one task: its owner (None once released) and the fencing epoch.

    `renewed_at` is the store's clock (seconds) at the last claim or heartbeat; the epoch never resets."""

    project_id: str
    task_id: str
    owner: Claimant | None
    lease_epoch: int
    renewed_at: float


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A per-project task row: its status and step progress, and the checkout fields mirroring the central row."""

    project_id: str
    task_id: str
    status: str
    step: int
    worktree: str | None
    checked_out_by: str | None
    checkout_node_id: str | None
    checkout_run_id: str | None
    checkout_lease_epoch: int
    checkout_lease_renewed_at: float | None

    def mirrors(self, claim: Claim | None) -> bool:
        """True where the checkout fields agree with the central row (the authority)."""
        owner = claim.owner if claim is not None else None
        if owner is None:
            return self.checked_out_by is None and self.checkout_node_id is None and self.status == "todo"
        return (self.checked_out_by == owner.agent_id and self.checkout_node_id == owner.node_id
                and self.checkout_run_id == owner.run_id and self.checkout_lease_epoch == claim.lease_epoch
                and self.status == "in-progress")


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One durable run-audit event of a project: `kind`, the task, the epoch it concerns, who wrote it and why."""

    project_id: str
    task_id: str
    kind: str
    epoch: int
    node_id: str
    detail: str = ""


class CheckoutConflictError(StoreError):
    """Ownership contention: the claim, heartbeat, release, progress write or recovery was refused and nothing
    was mutated. `current_holder` is the central row as the store saw it (None where there is none). Callers never
    retry it automatically (it is not transient, unlike `StoreBusyError`)."""

    def __init__(self, message: str = "", current_holder: Claim | None = None, *, project_id: str = "",
                 task_id: str = "") -> None:
        super().__init__(message or "checkout conflict")
        self.current_holder = current_holder
        self.project_id = project_id or (current_holder.project_id if current_holder else "")
        self.task_id = task_id or (current_holder.task_id if current_holder else "")


@runtime_checkable
class ClaimStore(Protocol):
    """One claim store object over one location (a central authority plus the per-project task rows).

    The pinned calls are `claim`, `heartbeat`, `release`, `get` and `record_progress`; the rest are what the
    handoff policy, the reconciler and the harness's final-state reader need (docs/claims.md)."""

    lease_ttl_ms: int

    def claim(self, project_id: str, task_id: str, claimant: Claimant) -> Claim: ...
    def heartbeat(self, project_id: str, task_id: str, claimant: Claimant, epoch: int) -> Claim: ...
    def release(self, project_id: str, task_id: str, claimant: Claimant, epoch: int) -> None: ...
    def get(self, project_id: str, task_id: str) -> Claim | None: ...
    def record_progress(self, project_id: str, task_id: str, claimant: Claimant, epoch: int, step: int) -> None: ...

    def recover(self, project_id: str, task_id: str, epoch: int, by: Claimant, reason: str) -> TaskRow:
        """Release an expired claim of epoch `epoch` for an unreachable owner, in one transaction with its
        `RECOVER_EVENT` audit event; the task row goes back to `todo`, step kept, worktree dropped. Refused
        (`CheckoutConflictError`) unless that epoch is current, held and expired by the store's clock."""
        ...

    def task(self, project_id: str, task_id: str) -> TaskRow | None: ...
    def tasks(self, project_id: str) -> list[TaskRow]: ...
    def claims(self, project_id: str) -> list[Claim]: ...
    def audit(self, project_id: str) -> list[AuditEvent]: ...

    def reconcile(self, project_id: str) -> list[str]:
        """Repair every task row of the project whose checkout fields disagree with its central row; return the
        task ids repaired."""
        ...

    def close(self) -> None: ...


def claim_json(claim: Claim | None) -> dict[str, Any] | None:
    """A claim as history and final-state records hold it."""
    if claim is None:
        return None
    o = claim.owner
    return {"owner": None if o is None else [o.node_id, o.agent_id, o.run_id], "epoch": claim.lease_epoch,
            "renewed_at": claim.renewed_at}


def task_json(row: TaskRow | None) -> dict[str, Any] | None:
    """A task row as history and final-state records hold it."""
    if row is None:
        return None
    return {"status": row.status, "step": row.step, "worktree": row.worktree, "by": row.checked_out_by,
            "node": row.checkout_node_id, "run": row.checkout_run_id, "epoch": row.checkout_lease_epoch,
            "renewed_at": row.checkout_lease_renewed_at}
