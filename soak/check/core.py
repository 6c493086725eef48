"""The pure checker: a recorded history plus the final store state in, a `Verdict` out.

No I/O and no clock. One streaming pass over the operations (`scan`) folds them into `Facts`:
a small record per tenure, per run and per blob ref, the operations whose tag appears in the
final state, refusals that might be spurious, and accepted appends missing from the journal
(as packed integers, dropped once a delete explains them). Nothing else is kept per
operation. Operations arrive as plain tuples (`soak.history.operation_tuples`; `Operation`s
are turned into them), and the pass can be cut: `fold` the files of some processes, `fold` the
rest elsewhere, and `merge` continues the first fold with the second exactly as one pass would
have. Folded a time slice at a time (`fold(..., until=T)`), the facts can be settled after each
slice (`settle`): what can no longer change is judged and dropped, and tenures nothing still to
come can consult retire, leaving a small residue, so memory is bounded by what is in flight,
not by the history (`soak.check.parallel` does both, on two cores; docs/bounded-checker.md).
Then small checkers each read `Facts` and return violations; a checker that raises makes the
verdict inconclusive, never pass.

Ordering without a replay: every mutation carries its lease epoch and a per-tenure counter
`c`, so the serial order of accepted writes is the order of their keys `(epoch, c)`. The
expected final state is then decided key by key (the last accepted write per run, meta and
ref wins; a delete explains every earlier write it removed), which is what a replay on
`soak.oracle.Oracle` would give, without sorting or holding the history.

Real time comes from the history's own monotonic timestamps: a tenure is stale from the
earliest completion of an accepted acquire of a later epoch, or of its own release.
The workers' `intent` is never consulted.

Reads are evidence too. Workers record the tenure a read was made under; the scan keeps, per
object (journal, meta, blob ref) and epoch, the last accepted write and the unknown ones after
it, and each tenured read with a frozen copy of its own tenure's summary. After the scan, a read
made while its tenure was surely live must see its own last write, or else the serially-last
write of the epochs below (unknown writes may or may not show): a superseded holder's write
that the fence let in late, after the successor was granted, shows up there even when the
final state hides it. Failed store boots (`open`) and acquires refused long after the newest
tenure surely ended are judged from the history as well (`concurrent-boot`, `ttl-honoured`).
"""

from __future__ import annotations

import bisect
import gc
import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

from soak.history import HistoryCorruptError, Operation, payload_for, tag_of
from soak.check.liveness import WHOLE_HISTORY_CHECKERS, check_liveness, exercised, history_gaps, lost_workers
from soak.check.verdict import Evidence, Verdict, Violation

__all__ = [
    "CHECKERS", "Checker", "Facts", "FoldOverlap", "Runner", "check", "default_margin_ns", "evidence", "finish",
    "fold", "judge", "merge", "merge_objects", "merge_reads", "merge_tenures", "new_facts", "new_part", "run_checkers",
    "scan", "settle", "Unordered",
]

_MUTATIONS = frozenset(("append", "put_meta", "delete", "blob_put", "blob_delete"))
#: Mutations whose payload names them (their tag can turn up in a read or the final state).
_TAGGED = frozenset(("append", "put_meta", "blob_put"))
#: Reads that record the tenure they were made under: checked against the serial history.
_READS = frozenset(("load", "get_meta", "blob_get"))
_LEASE_OPS = frozenset(("renew", "release"))
#: Events the fold keeps besides the nemesis's (`Facts.events`): how a worker started and ended.
_STORM_EVENTS = frozenset(("start", "crash", "store-exit"))
#: Typed refusals of the contract (and their root).
_TYPED = frozenset(("StoreError", "LeaseHeldError", "JournalOrderError", "StoreBusyError"))
_NEVER = float("inf")
#: The per-run caches' entry for a run without a granted tenure, which also marks them built: a tuple, which no run
#: id read from JSON can equal (an empty string could).
_NO_RUN = ("no run",)
_first, _second = itemgetter(0), itemgetter(1)
_intern = sys.intern


def default_margin_ns(lease_ttl_ms: int) -> int:
    """Slack for "surely live": a tenth of the ttl, at least 5 ms (store and history clocks differ)."""
    return max(5_000_000, lease_ttl_ms * 100_000)


#: Field positions of an operation tuple (`Operation`'s field order, as `soak.history.operation_tuples` yields).
_P, _I, _F, _RUN, _LEASE, _INTENT, _ARGS, _OUT, _RES, _ERR, _MSG, _INV, _COMP = range(13)
_RAW_LEN = 13


def _raw(op: Operation) -> tuple[Any, ...]:
    """An `Operation` as the tuple the scan folds."""
    return (op.process, op.index, op.f, op.run, op.lease, op.intent, op.args, op.outcome, op.result, op.error,
            op.message, op.invoke_ns, op.complete_ns)


def _ev(op: tuple[Any, ...]) -> Evidence:
    """Evidence of an operation tuple."""
    lease = op[_LEASE]
    if lease is not None:
        epoch = lease.epoch
    elif op[_F] == "acquire" and op[_OUT] == "ok":
        epoch = op[_RES].get("epoch")
    else:
        epoch = None
    return Evidence(
        op[_P], op[_I], op[_F], op[_RUN], epoch, op[_ARGS].get("c"), op[_OUT], op[_INV], op[_COMP],
        f"{op[_P]}#{op[_I]}", op[_ERR],
    )


def _lite(op: tuple[Any, ...]) -> tuple[Any, ...]:
    """A compact stand-in for `_ev(op)` (a plain tuple is several times cheaper to build)."""
    lease = op[_LEASE]
    error = op[_ERR]
    return (_intern(op[_P]), op[_I], _intern(op[_F]), _intern(op[_RUN]),
            lease.epoch if lease is not None else op[_RES].get("epoch"),
            op[_ARGS].get("c"), _intern(op[_OUT]), op[_INV], op[_COMP],
            None if error is None else _intern(error))


def _lite_of(op: tuple[Any, ...], memo: dict[int, tuple[Any, Any]]) -> tuple[Any, ...]:
    """`_lite(op)`, one tuple per operation however many summaries hold it (`memo` keeps `op` alive meanwhile)."""
    hit = memo.get(id(op))
    if hit is None:
        hit = memo[id(op)] = (op, _lite(op))
    return hit[1]


def _settle(tenure: _Tenure | None, objects: Iterable[_Obj]) -> None:
    """Compact the summaries one lease's operations wrote whole operations into (the fold has moved on)."""
    memo: dict[int, tuple[Any, Any]] = {}
    for o in objects:
        _compact_obj(o, memo)
    if tenure is not None:
        tenure.compact(memo)


def _op_fields(x: Any) -> tuple[str, int, str, int | None, int | None, int, int | None]:
    """(process, index, f, epoch, counter, invocation, completion) of an operation in any form `evidence` takes."""
    if type(x) is tuple and len(x) != _RAW_LEN:  # compact (`_lite`), the usual case
        return x[0], x[1], x[2], x[4], x[5], x[7], x[8]
    ev = evidence(x)
    return ev.process, ev.index, ev.f, ev.epoch, ev.counter, ev.invoke_ns, ev.complete_ns


def evidence(x: Evidence | Operation | tuple[Any, ...]) -> Evidence:
    """Evidence from an operation, its tuple or compact tuple, or evidence itself."""
    if type(x) is tuple:
        if len(x) == _RAW_LEN:
            return _ev(x)
        return Evidence(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], f"{x[0]}#{x[1]}", x[9])
    if type(x) is Evidence:
        return x
    return _ev(_raw(x))


class _Tenure:
    """What the history says about one (run, epoch). Operations are held as whole tuples or `_lite`."""

    __slots__ = ("run", "epoch", "grants", "marks", "rel_ok", "rel_ok_ev", "rel_inv", "mut_inv", "mut", "lop_inv", "lop",
                 "unt_inv", "unt", "users", "renew_unk")

    def __init__(self, run: str, epoch: int) -> None:
        self.run = run
        self.epoch = epoch
        self.grants: list[tuple[int, int, str, Any]] = []  # ok acquires: (invoke, complete, owner, op)
        self.marks: list[tuple[int, int]] = []  # ok acquire/renew: (invoke, complete)
        self.rel_ok: float = _NEVER  # earliest completion of an ok release
        self.rel_ok_ev: Any = None
        self.rel_inv: float = _NEVER  # earliest invocation of any release
        self.mut_inv, self.mut = -1, None  # latest-invoked accepted mutation
        self.lop_inv, self.lop = -1, None  # latest-invoked accepted renew/release
        self.unt_inv, self.unt = -1, None  # latest-invoked untyped unknown outcome
        self.users: dict[str, Any] | None = None  # owners presenting this lease in accepted ops -> first op
        self.renew_unk: list[tuple[int, float]] | None = None  # unknown renews: (invoke, complete or inf)

    def compact(self, memo: dict[int, tuple[Any, Any]]) -> None:
        """Swap held operations for compact tuples (their args and results are not needed)."""
        if self.mut is not None and len(self.mut) == _RAW_LEN:
            self.mut = _lite_of(self.mut, memo)
        if self.lop is not None and len(self.lop) == _RAW_LEN:
            self.lop = _lite_of(self.lop, memo)
        if self.unt is not None and len(self.unt) == _RAW_LEN:
            self.unt = _lite_of(self.unt, memo)
        if self.rel_ok_ev is not None and len(self.rel_ok_ev) == _RAW_LEN:
            self.rel_ok_ev = _lite_of(self.rel_ok_ev, memo)

    def granted_to(self, owner: str) -> bool:
        """Whether an accepted acquire of this tenure named `owner`."""
        for g in self.grants:
            if g[2] == owner:
                return True
        return False

    def grant_invoke(self) -> int:
        """The earliest invocation of an accepted acquire of this tenure (there must be one)."""
        grants = self.grants
        return grants[0][0] if len(grants) == 1 else min(g[0] for g in grants)

    def grant_complete(self) -> int:
        """The earliest completion of an accepted acquire of this tenure (there must be one)."""
        grants = self.grants
        return grants[0][1] if len(grants) == 1 else min(g[1] for g in grants)

    def renewed_by(self, before: int) -> int | None:
        """The latest completion among the grants and renewals invoked before `before`, or None."""
        return _latest(self.marks, 1, 0, before)

    def live_since(self, before: int) -> int | None:
        """The latest invocation among the grants and renewals that completed before `before`, or None."""
        return _latest(self.marks, 0, 1, before)

    def absorb(self, later: _Tenure) -> None:
        """Continue with what `later` (a fold of the files after this one's) says about the same tenure."""
        self.grants.extend(later.grants)
        self.marks.extend(later.marks)
        if later.rel_ok < self.rel_ok:
            self.rel_ok, self.rel_ok_ev = later.rel_ok, later.rel_ok_ev
        if later.rel_inv < self.rel_inv:
            self.rel_inv = later.rel_inv
        if later.mut_inv > self.mut_inv:
            self.mut_inv, self.mut = later.mut_inv, later.mut
        if later.lop_inv > self.lop_inv:
            self.lop_inv, self.lop = later.lop_inv, later.lop
        if later.unt_inv > self.unt_inv:
            self.unt_inv, self.unt = later.unt_inv, later.unt
        if later.users:
            if self.users is None:
                self.users = {}
            for owner, op in later.users.items():
                self.users.setdefault(owner, op)
        if later.renew_unk:
            self.renew_unk = [*(self.renew_unk or ()), *later.renew_unk]


def _latest(marks: list[tuple[int, int]], pick: int, by: int, before: int) -> int | None:
    """The largest `m[pick]` among the (invoke, complete) marks whose `m[by]` is below `before`, or None."""
    best = None
    for m in marks:
        if m[by] < before and (best is None or m[pick] > best):
            best = m[pick]
    return best


class _Run:
    """Per-run summaries for the state diff and the refusal check."""

    __slots__ = ("acq_invokes", "acq_unknown", "missing", "del_any", "del_ok", "meta_ok", "prune_at", "held")

    def __init__(self) -> None:
        self.acq_invokes = array("q")  # invocation time of every acquire, any outcome
        self.acq_unknown: list[tuple[int, float]] = []  # unknown acquires: (invoke, complete or inf)
        # ok appends absent from the journal, flat: epoch, c, process id, index, invoke, complete
        self.missing = array("q")
        self.del_any: tuple[int, int] | None = None  # highest key of an ok or unknown delete
        self.del_ok: tuple[tuple[int, int], tuple[Any, ...]] | None = None  # highest-keyed ok delete (whole op)
        self.meta_ok: tuple[tuple[int, int], tuple[Any, ...]] | None = None  # highest-keyed ok put_meta (whole op)
        self.prune_at = 6 * 1024
        self.held = array("q")  # acquires refused with LeaseHeldError, flat: invoke, complete, process id, index


class _Ref:
    """Per blob ref: the highest-keyed accepted put and delete, and any delete that may have applied."""

    __slots__ = ("run", "put_ok", "del_any", "del_ok")

    def __init__(self, run: str) -> None:
        self.run = run
        self.put_ok: tuple[tuple[int, int], tuple[Any, ...]] | None = None
        self.del_any: tuple[int, int] | None = None
        self.del_ok: tuple[tuple[int, int], tuple[Any, ...]] | None = None


#: Epochs (and counters) a residue row holds: what fits in its array; a run with others never retires.
_PACKABLE = 1 << 62


