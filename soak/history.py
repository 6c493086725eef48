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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from soak.spi import RUN_STATUSES, Lease

try:  # a faster codec for the checker's and the storm's hot paths; the standard library's is the fallback
    from orjson import dumps as _orjson_dumps
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a pinned dependency
    _orjson_dumps = None
    _loads = json.loads

#: Decode one history line (bytes or str) into its JSON object: the one decoder every reader uses.
decode_line = _loads

__all__ = [
    "COMPLETE_NS",
    "COMPLETIONS",
    "INVOKE_NS",
    "HistoryCorruptError",
    "HistoryTail",
    "HistoryWriter",
    "LEASE_OPS",
    "MUTATIONS",
    "Operation",
    "Record",
    "meta_fields_for",
    "now_ns",
    "operation_tuples",
    "operations",
    "decode_line",
    "decode_lines",
    "encode_lease",
    "first_invoke_ns",
    "payload_for",
    "read_records",
    "tag_of",
]

#: Surfaces that change store state under the fence.
MUTATIONS: tuple[str, ...] = ("append", "put_meta", "delete", "blob_put", "blob_delete")
#: Lease surfaces.
LEASE_OPS: tuple[str, ...] = ("acquire", "renew", "release")
COMPLETIONS: tuple[str, ...] = ("ok", "fail", "info")
#: Where an operation tuple (`operation_tuples`, `Operation`'s field order) holds its invocation and completion.
INVOKE_NS, COMPLETE_NS = 11, 12

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


def meta_fields_for(tag: str) -> tuple[str, int]:
    """The status and segments a `put_meta` with this tag writes beside `payload_for(tag)`, derived from the tag
    like its payload: a read alone then proves a meta that mixes two writes (one's payload, another's fields)."""
    digest = hashlib.blake2b(tag.encode("ascii"), digest_size=4, person=b"soak-meta").digest()
    n = int.from_bytes(digest, "big")
    return RUN_STATUSES[n % len(RUN_STATUSES)], n // len(RUN_STATUSES) % 100_000


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


def encode_lease(lease: Any) -> list[Any] | None:
    """A record's lease: a workload's list as given; a `soak.spi.Lease` as [run_id, owner, epoch]."""
    if lease is None or type(lease) is list:
        return lease
    if isinstance(lease, tuple):
        return list(lease)
    return [lease.run_id, lease.owner, lease.epoch]


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
        self, f: str, run: str, lease: list[Any] | None, intent: str, value: dict[str, Any] | None = None
    ) -> int:
        """Record the invocation of surface `f` on key `run` under `lease` (a list of JSON values as the workload's
        codec writes it, a `soak.spi.Lease`, or None); returns its index."""
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
                "lease": encode_lease(lease),
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


