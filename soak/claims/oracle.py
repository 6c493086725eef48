"""The pure claims oracle: CONTRACT section 2 as plain state transitions, time passed in.

`ClaimsOracle` is the reading of the contract every claim check shares: the `memory:` claim store is it behind
a lock and a clock, and the Hypothesis claims model holds a store under test to it. Each call returns what the
store must return or raises the `CheckoutConflictError` it must raise; a refused call changes nothing. The
central claim and the task row move together here (no split writes: those are a property of a real store's two
commits, which its reconciler repairs).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from soak.claims._types import RECOVER_EVENT, AuditEvent, CheckoutConflictError, Claim, Claimant, TaskRow

__all__ = ["ClaimsOracle", "fresh_task", "worktree_name"]


def fresh_task(project_id: str, task_id: str) -> TaskRow:
    """A task row nobody ever claimed."""
    return TaskRow(project_id, task_id, "todo", 0, None, None, None, None, 0, None)


def worktree_name(claimant: Claimant, task_id: str, epoch: int) -> str:
    """The fresh worktree a claim's owner works in (a recovery drops it; the next owner gets a new one)."""
    return f"wt/{claimant.node_id}/{claimant.agent_id}/{task_id}@{epoch}"


@dataclass
class ClaimsOracle:
    """Every project's central claims, task rows and audit events; `ttl_s` judges expiry for `recover`."""

    ttl_s: float
    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    tasks: dict[tuple[str, str], TaskRow] = field(default_factory=dict)
    events: dict[str, list[AuditEvent]] = field(default_factory=dict)

    def _conflict(self, key: tuple[str, str], why: str) -> CheckoutConflictError:
        return CheckoutConflictError(f"{key[0]}/{key[1]}: {why}", self.claims.get(key), project_id=key[0],
                                     task_id=key[1])

    def _row(self, key: tuple[str, str]) -> TaskRow:
        return self.tasks.get(key) or fresh_task(*key)

    def _held(self, key: tuple[str, str], claimant: Claimant, epoch: int, what: str) -> Claim:
        cur = self.claims.get(key)
        if cur is None or cur.owner is None or not claimant.same_owner(cur.owner) or cur.lease_epoch != epoch:
            raise self._conflict(key, f"{what} by {claimant.node_id}/{claimant.agent_id} at epoch {epoch} "
                                      "does not match the current owner")
        return cur

    def claim(self, project_id: str, task_id: str, claimant: Claimant, now: float) -> Claim:
        key = (project_id, task_id)
        cur = self.claims.get(key)
        if cur is not None and cur.owner is not None:
            if not claimant.same_owner(cur.owner):
                raise self._conflict(key, f"held by {cur.owner.node_id}/{cur.owner.agent_id}")
            new = replace(cur, renewed_at=now)
            self.claims[key] = new
            self.tasks[key] = replace(self._row(key), checkout_lease_renewed_at=now)
            return new
        epoch = (cur.lease_epoch if cur is not None else 0) + 1
        new = Claim(project_id, task_id, claimant, epoch, now)
        self.claims[key] = new
        self.tasks[key] = replace(self._row(key), status="in-progress", worktree=worktree_name(claimant, task_id, epoch),
                                  checked_out_by=claimant.agent_id, checkout_node_id=claimant.node_id,
                                  checkout_run_id=claimant.run_id, checkout_lease_epoch=epoch,
                                  checkout_lease_renewed_at=now)
        return new

    def heartbeat(self, project_id: str, task_id: str, claimant: Claimant, epoch: int, now: float) -> Claim:
        key = (project_id, task_id)
        new = replace(self._held(key, claimant, epoch, "heartbeat"), renewed_at=now)
        self.claims[key] = new
        self.tasks[key] = replace(self._row(key), checkout_lease_renewed_at=now)
        return new

    def release(self, project_id: str, task_id: str, claimant: Claimant, epoch: int) -> None:
        key = (project_id, task_id)
        cur = self._held(key, claimant, epoch, "release")
        self.claims[key] = replace(cur, owner=None)
        self.tasks[key] = self._cleared(key)

    def _cleared(self, key: tuple[str, str]) -> TaskRow:
        return replace(self._row(key), status="todo", worktree=None, checked_out_by=None, checkout_node_id=None,
                       checkout_run_id=None, checkout_lease_renewed_at=None)

    def get(self, project_id: str, task_id: str) -> Claim | None:
        return self.claims.get((project_id, task_id))

    def record_progress(self, project_id: str, task_id: str, claimant: Claimant, epoch: int, step: int) -> None:
        key = (project_id, task_id)
        self._held(key, claimant, epoch, "progress write")
        self.tasks[key] = replace(self._row(key), step=step)

    def recover(self, project_id: str, task_id: str, epoch: int, by: Claimant, reason: str, now: float) -> TaskRow:
        key = (project_id, task_id)
        cur = self.claims.get(key)
        if cur is None or cur.owner is None or cur.lease_epoch != epoch:
            raise self._conflict(key, f"recovery of epoch {epoch}: that epoch is not the current held claim")
        if now - cur.renewed_at <= self.ttl_s:
            raise self._conflict(key, f"recovery of epoch {epoch}: the owner is within its lease")
        self.claims[key] = replace(cur, owner=None)
        row = self.tasks[key] = self._cleared(key)
        self.events.setdefault(project_id, []).append(
            AuditEvent(project_id, task_id, RECOVER_EVENT, epoch, by.node_id,
                       f"from {cur.owner.node_id}/{cur.owner.agent_id}: {reason}"))
        return row

    def task(self, project_id: str, task_id: str) -> TaskRow | None:
        return self.tasks.get((project_id, task_id))

    def project_tasks(self, project_id: str) -> list[TaskRow]:
        return [row for (p, _), row in sorted(self.tasks.items()) if p == project_id]

    def project_claims(self, project_id: str) -> list[Claim]:
        return [c for (p, _), c in sorted(self.claims.items()) if p == project_id]

    def audit(self, project_id: str) -> list[AuditEvent]:
        return list(self.events.get(project_id, ()))