def _packed(x: Any) -> int:
    """`x` as a residue field: itself if it fits, else -1 (not known)."""
    return x if type(x) is int and 0 <= x < _PACKABLE else -1


class _Retired:
    """What one run's retired tenures (`settle`) leave behind, enough to judge operations still to come under them.

    Per retired epoch, in rising order, 13 integers: its first grant (invocation, completion, process id, index),
    its grantee (process id of the owner; -1 none, -2 several), when it was surely superseded (-1: never) and the
    operation proving it (kind 0 acquire or 1 release, process id, index, epoch, invocation, completion, counter;
    -1 for none). About 100 bytes a tenure, where the tenure and its summaries took kilobytes. Past `KEEP` rows,
    the oldest half folds into a watermark: those epochs were all superseded by its time, which its proof shows.
    Only operations that break the contract consult a row (a late write, a refused write in the final state, a
    misread), and one of that age is then named by the watermark (judged stale if invoked after it).
    """

    __slots__ = ("epochs", "data", "floor", "top_epoch", "top_inv", "last_inv", "granted", "mark", "mark_row")
    WIDTH = 13
    KEEP = 512
    #: The latest retired epochs whose tag segments stay (`_drop_tags`).
    TAGS = 256

    def __init__(self) -> None:
        self.epochs = array("q")
        self.data = array("q")
        self.floor = -1  # the highest epoch retired: object summaries at or below it are folded into floors
        self.top_epoch = -1  # the highest epoch retired with a grant, and that grant's invocation
        self.top_inv = 0
        self.last_inv = -1  # the latest invocation of a retired grant
        self.granted = 0  # retired epochs that were granted
        self.mark = -1  # the watermark: epochs up to it were superseded by the time in `mark_row`
        self.mark_row: array | None = None

    def add(self, facts: Facts, t: _Tenure, stale: tuple[float, Any]) -> None:
        """Retire `t`, superseded or released at `stale`."""
        row = [-1] * self.WIDTH
        if t.grants:
            g = min(t.grants, key=_second) if len(t.grants) > 1 else t.grants[0]
            process, index, _, _, _, _, _ = _op_fields(g[3])
            row[0], row[1], row[2], row[3] = g[0], g[1], _pid_of(facts, process), index
            owner = g[2]
            row[4] = _pid_of(facts, owner) if all(h[2] == owner for h in t.grants) else -2
            last = max(h[0] for h in t.grants)
            if last > self.last_inv:
                self.last_inv = last
            if t.epoch > self.top_epoch:
                self.top_epoch, self.top_inv = t.epoch, g[0]
        when, proof = stale
        if when != _NEVER and proof is not None:
            process, index, f, epoch, counter, invoke, complete = _op_fields(proof)
            row[5], row[6], row[7], row[8] = int(when), 1 if f == "release" else 0, _pid_of(facts, process), index
            row[9], row[10], row[11] = _packed(epoch), invoke, -1 if complete is None else complete
            row[12] = _packed(counter)
        if t.epoch <= self.mark:
            return  # operations that came under an epoch past the watermark: it stands for them
        w = self.WIDTH
        i = bisect.bisect_left(self.epochs, t.epoch)  # the end, in the usual case (retired in epoch order)
        if i < len(self.epochs) and self.epochs[i] == t.epoch:  # retired before: keep what its grant left
            old = self.data[i * w:(i + 1) * w]
            if old[0] >= 0:
                row[:5] = old[:5]
            elif row[0] >= 0:
                self.granted += 1
            if old[5] >= 0 and (row[5] < 0 or old[5] <= row[5]):
                row[5:] = old[5:]
            self.data[i * w:(i + 1) * w] = array("q", row)
        else:
            self.epochs.insert(i, t.epoch)
            self.data[i * w:i * w] = array("q", row)
            self.granted += row[0] >= 0
        if t.epoch > self.floor:
            self.floor = t.epoch
        if len(self.epochs) >= 2 * self.KEEP:
            self._fold_oldest(len(self.epochs) - self.KEEP)

    def _fold_oldest(self, n: int) -> None:
        """Fold the `n` oldest rows into the watermark (the latest superseding of them, and its proof)."""
        w = self.WIDTH
        best = self.mark_row
        for i in range(n):
            r = self.data[i * w:(i + 1) * w]
            if r[5] >= 0 and (best is None or r[5] > best[5]):
                best = r
        self.mark, self.mark_row = self.epochs[n - 1], best
        del self.epochs[:n], self.data[:n * w]

    def exact_row(self, epoch: int) -> array | None:
        """The row of a retired epoch, if it has one (a copy)."""
        i = bisect.bisect_left(self.epochs, epoch)
        if i < len(self.epochs) and self.epochs[i] == epoch:
            return self.data[i * self.WIDTH:(i + 1) * self.WIDTH]
        return None

    def row(self, epoch: int) -> array | None:
        """The row of a retired epoch; the watermark's for one past it that has none; else None."""
        row = self.exact_row(epoch)
        if row is not None:
            return row
        if epoch <= self.mark and self.mark_row is not None:
            row = array("q", self.mark_row)
            row[4] = -1  # whose it was is not kept
            return row
        return None

    def grant_ev(self, facts: Facts, run: str, epoch: int, row: array) -> Evidence:
        process = facts.procs[row[2]]
        return Evidence(process, row[3], "acquire", run, epoch, None, "ok", row[0], row[1], f"{process}#{row[3]}")

    def stale_at(self, facts: Facts, run: str, epoch: int) -> tuple[float, Any] | None:
        """`Facts.stale_at` of a retired epoch (or of one below them with no tenure), or None for one above."""
        if epoch > self.floor:
            return None
        row = self.row(epoch)
        if row is not None:
            if row[5] < 0:
                return _NEVER, None
            process = facts.procs[row[7]]
            f = "release" if row[6] == 1 else "acquire"
            return row[5], Evidence(process, row[8], f, run, None if row[9] < 0 else row[9],
                                    None if row[12] < 0 else row[12], "ok", row[10], None if row[11] < 0 else row[11],
                                    f"{process}#{row[8]}")
        # an epoch no retired tenure had: the earliest completing grant of the retired epochs above it (the
        # live ones, all above, are the caller's)
        best: tuple[float, Any] = (_NEVER, None)
        w = self.WIDTH
        for i in range(bisect.bisect_right(self.epochs, epoch), len(self.epochs)):
            r = self.data[i * w:(i + 1) * w]
            if r[0] >= 0 and r[1] < best[0]:
                best = (r[1], self.grant_ev(facts, run, self.epochs[i], r))
        return best

    def owners(self, facts: Facts, epoch: int) -> set[str] | None:
        """The grantee of a retired epoch, as a set; None when unknown (several grants, or none)."""
        row = self.row(epoch)
        if row is None or row[4] < 0:
            return None
        return {facts.procs[row[4]]}

    def top_grant(self, facts: Facts, run: str) -> tuple[int, int, int, Evidence] | None:
        """(invocation, completion, epoch, evidence) of the highest retired epoch's grant."""
        if self.top_epoch < 0:
            return None
        row = self.row(self.top_epoch)
        return row[0], row[1], self.top_epoch, self.grant_ev(facts, run, self.top_epoch, row)


#: The value of an empty journal as a read reports it: (tail seq, tail tag).
_EMPTY_JOURNAL = (0, None)


#: One object (journal, meta or blob ref) under one epoch, as a plain list (it travels between processes as it is):
#: [c of its last accepted write or None, the value a read then reports, that write's operation (whole until
#: compacted, then `_lite`), the (c, value, op) of unknown writes with c above]. `_frozen` gives the same as a tuple.
#: A value is what a read reports: `(seq, tag)` for a journal tail, a tag (or None) for meta and blobs.
_Obj = list


def _new_obj() -> _Obj:
    return [None, None, None, ()]


def _accept(o: _Obj, c: int, value: Any, op: Any) -> None:
    """Keep the write in `o` if it is the latest accepted."""
    ok_c = o[0]
    if ok_c is None or c > ok_c:
        o[0], o[1], o[2] = c, value, op
        if o[3]:
            o[3] = [u for u in o[3] if u[0] > c]


def _unknown(o: _Obj, c: int, value: Any, op: Any) -> None:
    """Add a write of unknown outcome to `o` (unless an accepted one with a higher c is already there)."""
    if o[0] is None or c > o[0]:
        o[3] = [*o[3], (c, value, op)]


def _compact_obj(o: _Obj, memo: dict[int, tuple[Any, Any]] | None = None) -> None:
    op = o[2]
    if op is not None and len(op) == _RAW_LEN:
        o[2] = _lite(op) if memo is None else _lite_of(op, memo)


def _frozen(o: _Obj) -> tuple[int | None, Any, Any, tuple[tuple[int, Any, Any], ...]]:
    """`o` as it stands now, compacted, as a tuple."""
    _compact_obj(o)
    return o[0], o[1], o[2], tuple(o[3])


def _absorb(o: _Obj, later: Sequence[Any]) -> None:
    """Continue `o` with the writes summarised in `later` (folded after it; a summary or a frozen one)."""
    if later[0] is not None and (o[0] is None or later[0] > o[0]):
        o[0], o[1], o[2] = later[0], later[1], later[2]
    if later[3] or o[3]:
        ok_c = o[0]
        o[3] = [u for u in (*o[3], *later[3]) if ok_c is None or u[0] > ok_c]


