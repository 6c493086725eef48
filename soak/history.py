"""Operation records and their on-disk form: the one thing the storm and the checker share.

Each worker process appends one JSON line per record to its own file and hands every line to
the kernel before it calls the store, so a SIGKILL loses at most the completion of the
operation in flight. Records are Jepsen-shaped: an `invoke` line, then one completion line
with the same process and index: `ok` (happened), `fail` (refused typed: definitely did not
happen) or `info` (unknown). A worker that dies mid-call leaves an invoke with no completion;
the reader (`operations`) turns it into an `info` operation, never into `ok` or `fail`.

Line format (compact keys, one object per line)::

    {"t":"invoke","p":"w3.1","i":17,"ts":123,"f":"append","run":"r1",
     "lease":["r1","w3.1",5],"intent":"live","v":{"seq":4,"tag":"w3.1#17","c":3}}
    {"t":"ok","p":"w3.1","i":17,"ts":130,"v":{}}
    {"t":"fail","p":"w3.1","i":18,"ts":140,"err":"LeaseHeldError","msg":"...","v":{"holder":[...]}}
    {"t":"event","p":"w3.1","ts":150,"kind":"stall","v":{"ms":400}}

`ts` is CLOCK_MONOTONIC in nanoseconds: one clock for every process on one machine.
Every mutation writes a payload derived from its tag (`payload_for`), so every value in the
final store state names the operation that wrote it and any altered byte is visible.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.spi import Lease

try:  # a faster codec for the checker's and the storm's hot paths; the standard library's is the fallback
    from orjson import dumps as _orjson_dumps
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a pinned dependency
    _orjson_dumps = None
    _loads = json.loads

#: Decode one history line (bytes or str) into its JSON object: the one decoder every reader uses.
decode_line = _loads

__all__ = [
    "COMPLETIONS",
    "HistoryCorruptError",
    "HistoryWriter",
    "LEASE_OPS",
    "MUTATIONS",
    "Operation",
    "Record",
    "now_ns",
    "operation_tuples",
    "operations",
    "decode_line",
    "payload_for",
    "read_records",
    "tag_of",
]

#: Surfaces that change store state under the fence.
MUTATIONS: tuple[str, ...] = ("append", "put_meta", "delete", "blob_put", "blob_delete")
#: Lease surfaces.
LEASE_OPS: tuple[str, ...] = ("acquire", "renew", "release")
COMPLETIONS: tuple[str, ...] = ("ok", "fail", "info")

_PAYLOAD_SEP = b"|"
#: How much of a history file `operation_tuples` decodes at a time.
_BATCH_BYTES = 32 * 1024


_monotonic_ns = time.monotonic_ns  # what now_ns returns, without the extra call on the writer's path


def now_ns() -> int:
    """The history clock: CLOCK_MONOTONIC, comparable across processes on one machine."""
    return time.monotonic_ns()


def payload_for(tag: str) -> bytes:
    """The payload an operation with this tag writes: the tag, then 12 bytes derived from it.

    The derived bytes are binary (not UTF-8 in general) so a store that transcodes or trims
    payloads is caught byte for byte.
    """
    return tag.encode("ascii") + _PAYLOAD_SEP + hashlib.blake2b(tag.encode("ascii"), digest_size=12).digest()


def tag_of(payload: bytes) -> str | None:
    """The tag of the operation that wrote `payload`, or None if it was not written by soak."""
    head, sep, _ = payload.partition(_PAYLOAD_SEP)
    if not sep:
        return None
    try:
        return head.decode("ascii")
    except UnicodeDecodeError:
        return None


class HistoryCorruptError(ValueError):
    """A history file that cannot be read, other than a truncated last line."""


@dataclass(frozen=True, slots=True)
class Record:
    """One line of a history file, parsed."""

    type: str  # invoke | ok | fail | info | event
    process: str
    time: int
    index: int = -1
    f: str = ""
    run: str = ""
    lease: Lease | None = None
    intent: str = ""
    value: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    message: str | None = None
    kind: str = ""  # events only


@dataclass(frozen=True, slots=True)
class Operation:
    """One invocation paired with its completion (`outcome` info when it never completed)."""

    process: str
    index: int
    f: str
    run: str
    lease: Lease | None
    intent: str
    args: dict[str, Any]
    outcome: str  # ok | fail | info
    result: dict[str, Any]
    error: str | None
    message: str | None
    invoke_ns: int
    complete_ns: int | None  # None: the process died (or the storm ended) before completion

    @property
    def tag(self) -> str:
        return f"{self.process}#{self.index}"

    @property
    def epoch(self) -> int | None:
        return self.lease.epoch if self.lease else None


def _encode_lease(lease: Lease | None) -> list[Any] | None:
    return None if lease is None else [lease.run_id, lease.owner, lease.epoch]


class HistoryWriter:
    """Appends records for one process; every line reaches the kernel before the call returns."""

    def __init__(self, path: str | os.PathLike[str], process: str) -> None:
        self.path = Path(path)
        self.process = process
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._index = 0

    def _write(self, obj: dict[str, Any]) -> None:
        # orjson writes the same compact JSON as json.dumps(separators=(",", ":")) in a third of the
        # time (non-ASCII text as UTF-8 rather than \u escapes: the reader decodes both). What it
        # refuses (ints past 64 bits, lone surrogates) goes through the standard library, with a
        # lone surrogate written as "?" so that the reader can still decode the line.
        try:
            line = _orjson_dumps(obj) + b"\n"  # type: ignore[misc]
        except TypeError:  # includes _orjson_dumps being None and orjson.JSONEncodeError
            line = (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8", "replace")
        os.write(self._fd, line)

    def next_index(self) -> int:
        """The index the next `invoke` will carry (its tag is `process#index`)."""
        return self._index

    def invoke(
        self, f: str, run: str, lease: Lease | None, intent: str, value: dict[str, Any] | None = None
    ) -> int:
        index = self._index
        self._index += 1
        self._write(
            {
                "t": "invoke",
                "p": self.process,
                "i": index,
                "ts": _monotonic_ns(),
                "f": f,
                "run": run,
                "lease": _encode_lease(lease),
                "intent": intent,
                "v": value or {},
            }
        )
        return index

    def complete(
        self,
        index: int,
        outcome: str,
        value: dict[str, Any] | None = None,
        error: str | None = None,
        message: str | None = None,
    ) -> None:
        if outcome not in COMPLETIONS:
            raise ValueError(f"outcome must be one of {COMPLETIONS}, got {outcome!r}")
        rec: dict[str, Any] = {"t": outcome, "p": self.process, "i": index, "ts": _monotonic_ns(), "v": value or {}}
        if error is not None:
            rec["err"] = error
        if message is not None:
            rec["msg"] = message[:500]
        self._write(rec)

    def event(self, kind: str, value: dict[str, Any] | None = None) -> None:
        self._write({"t": "event", "p": self.process, "ts": _monotonic_ns(), "kind": kind, "v": value or {}})

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _decode(obj: dict[str, Any]) -> Record:
    lease = obj.get("lease")
    return Record(
        type=obj["t"],
        process=obj["p"],
        time=int(obj["ts"]),
        index=int(obj.get("i", -1)),
        f=obj.get("f", ""),
        run=obj.get("run", ""),
        lease=Lease(lease[0], lease[1], int(lease[2])) if lease else None,
        intent=obj.get("intent", ""),
        value=obj.get("v") or {},
        error=obj.get("err"),
        message=obj.get("msg"),
        kind=obj.get("kind", ""),
    )


def read_records(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Records of one history file in order.

    A last line without its newline (a kill mid-write) is dropped: the operation it would
    have completed stays unknown. Any other unreadable line raises `HistoryCorruptError`.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        lineno = 0
        for raw in fh:
            lineno += 1
            if not raw.endswith(b"\n"):
                return  # truncated final line
            if not raw.strip():
                continue
            try:
                yield _decode(_loads(raw))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise HistoryCorruptError(f"{path}:{lineno}: unreadable history record ({exc})") from exc


def operations(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Operation | Record]:
    """Every operation and event of a run's history files, file by file.

    Invokes are paired with their completions per process (a worker makes one call at a time);
    an invoke left without one becomes an `info` operation; events pass through as `Record`s; a
    truncated last line is dropped. Any other unreadable line, a completion without its invoke
    or a second pending invoke raises `HistoryCorruptError` naming the file and line.
    """
    for p in sorted(Path(x) for x in paths):
        for item in operation_tuples(p):
            yield _operation(*item) if type(item) is tuple else item


class _Unfrozen:
    """Operation's slot layout without the frozen guard: filled, then turned into an Operation.

    A frozen dataclass's generated __init__ costs several microseconds per record, which
    dominates reading a long history; `_operation` builds the same immutable Operation in a
    fraction of that.
    """

    __slots__ = Operation.__slots__


def _operation(process, index, f, run, lease, intent, args, outcome, result, error, message, invoke_ns, complete_ns,
               _new=_Unfrozen, _cls=Operation):  # type: ignore[no-untyped-def]
    op = _new()
    op.process = process
    op.index = index
    op.f = f
    op.run = run
    op.lease = lease
    op.intent = intent
    op.args = args
    op.outcome = outcome
    op.result = result
    op.error = error
    op.message = message
    op.invoke_ns = invoke_ns
    op.complete_ns = complete_ns
    op.__class__ = _cls
    return op  # type: ignore[return-value]


def operation_tuples(path: str | os.PathLike[str]) -> Iterator[tuple[Any, ...] | Record]:
    """The operations of one history file as plain tuples in `Operation`'s field order, and its events.

    The pairing behind `operations`, for readers that cannot afford an object per operation
    (the checker folds millions of them); `Operation(*t)` is the record. Same errors as `operations`.
    """
    path = Path(path)
    leases: dict[tuple[Any, ...], Lease] = {}
    pending: dict[str, dict[str, Any]] = {}
    completions = frozenset(COMPLETIONS)
    loads = _loads
    done = 0  # lines before this batch
    with open(path, "rb") as fh:
        while True:
            batch = fh.readlines(_BATCH_BYTES)
            if not batch:
                break
            last = batch[-1][-1] != 10  # b"\n": a truncated final line; the operation it would have completed stays unknown
            if last:
                batch.pop()
            # One decoder call per batch of lines is a quarter cheaper than one per line; any line the
            # batch cannot decode (blank, corrupt, two values) sends the batch through line by line.
            try:
                objs = loads(b"[" + b",".join(batch) + b"]")
                if len(objs) != len(batch):
                    objs = None
            except ValueError:
                objs = None
            for k, obj in enumerate(batch if objs is None else objs):
                try:
                    if objs is None:
                        obj = loads(obj)
                    t = obj["t"]
                    if t == "invoke":
                        p = obj["p"]
                        if p in pending:
                            raise HistoryCorruptError(
                                f"{path}:{done + k + 1}: process {p}: invoke {obj.get('i')} while invoke {pending[p]['i']} is pending"
                            )
                        if type(obj["i"]) is not int or type(obj["ts"]) is not int:
                            obj["i"], obj["ts"] = int(obj["i"]), int(obj["ts"])  # checked here, so a bad line is named
                        pending[p] = obj
                        continue
                    if t in completions:
                        p = obj["p"]
                        inv = pending.pop(p, None)
                        if inv is None or inv["i"] != obj["i"]:
                            raise HistoryCorruptError(
                                f"{path}:{done + k + 1}: process {p}: completion {obj.get('i')} without its invoke")
                        lease = inv.get("lease")
                        if lease:
                            key = tuple(lease)
                            lease = leases.get(key)
                            if lease is None:
                                lease = leases[key] = Lease(key[0], key[1], int(key[2]))
                        else:
                            lease = None
                        ts = obj["ts"]
                        op: Any = (
                            p, inv["i"], inv.get("f", ""), inv.get("run", ""), lease, inv.get("intent", ""),
                            inv.get("v") or {}, t, obj.get("v") or {}, obj.get("err"), obj.get("msg"),
                            inv["ts"], ts if type(ts) is int else int(ts),
                        )
                    elif t == "event":
                        op = _decode(obj)
                    else:
                        raise HistoryCorruptError(f"{path}:{done + k + 1}: unknown record type {t!r}")
                except HistoryCorruptError:
                    raise
                except (ValueError, KeyError, TypeError, IndexError) as exc:
                    if not batch[k].strip():
                        continue
                    raise HistoryCorruptError(f"{path}:{done + k + 1}: unreadable history record ({exc})") from exc
                yield op
            done += len(batch)
            if last:
                break
    for inv in pending.values():
        yield _incomplete_tuple(_decode(inv))


def _incomplete_tuple(inv: Record) -> tuple[Any, ...]:
    """An invocation that never completed: unknown, concurrent with everything after it."""
    return (inv.process, inv.index, inv.f, inv.run, inv.lease, inv.intent, inv.value, "info", {}, "Incomplete",
            "no completion recorded (process killed or storm ended mid-call)", inv.time, None)
