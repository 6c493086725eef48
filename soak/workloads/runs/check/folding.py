"""One streaming pass over the operations into `Facts` (`fold`), and `merge` of two partial folds.

Nothing is kept per operation but what a checker needs: a small record per tenure, per run and per blob ref, the
operations whose tag appears in the final state, refusals that might be spurious, accepted appends missing from
the journal (packed integers, dropped once a delete explains them), and the generic part every workload's facts
hold (events, liveness candidates, the per-kind counts the quorum is recounted from). The pass can be cut: fold
the files of some processes, fold the rest elsewhere, and `merge` continues the first fold with the second exactly
as one pass would have; folded a time slice at a time (`fold(..., until=T)`), it stops at the first operation
invoked at T or later (`soak.workloads.runs.check.settling` then settles the slice).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from typing import Any

from soak.history import Operation
from soak.check.verdict import Violation
from soak.workloads.runs.check.facts import Facts
from soak.check.base import STORM_EVENTS as _STORM_EVENTS
from soak.workloads.runs.check.ops import (
    _ARGS, _COMP, _F, _I, _INV, _LEASE_OPS, _MUTATIONS, _NEVER, _P, _READS, _RES, _RUN, _TAGGED, _TYPED, _ev, _intern,
    _lite, _raw,
)
from soak.workloads.runs.check.summaries import (
    _EMPTY_JOURNAL, _R_OWN, _Obj, _Read, _Ref, _Run, _Tenure, _absorb, _accept, _combined, _frozen, _new_obj, _pid_of,
    _settle, _unknown,
)


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
                if f in reads:
                    res = op[_RES]
                    if type(res) is dict and res.get("altered"):
                        # the bytes read are not the bytes the tag's writer wrote: proven by the read alone
                        what = {"load": "journal tail", "get_meta": "meta"}.get(f) or f"blob {args.get('ref')}"
                        scan_violations.append(Violation(
                            "journal-a4", f"{what} of run {run} read back altered: its bytes are not what "
                                          f"{res.get('tail_tag') or res.get('tag') or 'its writer'} wrote", (_ev(op),)))
                    if type(res) is dict and res.get("mixed"):
                        scan_violations.append(Violation(
                            "meta-last-write", f"meta of run {run} read back mixed: its payload is what {res.get('tag')} "
                                               "wrote, its status and segments are not (last write wins, whole)",
                            (_ev(op),)))
                    elif args.get("tenure"):
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
            elif error == "LeaseHeldError" and f in mutations:
                scan_violations.append(
                    Violation("unleased-passthrough", f"{f} on run {run} without a lease refused by the fence",
                              (_ev(op),))
                )
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
                    if invoke < t.rel_any:  # a delete may end its tenure (the store's choice), as a release does
                        t.rel_any = invoke
            else:
                if invoke > t.lop_inv:
                    t.lop_inv, t.lop = invoke, op
                if f == "renew":
                    t.marks.append((invoke, complete))
                else:
                    _mark_epoch(epochs, run, epoch, 2)
                    if invoke < t.rel_any:
                        t.rel_any = invoke
                    if complete < t.rel_ok:
                        t.rel_ok = complete
                        t.rel_ok_ev = op if t.lop is op else _lite(op)
        elif outcome == "fail":
            n_fail += 1
            if f == "release":  # refused: it may still have ended the tenure, unless it was over before its grant
                t = _tenure_of(tenures, run, epoch)
                if t.rel_fail is None:
                    t.rel_fail = []
                t.rel_fail.append((invoke, complete))
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
                t.rel_any = min(t.rel_any, invoke)
            elif f == "renew":
                if t.renew_unk is None:
                    t.renew_unk = []
                t.renew_unk.append((invoke, _NEVER if complete is None else complete))
            if complete is not None and error is not None and error not in _TYPED:  # the store's own answer
                if invoke > t.unt_inv:
                    t.unt_inv, t.unt = invoke, _lite(op)
            if f == "delete":
                t.rel_any = min(t.rel_any, invoke)  # it may have ended the tenure
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