def _combined(earlier: _Obj, frozen: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """`frozen` (a later fold's view) as it would read had `earlier` been folded first."""
    merged = _new_obj()
    _absorb(merged, earlier)
    if frozen is not None:
        _absorb(merged, frozen)
    return _frozen(merged)


#: A kept read (`_note_read`) is a plain tuple, which travels between processes as it is (`soak.check.parallel`):
#: (object, run, epoch, owner, what it saw, process, index, f, invoke, complete, its tenure's own view frozen).
_Read = tuple
_R_OWN = 10


def _read_evidence(rd: tuple[Any, ...]) -> Evidence:
    """Evidence of a kept read."""
    _, run, _, _, _, process, index, f, invoke, complete, _ = rd
    return Evidence(process, index, f, run, None, None, "ok", invoke, complete, f"{process}#{index}")


@dataclass(slots=True)
class Facts:
    """Everything the checkers read: the scan's summaries plus the snapshot and settings."""

    snapshot: Any
    lease_ttl_ms: int
    margin_ns: int
    runs: tuple[str, ...]
    cross_runs: tuple[str, ...]
    status: str
    quorum: str
    tenures: dict[tuple[str, int], _Tenure] = field(default_factory=dict)
    run_acc: dict[str, _Run] = field(default_factory=dict)
    refs: dict[str, _Ref] = field(default_factory=dict)
    seen: dict[str, tuple[tuple[Any, ...], tuple[int, int], dict[str, Any]]] = field(default_factory=dict)
    refusals: list[tuple[str, int, str, Evidence]] = field(default_factory=list)
    procs: list[str] = field(default_factory=list)  # process names by id, for compact records
    proc_ids: dict[str, int] = field(default_factory=dict)
    # process -> index -> where that operation's tag appears in the final state (`_state_tags`)
    index: dict[str, dict[int, list[tuple[str, str]]]] = field(default_factory=dict)
    scan_violations: list[Violation] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    objects: dict[tuple[str, str], dict[int, _Obj]] = field(default_factory=dict)  # object -> epoch -> summary
    unordered: set[tuple[str, str]] = field(default_factory=set)  # objects with unleased writes
    _obj_keys: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # one tuple per object reads name
    reads: list[_Read] = field(default_factory=list)
    # process -> [first index of each segment, (lease run, epoch, outcome) of each segment, and the lease and
    # outcome of the last segment while known] of tagged writes
    tagged: dict[str, list[Any]] = field(default_factory=dict)
    boot_failures: list[tuple[Any, ...]] = field(default_factory=list)
    _stale_cache: dict[Any, tuple[list[int], list[tuple[float, Any]]]] = field(default_factory=dict)
    # run -> (its granted epochs sorted, the earliest grant invocation of each epoch and above, all grant invocations)
    _grant_cache: dict[Any, tuple[list[int], list[float], list[int]]] = field(default_factory=dict)
    # Settling (`settle`): every operation invoked before `settled` is folded; what was judged then (per checker:
    # violations, or why it raised); what retired tenures left per run; per object, the writes of its run's
    # retired epochs (`_to_floor`); each object's run.
    settled: float = -_NEVER
    early: dict[str, list[Violation]] = field(default_factory=dict)
    early_errors: dict[str, str] = field(default_factory=dict)
    retired: dict[str, _Retired] = field(default_factory=dict)
    floors: dict[tuple[str, str], tuple[tuple[tuple[Any, Any], ...], tuple[Any, Any] | None, tuple[Any, ...]]] = field(
        default_factory=dict)
    obj_run: dict[tuple[str, str], str] = field(default_factory=dict)
    read_counts: list[int] = field(default_factory=lambda: [0, 0])  # tenured reads kept, and judged (`check_reads`)
    # Liveness and what the history supports (`soak.check.liveness`): the call-returns bound; the quorum the storm
    # ran to and its workload; whether the history must come with the storm's own records (a run directory's:
    # nemesis.jsonl and a file per spawned worker); why the final state is missing (None: it was read).
    call_bound_ns: int = 0
    quorum_target: dict[str, int] = field(default_factory=dict)
    workload: str = "runs"
    from_storm: bool = False
    state_error: str | None = None
    # the storm's records (nemesis events; workers' start, crash and store-exit events), in file order
    events: list[Any] = field(default_factory=list)
    # operations that completed past the bound or never completed (compact tuples): liveness candidates
    slow: list[tuple[Any, ...]] = field(default_factory=list)
    # (surface, intent, outcome, error, lease of another run) -> operations: what the quorum and coverage count
    hist: dict[tuple[Any, ...], int] = field(default_factory=dict)
    # run -> one byte per epoch: 1 granted, 2 released (the quorum's takeovers)
    epochs: dict[str, bytearray] = field(default_factory=dict)

    def tenures_changed(self) -> None:
        """Forget the per-run caches built from the tenures (`next_grant`, `stale_at`): a fold, merge or
        retirement changed them."""
        self._grant_cache.clear()
        self._stale_cache.clear()

    @property
    def ttl_ns(self) -> int:
        return self.lease_ttl_ms * 1_000_000

    def next_grant(self, run: str, epoch: int, grant_inv: int) -> float:
        """The earliest invocation of a grant that may have landed after tenure (run, epoch)'s own grant, which was
        invoked at `grant_inv`: of a later epoch at any time, or of any epoch after `grant_inv` (a store may reuse
        epochs); infinity when there is none."""
        if not self._grant_cache:
            pairs: dict[str, list[tuple[int, int]]] = {}  # run -> (epoch, invocation) of every accepted acquire
            for (r, e), t in self.tenures.items():
                for g in t.grants:
                    pairs.setdefault(r, []).append((e, g[0]))
            self._grant_cache[_NO_RUN] = ([], [], [])
            for r, ps in pairs.items():
                ps.sort()
                suffix: list[float] = [_NEVER] * len(ps)
                best = _NEVER
                for i in range(len(ps) - 1, -1, -1):
                    best = min(best, ps[i][1])
                    suffix[i] = best
                self._grant_cache[r] = ([p[0] for p in ps], suffix, sorted(p[1] for p in ps))
        epochs, suffix, invokes = self._grant_cache.get(run) or self._grant_cache[_NO_RUN]
        j = bisect.bisect_right(epochs, epoch)
        k = bisect.bisect_right(invokes, grant_inv)
        first = min(suffix[j] if j < len(epochs) else _NEVER, invokes[k] if k < len(invokes) else _NEVER)
        res = self.retired.get(run)
        if res is not None:
            # Retired grants were all invoked before anything judged since they retired completed, so any of them
            # that qualifies stands for the earliest (the callers only compare with such a completion).
            if res.top_epoch > epoch:
                first = min(first, res.top_inv)
            if res.last_inv > grant_inv:
                first = min(first, res.last_inv)
        return first

    def stale_at(self, run: str, epoch: int) -> tuple[float, Any]:
        """When tenure (run, epoch) surely stopped being current, and the operation proving it (raw)."""
        if not self._stale_cache:
            granted: dict[str, list[tuple[int, int, Any]]] = {}
            for (r, e), t in self.tenures.items():
                if t.grants:
                    g = min(t.grants, key=lambda g: g[1])
                    granted.setdefault(r, []).append((e, g[1], g[3]))
            self._stale_cache[_NO_RUN] = ([], [(_NEVER, None)])
            for r, gs in granted.items():
                gs.sort(key=lambda x: x[0])
                suffix: list[tuple[float, Any]] = [(_NEVER, None)] * (len(gs) + 1)
                for i in range(len(gs) - 1, -1, -1):
                    best = suffix[i + 1]
                    suffix[i] = (gs[i][1], gs[i][2]) if gs[i][1] < best[0] else best
                self._stale_cache[r] = ([g[0] for g in gs], suffix)
        epochs, suffix = self._stale_cache.get(run) or self._stale_cache[_NO_RUN]
        superseded = suffix[bisect.bisect_right(epochs, epoch)]
        res = self.retired.get(run)
        if res is not None:
            old = res.stale_at(self, run, epoch)
            if old is not None and old[0] < superseded[0]:
                superseded = old
        t = self.tenures.get((run, epoch))
        if t is not None and t.rel_ok < superseded[0]:
            return t.rel_ok, t.rel_ok_ev
        return superseded


def scan(
    ops: Iterable[Operation | Any],
    snapshot: Any,
    *,
    lease_ttl_ms: int,
    runs: Iterable[str],
    cross_runs: Iterable[str] = ("xr",),
    status: str = "quorum",
    quorum: str = "",
    margin_ms: float | None = None,
) -> Facts:
    """Fold the history into `Facts` in one pass; events (non-operations) are counted and skipped.

    `ops` holds `Operation`s or their tuples (`soak.history.operation_tuples`), and events.
    """
    facts = new_facts(snapshot, lease_ttl_ms=lease_ttl_ms, runs=runs, cross_runs=cross_runs, status=status,
                      quorum=quorum, margin_ms=margin_ms)
    fold(facts, ops)
    return finish(facts)


def new_facts(snapshot: Any, *, lease_ttl_ms: int, runs: Iterable[str], cross_runs: Iterable[str] = ("xr",),
              status: str = "quorum", quorum: str = "", margin_ms: float | None = None,
              call_bound_s: float | None = None, quorum_target: dict[str, int] | None = None,
              workload: str = "runs", from_storm: bool = False, state_error: str | None = None) -> Facts:
    """Empty `Facts` for a history to be folded in (`fold`, then `finish`).

    `snapshot` None: the final state could not be read (`state_error` says why); the history is still judged,
    without the checkers that diff it against the final state. `call_bound_s` is the call-returns bound (default
    20 x ttl, at least 2 s); `quorum_target` the thresholds the storm ran to, recounted from the history;
    `from_storm` that the history is a storm's run directory, whose nemesis.jsonl names every worker spawned.
    """
    from soak.clauses import default_call_bound_s

    margin_ns = default_margin_ns(lease_ttl_ms) if margin_ms is None else int(margin_ms * 1_000_000)
    facts = Facts(snapshot, lease_ttl_ms, margin_ns, tuple(runs), tuple(cross_runs), status, quorum)
    facts.call_bound_ns = int((call_bound_s or default_call_bound_s(lease_ttl_ms)) * 1e9)
    facts.quorum_target = dict(quorum_target or {})
    facts.workload = workload
    facts.from_storm = from_storm
    facts.state_error = state_error if snapshot is None else None
    if snapshot is None and facts.state_error is None:
        facts.state_error = "no final state was given"
    for tag, where in (_state_tags(snapshot) if snapshot is not None else {}).items():
        process, sep, number = tag.rpartition("#")
        try:
            i = int(number)
        except ValueError:
            continue
        if sep and str(i) == number:  # only a canonical `process#index` can be an operation's tag
            facts.index.setdefault(process, {})[i] = where
    facts.stats.update(operations=0, events=0, ok=0, fail=0, info=0, stalls=0)
    return facts


def new_part(facts: Facts) -> Facts:
    """Empty `Facts` with the settings and final-state index of `facts`, to fold a part of the history into and
    `merge` into `facts` (the index is shared: folding only reads it)."""
    part = Facts(facts.snapshot, facts.lease_ttl_ms, facts.margin_ns, facts.runs, facts.cross_runs, facts.status,
                 facts.quorum, index=facts.index, call_bound_ns=facts.call_bound_ns, workload=facts.workload)
    part.stats.update(operations=0, events=0, ok=0, fail=0, info=0, stalls=0)
    return part


def finish(facts: Facts) -> Facts:
    """Complete the statistics once every operation is folded in."""
    live = sum(1 for t in facts.tenures.values() if t.grants and _retired_grant(facts, t) is None)
    facts.stats["tenures"] = live + sum(res.granted for res in facts.retired.values())
    return facts


class Unordered(Exception):
    """An operation invoked before the time `facts` were settled at (`settle`) came too late: check without settling."""


def fold(facts: Facts, ops: Iterable[Operation | Any], until: float = _NEVER) -> tuple[Any, ...] | None:
    """Fold operations (in each process's own order) into `facts`; whole operations end compacted.

    Stops before the first operation invoked at or after `until` and returns it (None once `ops` is
    exhausted). Raises `Unordered` at an operation invoked before `facts.settled`.
    """
    index = facts.index
    settled = facts.settled
    obj_run = facts.obj_run
    look = None
    facts.tenures_changed()
    tenures, run_acc, refs, seen, refusals = facts.tenures, facts.run_acc, facts.refs, facts.seen, facts.refusals
    scan_violations = facts.scan_violations
    proc_ids = facts.proc_ids
    n_ops = n_events = n_ok = n_fail = n_info = 0
    mutations, lease_ops, reads = _MUTATIONS, _LEASE_OPS, _READS
    ttl_ns = facts.lease_ttl_ms * 1_000_000
    margin_ns = facts.margin_ns

    objects, tagged = facts.objects, facts.tagged
    Op = Operation
    # A process's leased operations come in long stretches under one lease (the reader shares one Lease
    # object per value and file): what the last lease's operations looked up is kept for the next ones.
    # Its accepted writes are kept whole in those summaries until the fold moves to another lease (`_settle`).
    last_lease: Any = None
    l_tenure: _Tenure | None = None  # the tenure (lease run, epoch), once it exists
    l_objects: dict[tuple[str, str], _Obj] = {}  # object -> its summary under the lease's epoch
    last_process, last_hits, last_pid = None, None, -1

    events, slow, hist, epochs = facts.events, facts.slow, facts.hist, facts.epochs
    hist_get = hist.get
    bound_ns = facts.call_bound_ns or _NEVER
    has_state = facts.snapshot is not None
    n_stalls = 0
    for op in ops:
        if type(op) is not tuple:
            if type(op) is not Op:
                n_events += 1
                kind = op.kind
                if kind == "stall":
                    n_stalls += 1
                elif op.process == "nemesis" or kind in _STORM_EVENTS:
                    events.append(op)
                continue
            op = _raw(op)
        process, op_index, f, run, lease, intent, args, outcome, result, error, _, invoke, complete = op
        if not settled <= invoke < until:
            if invoke >= until:
                look = op
                break
            raise Unordered(f"{process}#{op_index} was invoked before the history was settled at {settled}")
        n_ops += 1
        hk = (f, intent, outcome, error, lease is not None and lease.run_id != run)
        hist[hk] = hist_get(hk, 0) + 1
        if complete is None or complete - invoke > bound_ns:
            slow.append(_lite(op))  # a liveness candidate (`soak.check.liveness`)

        if f == "acquire":
            ra = _run_of(run_acc, run)
            ra.acq_invokes.append(invoke)
            if outcome == "ok":
                n_ok += 1
                epoch = int(result["epoch"])
                t = tenures.get((run, epoch))
                if t is None:
                    t = tenures[(run, epoch)] = _Tenure(run, epoch)
                t.grants.append((invoke, complete, str(args.get("owner")), _lite(op)))
                t.marks.append((invoke, complete))
                _mark_epoch(epochs, run, epoch, 1)
            elif outcome == "info":
                n_info += 1
                ra.acq_unknown.append((invoke, _NEVER if complete is None else complete))
            else:
                n_fail += 1
                if error == "LeaseHeldError":
                    if process != last_process:
                        last_process, last_hits, last_pid = process, index.get(process), proc_ids.get(process, -1)
                    if last_pid < 0:
                        last_pid = _pid_of(facts, process)
                    ra.held.extend((invoke, complete, last_pid, op_index))
            continue

        if f in mutations:
            is_mut = True
        elif f in lease_ops:
            is_mut = False
        else:
            if outcome == "ok":
                n_ok += 1
                if f in reads and args.get("tenure"):
                    _note_read(facts, op)
            elif outcome == "fail":
                n_fail += 1
            else:
                n_info += 1
            if outcome != "ok" and f == "open" and complete is not None:  # not cut short by the harness
                facts.boot_failures.append(_lite(op))
            continue  # reads, open: nothing fenced

        if lease is None:
            key = (0, args.get("c", 0))
        else:
            key = (lease.epoch, args.get("c", 0))
            if lease is not last_lease:
                _settle(l_tenure, l_objects.values())
                last_lease, l_tenure, l_objects = lease, None, {}
        if process != last_process:
            last_process, last_hits, last_pid = process, index.get(process), proc_ids.get(process, -1)
        hit = None
        if last_hits is not None:
            hit = last_hits.get(op_index)
            if hit is not None:
                seen[f"{process}#{op_index}"] = (op, key, args)
        if lease is None:
            if outcome == "ok":
                n_ok += 1
            elif outcome == "fail":
                n_fail += 1
            else:
                n_info += 1
            if outcome != "fail":
                facts.unordered.update(obj for obj, _ in _writes(f, run, args))
            continue  # unleased passthrough: not fenced, and not ordered by a tenure
        epoch = lease.epoch
        own_run = lease.run_id == run
        if f in _TAGGED:
            seg = tagged.get(process)
            # the usual case: the next write of the same tenure with the same outcome extends the last segment
            if seg is None or not seg[0] or op_index <= seg[0][-1] or seg[2] is not lease or seg[3] != outcome:
                key3 = (lease.run_id, epoch, outcome)
                seg = _note_tag(tagged, process, op_index, key3)
                seg[2], seg[3] = (lease, outcome) if seg[1][-1] == key3 else (None, None)
        if is_mut and outcome != "fail" and own_run:
            # fold into the per-(object, epoch) summaries; accepted writes keep the whole operation
            # until the fold moves to another lease
            if outcome == "ok" and f != "delete":
                (obj, value), = _writes(f, run, args)
                o = l_objects.get(obj)
                if o is None:
                    o = l_objects[obj] = _summary(objects, obj, epoch, run, obj_run)
                _accept(o, key[1], value, op)
            else:
                _fold_objects(objects, obj_run, f, run, args, epoch, outcome == "ok", op)

        if outcome == "ok":
            n_ok += 1
            if not own_run:
                scan_violations.append(
                    Violation("run-match", f"{f} on run {run} accepted under a lease of run {lease.run_id}", (_ev(op),))
                )
                continue
            t = l_tenure
            if t is None:
                t = l_tenure = _tenure_of(tenures, run, epoch)
            owner = lease.owner
            if not (t.grants and owner == t.grants[0][2]):  # the usual case: the grantee, already seen
                users = t.users
                if users is None:
                    t.users = {owner: _lite(op)}
                elif owner not in users:
                    users[owner] = _lite(op)
            if is_mut:
                if invoke > t.mut_inv:
                    t.mut_inv, t.mut = invoke, op
                if f == "append":
                    if has_state and (hit is None or ("journal", run) not in hit):
                        ra = _run_of(run_acc, run)
                        if last_pid < 0:
                            last_pid = _pid_of(facts, process)
                        ra.missing.extend((key[0], key[1], last_pid, op_index, invoke, complete))
                        if len(ra.missing) > ra.prune_at:
                            _prune_missing(ra)
                elif f == "put_meta":
                    ra = _run_of(run_acc, run)
                    if ra.meta_ok is None or key > ra.meta_ok[0]:
                        ra.meta_ok = (key, op)
                elif f == "blob_put":
                    rf = _ref_of(refs, args["ref"], run)
                    if rf.put_ok is None or key > rf.put_ok[0]:
                        rf.put_ok = (key, op)
                elif f == "blob_delete":
                    rf = _ref_of(refs, args["ref"], run)
                    if rf.del_ok is None or key > rf.del_ok[0]:
                        rf.del_ok = (key, op)
                    if rf.del_any is None or key > rf.del_any:
                        rf.del_any = key
                else:  # delete
                    ra = _run_of(run_acc, run)
                    if ra.del_ok is None or key > ra.del_ok[0]:
                        ra.del_ok = (key, op)
                    if ra.del_any is None or key > ra.del_any:
                        ra.del_any = key
                    if invoke < t.rel_inv:  # a delete may end its tenure (the store's choice), as a release does
                        t.rel_inv = invoke
            else:
                if invoke > t.lop_inv:
                    t.lop_inv, t.lop = invoke, op
                if f == "renew":
                    t.marks.append((invoke, complete))
                else:
                    _mark_epoch(epochs, run, epoch, 2)
                    if invoke < t.rel_inv:
                        t.rel_inv = invoke
                    if complete < t.rel_ok:
                        t.rel_ok = complete
                        t.rel_ok_ev = op if t.lop is op else _lite(op)
        elif outcome == "fail":
            n_fail += 1
            if f == "release":
                t = _tenure_of(tenures, run, epoch)
                t.rel_inv = min(t.rel_inv, invoke)
            if error == "LeaseHeldError" and own_run:
                t = tenures.get((run, epoch))
                owner = lease.owner
                if t is not None and process == owner and t.grants and t.grants[0][2] == owner:
                    # The owner's grant and renewals sit earlier in its own file, already read: a refusal
                    # past their ttl (or before any of them completed) can never be spurious.
                    if t.rel_inv < complete:
                        continue  # released first
                    last = t.live_since(invoke)
                    if last is None or complete >= last + ttl_ns - margin_ns:
                        continue
                refusals.append((run, epoch, owner, _lite(op)))
        else:  # info: may or may not have applied
            n_info += 1
            if not own_run:
                continue
            t = _tenure_of(tenures, run, epoch)
            if f == "release":
                t.rel_inv = min(t.rel_inv, invoke)
            elif f == "renew":
                if t.renew_unk is None:
                    t.renew_unk = []
                t.renew_unk.append((invoke, _NEVER if complete is None else complete))
            if complete is not None and error is not None and error not in _TYPED:  # the store's own answer
                if invoke > t.unt_inv:
                    t.unt_inv, t.unt = invoke, _lite(op)
            if f == "delete":
                t.rel_inv = min(t.rel_inv, invoke)  # it may have ended the tenure
                ra = _run_of(run_acc, run)
                if ra.del_any is None or key > ra.del_any:
                    ra.del_any = key
            elif f == "blob_delete":
                rf = _ref_of(refs, args["ref"], run)
                if rf.del_any is None or key > rf.del_any:
                    rf.del_any = key

    _settle(l_tenure, l_objects.values())
    stats = facts.stats
    stats["operations"] += n_ops
    stats["events"] += n_events
    stats["ok"] += n_ok
    stats["fail"] += n_fail
    stats["info"] += n_info
    stats["stalls"] += n_stalls
    return look


class FoldOverlap(Exception):
    """Two partial folds share a process, so their tagged-write records cannot be merged: fold in one pass."""


def merge(facts: Facts, later: Facts) -> None:
    """Fold the partial `later` into `facts` as if its operations had been folded after those of `facts`.

    `later` covers the history files that follow those of `facts` (in file order; a process's
    operations all in one of them, or in `later` only operations it folds after those in `facts`). Every
    summary merges as its fold would have continued: first-seen wins ties, maxima and minima combine,
    lists concatenate in order, and a read's frozen view of its own tenure gains the writes of the
    earlier files. Raises `FoldOverlap`, before it changes anything, when one process's operations
    interleave between the two.
    """
    for process, seg in later.tagged.items():
        mine = facts.tagged.get(process)
        if mine is not None and mine[0] and seg[0] and seg[0][0] < mine[0][-1]:
            raise FoldOverlap(process)
    facts.tenures_changed()
    for process, seg in later.tagged.items():
        mine = facts.tagged.get(process)
        if mine is None:
            facts.tagged[process] = seg
        else:  # its last segment runs up to the later first one (which may start where it ends, `_note_tag`)
            if mine[0] and seg[0] and seg[0][0] == mine[0][-1]:
                mine[0].pop()
                mine[1].pop()
            mine[0].extend(seg[0])
            mine[1].extend(seg[1])
            mine[2], mine[3] = None, None
    remap = array("q", [_pid_of(facts, name) for name in later.procs])

    merge_reads(facts, later.reads)
    merge_objects(facts, later.objects.items())
    merge_tenures(facts, later.tenures.items())

    for run, rb in later.run_acc.items():
        for held, stride in ((rb.held, 4), (rb.missing, 6)):
            for i in range(2, len(held), stride):
                held[i] = remap[held[i]]
        ra = facts.run_acc.get(run)
        if ra is None:
            facts.run_acc[run] = rb
            continue
        ra.acq_invokes.extend(rb.acq_invokes)
        ra.acq_unknown.extend(rb.acq_unknown)
        ra.held.extend(rb.held)
        if rb.del_any is not None and (ra.del_any is None or rb.del_any > ra.del_any):
            ra.del_any = rb.del_any
        if rb.del_ok is not None and (ra.del_ok is None or rb.del_ok[0] > ra.del_ok[0]):
            ra.del_ok = rb.del_ok
        if rb.meta_ok is not None and (ra.meta_ok is None or rb.meta_ok[0] > ra.meta_ok[0]):
            ra.meta_ok = rb.meta_ok
        ra.missing.extend(rb.missing)
        if len(ra.missing) > ra.prune_at:
            _prune_missing(ra)

    for ref, fb in later.refs.items():
        fa = facts.refs.get(ref)
        if fa is None:
            facts.refs[ref] = fb
            continue
        if fb.put_ok is not None and (fa.put_ok is None or fb.put_ok[0] > fa.put_ok[0]):
            fa.put_ok = fb.put_ok
        if fb.del_ok is not None and (fa.del_ok is None or fb.del_ok[0] > fa.del_ok[0]):
            fa.del_ok = fb.del_ok
        if fb.del_any is not None and (fa.del_any is None or fb.del_any > fa.del_any):
            fa.del_any = fb.del_any

    for obj, run in later.obj_run.items():
        facts.obj_run.setdefault(obj, run)
    facts.seen.update(later.seen)
    facts.refusals.extend(later.refusals)
    facts.scan_violations.extend(later.scan_violations)
    facts.boot_failures.extend(later.boot_failures)
    facts.unordered |= later.unordered
    facts.events.extend(later.events)
    facts.slow.extend(later.slow)
    for k, n in later.hist.items():
        facts.hist[k] = facts.hist.get(k, 0) + n
    for run, b in later.epochs.items():
        mine = facts.epochs.get(run)
        if mine is None:
            facts.epochs[run] = b
            continue
        if len(mine) < len(b):
            mine.extend(bytes(len(b) - len(mine)))
        for e, bits in enumerate(b):
            if bits:
                mine[e] |= bits
    for k in ("operations", "events", "ok", "fail", "info", "stalls"):
        facts.stats[k] += later.stats.get(k, 0)


def merge_reads(facts: Facts, reads: Iterable[_Read]) -> None:
    """The reads part of `merge` (which may also be fed in pieces, before the later objects are merged)."""
    objects = facts.objects
    kept = facts.reads
    for rd in reads:
        base = objects.get(rd[0], {}).get(rd[2])
        kept.append(rd if base is None else (*rd[:_R_OWN], _combined(base, rd[_R_OWN])))


def merge_objects(facts: Facts, items: Iterable[tuple[tuple[str, str], dict[int, _Obj]]]) -> None:
    """The object summaries part of `merge` (which may also be fed in pieces after the rest)."""
    objects = facts.objects
    for obj, per in items:
        mine = objects.get(obj)
        if mine is None:
            objects[obj] = per
            continue
        for epoch, o in per.items():
            m = mine.get(epoch)
            if m is None:
                mine[epoch] = o
            else:
                _absorb(m, o)


def merge_tenures(facts: Facts, items: Iterable[tuple[tuple[str, int], _Tenure]]) -> None:
    """The tenures part of `merge` (which may also be fed in pieces after the rest)."""
    tenures = facts.tenures
    for key, tb in items:
        ta = tenures.get(key)
        if ta is None:
            tenures[key] = tb
        else:
            ta.absorb(tb)


def _writes(f: str, run: str, args: dict[str, Any]) -> list[tuple[tuple[str, str], Any]]:
    """The objects a mutation writes and the value a read would then report for each."""
    if f == "append":
        return [(("journal", run), (args.get("seq"), args.get("tag")))]
    if f == "put_meta":
        return [(("meta", run), args.get("tag"))]
    if f == "delete":
        return [(("journal", run), _EMPTY_JOURNAL), (("meta", run), None)]
    if f == "blob_put":
        return [(("blob", args.get("ref", "")), args.get("tag"))]
    return [(("blob", args.get("ref", "")), None)]  # blob_delete


def _summary(objects: dict[tuple[str, str], dict[int, _Obj]], obj: tuple[str, str], epoch: int, run: str,
             obj_run: dict[tuple[str, str], str]) -> _Obj:
    """The summary of `obj`'s writes under `epoch`, made on first use (`obj_run` learns the run it belongs to)."""
    per = objects.get(obj)
    if per is None:
        per = objects[obj] = {}
        obj_run.setdefault(obj, run)
    o = per.get(epoch)
    if o is None:
        o = per[epoch] = _new_obj()
    return o


def _fold_objects(objects: dict[tuple[str, str], dict[int, _Obj]], obj_run: dict[tuple[str, str], str], f: str,
                  run: str, args: dict[str, Any], epoch: int, ok: bool, op: tuple[Any, ...]) -> None:
    """Fold an accepted or unknown leased write of its own run into the per-(object, epoch) summaries."""
    lite = _lite(op)
    c = args.get("c", 0)
    for obj, value in _writes(f, run, args):
        o = _summary(objects, obj, epoch, run, obj_run)
        if ok:
            _accept(o, c, value, lite)
        else:
            _unknown(o, c, value, lite)


def _note_tag(tagged: dict[str, list[Any]], process: str, index: int, key: tuple[str, int, str]) -> list[Any]:
    """Remember (lease run, epoch, outcome) of a tagged write as runs of equal keys per process; the process's record."""
    seg = tagged.get(process)
    if seg is None:
        seg = tagged[process] = [array("q"), [], None, None]
    starts, keys = seg[0], seg[1]
    if starts and index > starts[-1]:
        if keys[-1] != key:
            starts.append(index)
            keys.append(key)
        return seg
    # out of order (hand-written histories): insert in place, and restore the split segment after it
    i = bisect.bisect_right(starts, index)
    if i > 0 and starts[i - 1] == index:
        keys[i - 1] = key
        return seg
    prev = keys[i - 1] if i > 0 else None
    starts.insert(i, index)
    keys.insert(i, key)
    if i + 1 == len(starts) or starts[i + 1] != index + 1:
        starts.insert(i + 1, index + 1)
        keys.insert(i + 1, prev)
    return seg


def _tag_info(facts: Facts, tag: str) -> tuple[str, int, str] | None:
    """(lease run, epoch, outcome) of the tagged write `tag`, or None if no recorded write has it."""
    process, sep, index = tag.rpartition("#")
    seg = facts.tagged.get(process)
    if not sep or seg is None or not index.isdigit():
        return None
    starts, keys = seg[0], seg[1]
    i = bisect.bisect_right(starts, int(index)) - 1
    return keys[i] if i >= 0 else None


def _note_read(facts: Facts, op: tuple[Any, ...]) -> None:
    """Keep an accepted tenured read: what it saw and, frozen now, its own tenure's writes so far."""
    args = op[_ARGS]
    tenure = args["tenure"]
    run, owner, epoch = _intern(str(tenure[0])), _intern(str(tenure[1])), int(tenure[2])
    if run != op[_RUN]:
        return
    res = op[_RES]
    f = op[_F]
    if f == "load":
        if "tail_tag" not in res:
            return  # an older history: no tag to compare
        f, obj, seen = "load", ("journal", run), (res.get("tail"), res.get("tail_tag"))
    elif f == "get_meta":
        f, obj, seen = "get_meta", ("meta", run), res.get("tag")
    else:
        f, obj, seen = "blob_get", ("blob", str(args.get("ref", ""))), res.get("tag")
    obj = facts._obj_keys.setdefault(obj, obj)  # one tuple per object, however many reads name it
    per = facts.objects.get(obj)
    cur = per.get(epoch) if per is not None else None
    facts.reads.append((obj, run, epoch, owner, seen, _intern(op[_P]), op[_I], f, op[_INV], op[_COMP],
                        None if cur is None else _frozen(cur)))


def _pid_of(facts: Facts, process: str) -> int:
    """The number standing for `process` in packed records (`Facts.procs`), assigned on first use."""
    pid = facts.proc_ids.get(process)
    if pid is None:
        pid = facts.proc_ids[process] = len(facts.procs)
        facts.procs.append(process)
    return pid


def _run_of(run_acc: dict[str, _Run], run: str) -> _Run:
    ra = run_acc.get(run)
    if ra is None:
        ra = run_acc[run] = _Run()
    return ra


def _ref_of(refs: dict[str, _Ref], ref: str, run: str) -> _Ref:
    rf = refs.get(ref)
    if rf is None:
        rf = refs[ref] = _Ref(run)
    return rf


def _tenure_of(tenures: dict[tuple[str, int], _Tenure], run: str, epoch: int) -> _Tenure:
    t = tenures.get((run, epoch))
    if t is None:
        t = tenures[(run, epoch)] = _Tenure(run, epoch)
    return t


def _prune_missing(ra: _Run) -> None:
    """Drop absent appends a delete seen so far explains; the threshold doubles, so this stays linear."""
    if ra.del_any is not None:
        ra.missing = array("q", _unexplained(ra.missing, ra.del_any))
    ra.prune_at = max(6 * 1024, 2 * len(ra.missing))


def _unexplained(missing: array, del_any: tuple[int, int] | None) -> Iterable[int]:
    for i in range(0, len(missing), 6):
        if del_any is None or (missing[i], missing[i + 1]) >= del_any:
            yield from missing[i:i + 6]


def _mark_epoch(epochs: dict[str, bytearray], run: str, epoch: Any, bit: int) -> None:
    """Note epoch `epoch` of `run` granted (bit 1) or released (bit 2); epochs past 2**22 are not counted."""
    if type(epoch) is not int or not 0 < epoch < 1 << 22:
        return
    b = epochs.get(run)
    if b is None:
        b = epochs[run] = bytearray(max(64, epoch + 1))
    elif epoch >= len(b):
        b.extend(bytes(max(epoch + 1 - len(b), len(b))))
    b[epoch] |= bit


def _state_tags(snapshot: Any) -> dict[str, list[tuple[str, str]]]:
    """tag -> where it appears in the final state: ("journal"|"meta"|"blob", run)."""
    index: dict[str, list[tuple[str, str]]] = {}

    def add(tag: str | None, where: tuple[str, str]) -> None:
        if tag is not None:
            index.setdefault(tag, []).append(where)

    for run, entries in snapshot.journals.items():
        where = ("journal", run)
        for e in entries:
            add(tag_of(e.payload), where)
    for run, meta in snapshot.metas.items():
        if meta is not None:
            add(tag_of(meta.payload), ("meta", run))
    for run, blobs in snapshot.blobs.items():
        where = ("blob", run)
        for data in blobs.values():
            add(tag_of(data), where)
    return index


# -- checkers ---------------------------------------------------------------------------------

Checker = Callable[[Facts], list[Violation]]


def check_scan(facts: Facts) -> list[Violation]:
    """Findings made while streaming: accepted operations whose lease names another run."""
    return list(facts.scan_violations)


def check_grants(facts: Facts, tenures: Iterable[_Tenure] | None = None) -> list[Violation]:
    """Each epoch granted once; epochs rising with grant order; no two surely-live tenures overlap.

    Judges `tenures` (default: all), with every tenure of the facts and the highest retired grant of
    each run as context.
    """
    out: list[Violation] = []
    judged = None if tenures is None else {id(t) for t in tenures}
    by_run: dict[str, list[_Tenure]] = {}
    for t in facts.tenures.values():
        if t.grants:
            by_run.setdefault(t.run, []).append(t)
        if judged is not None and id(t) not in judged:
            continue
        before = _retired_grant(facts, t) if t.grants and facts.retired else None  # the epoch's grant retired before
        if len(t.grants) > 1 or (t.grants and before is not None):
            owners = sorted({g[2] for g in t.grants} | ({before[0]} if before is not None else set()))
            n = len(t.grants) + (before is not None)
            out.append(Violation(
                "epoch-monotonic",
                f"epoch {t.epoch} of run {t.run} was granted {n} times (to {', '.join(owners)})",
                (*((before[1],) if before is not None else ()), *(evidence(g[3]) for g in t.grants)),
            ))
    ttl, margin = facts.ttl_ns, facts.margin_ns
    for run, ts in by_run.items():
        # (invoke, complete, epoch, op, judged) of every grant
        grants = [(g[0], g[1], t.epoch, g[3], judged is None or id(t) in judged) for t in ts for g in t.grants]
        res = facts.retired.get(run)
        top = res.top_grant(facts, run) if res is not None else None
        if top is not None:
            grants.append((*top, False))
        # rising: a grant that completed before another was invoked carries the lower epoch
        by_complete = sorted(grants, key=_second)
        by_invoke = sorted(grants, key=_first)
        i, best = 0, None
        for g in by_invoke:
            while i < len(by_complete) and by_complete[i][1] < g[0]:
                if best is None or by_complete[i][2] > best[2]:
                    best = by_complete[i]
                i += 1
            if best is not None and best[2] > g[2] and g[4]:
                out.append(Violation(
                    "epoch-monotonic",
                    f"run {run}: epoch {g[2]} granted after epoch {best[2]} had been granted",
                    (evidence(best[3]), evidence(g[3])),
                ))
        # overlap: a takeover that completed while an earlier tenure was surely live
        invokes = [g[0] for g in by_invoke]
        for t in ts:
            if judged is not None and id(t) not in judged:
                continue
            marks = t.marks
            if len(marks) == 1:  # the grant alone
                latest, completes = [marks[0][0]], [marks[0][1]]
            else:
                marks = sorted(marks, key=_second)  # by completion
                completes = [m[1] for m in marks]
                latest = []  # latest invocation among the first k marks
                for m in marks:
                    latest.append(m[0] if not latest or m[0] > latest[-1] else latest[-1])
            hi = min(latest[-1] + ttl - margin, t.rel_inv)  # a takeover invoked later cannot prove overlap
            for j in range(bisect.bisect_right(invokes, completes[0]), bisect.bisect_left(invokes, hi)):
                g = by_invoke[j]
                if g[2] == t.epoch or t.rel_inv < g[1]:
                    continue
                k = bisect.bisect_left(completes, g[0])  # marks that completed before the takeover was invoked
                if k == 0:
                    continue
                last = latest[k - 1]
                if g[1] < last + ttl - margin:
                    out.append(Violation(
                        "lease-exclusive",
                        f"run {run}: epoch {g[2]} granted {(g[1] - last) / 1e6:.1f} ms after epoch "
                        f"{t.epoch} was last granted or renewed (ttl {facts.lease_ttl_ms} ms), while it was live",
                        (evidence(t.grants[0][3]), evidence(g[3])),
                    ))
    return out


def _retired_grant(facts: Facts, t: _Tenure) -> tuple[str, Evidence] | None:
    """(grantee, evidence) of the grant of `t`'s epoch that retired before `t`'s own grants came, if any."""
    res = facts.retired.get(t.run)
    row = res.exact_row(t.epoch) if res is not None and t.epoch <= res.floor else None
    if row is None or row[0] < 0:
        return None
    ev = res.grant_ev(facts, t.run, t.epoch, row)
    return (facts.procs[row[4]] if row[4] >= 0 else ev.process), ev


def check_grantees(facts: Facts, tenures: Iterable[_Tenure] | None = None) -> list[Violation]:
    """Every accepted mutation, renew or release carries a lease granted to its owner (of `tenures`, default all)."""
    out: list[Violation] = []
    for t in facts.tenures.values() if tenures is None else tenures:
        if not t.users:
            continue
        granted_to = {g[2] for g in t.grants}
        grants = [evidence(g[3]) for g in t.grants] if t.grants else []
        if not granted_to:  # an operation under a retired tenure: granted to whom its residue says
            before = _retired_grant(facts, t)
            res = facts.retired.get(t.run)
            if before is None and res is not None and t.epoch <= res.mark:
                continue  # long retired: whose it was is not kept (fencing judges the operation)
            if before is not None:
                granted_to = res.owners(facts, t.epoch)
                if granted_to is None:
                    continue
                grants = [before[1]]
        for owner, op in t.users.items():
            if owner in granted_to:
                continue
            ev = evidence(op)
            clause = "stale-lease-ops" if ev.f in _LEASE_OPS else "stale-rejected"
            if not granted_to:
                why = f"epoch {t.epoch} of run {t.run} was never granted"
            else:
                why = f"epoch {t.epoch} of run {t.run} was granted to {', '.join(sorted(granted_to))}, not {owner}"
            out.append(Violation(clause, f"{ev.f} accepted from a non-grantee: {why}", (ev, *grants)))
    return out


def check_fencing(facts: Facts, tenures: Iterable[_Tenure] | None = None) -> list[Violation]:
    """Real time: nothing accepted under a tenure (of `tenures`, default all) invoked after it was superseded or released."""
    out: list[Violation] = []
    for t in facts.tenures.values() if tenures is None else tenures:
        if t.mut is None and t.lop is None and t.unt is None:
            continue
        when, proof = facts.stale_at(t.run, t.epoch)
        if when == _NEVER:
            continue
        if max(t.mut_inv, t.lop_inv, t.unt_inv) <= when:
            continue
        pev = evidence(proof) if proof is not None else None
        cite = (pev,) if pev is not None else ()
        how = "released" if pev is not None and pev.f == "release" else f"superseded by epoch {pev.epoch if pev else '?'}"
        if t.mut is not None and t.mut_inv > when:
            ev = evidence(t.mut)
            out.append(Violation(
                "stale-rejected", f"{ev.f} under epoch {t.epoch} of run {t.run} accepted after the tenure was {how}",
                (ev, *cite),
            ))
        if t.lop is not None and t.lop_inv > when:
            ev = evidence(t.lop)
            out.append(Violation(
                "stale-lease-ops", f"{ev.f} under epoch {t.epoch} of run {t.run} accepted after the tenure was {how}",
                (ev, *cite),
            ))
        if t.unt is not None and t.unt_inv > when:
            ev = evidence(t.unt)
            out.append(Violation(
                "typed-refusal",
                f"{ev.f} under stale epoch {t.epoch} of run {t.run} raised untyped {ev.error} instead of LeaseHeldError",
                (ev, *cite),
            ))
    return out


def check_refusals(facts: Facts, refusals: Iterable[tuple[str, int, str, Any]] | None = None) -> list[Violation]:
    """A LeaseHeldError under a tenure that was surely current and live is a spurious refusal (of `refusals`, default
    the facts' own)."""
    out: list[Violation] = []
    ttl, margin = facts.ttl_ns, facts.margin_ns
    sorted_acq: dict[str, list[int]] = {}
    for run, epoch, owner, op in facts.refusals if refusals is None else refusals:
        t = facts.tenures.get((run, epoch))
        ev = evidence(op)
        if t is None or not t.granted_to(owner) or ev.complete_ns is None:
            continue
        done = ev.complete_ns
        if t.rel_inv < done:
            continue
        grant_inv = t.grant_invoke()
        ra = facts.run_acc.get(run)
        if ra is not None:
            acq = sorted_acq.get(run)
            if acq is None:
                acq = sorted_acq[run] = sorted(ra.acq_invokes)
            if bisect.bisect_left(acq, done) - bisect.bisect_right(acq, grant_inv) > 0:
                continue  # another acquire was attempted meanwhile: the tenure may have been taken
            if any(inv < done and comp > grant_inv and inv != grant_inv for inv, comp in ra.acq_unknown):
                continue
        last = t.live_since(ev.invoke_ns)
        if last is not None and done < last + ttl - margin:
            out.append(Violation(
                "live-accepted",
                f"{ev.f} under epoch {epoch} of run {run} refused {(done - last) / 1e6:.1f} ms after its last grant "
                f"or renewal (ttl {facts.lease_ttl_ms} ms), with no takeover attempted",
                (ev, evidence(t.grants[0][3])),
            ))
    return out


def check_state(facts: Facts) -> list[Violation]:
    """Diff the final state against the serial order of accepted writes (nothing to diff without a final state:
    `_undecidable` says why it is missing)."""
    out: list[Violation] = []
    snap = facts.snapshot
    if snap is None:
        return out
    seen = facts.seen

    def stale(ev: Evidence) -> bool:
        return ev.epoch is not None and ev.invoke_ns > facts.stale_at(ev.run, ev.epoch)[0]

    def refused_written(ev: Evidence, where: str) -> Violation:
        if stale(ev):
            return Violation("stale-rejected", f"a refused stale {ev.f} was written anyway ({where})", (ev,))
        return Violation("typed-refusal",
                         f"a refused {ev.f} ({ev.error}) was written anyway ({where}): a refusal mutates nothing", (ev,))

    def lookup(payload: bytes) -> tuple[str | None, tuple[Evidence, tuple[int, int], dict[str, Any]] | None]:
        tag = tag_of(payload)
        s = seen.get(tag) if tag is not None else None
        return tag, (None if s is None else (evidence(s[0]), s[1], s[2]))

    def foreign(tag: str, run: str, where: str) -> bool:
        """A value written under another run's lease: run-match, and outside this run's (epoch, c) order."""
        lease = seen[tag][0][_LEASE]
        if lease is None or lease.run_id == run:
            return False
        out.append(Violation("run-match", f"{where} was written by {tag} under a lease of run {lease.run_id}",
                             (evidence(seen[tag][0]),)))
        return True

    for run, entries in snap.journals.items():
        ra = facts.run_acc.get(run)
        del_ok = ra.del_ok if ra else None
        prev: tuple[Evidence, tuple[int, int], int] | None = None  # the previous entry: op, key, seq
        for pos, entry in enumerate(entries):
            where = f"journal of {run} at position {pos}, seq {entry.seq}"
            tag, s = lookup(entry.payload)
            if s is None:
                clause = "journal-a4" if tag is None else "journal-a1"
                out.append(Violation(clause, f"phantom entry {tag or entry.payload[:16]!r} matches no recorded append ({where})"))
                continue
            ev, key, args = s
            if ev.f != "append" or ev.run != run:
                out.append(Violation("journal-a1", f"entry written by a {ev.f} on run {ev.run} ({where})", (ev,)))
                continue
            if foreign(tag, run, where):
                continue
            if ev.outcome == "fail":
                out.append(refused_written(ev, where))
            if entry.payload != payload_for(tag):
                out.append(Violation("journal-a4", f"payload of {tag} altered ({where})", (ev,)))
            if args.get("seq") != entry.seq:
                out.append(Violation("journal-a1", f"{tag} appended seq {args.get('seq')} but the entry has seq {entry.seq}", (ev,)))
            if prev is not None:
                out.extend(_journal_pair(prev, (ev, key, entry.seq), where, stale))
            if del_ok is not None and key < del_ok[0]:
                out.append(Violation("delete-semantics", f"entry {tag} survived the later delete of run {run}",
                                     (ev, evidence(del_ok[1]))))
            prev = (ev, key, entry.seq)

    for run, ra in facts.run_acc.items():
        if run not in snap.journals:
            continue
        m = array("q", _unexplained(ra.missing, ra.del_any))
        for i in range(0, len(m), 6):
            epoch, c, pid, index, invoke, complete = m[i:i + 6]
            process = facts.procs[pid]
            ev = Evidence(process, index, "append", run, epoch, c, "ok", invoke, complete, f"{process}#{index}")
            out.append(Violation("journal-a1", f"lost write: accepted append {ev.tag} is missing from the journal "
                                 f"of {run} and no later delete explains it", (ev,)))

    for run, meta in snap.metas.items():
        ra = facts.run_acc.get(run)
        if meta is None:
            if ra is not None and ra.meta_ok is not None and (ra.del_any is None or ra.meta_ok[0] > ra.del_any):
                ev = evidence(ra.meta_ok[1])
                out.append(Violation("meta-last-write", f"lost write: accepted meta {ev.tag} of {run} is "
                                     f"missing and no later delete explains it", (ev,)))
            continue
        tag, s = lookup(meta.payload)
        if s is None:
            out.append(Violation("meta-last-write", f"phantom meta {tag or meta.payload[:16]!r} of {run} matches no recorded put_meta"))
            continue
        ev, key, args = s
        if ev.f != "put_meta" or ev.run != run:
            out.append(Violation("meta-last-write", f"meta of {run} written by a {ev.f} on run {ev.run}", (ev,)))
            continue
        if foreign(tag, run, f"meta of {run}"):
            continue
        if ev.outcome == "fail":
            out.append(refused_written(ev, f"meta of {run}"))
        if meta.payload != payload_for(tag):
            out.append(Violation("journal-a4", f"meta payload of {run} differs byte for byte from what {tag} wrote", (ev,)))
        if meta.run_id != run or meta.status != args.get("status") or meta.segments != args.get("segments"):
            out.append(Violation("meta-last-write", f"meta of {run} differs from what {tag} wrote", (ev,)))
        if ra is not None and ra.meta_ok is not None and ra.meta_ok[0] > key:
            later = evidence(ra.meta_ok[1])
            out.append(Violation("meta-last-write", f"lost write: the final meta of {run} is {tag}, not the later "
                                 f"accepted {later.tag}", (ev, later)))
        if ra is not None and ra.del_ok is not None and ra.del_ok[0] > key:
            out.append(Violation("delete-semantics", f"meta {tag} of {run} survived the later delete",
                                 (ev, evidence(ra.del_ok[1]))))

    listed = set(snap.listed_runs)
    for run, meta in snap.metas.items():
        if (meta is not None) != (run in listed):
            out.append(Violation("meta-last-write", f"list_runs {'omits' if meta is not None else 'lists'} run {run} "
                                 f"whose meta is {'present' if meta is not None else 'absent'}"))

    for run, blobs in snap.blobs.items():
        for ref, data in blobs.items():
            tag, s = lookup(data)
            if s is None:
                out.append(Violation("blob-semantics", f"phantom blob {ref} ({tag or data[:16]!r}) matches no recorded blob_put"))
                continue
            ev, key, args = s
            if ev.f != "blob_put" or args.get("ref") != ref:
                out.append(Violation("blob-semantics", f"blob {ref} holds what a {ev.f} of {args.get('ref', ev.run)} wrote", (ev,)))
                continue
            if foreign(tag, run, f"blob {ref}"):
                continue
            if ev.outcome == "fail":
                out.append(refused_written(ev, f"blob {ref}"))
            if data != payload_for(tag):  # the byte-for-byte promise, as for journal payloads
                out.append(Violation("journal-a4", f"blob {ref} differs byte for byte from what {tag} wrote", (ev,)))
            rf = facts.refs.get(ref)
            if rf is not None and rf.put_ok is not None and rf.put_ok[0] > key:
                later = evidence(rf.put_ok[1])
                out.append(Violation("blob-semantics", f"lost write: blob {ref} holds {tag}, not the later accepted "
                                     f"{later.tag}", (ev, later)))
            if rf is not None and rf.del_ok is not None and rf.del_ok[0] > key:
                ra = facts.run_acc.get(run)
                deleted = ra is not None and ra.del_ok is not None and ra.del_ok[0] > key
                out.append(Violation("blob-semantics", f"blob {ref} survived its accepted delete"
                                     + (f" and the deletion of run {run}" if deleted else ""), (ev, evidence(rf.del_ok[1]))))
    for ref, rf in facts.refs.items():
        if rf.run not in snap.blobs or ref in snap.blobs[rf.run] or rf.put_ok is None:
            continue
        if rf.del_any is None or rf.put_ok[0] > rf.del_any:
            ev = evidence(rf.put_ok[1])
            out.append(Violation("blob-semantics", f"lost write: accepted blob_put {ev.tag} of {ref} is missing "
                                 f"and no later blob_delete explains it", (ev,)))

    for run in facts.cross_runs:
        found = [e.payload for e in snap.journals.get(run, ())]
        if snap.metas.get(run) is not None:
            found.append(snap.metas[run].payload)
        found.extend(snap.blobs.get(run, {}).values())
        if found:
            cite = tuple(evidence(seen[t][0]) for t in (tag_of(p) for p in found) if t in seen)
            out.append(Violation("run-match", f"cross-run target {run} holds {len(found)} value(s); nobody may write it", cite))
    return out


def _journal_pair(prev: tuple[Evidence, tuple[int, int], int], cur: tuple[Evidence, tuple[int, int], int], where: str,
                  stale: Callable[[Evidence], bool]) -> list[Violation]:
    """Two adjacent loaded entries: load order must be both seq order and serial (epoch, c) order.

    Which clause a disagreement breaks depends on which orders agree: entries stored in serial
    order but with a seq not above the one before were accepted below the tail (A5); entries in
    seq order but not serial order come from a stale acceptance if the later one is provably
    stale, else from an append accepted below the tail that an earlier one had set (A5);
    entries in neither order load out of append order (A2).
    """
    (pev, pkey, pseq), (ev, key, seq) = prev, cur
    if key == pkey:
        return [Violation("journal-a1", f"two entries with the same (epoch, counter) {key} ({where})", (pev, ev))]
    if seq <= pseq:
        if key > pkey:
            return [Violation("journal-a5", f"{ev.tag} was accepted with seq {seq}, not above the tail {pseq} "
                                            f"({where})", (pev, ev))]
        return [Violation("journal-a2", f"entries load in neither seq nor append order ({where})", (pev, ev))]
    if key < pkey:
        if stale(ev):
            return [Violation("stale-rejected", f"epoch inversion: a stale entry of epoch {key[0]} follows one of "
                                                f"epoch {pkey[0]} ({where})", (pev, ev))]
        return [Violation("journal-a5", f"{pev.tag} was accepted with seq {pseq} below the tail {seq} that the "
                                        f"earlier {ev.tag} had set ({where})", (ev, pev))]
    return []


def check_probe(facts: Facts) -> list[Violation]:
    """The final probe's epoch exceeds every granted epoch; it was not refused after 1.2 x ttl."""
    out: list[Violation] = []
    highest: dict[str, tuple[int, Any]] = {}  # run -> (highest granted epoch, its first grant)
    for t in facts.tenures.values():
        if t.grants and (t.run not in highest or t.epoch > highest[t.run][0]):
            highest[t.run] = (t.epoch, t.grants[0][3])
    for run, res in facts.retired.items():
        top = res.top_grant(facts, run)
        if top is not None and (run not in highest or top[2] > highest[run][0]):
            highest[run] = (top[2], top[3])
    for run, probe in (facts.snapshot.probe if facts.snapshot is not None else {}).items():
        if "epoch" in probe:
            top = highest.get(run)
            if top is not None and int(probe["epoch"]) <= top[0]:
                out.append(Violation("epoch-monotonic", f"run {run}: the final probe got epoch {probe['epoch']}, not above "
                                     f"the granted epoch {top[0]}", (evidence(top[1]),)))
        elif probe.get("error") == "LeaseHeldError":
            out.append(Violation("ttl-honoured", f"run {run}: the final probe was refused {probe.get('message', '')!r} "
                                 f"after every worker stopped and 1.2 x ttl passed"))
    return out


_OBJECT_CLAUSE = {"journal": "journal-a3", "meta": "meta-last-write", "blob": "blob-semantics"}
_OBJECT_WRITER = {"journal": "append", "meta": "put_meta", "blob": "blob_put"}


def _surely_held(facts: Facts) -> Callable[[_Read], _Tenure | None]:
    """The "surely live" test of `check_refusals`, for reads: the tenure when nothing can have ended it.

    The read must have completed within ttl - margin of a grant or renewal that completed before
    it was invoked, with the tenure unreleased and no grant of another epoch (nor an acquire of
    unknown outcome) that could have landed before the read completed. Refused acquires change
    nothing (a refusal mutates nothing), so, unlike for refusals, they do not disqualify a read.
    """
    ttl, margin = facts.ttl_ns, facts.margin_ns
    ungranted = (None, 0, 0.0, ())
    tenure_info: dict[tuple[str, int], tuple[Any, ...]] = {}

    def info(run: str, epoch: int) -> tuple[Any, ...]:
        """(tenure, its grant's invocation, the deadline, the run's unknown acquires) of a granted tenure."""
        t = facts.tenures.get((run, epoch))
        if t is None or not t.grants:
            tenure_info[(run, epoch)] = ungranted
            return ungranted
        grant_inv = t.grant_invoke()
        ra = facts.run_acc.get(run)
        found = tenure_info[(run, epoch)] = (t, grant_inv, facts.next_grant(run, epoch, grant_inv),
                                             ra.acq_unknown if ra is not None else ())
        return found

    def held(rd: _Read) -> _Tenure | None:
        _, run, epoch, owner, _, _, _, _, inv, done, _ = rd
        t, grant_inv, first, unknown = tenure_info.get((run, epoch)) or info(run, epoch)
        if t is None or done is None or first < done or t.rel_inv < done or not t.granted_to(owner):
            return None  # (first < done: another grant, or a later epoch's, was invoked meanwhile)
        if unknown and any(i < done and c > grant_inv for i, c in unknown):
            return None
        last = t.live_since(inv)
        if last is None or done >= last + ttl - margin:
            return None
        return t

    return held


def check_reads(facts: Facts, reads: Sequence[_Read] | None = None) -> list[Violation]:
    """A read under a surely-live tenure sees what the epoch-ordered serial history allows.

    Its own last accepted write of the object (or an own write of unknown outcome after it);
    if it has not written the object yet, the serially-last accepted write of the epochs below
    (a run delete empties journal and meta, a blob delete the blob), any unknown write after it,
    or the state before those unknown writes. Anything else is a write the fence let in late
    (`stale-rejected`), one under another run's lease (`run-match`), or a lost write.
    Judges `reads` (default: the facts' own); the statistics count every read judged so far.
    """
    out: list[Violation] = []
    final = reads is None
    if final:
        reads = facts.reads
    if reads:
        out = _judge_reads(facts, reads)
    if final and facts.read_counts[0]:
        facts.stats["reads"], facts.stats["reads_judged"] = facts.read_counts
    return out


def _judge_reads(facts: Facts, reads: Sequence[_Read]) -> list[Violation]:
    """`check_reads` of `reads`, counting them in `facts.read_counts`."""
    out: list[Violation] = []
    held = _surely_held(facts)
    epochs_of: dict[tuple[str, str], list[int]] = {}

    def before(obj: tuple[str, str], epoch: int) -> tuple[dict[Any, Any], Any]:
        """Values the serial history allows just before `epoch` (value -> op or None), and the last accepted op."""
        allowed: dict[Any, Any] = {}
        per = facts.objects.get(obj, {})
        eps = epochs_of.get(obj)
        if eps is None:
            eps = epochs_of[obj] = sorted(per)
        for k in range(bisect.bisect_left(eps, epoch) - 1, -1, -1):  # downwards, without copying the epochs
            ok_c, ok_val, ok_op, unk = per[eps[k]]
            for _, v, op in unk:
                allowed.setdefault(v, op)
            if ok_c is not None:
                allowed.setdefault(ok_val, ok_op)
                return allowed, ok_op
        floor = floors.get(obj)  # the retired epochs, all below `epoch` (reads at or below them are not judged)
        if floor is not None:
            for v, op in floor[0]:
                allowed.setdefault(v, op)
            if floor[1] is not None:
                allowed.setdefault(floor[1][0], floor[1][1])
                return allowed, floor[1][1]
        allowed.setdefault(_EMPTY_JOURNAL if obj[0] == "journal" else None, None)
        return allowed, None

    judged = 0
    unordered, floors, retired = facts.unordered, facts.floors, facts.retired
    for rd in reads:
        obj, run, epoch, _, seen, _, _, _, _, _, own = rd
        if obj in unordered:
            continue  # unleased writes are not ordered by epochs
        if retired and run in retired and epoch <= retired[run].floor:
            continue  # under a retired epoch (reused, by a store that resets epochs): its floor is not below it
        t = held(rd)
        if t is None:
            continue
        judged += 1
        # allowed: its own last accepted write if it made one, else what the epochs below allow; and the
        # values of its own writes of unknown outcome after that
        own_wrote = own is not None and own[0] is not None
        if own_wrote:
            if seen == own[1]:
                continue
        elif seen in before(obj, epoch)[0]:
            continue
        if own is not None and any(seen == v for _, v, _ in own[3]):
            continue
        out.append(_misread(facts, rd, t, own_wrote, before))
    facts.read_counts[0] += len(reads)
    facts.read_counts[1] += judged
    return out


def _misread(facts: Facts, rd: _Read, t: _Tenure, own_wrote: bool,
             before: Callable[[tuple[str, str], int], tuple[dict[Any, Any], Any]]) -> Violation:
    """Name the clause a disallowed read breaks, citing the read and the writes involved."""
    obj, run, epoch, _, seen, _, _, _, _, _, own = rd
    kind, name = obj
    what = f"the journal tail of {name}" if kind == "journal" else f"the meta of {name}" if kind == "meta" else f"blob {name}"
    rev = _read_evidence(rd)
    seen_tag = seen[1] if kind == "journal" else seen
    shown = "nothing" if seen_tag is None and seen in (None, _EMPTY_JOURNAL) else (
        f"{seen_tag}" + (f" at seq {seen[0]}" if kind == "journal" else ""))
    head = f"{rev.tag} read {what} under epoch {epoch} while it was surely live and saw {shown}"
    grant_inv = t.grant_invoke()
    lost = _OBJECT_CLAUSE[kind]
    if own_wrote:
        mine = evidence(own[2])
        expect = f"; its own tenure last wrote {mine.tag}"
        cite: tuple[Evidence, ...] = (rev, mine)
    else:
        _, last = before(obj, epoch)
        mine = evidence(last) if last is not None else None
        expect = (f"; the serially-last accepted write before epoch {epoch} is {mine.tag} (epoch {mine.epoch})"
                  if mine is not None else f"; nothing was accepted before epoch {epoch}")
        cite = (rev,) if mine is None else (rev, mine)
    info = _tag_info(facts, seen_tag) if seen_tag is not None else None
    if info is not None:
        lease_run, ep, outcome = info
        hit = facts.seen.get(seen_tag)
        sev = evidence(hit[0]) if hit is not None else Evidence(
            seen_tag.rpartition("#")[0], int(seen_tag.rpartition("#")[2]), _OBJECT_WRITER[kind], run, ep, None,
            outcome, 0, None, seen_tag)
        cite = (*cite, sev)
        if lease_run != run:
            return Violation("run-match", f"{head}, written under a lease of run {lease_run}{expect}", cite)
        if ep < epoch:
            if outcome == "fail":
                return Violation("stale-rejected", f"{head}: a refused write of superseded epoch {ep} took effect"
                                 f"{expect}", cite)
            if own_wrote:
                prior = before(obj, epoch)[0].get(seen, False)
                landed_late = prior is False or prior is None or prior[8] is None or prior[8] > grant_inv
                if not landed_late:
                    return Violation(lost, f"{head}, the value from before its own write: lost write{expect}", cite)
                return Violation("stale-rejected", f"{head}: a write of superseded epoch {ep} took effect after the "
                                 f"successor's own write{expect}", cite)
            wrote = _written_by(facts, obj, ep, seen_tag)
            if wrote is not None and wrote[8] is not None and wrote[8] > facts.stale_at(run, ep)[0]:
                return Violation("stale-rejected", f"{head}: {seen_tag} of epoch {ep} completed after its tenure was "
                                 f"superseded and took effect over later writes{expect}", cite)
            if mine is not None and mine.epoch is not None and mine.epoch < epoch and (
                    mine.complete_ns is None or mine.complete_ns > grant_inv):
                return Violation("stale-rejected", f"{head}, an older write of superseded epoch {ep}: {mine.tag} was "
                                 f"still in flight when epoch {epoch} was granted and took effect late or never"
                                 f"{expect}", cite)
            return Violation(lost, f"{head}, an older write of epoch {ep}: lost write{expect}", cite)
        return Violation(lost, f"{head}, a write of epoch {ep} the serial history does not allow here{expect}", cite)
    if own_wrote:
        return Violation(lost, f"{head}: its own write is lost{expect}", cite)
    if mine is not None and (mine.complete_ns is None or mine.complete_ns > grant_inv):
        return Violation("stale-rejected", f"{head}: {mine.tag} of superseded epoch {mine.epoch} was still in flight "
                         f"when epoch {epoch} was granted and took effect late or never{expect}", cite)
    return Violation(lost, f"{head}: lost write{expect}", cite)


def _written_by(facts: Facts, obj: tuple[str, str], epoch: int, tag: str) -> Any:
    """The compact record of the write `tag` if the summary of (obj, epoch) still holds it (last accepted or unknown)."""
    o = facts.objects.get(obj, {}).get(epoch)
    if o is not None:
        ops: Iterable[Any] = (o[2], *(u[2] for u in o[3]))
    else:  # a retired epoch: its last accepted write may stand in its object's floor
        floor = facts.floors.get(obj)
        if floor is None:
            return None
        ops = (*(u[1] for u in floor[0]), floor[1][1] if floor[1] is not None else None, *floor[2])
    for op in ops:
        if op is not None and f"{op[0]}#{op[1]}" == tag:
            return op
    return None


def check_boot(facts: Facts) -> list[Violation]:
    """Every store boot (`open`) comes up; one the harness did not cut short that fails breaks concurrent-boot."""
    out = []
    for op in facts.boot_failures:
        ev = evidence(op)
        how = "refused typed" if ev.outcome == "fail" else "failed untyped"
        out.append(Violation("concurrent-boot", f"{ev.process} opening the store {how} ({ev.error}): every process "
                             f"opening one location must come up", (ev,)))
    return out


def check_takeovers(facts: Facts, held_by_run: dict[str, array] | None = None) -> list[Violation]:
    """In the history: an acquire refused (LeaseHeldError) although the newest tenure surely ended.

    Surely ended: released (an ok release completed before the acquire was invoked), or expired
    unrenewed, its last acquire or renew (and any renew of unknown outcome) completed more than
    1.2 x ttl + margin before the acquire was invoked. Skipped whenever a grant of a later epoch,
    an acquire of unknown outcome or a renewal invoked before the refused acquire completed may
    have landed first. Judges the refused acquires `held_by_run` (default: the facts' own, `_Run.held`).
    """
    out: list[Violation] = []
    bound = int(facts.ttl_ns * 1.2) + facts.margin_ns
    by_run: dict[str, list[_Tenure]] = {}
    for t in facts.tenures.values():
        if t.grants:
            by_run.setdefault(t.run, []).append(t)
    for run, ra in facts.run_acc.items():
        held, ts = ra.held if held_by_run is None else held_by_run.get(run), by_run.get(run)
        if not held or not ts:
            continue
        firsts = sorted([(t.grant_complete(), t.grant_invoke(), t) for t in ts], key=_first)
        completes = [x[0] for x in firsts]
        newest: list[tuple[int, int, _Tenure]] = []  # the first grant (complete, invoke, tenure) of the highest
        for x in firsts:                                # epoch among the first k tenures to be granted
            newest.append(x if not newest or x[2].epoch > newest[-1][2].epoch else newest[-1])
        deadlines: dict[int, float] = {}  # per newest tenure: `Facts.next_grant`
        for i in range(0, len(held), 4):
            inv, done, pid, index = held[i:i + 4]
            k = bisect.bisect_left(completes, inv)
            if k == 0:
                continue
            granted, grant_inv, t = newest[k - 1]
            first = deadlines.get(t.epoch)
            if first is None:
                first = deadlines[t.epoch] = facts.next_grant(run, t.epoch, grant_inv)
            # the store judged the acquire somewhere in [inv, done] (a pause can sit inside the call):
            # anything invoked before it completed may have landed first
            if first < done:
                continue  # a later grant, or another grant of any epoch (a store may reset them), may have landed first
            if inv <= granted + bound and t.rel_ok >= inv:
                continue  # within the bound of the grant itself (it completed before this acquire was invoked)
            if ra.acq_unknown and any(u < done and c > grant_inv for u, c in ra.acq_unknown):
                continue
            if t.rel_ok < inv:
                out.append(Violation("ttl-honoured", f"acquire of run {run} refused {(inv - t.rel_ok) / 1e6:.1f} ms "
                                     f"after epoch {t.epoch} was released, with no acquire since",
                                     (_held_ev(facts, run, inv, done, pid, index), evidence(t.rel_ok_ev))))
                continue
            last = t.renewed_by(done)
            if last is None:
                continue
            for u, c in t.renew_unk or ():
                if u < done and c > last:
                    last = c
            if inv > last + bound:
                out.append(Violation("ttl-honoured", f"acquire of run {run} refused {(inv - last) / 1e6:.1f} ms after "
                                     f"epoch {t.epoch} was last granted or renewed (ttl {facts.lease_ttl_ms} ms, bound "
                                     f"1.2 x ttl), with no takeover in flight",
                                     (_held_ev(facts, run, inv, done, pid, index), evidence(t.grants[0][3]))))
    return out


def _held_ev(facts: Facts, run: str, inv: int, done: int, pid: int, index: int) -> Evidence:
    """Evidence of an acquire refused with LeaseHeldError, from its packed record (`_Run.held`)."""
    process = facts.procs[pid]
    return Evidence(process, index, "acquire", run, None, None, "fail", inv, done, f"{process}#{index}", "LeaseHeldError")


#: The checkers `check` runs, by name (each one's failure is reported under its name).
CHECKERS: tuple[tuple[str, Checker], ...] = (
    ("run-match", check_scan),
    ("grants", check_grants),
    ("grantees", check_grantees),
    ("fencing", check_fencing),
    ("refusals", check_refusals),
    ("state", check_state),
    ("reads", check_reads),
    ("boot", check_boot),
    ("takeovers", check_takeovers),
    ("probe", check_probe),
    ("liveness", check_liveness),
)


def settle(facts: Facts, until: float, names: Iterable[str] | None = None) -> None:
    """Judge and drop what can no longer change, once every operation invoked before `until` is folded.

    The scan can then run in memory bounded by what is in flight, not by the history's length
    (`soak.check.parallel` folds the files a time slice at a time and settles after each):

    - a tenured read, a refusal under a tenure and a refused acquire are final once they completed
      before `until`: everything they consult was invoked before they completed;
    - a tenure retires once a grant of a higher epoch completed, and its own ttl since its last
      grant or renewal ran out, before anything still to be judged was invoked (so nothing still
      to be judged can consult it), and every lower epoch of its run retires too. Its grants,
      grantees and fencing are judged then; its run keeps a residue (`_Retired`) for operations
      that still arrive under it, and the summaries of its epoch join their objects' floors,
      which stand below every live epoch for reads (`check_reads`).

    Each item is judged once, by the checker of the same name (`names`, default all), into
    `facts.early`; `run_checkers` adds those findings to the final ones.
    """
    wanted = {n for n, _ in CHECKERS} if names is None else set(names)
    hz = until  # the earliest invocation of anything still to judge

    if facts.reads:
        ready = [rd for rd in facts.reads if rd[9] < until]
        if ready:
            facts.reads = [rd for rd in facts.reads if rd[9] >= until]
            _early(facts, wanted, "reads", check_reads, ready)
        for rd in facts.reads:
            if rd[8] < hz:
                hz = rd[8]
    if facts.refusals:
        done = [r for r in facts.refusals if r[3][8] < until]
        if done:
            facts.refusals = [r for r in facts.refusals if r[3][8] >= until]
            _early(facts, wanted, "refusals", check_refusals, done)
        for r in facts.refusals:
            if r[3][7] < hz:
                hz = r[3][7]
    ready_held: dict[str, array] = {}
    for run, ra in facts.run_acc.items():
        held = ra.held
        if not held:
            continue
        now, later = array("q"), array("q")
        for i in range(0, len(held), 4):
            (now if held[i + 1] < until else later).extend(held[i:i + 4])
            if held[i + 1] >= until and held[i] < hz:
                hz = held[i]
        if now:
            ready_held[run] = now
            ra.held = later
    if ready_held:
        _early(facts, wanted, "takeovers", check_takeovers, ready_held)

    # tenures no later judgement can consult: per run, the lowest epochs, each superseded before `hz`
    ttl = facts.ttl_ns
    by_run: dict[str, list[_Tenure]] = {}
    for t in facts.tenures.values():
        by_run.setdefault(t.run, []).append(t)
    retiring: list[_Tenure] = []
    floors: dict[str, tuple[int, int]] = {}  # run -> (its floor before, after)
    live_grants: dict[str, tuple[float, set[int]]] = {}  # run -> (earliest grant invocation, epochs) of live tenures
    for run, ts in by_run.items():
        granted = sorted((t for t in ts if t.grants), key=_EPOCH)
        sup, sups = _NEVER, [_NEVER] * len(granted)  # earliest completed grant of a higher epoch
        for i in range(len(granted) - 1, -1, -1):
            sups[i] = sup
            sup = min(sup, granted[i].grant_complete())
        n = 0
        while (n < len(granted) and sups[n] < hz and max(m[0] for m in granted[n].marks) + ttl < hz
               and 0 <= granted[n].epoch < _PACKABLE):
            n += 1
        res = facts.retired.get(run)
        before = res.floor if res is not None else -1
        floor = max(before, granted[n - 1].epoch if n else -1)
        live = granted[n:]
        live_grants[run] = (min((t.grant_invoke() for t in live), default=_NEVER), {t.epoch for t in live})
        if floor < 0:
            continue
        gone = [*granted[:n], *(t for t in ts if not t.grants and 0 <= t.epoch <= floor)]
        if gone:
            retiring.extend(gone)
            floors[run] = (before, floor)
    if retiring:
        _early(facts, wanted, "grants", check_grants, retiring)
        _early(facts, wanted, "grantees", check_grantees, retiring)
        _early(facts, wanted, "fencing", check_fencing, retiring)
        stale = [facts.stale_at(t.run, t.epoch) for t in retiring]
        superseded: dict[str, dict[int, float]] = {}  # run -> epoch -> when it was superseded
        for t, when in zip(retiring, stale):
            superseded.setdefault(t.run, {})[t.epoch] = when[0]
        for t, when in zip(retiring, stale):
            res = facts.retired.get(t.run)
            if res is None:
                res = facts.retired[t.run] = _Retired()
            res.add(facts, t, when)
            del facts.tenures[(t.run, t.epoch)]
        facts.tenures_changed()
        for obj, per in facts.objects.items():
            run = facts.obj_run.get(obj)
            if run in floors:
                _to_floor(facts, obj, per, *floors[run], live_grants[run][1], superseded.get(run, {}))

    if floors:
        _drop_tags(facts)
    for run, ra in facts.run_acc.items():  # acquires only ever consulted after a live tenure's grant
        cut = min(hz, live_grants[run][0]) if run in live_grants else hz
        if ra.acq_invokes and min(ra.acq_invokes) < cut:
            ra.acq_invokes = array("q", [x for x in ra.acq_invokes if x >= cut])
        if ra.acq_unknown:
            ra.acq_unknown = [u for u in ra.acq_unknown if u[1] > cut]
    facts.settled = until


_EPOCH = attrgetter("epoch")


def _early(facts: Facts, wanted: set[str], name: str, fn: Callable[..., list[Violation]], items: Any) -> None:
    """Run checker `name` on `items` now, keeping its findings (or why it raised) for `run_checkers`."""
    if name not in wanted:
        return
    try:
        found = fn(facts, items)
    except Exception as exc:
        facts.early_errors.setdefault(name, f"checker {name} raised {type(exc).__name__}: {exc}")
        return
    if found:
        facts.early.setdefault(name, []).extend(found)


def _drop_tags(facts: Facts) -> None:
    """Forget which lease wrote the tags of long-retired epochs, all but the `_Retired.TAGS` latest retired of
    each run: each process's oldest segments of `Facts.tagged`.

    Only a read that saw a value it must not have asks (`_misread`); one that sees a write of a long
    retired tenure is named by the plain clause of its object (a lost or phantom write).
    """
    cuts = {run: res.epochs[-res.TAGS] if len(res.epochs) > res.TAGS else res.mark
            for run, res in facts.retired.items()}
    for seg in facts.tagged.values():
        starts, keys = seg[0], seg[1]
        k = 0
        while k < len(keys):
            key = keys[k]
            cut = cuts.get(key[0]) if key is not None else None
            if key is not None and (cut is None or key[1] > cut):
                break
            k += 1
        if k:
            del starts[:k], keys[:k]


#: Writes that completed after their tenure was superseded a floor keeps (`_to_floor`), the latest.
_FLOOR_LATE = 64


def _to_floor(facts: Facts, obj: tuple[str, str], per: dict[int, _Obj], before: int, floor: int,
              live: set[int], superseded: dict[int, float]) -> None:
    """Fold `obj`'s summaries of the epochs up to `floor` into its floor: (the unknown writes above the last
    accepted one, that one as (value, op), and the writes that completed after their tenure was superseded,
    which `_misread` may have to name; `superseded` has when the run's tenures retired now were). Those at or below
    the old floor `before` are writes that arrived under long-retired tenures: fencing judges them, reads never
    see them as serial."""
    epochs = sorted((e for e in per if e <= floor and e not in live), reverse=True)
    if not epochs:
        return
    run = facts.obj_run.get(obj, "")
    unknown: list[tuple[Any, Any]] = []
    late: list[Any] = []
    last = None
    for e in epochs:
        o = per.pop(e)
        if e <= before:
            continue
        _compact_obj(o)
        when = superseded.get(e)
        if when is None:
            when = facts.stale_at(run, e)[0]
        op = o[2]
        if op is not None and (op[8] is None or op[8] > when):
            late.append(op)
        for u in o[3]:
            if u[2][8] is None or u[2][8] > when:
                late.append(u[2])
        if last is not None:
            continue
        unknown.extend((v, op) for _, v, op in o[3])
        if o[0] is not None:
            last = (o[1], o[2])
    old = facts.floors.get(obj)
    if old is not None:
        late[:0] = old[2]
        if last is None:
            unknown.extend(old[0])
            last = old[1]
    facts.floors[obj] = (tuple(unknown), last, tuple(late[-_FLOOR_LATE:]))


def check(
    ops: Iterable[Operation | Any],
    snapshot: Any,
    *,
    lease_ttl_ms: int,
    runs: Iterable[str],
    cross_runs: Iterable[str] = ("xr",),
    status: str = "quorum",
    quorum: str = "",
    margin_ms: float | None = None,
    checkers: Sequence[tuple[str, Checker]] | None = None,
) -> Verdict:
    """Check a history (operations, events allowed) against the final state; pure, one pass.

    `runs` are the runs workers write legitimately, `cross_runs` those nobody may write,
    `status` the storm's ending (anything but `quorum` is inconclusive). `margin_ms` is the
    slack for "surely live" (default: `default_margin_ns`).
    """
    runs = tuple(runs)
    return judge(lambda: scan(ops, snapshot, lease_ttl_ms=lease_ttl_ms, runs=runs, cross_runs=cross_runs,
                              status=status, quorum=quorum, margin_ms=margin_ms), checkers)


#: Runs checkers over facts: per checker, in order, its violations or why it raised (`run_checkers`).
Runner = Callable[[Facts, Sequence[tuple[str, Checker]]], list[tuple[list[Violation], str | None]]]


def run_checkers(facts: Facts, checkers: Sequence[tuple[str, Checker]]) -> list[tuple[list[Violation], str | None]]:
    """Per checker, in order: its violations, or no violations and the reason it raised."""
    out: list[tuple[list[Violation], str | None]] = []
    for name, fn in checkers:
        early, failed = facts.early.get(name, []), facts.early_errors.get(name)
        try:
            out.append(([*early, *fn(facts)], failed))
        except Exception as exc:
            out.append((list(early), failed or f"checker {name} raised {type(exc).__name__}: {exc}"))
    return out


def judge(build: Callable[[], Facts], checkers: Sequence[tuple[str, Checker]] | None = None,
          runner: Runner = run_checkers) -> Verdict:
    """Build the facts (a scan of the history) and run the checkers over them: the verdict.

    A corrupt history or a scan that raises is inconclusive with the reason named, as is a
    checker that raises (the others still run). `runner` may spread the checkers over processes.
    """
    # The scan allocates millions of short-lived, acyclic objects (operations, tuples) while its
    # summaries grow: the cyclic collector would re-traverse them for nothing (18% of the time at
    # 1M operations). Reference counting still frees everything; the caller's setting is restored.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _judge(build, CHECKERS if checkers is None else checkers, runner)
    finally:
        if gc_was_enabled:
            gc.enable()


def _judge(build: Callable[[], Facts], checkers: Sequence[tuple[str, Checker]], runner: Runner) -> Verdict:
    """`judge` with the cyclic collector already paused."""
    try:
        facts = build()
    except HistoryCorruptError as exc:
        return Verdict.build(reasons=[f"corrupt history: {exc}"])
    except Exception as exc:
        return Verdict.build(reasons=[f"the history scan raised {type(exc).__name__}: {exc}"])
    violations: list[Violation] = []
    reasons: list[str] = []
    partial = bool(lost_workers(facts))  # a worker's history is missing: only proofs from recorded operations
    for (name, _), (found, reason) in zip(checkers, runner(facts, checkers)):
        if partial and name in WHOLE_HISTORY_CHECKERS:
            continue  # history_gaps names why
        violations.extend(found)
        if reason is not None:
            reasons.append(reason)
    try:
        reasons.extend(_undecidable(facts))
    except Exception as exc:
        reasons.append(f"reading the final state raised {type(exc).__name__}: {exc}")
    if facts.status != "quorum":
        reasons.append(f"run ended with status {facts.status!r}, quorum not met"
                       f"{': ' + facts.quorum if facts.quorum else ''}")
    violations = _dedupe(violations)
    facts.stats["violations"] = len(violations)
    try:
        facts.stats["exercised"] = exercised(facts)
    except Exception as exc:
        reasons.append(f"counting what the history exercised raised {type(exc).__name__}: {exc}")
    return Verdict.build(violations, reasons, facts.stats)


def _undecidable(facts: Facts) -> list[str]:
    """What keeps the checker from deciding: what the history lacks (`soak.check.liveness.history_gaps`), a final
    state that could not be read, read errors, probes that errored."""
    reasons = history_gaps(facts)
    snap = facts.snapshot
    if snap is None:
        return [*reasons, f"final state not read ({facts.state_error}): the history was judged without it"]
    reasons += [f"final state unreadable: {e}" for e in snap.read_errors]
    for run, probe in snap.probe.items():
        if "epoch" not in probe and probe.get("error") != "LeaseHeldError":
            reasons.append(f"final probe of run {run} raised {probe.get('error')}: {probe.get('message', '')}")
    for run in facts.run_acc:
        if run in facts.runs and run not in snap.journals:
            reasons.append(f"final state lacks run {run}: its writes cannot be diffed")
    return reasons


def _dedupe(violations: list[Violation]) -> list[Violation]:
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    out = []
    for v in violations:
        k = (v.clause, v.statement, tuple(e.tag for e in v.evidence))
        if k not in seen:
            seen.add(k)
            out.append(v)
    return out
