"""The values and errors of the wire protocol (docs/wire.md section 3), shared by the client and the Python server.

Each call is described once (`RUN_CALLS`, `CLAIM_CALLS`): its argument names and what they and its result are, so
both sides encode and decode from the same table.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from soak.claims._types import AuditEvent, CheckoutConflictError, Claim, Claimant, TaskRow
from soak.spi import JournalEntry, JournalOrderError, Lease, LeaseHeldError, RunMeta, StoreBusyError

__all__ = ["CLAIM_CALLS", "PROTOCOL_VERSION", "RUN_CALLS", "decode", "encode", "encode_error", "typed_error"]

PROTOCOL_VERSION = 1

# a value's kind -> its dataclass (fields of these kinds are encoded field by field)
_RECORDS: dict[str, type] = {"lease": Lease, "entry": JournalEntry, "meta": RunMeta, "claimant": Claimant,
                             "claim": Claim, "task": TaskRow, "audit": AuditEvent}
# record kind -> {field: kind} for the fields that are not plain JSON
_FIELDS: dict[str, dict[str, str]] = {"entry": {"payload": "bytes"}, "meta": {"payload": "bytes"},
                                      "claim": {"owner": "claimant?"}}


def encode(kind: str, value: Any) -> Any:
    """A Python value of `kind` as JSON (`bytes`, a record name, `X?` for optional, `[X]` for a list, `-` plain)."""
    if kind.endswith("?"):
        return None if value is None else encode(kind[:-1], value)
    if kind.startswith("["):
        return [encode(kind[1:-1], v) for v in value]
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode("ascii")
    if kind in _RECORDS:
        special = _FIELDS.get(kind, {})
        return {f.name: encode(special.get(f.name, "-"), getattr(value, f.name))
                for f in dataclasses.fields(_RECORDS[kind])}
    return value


def decode(kind: str, value: Any) -> Any:
    """The inverse of `encode`; malformed JSON raises `ValueError`, `TypeError` or `KeyError`."""
    if kind.endswith("?"):
        return None if value is None else decode(kind[:-1], value)
    if kind.startswith("["):
        if not isinstance(value, list):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return [decode(kind[1:-1], v) for v in value]
    if kind == "bytes":
        if not isinstance(value, str):
            raise TypeError(f"expected base64 text, got {type(value).__name__}")
        return base64.b64decode(value, validate=True)
    if kind in _RECORDS:
        if not isinstance(value, dict):
            raise TypeError(f"expected a {kind} object, got {type(value).__name__}")
        special = _FIELDS.get(kind, {})
        cls = _RECORDS[kind]
        return cls(**{f.name: decode(special.get(f.name, "-"), value[f.name]) for f in dataclasses.fields(cls)
                      if f.name in value or f.default is dataclasses.MISSING})
    return value


#: op -> ((arg name, kind), ...), result kind: the calls of a fenced run store (docs/wire.md section 3)
RUN_CALLS: dict[str, tuple[tuple[tuple[str, str], ...], str]] = {
    "acquire": ((("run_id", "-"), ("owner", "-")), "lease"),
    "renew": ((("lease", "lease"),), "lease"),
    "release": ((("lease", "lease"),), "-"),
    "append": ((("run_id", "-"), ("entry", "entry"), ("lease", "lease?")), "-"),
    "load": ((("run_id", "-"),), "[entry]"),
    "put_meta": ((("meta", "meta"), ("lease", "lease?")), "-"),
    "get_meta": ((("run_id", "-"),), "meta?"),
    "list_runs": ((), "[meta]"),
    "delete": ((("run_id", "-"), ("lease", "lease?")), "-"),
    "blob_put": ((("ref", "-"), ("blob", "bytes"), ("lease", "lease?")), "-"),
    "blob_get": ((("ref", "-"),), "bytes?"),
    "blob_list": ((("run_id", "-"),), "[-]"),
    "blob_delete": ((("ref", "-"), ("lease", "lease?")), "-"),
    "close": ((), "-"),
}

_TASK = (("project_id", "-"), ("task_id", "-"))
#: the calls of a task claim store (docs/wire.md section 5)
CLAIM_CALLS: dict[str, tuple[tuple[tuple[str, str], ...], str]] = {
    "claim": ((*_TASK, ("claimant", "claimant")), "claim"),
    "heartbeat": ((*_TASK, ("claimant", "claimant"), ("epoch", "-")), "claim"),
    "release": ((*_TASK, ("claimant", "claimant"), ("epoch", "-")), "-"),
    "get": (_TASK, "claim?"),
    "record_progress": ((*_TASK, ("claimant", "claimant"), ("epoch", "-"), ("step", "-")), "-"),
    "recover": ((*_TASK, ("epoch", "-"), ("by", "claimant"), ("reason", "-")), "task"),
    "task": (_TASK, "task?"),
    "tasks": ((("project_id", "-"),), "[task]"),
    "claims": ((("project_id", "-"),), "[claim]"),
    "audit": ((("project_id", "-"),), "[audit]"),
    "reconcile": ((("project_id", "-"),), "[-]"),
    "close": ((), "-"),
}


def encode_error(exc: BaseException) -> dict[str, Any]:
    """An exception as a response's `error` object: the contract's typed errors by their pinned names, most
    specific first; anything else by its own class name (the client treats it as indeterminate)."""
    message = str(exc)
    if isinstance(exc, LeaseHeldError):
        return {"type": "LeaseHeldError", "message": message, "run_id": exc.run_id,
                "holder": encode("lease?", exc.holder)}
    if isinstance(exc, CheckoutConflictError):
        return {"type": "CheckoutConflictError", "message": message,
                "current_holder": encode("claim?", exc.current_holder)}
    if isinstance(exc, JournalOrderError):
        return {"type": "JournalOrderError", "message": message}
    if isinstance(exc, StoreBusyError):
        return {"type": "StoreBusyError", "message": message}
    return {"type": type(exc).__name__, "message": message}


def typed_error(error: dict[str, Any]) -> Exception | None:
    """The contract error a response's `error` object names, or None where it names no typed error."""
    kind, message = error.get("type"), str(error.get("message") or "")
    if kind == "LeaseHeldError":
        return LeaseHeldError(str(error.get("run_id", "")), decode("lease?", error.get("holder")), message or None)
    if kind == "CheckoutConflictError":
        return CheckoutConflictError(message, decode("claim?", error.get("current_holder")))
    if kind == "JournalOrderError":
        return JournalOrderError(message)
    if kind == "StoreBusyError":
        return StoreBusyError(message)
    return None
