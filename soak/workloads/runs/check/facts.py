"""`Facts`: everything the runs checkers read, made by `new_facts` (the final state's tags indexed by the operation
that wrote them), folded into by `soak.workloads.runs.check.folding`, completed by `finish`. `Facts.stale_at` and
`Facts.next_grant` answer the real-time questions every checker asks: when a tenure surely stopped being current,
and the earliest grant that may have landed after one.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from soak.history import tag_of
from soak.check.verdict import Evidence, Violation
from soak.check.base import BaseFacts
from soak.workloads.runs.check.ops import _NEVER, _NO_RUN, default_margin_ns, evidence
from soak.workloads.runs.check.summaries import _Obj, _Read, _Ref, _Retired, _Run, _Tenure


@dataclass(slots=True, kw_only=True)
class Facts(BaseFacts):
    """Everything the runs checkers read: the fold's summaries, the final state and the settings (and, from
    `BaseFacts`, what every workload's facts hold)."""

    snapshot: Any = None
    margin_ns: int = 0
    #: a storm across hosts: how far two records of different hosts can be off each other's clock (twice the
    #: largest offset error in clocks.json); every real-time rule gives it as slack, so it fires only when certain
    clock_ns: int = 0
    runs: tuple[str, ...] = ()
    cross_runs: tuple[str, ...] = ()
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
    # Settling (`soak.workloads.runs.check.settling`): what retired tenures left per run; per object, the writes of
    # its run's retired epochs (`_to_floor`); each object's run.
    retired: dict[str, _Retired] = field(default_factory=dict)
    floors: dict[tuple[str, str], tuple[tuple[tuple[Any, Any], ...], tuple[Any, Any] | None, tuple[Any, ...]]] = field(
        default_factory=dict)
    obj_run: dict[tuple[str, str], str] = field(default_factory=dict)
    read_counts: list[int] = field(default_factory=lambda: [0, 0])  # tenured reads kept, and judged (`check_reads`)
    # (surface, intent, outcome, error, lease of another run) -> operations: what the quorum and coverage count
    hist: dict[tuple[Any, ...], int] = field(default_factory=dict)
    # run -> one byte per epoch: 1 granted, 2 released (the quorum's takeovers)
    epochs: dict[str, bytearray] = field(default_factory=dict)

    def evidence(self, item: Any) -> Evidence:
        return evidence(item)

    def tenures_changed(self) -> None:
        """Forget the per-run caches built from the tenures (`next_grant`, `stale_at`): a fold, merge or
        retirement changed them."""
        self._grant_cache.clear()
        self._stale_cache.clear()

    def next_grant(self, run: str, epoch: int, grant_inv: int) -> float:
        """`_next_grant`, moved earlier by the cross-host clock slack (`clock_ns`)."""
        return self._next_grant(run, epoch, grant_inv) - self.clock_ns

    def stale_at(self, run: str, epoch: int) -> tuple[float, Any]:
        """`_stale_at`, moved later by the cross-host clock slack (`clock_ns`)."""
        when, proof = self._stale_at(run, epoch)
        return when + self.clock_ns, proof

    def _next_grant(self, run: str, epoch: int, grant_inv: int) -> float:
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

    def _stale_at(self, run: str, epoch: int) -> tuple[float, Any]:
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


def new_facts(snapshot: Any, *, lease_ttl_ms: int, runs: Iterable[str], cross_runs: Iterable[str] = ("xr",),
              status: str = "quorum", quorum: str = "", margin_ms: float | None = None,
              call_bound_s: float | None = None, quorum_target: dict[str, int] | None = None,
              workload: str = "runs", from_storm: bool = False, state_error: str | None = None,
              clock_error_ms: float = 0.0) -> Facts:
    """Empty `Facts` for a history to be folded in (`fold`, then `finish`).

    `snapshot` None: the final state could not be read (`state_error` says why); the history is still judged,
    without the checkers that diff it against the final state. `call_bound_s` is the call-returns bound (default
    20 x ttl, at least 2 s); `quorum_target` the thresholds the storm ran to, recounted from the history;
    `from_storm` that the history is a storm's run directory, whose nemesis.jsonl names every worker spawned.
    """
    from soak.clauses import default_call_bound_s

    clock_ns = int(2 * clock_error_ms * 1_000_000)
    margin_ns = (default_margin_ns(lease_ttl_ms) if margin_ms is None else int(margin_ms * 1_000_000)) + clock_ns
    facts = Facts(snapshot=snapshot, lease_ttl_ms=lease_ttl_ms, margin_ns=margin_ns, clock_ns=clock_ns,
                  runs=tuple(runs),
                  cross_runs=tuple(cross_runs), status=status, quorum=quorum,
                  call_bound_ns=int((call_bound_s or default_call_bound_s(lease_ttl_ms)) * 1e9),
                  quorum_target=dict(quorum_target or {}), workload=workload, from_storm=from_storm,
                  state_error=(state_error or "no final state was given") if snapshot is None else None)
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
    part = Facts(snapshot=facts.snapshot, lease_ttl_ms=facts.lease_ttl_ms, margin_ns=facts.margin_ns,
                 clock_ns=facts.clock_ns,
                 runs=facts.runs, cross_runs=facts.cross_runs, status=facts.status, quorum=facts.quorum,
                 index=facts.index, call_bound_ns=facts.call_bound_ns, workload=facts.workload)
    part.stats.update(operations=0, events=0, ok=0, fail=0, info=0, stalls=0)
    return part


def finish(facts: Facts) -> Facts:
    """Complete the statistics once every operation is folded in."""
    live = sum(1 for t in facts.tenures.values() if t.grants and _retired_grant(facts, t) is None)
    facts.stats["tenures"] = live + sum(res.granted for res in facts.retired.values())
    return facts


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


def _retired_grant(facts: Facts, t: _Tenure) -> tuple[str, Evidence] | None:
    """(grantee, evidence) of the grant of `t`'s epoch that retired before `t`'s own grants came, if any."""
    res = facts.retired.get(t.run)
    row = res.exact_row(t.epoch) if res is not None and t.epoch <= res.floor else None
    if row is None or row[0] < 0:
        return None
    ev = res.grant_ev(facts, t.run, t.epoch, row)
    return (facts.procs[row[4]] if row[4] >= 0 else ev.process), ev
