"""Store spec strings, resolved in one place (CONTRACT section 1, "Plugging a store in").

`resolve(spec)` turns a spec into a `StoreTarget` (a factory plus options) or raises
`StoreSpecError` with one line naming the fix. `StoreTarget.open(location, lease_ttl_ms)` calls
the factory, turning anything it raises into `StoreBootError`. Targets pickle (with dill for a
vendor's own callable), so a worker process can open its own store from the same target.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import parse_qsl

from soak.errors import StoreBootError, StoreSpecError
from soak.spi import FencedRunStore

__all__ = ["StoreTarget", "declares_injectable_clock", "networked", "redact", "register_scheme", "resolve", "SCHEMES"]

_REQUIRED = (
    "lease_ttl_ms", "fenced_writes", "acquire", "renew", "release", "append", "load", "put_meta",
    "get_meta", "list_runs", "delete", "transcripts", "close",
)
_REQUIRED_BLOBS = ("fenced_writes", "put", "get", "list", "delete")
_CLAIM_REQUIRED = ("lease_ttl_ms", "claim", "heartbeat", "release", "get", "record_progress", "recover", "task",
                   "tasks", "claims", "audit", "reconcile", "close")
#: kind -> (the members a store object must have, its blob store's, the protocol that names them)
_KINDS = {"runs": (_REQUIRED, _REQUIRED_BLOBS, "soak.spi.FencedRunStore"),
          "claims": (_CLAIM_REQUIRED, (), "soak.claims.ClaimStore")}
#: kind -> the entry-point group installed packages register named stores under
ENTRY_POINT_GROUPS = {"runs": "soak.stores", "claims": "soak.claim_stores"}


@dataclass(frozen=True)
class StoreTarget:
    """A resolved store spec: how to open one store object over a location."""

    spec: str
    factory: Callable[..., FencedRunStore]
    options: dict[str, Any] = field(default_factory=dict)
    single_process: bool = False
    description: str = ""
    #: which contract the store implements: `runs` (soak.spi, section 1) or `claims` (soak.claims, section 2)
    kind: str = "runs"
    #: a networked store's `remove(root, options)`: drops the namespaces of `root` and every location under it
    remove: Callable[[str, dict[str, Any]], Any] | None = None
    #: leave the namespaces in place after the storm (`soak storm --keep`)
    keep: bool = False

    def open(self, location: str, lease_ttl_ms: int, *, timeout_s: float | None = 60.0, **extra: Any) -> FencedRunStore:
        """Call the factory once; any failure becomes a one-line `StoreBootError`."""
        name = redact(self.spec)
        try:
            with _time_limit(timeout_s, f"store {name} did not finish booting within {timeout_s} s"):
                store = self.factory(location, lease_ttl_ms=lease_ttl_ms, **self.options, **extra)
        except StoreBootError:
            raise
        except Exception as exc:
            raise StoreBootError(
                f"store {name} failed to boot: {type(exc).__name__}: {_one_line(exc)}; fix the store or its options"
            ) from exc
        required, required_blobs, protocol = _KINDS[self.kind]
        missing = [m for m in required if not hasattr(store, m)]
        if not missing:
            missing = [f"transcripts.{m}" for m in required_blobs if not hasattr(store.transcripts, m)]
        if missing:
            raise StoreBootError(
                f"store {name} returned {type(store).__name__}, which lacks {', '.join(missing)}; "
                f"a factory must return a store with the members of {protocol}"
            )
        return store


    def cleanup(self, location: str | os.PathLike[str]) -> None:
        """Remove what the store keeps outside `location` for it and for every location under it (a networked
        store's schema or keys); a file store keeps everything inside and needs nothing. Called by whoever made the
        location, once no store object over it is in use. A failure is one line on stderr: the verdict stands."""
        if self.remove is None or self.keep:
            return
        try:
            self.remove(str(location), self.options)
        except Exception as exc:  # noqa: BLE001 - leftovers are worth a warning, not a different verdict
            print(f"soak: could not remove the namespace of {location} in {redact(self.spec)}: "
                  f"{type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)

    def probe_injectable_clock(self, location: str, lease_ttl_ms: int) -> bool:
        """Open one store object over `location` without a clock and read its declaration (then close it).

        The capability is never inferred from the factory's signature: a factory taking `**options` accepts any
        keyword, including one it ignores."""
        store = self.open(location, lease_ttl_ms)
        try:
            return declares_injectable_clock(store)
        finally:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - the probe only reads a declaration
                pass


def declares_injectable_clock(store: Any) -> bool:
    """True where the store object declares `injectable_clock = True` (CONTRACT section 1): its factory accepts
    `clock=` and the store judges expiry by that clock alone."""
    return getattr(store, "injectable_clock", False) is True


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else "(no message)"


class _BootTimeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: float | None, message: str):
    """Bound a call made on the main thread with SIGALRM (elsewhere: no bound)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _alarm(signum, frame):
        raise _BootTimeout(message)

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _BootTimeout as exc:
        raise StoreBootError(str(exc)) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def redact(spec: str) -> str:
    """The spec with any password in a URL or `password=`/`secret=`/`token=` option replaced."""
    spec = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", spec)
    return re.sub(r"((?:password|secret|token)=)[^&]*", r"\1***", spec, flags=re.I)


# -- schemes -------------------------------------------------------------------------------

def _memory(rest: str, options: dict[str, str]) -> StoreTarget:
    from soak.stores.memory import open_memory

    if rest:
        raise StoreSpecError(f"memory: takes no location, got 'memory:{rest}'; use 'memory:'")
    return StoreTarget("memory:", open_memory, options, single_process=True, description="in-process reference store")


def _sqlite(rest: str, options: dict[str, str]) -> StoreTarget:
    from soak.stores.sqlite import open_sqlite

    opts = dict(options)
    if rest:
        if not rest.startswith("///"):
            raise StoreSpecError(
                f"sqlite spec 'sqlite:{rest}' is malformed; use 'sqlite:' or 'sqlite:///abs/path.db'"
            )
        opts["path"] = rest[2:]
    allowed = {"path", "busy_timeout_ms", "boot_timeout_ms", "synchronous"}
    unknown = sorted(set(opts) - allowed)
    if unknown:
        raise StoreSpecError(f"sqlite: has no option {unknown[0]!r}; options are {', '.join(sorted(allowed))}")
    return StoreTarget("sqlite:" + rest, open_sqlite, opts, description="embedded SQLite reference store")


def _mutant(rest: str, options: dict[str, str]) -> StoreTarget:
    from soak.stores.mutants import MUTANTS, open_mutant
    from soak.stores.net_mutants import NET_MUTANTS, net_mutant_target

    if rest in NET_MUTANTS:
        return net_mutant_target(rest, options)
    if rest not in MUTANTS:
        raise StoreSpecError(f"no mutant named {rest!r}; mutants are {', '.join(sorted([*MUTANTS, *NET_MUTANTS]))}")
    return StoreTarget(f"mutant:{rest}", open_mutant, {**options, "mutant": rest},
                       description=f"mutant: {MUTANTS[rest].summary} (breaks {MUTANTS[rest].clause})")


def networked(backend: str) -> Any:
    """The module of a networked reference store (`postgres` or `redis`), or a one-line error naming the extra."""
    try:
        return importlib.import_module(f"soak.stores.{backend}")
    except ImportError as exc:
        raise StoreSpecError(f"the {backend} store needs its driver ({_one_line(exc)}); "
                             f"install it: pip install 'soak[{backend}]'") from exc


def _postgres(rest: str, options: dict[str, str]) -> StoreTarget:
    return networked("postgres").spec_target("postgresql:" + rest, options)


def _redis(rest: str, options: dict[str, str]) -> StoreTarget:
    return networked("redis").spec_target("redis:" + rest, options)


def _exec(rest: str, options: dict[str, str]) -> StoreTarget:
    from soak.stores.wire import exec_target

    return exec_target(rest, options)


#: scheme -> builder(rest_after_colon, options) -> StoreTarget
SCHEMES: dict[str, Callable[[str, dict[str, str]], StoreTarget]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "mutant": _mutant,
    "postgresql": _postgres,
    "postgres": _postgres,
    "redis": _redis,
    "exec": _exec,
}


def register_scheme(name: str, builder: Callable[[str, dict[str, str]], StoreTarget]) -> None:
    """Add a scheme (used by the mutant catalogue and the networked stores)."""
    SCHEMES[name] = builder


_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_CALLABLE_SPEC = re.compile(rf"^({_IDENT}(?:\.{_IDENT})*):({_IDENT}(?:\.{_IDENT})*)$")


def _split_options(spec: str) -> tuple[str, dict[str, str]]:
    head, sep, query = spec.partition("?")
    if not sep:
        return head, {}
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False)
    if not pairs and query:
        raise StoreSpecError(f"store options {query!r} are malformed; write them as ?key=value&key2=value2")
    for key, _ in pairs:
        if not key.isidentifier():
            raise StoreSpecError(f"store option name {key!r} is not an identifier; write ?key=value")
    return head, dict(pairs)


