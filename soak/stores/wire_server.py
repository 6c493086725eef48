"""The Python wire server: any soak store spec served over the wire protocol (docs/wire.md).

    python -m soak.stores.wire_server SPEC

SPEC is any spec soak accepts (`sqlite:`, `memory:`, `postgresql://...`, `redis://...`, `mutant:NAME`,
`package.module:callable`); the hello names the kind (runs or claims), the location, the ttl and options (merged
over the spec's own). The server answers one request at a time on stdout and exits at `close` or stdin EOF; stray
prints of the store go to stderr, never into the protocol. It honours a request's step-mode `"strike"`: it stops
itself (SIGSTOP) at boundary k of its handling of the call and reports the boundaries it counted.

It is the reference the protocol is tested against on every backend, and what its overhead is measured with.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, BinaryIO
from urllib.parse import urlencode

from soak.stores._wire_codec import CLAIM_CALLS, PROTOCOL_VERSION, RUN_CALLS, decode, encode, encode_error

__all__ = ["main", "serve"]

_BLOB_OPS = {"blob_put": "put", "blob_get": "get", "blob_list": "list", "blob_delete": "delete"}


def _respond(out: BinaryIO, rid: Any, body: dict[str, Any]) -> None:
    out.write(json.dumps({"id": rid, **body}, separators=(",", ":")).encode() + b"\n")
    out.flush()


def _hello(spec: str, args: dict[str, Any]) -> tuple[Any, str, dict[str, Any]]:
    """Open the store the hello asks for: (store, kind, the hello's answer)."""
    from soak.stores import resolve

    if args.get("version") != PROTOCOL_VERSION:
        raise _VersionError(f"this server speaks protocol {PROTOCOL_VERSION}, the client {args.get('version')!r}")
    kind = args.get("kind", "runs")
    options = {str(k): str(v) for k, v in (args.get("options") or {}).items()}
    if options:  # the exec: spec's options, checked by the served spec's scheme like its own
        spec += ("&" if "?" in spec else "?") + urlencode(options)
    target = resolve(spec, kind=kind)
    location = os.environ.get("SOAK_WIRE_LOCATION") or args["location"]
    store = target.open(location, int(args["lease_ttl_ms"]), timeout_s=None)
    answer = {"protocol": PROTOCOL_VERSION, "store": f"soak {target.spec}", "lease_ttl_ms": int(store.lease_ttl_ms),
              "fenced_writes": bool(getattr(store, "fenced_writes", False)), "injectable_clock": False}
    if kind == "runs":
        answer["blob_fenced_writes"] = bool(getattr(store.transcripts, "fenced_writes", False))
    return store, kind, answer


class _VersionError(Exception):
    pass


def _step_k(strike: Any) -> int | None:
    """The boundary a step-mode strike stops at (0: count only), None for a request without one."""
    if not isinstance(strike, dict) or strike.get("mode") != "step":
        return None
    k = strike.get("k", 0)
    return k if isinstance(k, int) and k >= 0 else None


class _NoStrikes:
    available = False


def _strike_timer() -> Any:
    """The step-mode counter, or a stand-in that strikes nothing where it cannot load: a server that ignores
    `"strike"` is conformant, one that dies on it is not."""
    try:
        from soak.storm.strike import StrikeTimer

        return StrikeTimer()
    except Exception as exc:  # noqa: BLE001 - e.g. run by a Python without soak's dependencies
        print(f"wire_server: strikes are ignored: their counter did not load ({type(exc).__name__}: {exc}); "
              f"run this server with the Python soak is installed in", file=sys.stderr)
        return _NoStrikes()


def serve(spec: str, inp: BinaryIO, out: BinaryIO) -> int:
    """Serve `spec` over the protocol on `inp`/`out` until `close` or EOF; the exit status."""
    timer: Any = None  # the step-mode strike counter, made at the first strike (its import is half a boot)
    store: Any = None
    table: dict[str, Any] = {}
    for raw in inp:
        try:
            request = json.loads(raw)
            rid, op, args = request["id"], request["op"], request.get("args") or {}
        except (ValueError, KeyError, TypeError) as exc:
            print(f"wire_server: a request that is not a JSON request object ({exc}): {raw[:200]!r}",
                  file=sys.stderr)
            return 2
        if store is None:
            if op != "hello":
                _respond(out, rid, {"error": {"type": "ProtocolError", "message": f"{op} before hello"}})
                continue
            try:
                store, kind, answer = _hello(spec, args)
            except _VersionError as exc:
                _respond(out, rid, {"error": {"type": "ProtocolVersionError", "message": str(exc)}})
                return 2
            except Exception as exc:  # noqa: BLE001 - a boot failure is the client's to report
                _respond(out, rid, {"error": {"type": type(exc).__name__, "message": str(exc)}})
                return 1
            table = RUN_CALLS if kind == "runs" else CLAIM_CALLS
            _respond(out, rid, {"ok": answer})
            continue
        if op not in table:
            _respond(out, rid, {"error": {"type": "ProtocolError", "message": f"no call named {op!r}"}})
            continue
        names, result = table[op]
        try:
            values = [decode(kind, args[name]) for name, kind in names]
        except (ValueError, TypeError, KeyError) as exc:
            _respond(out, rid, {"error": {"type": "ProtocolError", "message": f"{op}: malformed args ({exc})"}})
            continue
        target = store.transcripts if op in _BLOB_OPS else store
        method = getattr(target, _BLOB_OPS.get(op, op))
        strike = request.get("strike")
        # k 0 counts the call's boundaries without stopping (the worker learns n before its first strike)
        k = _step_k(strike)
        extra: dict[str, Any] = {}
        if k is not None and timer is None:
            timer = _strike_timer()
        if k is not None and timer.available:
            timer.count_to(op, k)
        try:
            value = method(*values)
        except Exception as exc:  # noqa: BLE001 - every store error goes back by name
            body = {"error": encode_error(exc)}
        else:
            body = {"ok": encode(result, value)}
        finally:
            if k is not None and timer.available:
                extra = {"strike": {"seen": timer.stop_counting()}}
        _respond(out, rid, {**body, **extra})
        if op == "close":
            return 0
    if store is not None:
        try:
            store.close()
        except Exception:  # noqa: BLE001 - stdin ended: the client is gone
            pass
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m soak.stores.wire_server SPEC   (e.g. sqlite:, mutant:split-fence)", file=sys.stderr)
        return 2
    # the protocol owns the original stdout; anything else printed goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's: this child ends with its stdin
    return serve(argv[0], sys.stdin.buffer, out)


if __name__ == "__main__":
    sys.exit(main())
