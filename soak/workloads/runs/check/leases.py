"""Leases: `lease-exclusive` and `epoch-monotonic` from the grants (each epoch granted once, epochs rising with grant
order, no two surely-live tenures overlapping), `ttl-honoured` from refused acquires (refused although the run's
newest tenure had surely expired unrenewed, or after its release) and from the final probe (its epoch above every
granted one; not refused after every worker stopped and 1.2 x ttl passed).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from typing import Any

from soak.check.verdict import Evidence, Violation
from soak.workloads.runs.check.facts import Facts, _retired_grant
from soak.workloads.runs.check.ops import _first, _second, evidence
from soak.workloads.runs.check.summaries import _Tenure


def check_grants(facts: Facts, tenures: Iterable[_Tenure] | None = None, *, overlap: bool = True) -> list[Violation]:
    """Each epoch granted once; epochs rising with grant order; no two surely-live tenures overlap.

    Judges `tenures` (default: all), with every tenure of the facts and the highest retired grant of
    each run as context. Without `overlap`, only what no later operation can undo (an epoch granted twice, a
    grant below an earlier one): what the early judge may read off tenures still live (a release not folded yet
    can show an earlier tenure was no longer live when a takeover landed).
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
            again = _granted_while_live(t, facts.ttl_ns, facts.margin_ns) if overlap else None
            if again is not None:
                first, g, last = again
                out.append(Violation(
                    "lease-exclusive",
                    f"run {t.run}: acquire by {g[2]} granted {(g[1] - last) / 1e6:.1f} ms after epoch {t.epoch} was "
                    f"last granted or renewed (ttl {facts.lease_ttl_ms} ms), while that tenure was live: an acquire "
                    "is refused while a live lease exists, whoever holds it",
                    (evidence(first[3]), evidence(g[3])),
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
        for t in ts if overlap else ():
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
                if g[2] == t.epoch or t.rel_inv < g[1] + facts.clock_ns:
                    continue
                k = bisect.bisect_left(completes, g[0] - facts.clock_ns)  # marks surely completed before the takeover was invoked
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
            if len(t.grants) == 1 and not (facts.retired and _retired_grant(facts, t) is not None):
                out.extend(_raced_grant(facts, run, t, by_invoke, invokes, completes[0]))
    return out


def _raced_grant(facts: Facts, run: str, t: _Tenure, by_invoke: list[Any], invokes: list[int],
                 granted: int) -> list[Violation]:
    """A higher epoch whose acquire was invoked before this tenure's grant completed (two acquires raced) and
    completed within the ttl of this grant's invocation: the store granted it after this tenure's grant (epochs rise
    with grant order; a store that breaks that is `epoch-monotonic`'s), so at most that long after, while this
    tenure was surely live (unless it was released first)."""
    first_inv = t.grants[0][0]
    bound = first_inv + facts.ttl_ns - facts.margin_ns
    for g in by_invoke[:bisect.bisect_right(invokes, granted)]:
        # the two calls overlapped (it completed after this grant was invoked: one that completed before was granted
        # first, which is `epoch-monotonic`'s to judge, not an overlap)
        if g[2] > t.epoch and first_inv < g[1] and g[1] + facts.clock_ns < bound \
                and t.rel_inv >= g[1] + facts.clock_ns:
            return [Violation(
                "lease-exclusive",
                f"run {run}: epoch {g[2]} granted at most {(g[1] - first_inv) / 1e6:.1f} ms after epoch {t.epoch} "
                f"(their acquires raced; the higher epoch was granted second), while it was live "
                f"(ttl {facts.lease_ttl_ms} ms)",
                (evidence(t.grants[0][3]), evidence(g[3])),
            )]
    return []


def _granted_while_live(t: _Tenure, ttl: int, margin: int) -> tuple[Any, Any, int] | None:
    """A later grant of a tenure's own epoch that completed while the tenure was surely live (its latest grant or
    renew completed before the acquire was invoked, less than ttl - margin earlier, and no release invoked by
    then): (the first grant, that grant, the invocation its liveness counts from), or None."""
    grants = sorted(t.grants, key=_first)
    for g in grants[1:]:
        before = [m[0] for m in t.marks if m[1] < g[0]]
        if before and g[1] < max(before) + ttl - margin and t.rel_inv >= g[1]:
            return grants[0], g, max(before)
    return None


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
            if t.rel_ok + facts.clock_ns < inv:
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
