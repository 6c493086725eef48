"""Settling, after each time slice (bounded memory): what can no longer change is judged (by the checker of the
same name, into `Facts.early`) and dropped, and tenures nothing still to come can consult retire, leaving a
small residue per run (`summaries._Retired`) and a floor per object that later reads are judged against
(docs/bounded-checker.md).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

from soak.check.verdict import Violation
from soak.workloads.runs.check.facts import Facts
from soak.workloads.runs.check.fencing import check_fencing, check_grantees, check_refusals
from soak.workloads.runs.check.checkers import CHECKERS
from soak.workloads.runs.check.leases import check_grants, check_takeovers
from soak.workloads.runs.check.ops import _NEVER
from soak.workloads.runs.check.reads import check_reads
from soak.workloads.runs.check.summaries import _Obj, _PACKABLE, _Retired, _Tenure, _compact_obj


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
