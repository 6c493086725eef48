"""Claim store spec strings: `memory:`, `sqlite:` (the default), `sqlite:///abs/dir`, `mutant:NAME` (a claim store
mutant), and, through `soak.stores.resolve(spec, kind="claims")`, `package.module:callable` and entry points in
group `soak.claim_stores`. A vendor's factory is called `callable(location, *, lease_ttl_ms=...)` like a run
store's."""

from __future__ import annotations

from collections.abc import Callable

from soak.errors import StoreSpecError
from soak.stores import StoreTarget

__all__ = ["CLAIM_SCHEMES", "resolve_claims"]


def _memory(rest: str, options: dict[str, str]) -> StoreTarget:
    from soak.claims._memory import open_memory_claims

    if rest:
        raise StoreSpecError(f"memory: takes no location, got 'memory:{rest}'; use 'memory:'")
    return StoreTarget("memory:", open_memory_claims, options, single_process=True,
                       description="in-process reference claim store", kind="claims")


def _sqlite(rest: str, options: dict[str, str]) -> StoreTarget:
    from soak.claims._sqlite import SQLITE_OPTIONS, open_sqlite_claims

    opts = dict(options)
    if rest:
        if not rest.startswith("///"):
            raise StoreSpecError(f"sqlite spec 'sqlite:{rest}' is malformed; use 'sqlite:' or 'sqlite:///abs/dir'")
        opts["path"] = rest[2:]
    unknown = sorted(set(opts) - set(SQLITE_OPTIONS))
    if unknown:
        raise StoreSpecError(f"sqlite: claim store has no option {unknown[0]!r}; options are "
                             f"{', '.join(sorted(SQLITE_OPTIONS))}")
    return StoreTarget("sqlite:" + rest, open_sqlite_claims, opts, description="embedded SQLite reference claim store",
                       kind="claims")


def _mutant(rest: str, options: dict[str, str]) -> StoreTarget:
    from soak.claims.mutants import CLAIM_MUTANTS, open_claim_mutant

    if rest not in CLAIM_MUTANTS:
        raise StoreSpecError(f"no claim store mutant named {rest!r}; mutants are {', '.join(sorted(CLAIM_MUTANTS))}")
    m = CLAIM_MUTANTS[rest]
    return StoreTarget(f"mutant:{rest}", open_claim_mutant, {**options, "mutant": rest},
                       description=f"claim store mutant: {m.summary} (breaks {m.clause})", kind="claims")


def _exec(rest: str, options: dict[str, str]) -> StoreTarget:
    from soak.stores.wire import exec_target

    return exec_target(rest, options, kind="claims")


#: scheme -> builder(rest_after_colon, options) -> StoreTarget (kind `claims`)
CLAIM_SCHEMES: dict[str, Callable[[str, dict[str, str]], StoreTarget]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "mutant": _mutant,
    "exec": _exec,
}


def resolve_claims(spec: str | Callable[..., object]) -> StoreTarget:
    """A claim store spec resolved to a `StoreTarget` of kind `claims` (or a one-line `StoreSpecError`)."""
    from soak.stores import resolve

    return resolve(spec, kind="claims")