def _decode(obj: dict[str, Any], make_lease: Callable[..., Any] | None = None) -> Record:
    lease = obj.get("lease")
    return Record(
        type=obj["t"],
        process=obj["p"],
        time=int(obj["ts"]),
        index=int(obj.get("i", -1)),
        f=obj.get("f", ""),
        run=obj.get("run", ""),
        lease=(make_lease or _run_lease)(*lease) if lease else None,
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


def operations(paths: Iterable[str | os.PathLike[str]],
               make_lease: Callable[..., Any] | None = None) -> Iterator[Operation | Record]:
    """Every operation and event of a run's history files, file by file.

    Invokes are paired with their completions per process (a worker makes one call at a time);
    an invoke left without one becomes an `info` operation; events pass through as `Record`s; a
    truncated last line is dropped. Any other unreadable line, a completion without its invoke
    or a second pending invoke raises `HistoryCorruptError` naming the file and line.
    """
    for p in sorted(Path(x) for x in paths):
        for item in operation_tuples(p, make_lease):
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


# The lines as `operation_tuples` reads them, keys as on disk. Untracked by the cyclic GC (they hold no cycles):
# tracked, they set it off again and again (1M operations read in 2.26 s instead of 1.95 s with the GC on).
class _Invoke(msgspec.Struct, tag_field="t", tag="invoke", gc=False):
    """An invoke line."""

    p: str
    i: int
    ts: int
    f: str = ""
    run: str = ""
    lease: tuple[str, str, int] | None = None
    intent: str = ""
    v: dict[str, Any] = {}


class _Ok(msgspec.Struct, tag_field="t", tag="ok", gc=False):
    """A completion line; its class is its outcome."""

    p: str
    i: int
    ts: int
    v: dict[str, Any] = {}
    err: str | None = None
    msg: str | None = None


class _Fail(_Ok, tag="fail"):
    pass


class _Info(_Ok, tag="info"):
    pass


class _Event(msgspec.Struct, tag_field="t", tag="event"):
    """An event line: every key a `Record` reads."""

    p: str
    ts: int
    i: int = -1
    f: str = ""
    run: str = ""
    lease: tuple[str, str, int] | None = None
    intent: str = ""
    v: dict[str, Any] = {}
    err: str | None = None
    msg: str | None = None
    kind: str = ""


#: Decode a batch of lines given as a JSON array; anything but these shapes and types is rejected. It reads what
#: orjson reads, to the value, except integers past 64 bits (only the standard library's writer writes them),
#: which it keeps exact where orjson rounds them to floats.
_decode_batch = msgspec.json.Decoder(list[_Invoke | _Ok | _Fail | _Info | _Event]).decode
_OUTCOMES: dict[type, str] = {_Ok: "ok", _Fail: "fail", _Info: "info"}


def operation_tuples(path: str | os.PathLike[str],
                     make_lease: Callable[..., Any] | None = None) -> Iterator[tuple[Any, ...] | Record]:
    """The operations of one history file as plain tuples in `Operation`'s field order, and its events.

    The pairing behind `operations`, for readers that cannot afford an object per operation
    (the checker folds millions of them); `Operation(*t)` is the record. Same errors as `operations`.
    Operations of one file that hold equal leases hold the same `Lease` object, among the last
    `_LEASES` distinct leases of the file (older ones are forgotten, so memory stays bounded). `make_lease` builds
    the lease object from a record's lease list (the workload's decoder; default `soak.spi.Lease`).
    """
    path = Path(path)
    make = make_lease or _run_lease
    leases: dict[Any, Lease] = {}
    pending: dict[Any, _Invoke] = {}
    enter, leave, shared, outcome_of = pending.setdefault, pending.pop, leases.get, _OUTCOMES.get
    done, objs, obj = 0, [], None
    seen: Any = None  # the lease of the previous operation that held one, as read, and its shared Lease
    held: Lease | None = None
    try:
        for done, objs, unreadable in _batches(path):
            for obj in objs:
                cls = type(obj)
                if cls is _Invoke:
                    if enter(obj.p, obj) is not obj:
                        raise HistoryCorruptError(f"{path}:{_line(done, objs, obj)}: process {obj.p}: "
                                                  f"invoke {obj.i} while invoke {pending[obj.p].i} is pending")
                    continue
                t = outcome_of(cls)
                if t is not None:
                    p = obj.p
                    inv = leave(p, None)
                    if inv is None or inv.i != obj.i:
                        raise HistoryCorruptError(
                            f"{path}:{_line(done, objs, obj)}: process {p}: completion {obj.i} without its invoke")
                    lease = inv.lease
                    if lease is not None:
                        if lease == seen:  # a worker's consecutive calls mostly hold one lease: no hashing
                            lease = held
                        else:
                            held = shared(lease) or _intern(leases, lease, make)
                            seen, lease = lease, held
                    yield (p, inv.i, inv.f, inv.run, lease, inv.intent, inv.v, t, obj.v, obj.err, obj.msg, inv.ts,
                           obj.ts)
                elif obj is not None:  # an event (None: a blank line)
                    yield obj if cls is Record else _event(obj)
            if unreadable is not None:
                raise unreadable
    except HistoryCorruptError:
        raise
    except (ValueError, KeyError, TypeError, IndexError) as exc:  # an unhashable process, an unreadable lease
        raise HistoryCorruptError(f"{path}:{_line(done, objs, obj)}: unreadable history record ({exc})") from exc
    for inv in pending.values():
        yield _incomplete_tuple(_decode({"t": "invoke", **msgspec.structs.asdict(inv)}, make))


def first_invoke_ns(path: str | os.PathLike[str]) -> int | None:
    """When the first operation of a history file was invoked, read off its first invoke line (the checker
    opens a file only when it gets there); None for a file without one (events only), or whose first invoke
    line cannot be read (`operation_tuples` will say why)."""
    try:
        with open(path, "rb") as fh:
            for line in fh:
                if b"invoke" not in line:
                    continue
                try:
                    obj = _loads(line)
                except ValueError:
                    return None
                if isinstance(obj, dict) and obj.get("t") == "invoke":
                    ts = obj.get("ts")
                    return ts if type(ts) is int else None
    except OSError:
        pass
    return None


def _batches(path: Path) -> Iterator[tuple[int, list[Any], HistoryCorruptError | None]]:
    """A history file's records a batch of lines at a time: (lines before the batch, one record a line, the error
    of an unreadable line that ends the batch's records, if any). A truncated last line is left out.

    Each batch is decoded by `decode_lines`.
    """
    done = 0
    with open(path, "rb") as fh:
        while True:
            batch = fh.readlines(_BATCH_BYTES)
            if not batch:
                return
            last = batch[-1][-1] != 10  # b"\n": a truncated final line; the operation it would have completed stays unknown
            if last:
                batch.pop()
            yield done, *decode_lines(path, done, batch)
            done += len(batch)
            if last:
                return


def decode_lines(path: Path, done: int, batch: list[bytes]) -> tuple[list[Any], HistoryCorruptError | None]:
    """Complete lines of a history file (each ending in a newline), the `done` lines before them already read: one
    record a line (None for a blank one), and the error of an unreadable line that ends them, if any.

    One typed decoder call for the lines; lines it rejects (a blank or corrupt line, a value of another type, a
    record of another shape, a line holding two records) are read one by one as the untyped reader reads them.
    """
    try:
        objs: list[Any] | None = _decode_batch(b"[" + b",".join(batch) + b"]")
    except (msgspec.DecodeError, RecursionError):  # msgspec nests by recursion, orjson reads 1024 deep
        objs = None
    if objs is not None and len(objs) == len(batch):
        return objs, None
    return _read_lines(path, done, batch)


def _line(done: int, objs: list[Any], obj: Any) -> int:
    """The line number of `obj`, a record of a batch that follows `done` lines (one record a line)."""
    return done + 1 + next((k for k, o in enumerate(objs) if o is obj), 0)


#: Distinct leases a file's reader shares one `Lease` object for (`operation_tuples`): a worker holds a few at a time.
_LEASES = 1024


def _run_lease(run_id: Any, owner: Any, epoch: Any) -> Lease:
    """The run store's lease from its record ([run_id, owner, epoch])."""
    return Lease(run_id, owner, int(epoch))


def _intern(leases: dict[Any, Any], lease: Any, make: Callable[..., Any] = _run_lease) -> Any:
    """The file's one lease object for an invoke's lease array (first use; the oldest is forgotten past
    `_LEASES`)."""
    key = tuple(lease)
    shared = leases.get(key)
    if shared is None:
        if len(leases) >= _LEASES:
            del leases[next(iter(leases))]
        shared = leases[key] = make(*key)
    return shared


def _event(ev: _Event) -> Record:
    return _decode({"t": "event", **msgspec.structs.asdict(ev)})


def _invoke_of(obj: dict[str, Any]) -> _Invoke:
    # The lease is read when first used, as part of the completion's line (`_intern`); an array or an object is
    # kept as a tuple so that it can be looked up.
    lease = obj.get("lease") or None
    return _Invoke(obj["p"], int(obj["i"]), int(obj["ts"]), obj.get("f", ""), obj.get("run", ""),
                   tuple(lease) if isinstance(lease, (list, dict)) else lease, obj.get("intent", ""),
                   obj.get("v") or {})


def _completion_of(cls: type[_Ok], obj: dict[str, Any]) -> _Ok:
    return cls(obj["p"], obj["i"], int(obj["ts"]), obj.get("v") or {}, obj.get("err"), obj.get("msg"))


#: What the line-by-line reader makes of a decoded line, by record type: the typed decoder's records, with
#: the values the untyped reader accepts (a number given as a string, a non-object "v", a string "p").
_OF_TYPE: dict[Any, Callable[[dict[str, Any]], Any]] = {
    "invoke": _invoke_of, "ok": partial(_completion_of, _Ok), "fail": partial(_completion_of, _Fail),
    "info": partial(_completion_of, _Info), "event": _decode,
}


def _read_lines(path: Path, done: int, batch: list[bytes]) -> tuple[list[Any], HistoryCorruptError | None]:
    """A batch's records read one line at a time (None for a blank line), and the error of the first unreadable
    line (the records stop there; the caller pairs them before it raises)."""
    objs: list[Any] = []
    for k, raw in enumerate(batch):
        try:
            obj = _loads(raw)
            t = obj["t"]
            of = _OF_TYPE.get(t)
            if of is None:
                return objs, HistoryCorruptError(f"{path}:{done + k + 1}: unknown record type {t!r}")
            objs.append(of(obj))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            if not raw.strip():
                objs.append(None)
                continue
            err = HistoryCorruptError(f"{path}:{done + k + 1}: unreadable history record ({exc})")
            err.__cause__ = exc
            return objs, err
    return objs, None


def _incomplete_tuple(inv: Record) -> tuple[Any, ...]:
    """An invocation that never completed: unknown, concurrent with everything after it."""
    return (inv.process, inv.index, inv.f, inv.run, inv.lease, inv.intent, inv.value, "info", {}, "Incomplete",
            "no completion recorded (process killed or storm ended mid-call)", inv.time, None)


class HistoryTail:
    """One history file read as it grows (a storm's worker still writes it): its operations as `operation_tuples`
    makes them, and its events, as far as their lines are complete.

    `read()` takes the complete lines appended since the last read; an invoke waits in `pending_ns` until its
    completion arrives. `items` holds what is complete, in file order, for the caller to take from the left.
    `last_ns` is the time of the latest line read and `last_event` that line when it was an event. `end()` says
    the process has ended: a pending invoke becomes an operation that never completed, as the whole reader makes it.
    """

    __slots__ = ("path", "make", "offset", "done", "partial", "pending", "items", "last_ns", "last_event", "leases")

    def __init__(self, path: str | os.PathLike[str], make_lease: Callable[..., Any] | None = None) -> None:
        from collections import deque

        self.path = Path(path)
        self.make = make_lease or _run_lease
        self.offset = self.done = 0
        self.partial = b""
        self.pending: _Invoke | None = None
        self.items: Any = deque()
        self.last_ns: int | None = None
        self.last_event: Record | None = None
        self.leases: dict[Any, Any] = {}

    @property
    def pending_ns(self) -> int | None:
        """When the invoke still waiting for its completion was made (None: none is)."""
        return None if self.pending is None else self.pending.ts

    def read(self) -> None:
        """Take the lines appended since the last read (a last line without its newline waits for the rest)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        if not data:
            return
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        lines = [line + b"\n" for line in lines]
        objs, unreadable = decode_lines(self.path, self.done, lines)
        for obj in objs:
            self._take(obj, lines)
        self.done += len(lines)
        if unreadable is not None:
            raise unreadable

    def _take(self, obj: Any, lines: list[bytes]) -> None:
        cls = type(obj)
        if obj is None:
            return
        self.last_ns = obj.ts if cls is not Record else obj.time
        if cls is _Invoke:
            if self.pending is not None:
                raise HistoryCorruptError(f"{self.path}: process {obj.p}: invoke {obj.i} while invoke "
                                          f"{self.pending.i} is pending")
            self.pending, self.last_event = obj, None
            return
        t = _OUTCOMES.get(cls)
        if t is None:
            self.last_event = obj if cls is Record else _event(obj)
            self.items.append(self.last_event)
            return
        inv, self.pending, self.last_event = self.pending, None, None
        if inv is None or inv.i != obj.i:
            raise HistoryCorruptError(f"{self.path}: process {obj.p}: completion {obj.i} without its invoke")
        lease = None if inv.lease is None else _intern(self.leases, inv.lease, self.make)
        self.items.append((obj.p, inv.i, inv.f, inv.run, lease, inv.intent, inv.v, t, obj.v, obj.err, obj.msg,
                           inv.ts, obj.ts))

    def end(self) -> None:
        """The process has ended: its pending invoke (if any) never completes."""
        self.read()
        if self.pending is not None:
            inv, self.pending = self.pending, None
            self.items.append(_incomplete_tuple(_decode({"t": "invoke", **msgspec.structs.asdict(inv)}, self.make)))
