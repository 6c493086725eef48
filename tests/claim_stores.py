"""A claim store written outside the reference stores: the claims oracle in a file, every call under an
exclusive `flock` (correct by construction, and shared across processes). Storms and checks use it as a second
correct store besides `sqlite:`, so a check that fails it is a false alarm.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import time
from typing import Any

from soak.claims.oracle import ClaimsOracle


class LockedFileClaims:
    injectable_clock = False
    #: the oracle class a fresh location starts with (the broken variants below change one rule of it)
    oracle = ClaimsOracle

    def __init__(self, location: str, *, lease_ttl_ms: int) -> None:
        self.lease_ttl_ms = int(lease_ttl_ms)
        self._path = os.path.join(location, "claims.pickle")
        self._lock = open(os.path.join(location, "claims.lock"), "a+")

    def _do(self, name: str, *args: Any, timed: bool = False) -> Any:
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            try:
                with open(self._path, "rb") as fh:
                    oracle = pickle.load(fh)
            except FileNotFoundError:
                oracle = self.oracle(self.lease_ttl_ms / 1000.0)
            oracle.ttl_s = self.lease_ttl_ms / 1000.0
            result = getattr(oracle, name)(*args, time.time()) if timed else getattr(oracle, name)(*args)
            tmp = f"{self._path}.{os.getpid()}"
            with open(tmp, "wb") as fh:
                pickle.dump(oracle, fh)
            os.replace(tmp, self._path)
            return result
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)

    def claim(self, p, t, c):
        return self._do("claim", p, t, c, timed=True)

    def heartbeat(self, p, t, c, e):
        return self._do("heartbeat", p, t, c, e, timed=True)

    def release(self, p, t, c, e):
        return self._do("release", p, t, c, e)

    def get(self, p, t):
        return self._do("get", p, t)

    def record_progress(self, p, t, c, e, s):
        return self._do("record_progress", p, t, c, e, s)

    def recover(self, p, t, e, by, reason):
        return self._do("recover", p, t, e, by, reason, timed=True)

    def task(self, p, t):
        return self._do("task", p, t)

    def tasks(self, p):
        return self._do("project_tasks", p)

    def claims(self, p):
        return self._do("project_claims", p)

    def audit(self, p):
        return self._do("audit", p)

    def reconcile(self, p):
        return []

    def close(self):
        self._lock.close()


def open_locked(location: str, *, lease_ttl_ms: int) -> LockedFileClaims:
    return LockedFileClaims(location, lease_ttl_ms=lease_ttl_ms)


# -- broken variants: one changed rule each, for the checker's own tests -----------------------------------------

from dataclasses import replace as _replace  # noqa: E402

from soak.claims._types import CheckoutConflictError  # noqa: E402


class _EpochReset(ClaimsOracle):
    def release(self, p, t, c, e):
        super().release(p, t, c, e)
        self.claims[(p, t)] = _replace(self.claims[(p, t)], lease_epoch=0)


class _RenewBumps(ClaimsOracle):
    def claim(self, p, t, c, now):
        cur = self.claims.get((p, t))
        new = super().claim(p, t, c, now)
        if cur is not None and cur.owner is not None and c.same_owner(cur.owner):
            new = self.claims[(p, t)] = _replace(new, lease_epoch=new.lease_epoch + 1)
        return new


class _NoHolder(ClaimsOracle):
    def _conflict(self, key, why):
        return CheckoutConflictError(why, None, project_id=key[0], task_id=key[1])


class _StaleHeartbeat(ClaimsOracle):
    def heartbeat(self, p, t, c, e, now):
        cur = self.claims.get((p, t))
        if cur is not None and cur.owner is not None:
            return cur  # accepted from anyone
        return super().heartbeat(p, t, c, e, now)


class _UnfencedProgress(ClaimsOracle):
    def record_progress(self, p, t, c, e, step):
        self.tasks[(p, t)] = _replace(self._row((p, t)), step=step)


class _LosesProgress(ClaimsOracle):
    def recover(self, *args):
        row = super().recover(*args)
        row = self.tasks[(args[0], args[1])] = _replace(row, step=0)
        return row


class _NoAudit(ClaimsOracle):
    def recover(self, *args):
        row = super().recover(*args)
        self.events[args[0]].pop()
        return row


class _RecoverInLease(ClaimsOracle):
    def recover(self, p, t, e, by, reason, now):
        return super().recover(p, t, e, by, reason, now + 3600)


BROKEN = {"epoch-reset": (_EpochReset, "claim-epoch-step"), "renew-bumps": (_RenewBumps, "claim-epoch-step"),
          "no-holder": (_NoHolder, "conflict-holder"), "stale-heartbeat": (_StaleHeartbeat, "heartbeat-fenced"),
          "unfenced-progress": (_UnfencedProgress, "progress-fenced"),
          "loses-progress": (_LosesProgress, "progress-preserved"), "no-audit": (_NoAudit, "recovery-audited"),
          "recover-in-lease": (_RecoverInLease, "claim-lease-protected")}


class BrokenLockedFileClaims(LockedFileClaims):
    def __init__(self, location: str, *, lease_ttl_ms: int, bug: str) -> None:
        super().__init__(location, lease_ttl_ms=lease_ttl_ms)
        self.oracle = BROKEN[bug][0]


def open_broken(location: str, *, lease_ttl_ms: int, bug: str) -> BrokenLockedFileClaims:
    return BrokenLockedFileClaims(location, lease_ttl_ms=lease_ttl_ms, bug=bug)
