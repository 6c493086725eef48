"""The networked mutant catalogue: PostgreSQL and Redis stores that each break one clause of the contract.

Each is the reference `postgresql://` or `redis://` store with one thing changed, selectable as
`mutant:NAME` (`?url=` names the server; by default `SOAK_POSTGRES_URL` / `SOAK_REDIS_URL`, else the
local test servers), so `soak selftest --mutant NAME` and every command taking a spec can name them.
The classes live beside their backends (`postgres_mutants`, `redis_mutants`) and load only when opened,
so a machine without a driver still resolves every other spec. `waits_for` names the fault a mutant
needs before a suite can see it break: the storm's clock-skew or network nemesis (`scenarios/networked.toml`
turns both on; conformance has neither).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from dataclasses import dataclass
from typing import Any

from soak.errors import StoreSpecError

__all__ = ["DEFAULT_URLS", "NET_MUTANTS", "NetMutant", "default_url", "net_mutant_target", "open_net_mutant"]

#: backend -> (the environment variable naming its server, the local default)
DEFAULT_URLS = {"postgres": ("SOAK_POSTGRES_URL", "postgresql://127.0.0.1:5432/test"),
                "redis": ("SOAK_REDIS_URL", "redis://127.0.0.1:6379/0")}


def default_url(backend: str) -> str:
    """The server a networked mutant is opened on when its spec names none."""
    env, fallback = DEFAULT_URLS[backend]
    return os.environ.get(env) or fallback


@dataclass(frozen=True)
class NetMutant:
    name: str
    backend: str  # postgres or redis
    cls: str  # the class in soak.stores.<backend>_mutants
    clause: str
    summary: str
    waits_for: str | None = None  # the fault a suite needs to catch it, where one is needed


NET_MUTANTS: dict[str, NetMutant] = {
    m.name: m
    for m in (
        NetMutant("pg-store-clock", "postgres", "StoreClock", "store-clock",
                  "expiry judged by the caller's clock, not clock_timestamp()", waits_for="clock-skew"),
        NetMutant("pg-split-fence", "postgres", "SplitFence", "atomic-fence",
                  "fence read in one statement, the mutation in the next, under READ COMMITTED"),
        NetMutant("pg-advisory-fence", "postgres", "AdvisoryFence", "stale-rejected",
                  "a session advisory lock taken at acquire is the writes' fence (no epoch)"),
        NetMutant("pg-lost-commit-busy", "postgres", "LostCommitBusy", "typed-refusal",
                  "a connection lost during a commit is answered StoreBusyError (it may have committed)",
                  waits_for="network"),
        NetMutant("redis-store-clock", "redis", "StoreClock", "store-clock",
                  "expiry judged by the caller's clock, not the server's TIME", waits_for="clock-skew"),
        NetMutant("redis-check-then-set", "redis", "CheckThenSet", "atomic-fence",
                  "the tenure read and checked by the client, then the write sent outside the script"),
        NetMutant("redis-setnx-lock", "redis", "SetNxLock", "stale-rejected",
                  "a SET NX PX lock; writes check no epoch (Kleppmann's unfenced lock)"),
    )
}


def _store_class(m: NetMutant) -> type:
    return getattr(importlib.import_module(f"soak.stores.{m.backend}_mutants"), m.cls)


def open_net_mutant(location: str, *, lease_ttl_ms: int, mutant: str, **options: Any) -> Any:
    """Factory for a networked `mutant:NAME`: the backend's own factory with the mutant's class."""
    m = NET_MUTANTS[mutant]
    module = importlib.import_module(f"soak.stores.{m.backend}")
    opener = module.open_postgres if m.backend == "postgres" else module.open_redis
    return opener(location, lease_ttl_ms=lease_ttl_ms, cls=_store_class(m), **options)


def net_mutant_target(name: str, options: dict[str, str]) -> Any:
    """The `StoreTarget` of `mutant:NAME` for a networked mutant (`?url=` names the server)."""
    from soak.stores import networked

    m = NET_MUTANTS[name]
    opts = dict(options)
    url = opts.pop("url", None) or default_url(m.backend)
    scheme = "postgresql" if m.backend == "postgres" else "redis"
    if not url.startswith(scheme + "://"):
        raise StoreSpecError(f"mutant {name} runs on {scheme}; pass ?url={scheme}://HOST:PORT/..., not {url!r}")
    target = networked(m.backend).spec_target(url, opts, factory=open_net_mutant, extra={"mutant": name},
                                              description=f"mutant: {m.summary} (breaks {m.clause})")
    return dataclasses.replace(target, spec=f"mutant:{name}" + (f"?url={url}" if "url" in options else ""))
