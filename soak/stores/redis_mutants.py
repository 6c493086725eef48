"""Redis mutants (catalogue: `soak.stores.net_mutants`): the reference store with one thing changed."""

from __future__ import annotations

import time
from typing import Any

from soak.spi import Lease, LeaseHeldError
from soak.stores.redis import RedisStore

__all__ = ["CheckThenSet", "SetNxLock", "StoreClock"]


class StoreClock(RedisStore):
    """Expiry computed and judged by the caller's clock, passed into the scripts."""

    NOW = "return tonumber(ARGV[4])"

    def _caller_now(self) -> int:
        return int(time.time() * 1000)


class CheckThenSet(RedisStore):
    """The tenure read and checked by the client (against the server's TIME), then the write sent as an
    unfenced script: a takeover between the read and the write is not seen."""

    def _mutate(self, name: str, run_id: str, lease: Lease | None, keys: list[str], args: list[Any]) -> list:
        if lease is not None and lease.run_id == run_id:
            owner, epoch, exp, rel = self._call(lambda r: r.hmget(self._key("lease", run_id), "owner", "epoch", "exp", "rel"))
            secs, micros = self._call(lambda r: r.time())
            now_ms = secs * 1000 + micros // 1000
            if (owner, epoch, rel) != (lease.owner.encode(), str(lease.epoch).encode(), b"0") or int(exp) <= now_ms:
                raise LeaseHeldError(run_id, None, f"lease {lease} is not the current live tenure")
            lease = None
        return super()._mutate(name, run_id, lease, keys, args)


class SetNxLock(RedisStore):
    """A `SET NX PX` lock per run, with an epoch counter beside it; writes check no epoch at all."""

    def acquire(self, run_id: str, owner: str) -> Lease:
        if not self._call(lambda r: r.set(self._key("lock", run_id), owner, nx=True, px=self.lease_ttl_ms)):
            raise LeaseHeldError(run_id, None)
        return Lease(run_id, owner, int(self._call(lambda r: r.incr(self._key("epoch", run_id)))))

    def renew(self, lease: Lease) -> Lease:
        if self._call(lambda r: r.get(self._key("lock", lease.run_id))) != lease.owner.encode():
            raise LeaseHeldError(lease.run_id, None, f"lease {lease} is not held")
        self._call(lambda r: r.pexpire(self._key("lock", lease.run_id), self.lease_ttl_ms))
        return lease

    def release(self, lease: Lease) -> None:
        if self._call(lambda r: r.get(self._key("lock", lease.run_id))) != lease.owner.encode():
            raise LeaseHeldError(lease.run_id, None, f"lease {lease} is not held")
        self._call(lambda r: r.delete(self._key("lock", lease.run_id)))

    def _mutate(self, name: str, run_id: str, lease: Lease | None, keys: list[str], args: list[Any]) -> list:
        return super()._mutate(name, run_id, None if lease is None or lease.run_id == run_id else lease, keys, args)
