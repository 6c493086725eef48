"""`memory:` claim store: the claims oracle behind a lock and a clock (single process only).

Objects opened over one location in one process share its state, as run memory stores do; the state is freed
when the last object over the location closes.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from soak.claims._types import AuditEvent, Claim, Claimant, TaskRow
from soak.claims.oracle import ClaimsOracle

__all__ = ["MemoryClaimStore", "open_memory_claims"]

_DOMAINS: dict[str, list[Any]] = {}  # location -> [oracle, lock, objects]
_DOMAINS_LOCK = threading.Lock()


class MemoryClaimStore:
    """The in-process reference claim store."""

    injectable_clock = True

    def __init__(self, location: str | None = None, *, lease_ttl_ms: int = 1000,
                 clock: Callable[[], float] | None = None) -> None:
        self.lease_ttl_ms = int(lease_ttl_ms)
        self._clock = clock or time.time
        self._key = os.path.abspath(location) if location is not None else None
        with _DOMAINS_LOCK:
            domain = _DOMAINS.get(self._key) if self._key is not None else None
            if domain is None:
                domain = [ClaimsOracle(self.lease_ttl_ms / 1000.0), threading.Lock(), 0]
                if self._key is not None:
                    _DOMAINS[self._key] = domain
            domain[2] += 1
        self._domain = domain
        self._closed = False

    def _do(self, name: str, *args: Any, timed: bool = False) -> Any:
        oracle, lock, _ = self._domain
        with lock:
            saved = oracle.ttl_s
            oracle.ttl_s = self.lease_ttl_ms / 1000.0  # each object judges expiry by its own ttl
            try:
                return getattr(oracle, name)(*args, self._clock()) if timed else getattr(oracle, name)(*args)
            finally:
                oracle.ttl_s = saved

    def claim(self, project_id: str, task_id: str, claimant: Claimant) -> Claim:
        return self._do("claim", project_id, task_id, claimant, timed=True)

    def heartbeat(self, project_id: str, task_id: str, claimant: Claimant, epoch: int) -> Claim:
        return self._do("heartbeat", project_id, task_id, claimant, int(epoch), timed=True)

    def release(self, project_id: str, task_id: str, claimant: Claimant, epoch: int) -> None:
        self._do("release", project_id, task_id, claimant, int(epoch))

    def get(self, project_id: str, task_id: str) -> Claim | None:
        return self._do("get", project_id, task_id)

    def record_progress(self, project_id: str, task_id: str, claimant: Claimant, epoch: int, step: int) -> None:
        self._do("record_progress", project_id, task_id, claimant, int(epoch), int(step))

    def recover(self, project_id: str, task_id: str, epoch: int, by: Claimant, reason: str) -> TaskRow:
        return self._do("recover", project_id, task_id, int(epoch), by, reason, timed=True)

    def task(self, project_id: str, task_id: str) -> TaskRow | None:
        return self._do("task", project_id, task_id)

    def tasks(self, project_id: str) -> list[TaskRow]:
        return self._do("project_tasks", project_id)

    def claims(self, project_id: str) -> list[Claim]:
        return self._do("project_claims", project_id)

    def audit(self, project_id: str) -> list[AuditEvent]:
        return self._do("audit", project_id)

    def reconcile(self, project_id: str) -> list[str]:
        return []  # one atomic state: a task row never splits from its claim here

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with _DOMAINS_LOCK:
            self._domain[2] -= 1
            if self._domain[2] <= 0 and self._key is not None and _DOMAINS.get(self._key) is self._domain:
                del _DOMAINS[self._key]


def open_memory_claims(location: str, *, lease_ttl_ms: int, clock: Callable[[], float] | None = None,
                       **options: Any) -> MemoryClaimStore:
    if options:
        raise TypeError(f"memory: claim store takes no options, got {', '.join(sorted(options))}")
    return MemoryClaimStore(location, lease_ttl_ms=lease_ttl_ms, clock=clock)