def _callable_target(spec: str, module_name: str, attr: str, options: dict[str, str], kind: str) -> StoreTarget:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StoreSpecError(
            f"cannot import module {module_name!r} named by store spec {spec!r} ({_one_line(exc)}); "
            "install the package or fix the spec"
        ) from exc
    except Exception as exc:
        raise StoreSpecError(
            f"importing module {module_name!r} for store spec {spec!r} raised {type(exc).__name__}: "
            f"{_one_line(exc)}; fix the module"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise StoreSpecError(f"module {module_name!r} has no attribute {attr!r}; fix the spec {spec!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise StoreSpecError(f"{module_name}:{attr} is a {type(obj).__name__}, not a callable store factory")
    return StoreTarget(spec, obj, options, description=f"{module_name}:{attr}", kind=kind)


def _entry_point_target(name: str, options: dict[str, str], kind: str) -> StoreTarget | None:
    for ep in entry_points(group=ENTRY_POINT_GROUPS[kind]):
        if ep.name == name:
            try:
                factory = ep.load()
            except Exception as exc:
                raise StoreSpecError(
                    f"store entry point {name!r} ({ep.value}) failed to load: {type(exc).__name__}: {_one_line(exc)}"
                ) from exc
            return StoreTarget(name, factory, options, description=f"entry point {ep.value}", kind=kind)
    return None


def resolve(spec: str | Callable[..., Any], kind: str = "runs") -> StoreTarget:
    """Resolve a store spec string (or a factory callable) to a `StoreTarget` of `kind` (`runs` or `claims`)."""
    if kind not in _KINDS:
        raise StoreSpecError(f"unknown store kind {kind!r}; use one of {', '.join(sorted(_KINDS))}")
    if callable(spec):
        name = getattr(spec, "__qualname__", type(spec).__name__)
        return StoreTarget(f"{getattr(spec, '__module__', '?')}:{name}", spec, {}, description="factory object",
                           kind=kind)
    if not isinstance(spec, str) or not spec.strip():
        raise StoreSpecError("store spec is empty; use e.g. sqlite:, memory: or package.module:callable")
    spec = spec.strip()
    head, options = _split_options(spec)
    scheme, colon, rest = head.partition(":")
    schemes = SCHEMES if kind == "runs" else _claim_schemes()
    if colon and scheme in schemes:
        return schemes[scheme](rest, options)
    match = _CALLABLE_SPEC.match(head)
    if match:
        return _callable_target(spec, match.group(1), match.group(2), options, kind)
    what = "store" if kind == "runs" else "claim store"
    if not colon:
        target = _entry_point_target(head, options, kind)
        if target is not None:
            return target
        raise StoreSpecError(
            f"no {what} named {head!r} (no such entry point in group {ENTRY_POINT_GROUPS[kind]}); "
            f"use one of {', '.join(s + ':' for s in sorted(schemes))} or package.module:callable"
        )
    raise StoreSpecError(
        f"unknown {what} scheme {scheme + ':'!r} in {spec!r}; use one of "
        f"{', '.join(s + ':' for s in sorted(schemes))} or package.module:callable"
    )


def _claim_schemes() -> dict[str, Callable[[str, dict[str, str]], StoreTarget]]:
    from soak.claims._spec import CLAIM_SCHEMES

    return CLAIM_SCHEMES
