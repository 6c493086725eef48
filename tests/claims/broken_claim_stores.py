"""Claim stores with one defect each, for the claims model and the transition tests to catch.

Each is the `memory:` claim store with one call changed; `factory(cls)` makes a claim store factory of it (the
shape `resolve_claims` takes: `factory(location, *, lease_ttl_ms, clock=None)`).
"""

from __future__ import annotations

from dataclasses import replace

from soak.claims._memory import MemoryClaimStore
from soak.claims._types import CheckoutConflictError, Claimant, TaskRow
from soak.spi import StoreBusyError


def factory(cls: type[MemoryClaimStore]):
    def open_store(location: str, *, lease_ttl_ms: int, clock=None, **options):
        return cls(location, lease_ttl_ms=lease_ttl_ms, clock=clock)

    open_store.__qualname__ = open_store.__name__ = f"open_{cls.__name__}"
    return open_store


class ReleaseResetsEpoch(MemoryClaimStore):
    """release clears the owner and resets the epoch to 0: the next claim reissues epoch 1."""

    def release(self, project_id: str, task_id: str, claimant: Claimant, epoch: int) -> None:
        super().release(project_id, task_id, claimant, epoch)
        oracle, lock, _ = self._domain
        with lock:
            key = (project_id, task_id)
            oracle.claims[key] = replace(oracle.claims[key], lease_epoch=0)
            oracle.tasks[key] = replace(oracle.tasks[key], checkout_lease_epoch=0)


class NamelessConflict(MemoryClaimStore):
    """Every conflict names no holder."""

    def _do(self, name, *args, timed=False):
        try:
            return super()._do(name, *args, timed=timed)
        except CheckoutConflictError as exc:
            raise CheckoutConflictError(str(exc), None, project_id=exc.project_id, task_id=exc.task_id) from None


class RecoverWithoutAudit(MemoryClaimStore):
    """recover releases the claim but writes no audit event."""

    def recover(self, project_id: str, task_id: str, epoch: int, by: Claimant, reason: str) -> TaskRow:
        row = super().recover(project_id, task_id, epoch, by, reason)
        oracle, lock, _ = self._domain
        with lock:
            oracle.events[project_id].pop()
        return row


class RecoverDropsStep(MemoryClaimStore):
    """recover resets the task's step progress to 0."""

    def recover(self, project_id: str, task_id: str, epoch: int, by: Claimant, reason: str) -> TaskRow:
        super().recover(project_id, task_id, epoch, by, reason)
        oracle, lock, _ = self._domain
        with lock:
            key = (project_id, task_id)
            row = oracle.tasks[key] = replace(oracle.tasks[key], step=0)
        return row


class RecoverWithinLease(MemoryClaimStore):
    """recover ignores the lease: a live owner's task is taken from it."""

    def recover(self, project_id: str, task_id: str, epoch: int, by: Claimant, reason: str) -> TaskRow:
        saved = self._clock
        self._clock = lambda: saved() + 10 * self.lease_ttl_ms / 1000.0
        try:
            return super().recover(project_id, task_id, epoch, by, reason)
        finally:
            self._clock = saved


class UnfencedProgress(MemoryClaimStore):
    """record_progress writes the step without checking owner or epoch."""

    def record_progress(self, project_id: str, task_id: str, claimant: Claimant, epoch: int, step: int) -> None:
        oracle, lock, _ = self._domain
        with lock:
            key = (project_id, task_id)
            oracle.tasks[key] = replace(oracle._row(key), step=int(step))


class StaleHeartbeat(MemoryClaimStore):
    """heartbeat checks the owner but not the epoch."""

    def heartbeat(self, project_id: str, task_id: str, claimant: Claimant, epoch: int):
        cur = self.get(project_id, task_id)
        if cur is not None and claimant.same_owner(cur.owner):
            epoch = cur.lease_epoch
        return super().heartbeat(project_id, task_id, claimant, epoch)


class StealingClaim(MemoryClaimStore):
    """claim takes a held task from its owner (a new epoch) instead of refusing."""

    def claim(self, project_id: str, task_id: str, claimant: Claimant):
        cur = self.get(project_id, task_id)
        if cur is not None and cur.owner is not None and not claimant.same_owner(cur.owner):
            super().release(project_id, task_id, cur.owner, cur.lease_epoch)
        return super().claim(project_id, task_id, claimant)


class UntypedHeartbeat(MemoryClaimStore):
    """heartbeat of anyone but the owner raises RuntimeError instead of CheckoutConflictError."""

    def heartbeat(self, project_id: str, task_id: str, claimant: Claimant, epoch: int):
        try:
            return super().heartbeat(project_id, task_id, claimant, epoch)
        except CheckoutConflictError:
            raise RuntimeError("heartbeat exploded") from None


class AlwaysBusyClaim(MemoryClaimStore):
    """claim answers StoreBusyError on every attempt (nothing can be concluded)."""

    def claim(self, project_id: str, task_id: str, claimant: Claimant):
        if project_id == "soak-preflight":
            return super().claim(project_id, task_id, claimant)
        raise StoreBusyError("always busy")


class RealClockOnly(MemoryClaimStore):
    """A correct store that does not declare an injectable clock (it judges expiry by real time)."""

    injectable_clock = False

    def __init__(self, location=None, *, lease_ttl_ms=1000, clock=None):
        super().__init__(location, lease_ttl_ms=lease_ttl_ms, clock=None)
