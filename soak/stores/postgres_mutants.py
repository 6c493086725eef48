"""PostgreSQL mutants (catalogue: `soak.stores.net_mutants`): the reference store with one thing changed."""

from __future__ import annotations

import time
from typing import Any

from soak.spi import Lease, LeaseHeldError, StoreBusyError
from soak.stores.postgres import PostgresStore

__all__ = ["AdvisoryFence", "LostCommitBusy", "SplitFence", "StoreClock"]


class StoreClock(PostgresStore):
    """Expiry computed and judged by the caller's clock, sent as a parameter."""

    NOW = "to_timestamp(%(now)s)"

    def _now_params(self) -> dict[str, Any]:
        return {"now": time.time()}


class SplitFence(PostgresStore):
    """The fence read in one statement (no row lock) and the mutation in the next, in one READ COMMITTED
    transaction: a takeover committing between the two is not seen."""

    def _mutate(self, run_id: str, lease: Lease | None, writes: str, params: dict[str, Any]) -> int:
        if lease is None:
            return super()._mutate(run_id, lease, writes, params)
        self._run_match(run_id, lease)
        with self._connection().transaction():
            fence = self._fence_sql(lease).replace(" FOR SHARE", "")
            if not self._execute(fence, self._fence_params(lease)):
                raise LeaseHeldError(run_id, self._holder(run_id), f"lease {lease} is not the current live tenure")
            return super()._mutate(run_id, None, writes, params)


class AdvisoryFence(PostgresStore):
    """Acquire also takes a session advisory lock on the run, and a write is let through when its session
    holds that lock: the lock outlives the tenure (it is the session's, not the epoch's), so a holder that
    stalled past its ttl still writes after a takeover."""

    def _key(self, run_id: str) -> dict[str, Any]:
        return {"ns": self.schema, "run": run_id}

    def acquire(self, run_id: str, owner: str) -> Lease:
        lease = super().acquire(run_id, owner)
        self._execute("SELECT pg_try_advisory_lock(hashtext(%(ns)s), hashtext(%(run)s))", self._key(run_id))
        return lease

    def _mutate(self, run_id: str, lease: Lease | None, writes: str, params: dict[str, Any]) -> int:
        if lease is None:
            return super()._mutate(run_id, lease, writes, params)
        self._run_match(run_id, lease)
        held = self._execute("SELECT pg_try_advisory_lock(hashtext(%(ns)s), hashtext(%(run)s))", self._key(run_id))
        if not held[0][0]:
            raise LeaseHeldError(run_id, self._holder(run_id), "another session holds the run's advisory lock")
        return super()._mutate(run_id, None, writes, params)

    def release(self, lease: Lease) -> None:
        super().release(lease)
        while self._execute("SELECT pg_advisory_unlock(hashtext(%(ns)s), hashtext(%(run)s))",
                            self._key(lease.run_id))[0][0]:
            pass


class LostCommitBusy(PostgresStore):
    """A statement whose connection was lost (it may have committed) answered as StoreBusyError."""

    def _lost(self, exc: Exception) -> Any:
        raise StoreBusyError(f"postgresql connection lost: {exc}") from exc
