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
                oracle = ClaimsOracle(self.lease_ttl_ms / 1000.0)
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
