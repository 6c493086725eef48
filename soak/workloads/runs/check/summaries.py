"""What the fold keeps: per tenure (`_Tenure`: grants, renewals, releases, the latest accepted and unknown operations
under it), per run (`_Run`) and blob ref (`_Ref`), per object and epoch (the last accepted write and the unknown
ones after it), tenured reads, and what a retired tenure leaves behind (`_Retired`: a residue row per epoch,
capped per run, so that operations still arriving under it are judged).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from soak.check.verdict import Evidence
from soak.workloads.runs.check.ops import _NEVER, _RAW_LEN, _lite, _lite_of, _op_fields, _second

if TYPE_CHECKING:
    from soak.workloads.runs.check.facts import Facts


def _settle(tenure: _Tenure | None, objects: Iterable[_Obj]) -> None:
    """Compact the summaries one lease's operations wrote whole operations into (the fold has moved on)."""
    memo: dict[int, tuple[Any, Any]] = {}
    for o in objects:
        _compact_obj(o, memo)
    if tenure is not None:
        tenure.compact(memo)


class _Tenure:
    """What the history says about one (run, epoch). Operations are held as whole tuples or `_lite`."""

    __slots__ = ("run", "epoch", "grants", "marks", "rel_ok", "rel_ok_ev", "rel_any", "rel_fail", "mut_inv", "mut",
                 "lop_inv", "lop", "unt_inv", "unt", "users", "renew_unk")

    def __init__(self, run: str, epoch: int) -> None:
        self.run = run
        self.epoch = epoch
        self.grants: list[tuple[int, int, str, Any]] = []  # ok acquires: (invoke, complete, owner, op)
        self.marks: list[tuple[int, int]] = []  # ok acquire/renew: (invoke, complete)
        self.rel_ok: float = _NEVER  # earliest completion of an ok release
        self.rel_ok_ev: Any = None
        self.rel_any: float = _NEVER  # earliest invocation of a release (or delete) accepted or of unknown outcome
        self.rel_fail: list[tuple[int, int]] | None = None  # refused releases: (invoke, complete)
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

    @property
    def rel_inv(self) -> float:
        """The earliest invocation of a release that may have ended this tenure: accepted, of unknown outcome, or
        refused but not over before the tenure's first grant was invoked (a lease presented before its epoch was
        granted, a coverage probe's future epoch, is refused and cannot end the tenure granted later)."""
        r = self.rel_any
        fails = self.rel_fail
        if fails is not None:
            g = self.grant_invoke() if self.grants else None
            for inv, done in fails:
                if inv < r and (g is None or done >= g):
                    r = inv
        return r

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
        if later.rel_any < self.rel_any:
            self.rel_any = later.rel_any
        if later.rel_fail:
            self.rel_fail = [*(self.rel_fail or ()), *later.rel_fail]
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


def _pid_of(facts: Facts, process: str) -> int:
    """The number standing for `process` in packed records (`Facts.procs`), assigned on first use."""
    pid = facts.proc_ids.get(process)
    if pid is None:
        pid = facts.proc_ids[process] = len(facts.procs)
        facts.procs.append(process)
    return pid
