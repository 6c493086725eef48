"""The runs workload's checker: its history plus its final state in, a `Verdict` out (pure: no I/O, no clock).

The flow, one module per step:

- `ops`: operation tuples as the history reader yields them, their compact form and their evidence;
- `summaries`: what is kept per tenure, run, blob ref and object, and what a retired tenure leaves behind;
- `facts`: `Facts`, all the checkers read;
- `fold`: one streaming pass over the operations into the facts, and `merge` of two partial folds;
- `settle`: after each time slice, judge and drop what can no longer change (bounded memory);
- the clause checkers (`checkers` says which module checks which clause): `leases`, `fencing`, `state`,
  `reads`, `boot`;
- judging is generic (`soak.check.judge`): the checkers composed, made safe, merged false > unknown > true.

Ordering without a replay: every mutation carries its lease epoch and a per-tenure counter `c`, so the serial
order of accepted writes is the order of their keys `(epoch, c)`. The expected final state is then decided key by
key (the last accepted write per run, meta and ref wins; a delete explains every earlier write it removed), which
is what a replay on `soak.oracle.Oracle` would give, without sorting or holding the history. Real time comes from
the history's own monotonic timestamps: a tenure is stale from the earliest completion of an accepted acquire of
a later epoch, or of its own release. The workers' `intent` is never consulted for a judgement. Reads are evidence
too: a read made while its tenure was surely live must see its own last write, or else the serially-last write of
the epochs below. Failed store boots and acquires refused long after the newest tenure surely ended are judged
from the history as well.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from soak.check.judge import CheckPlan, Checker, Runner, run_checkers
from soak.check.judge import judge as _judge
from soak.check.verdict import Verdict
from soak.history import Operation
from soak.workloads.runs.check.boot import check_boot
from soak.workloads.runs.check.checkers import CHECKERS, WHOLE_HISTORY
from soak.workloads.runs.check.facts import Facts, finish, new_facts, new_part
from soak.workloads.runs.check.leases import check_grants
from soak.workloads.runs.check.folding import FoldOverlap, Unordered, fold, merge, merge_objects, merge_reads, merge_tenures
from soak.workloads.runs.check.ops import default_margin_ns, evidence
from soak.workloads.runs.check.settling import settle
from soak.workloads.runs.check.state import state_gaps

__all__ = [
    "CHECKERS", "Facts", "FoldOverlap", "PLAN", "Unordered", "WHOLE_HISTORY", "check", "default_margin_ns",
    "evidence", "finish", "fold", "judge", "merge", "merge_objects", "merge_reads", "merge_tenures", "new_facts",
    "new_part", "scan", "settle",
]


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
    clock_error_ms: float = 0.0,
) -> Facts:
    """Fold the history into `Facts` in one pass; events (non-operations) are counted and kept where the generic
    checks need them. `ops` holds `Operation`s or their tuples (`soak.history.operation_tuples`), and events."""
    facts = new_facts(snapshot, lease_ttl_ms=lease_ttl_ms, runs=runs, cross_runs=cross_runs, status=status,
                      quorum=quorum, margin_ms=margin_ms, clock_error_ms=clock_error_ms)
    fold(facts, ops)
    return finish(facts)


def check(ops: Iterable[Operation | Any], snapshot: Any, *, checkers: Sequence[tuple[str, Checker]] | None = None,
          **settings: Any) -> Verdict:
    """Check a history (operations, events allowed) against the final state; pure, one pass.

    `settings` are `scan`'s: `lease_ttl_ms`, `runs` (the runs workers write legitimately), `cross_runs` (those
    nobody may write), `status` (the storm's ending: anything but `quorum` is inconclusive), `quorum`,
    `margin_ms` (the slack for "surely live", default `default_margin_ns`), `clock_error_ms` (a storm across hosts:
    the largest error of a host's clock offset; twice it is slack in every real-time rule). `checkers` default to the runs
    checkers and the generic ones.
    """
    return judge(lambda: scan(ops, snapshot, **settings), checkers)


def judge(build: Any, checkers: Sequence[tuple[str, Checker]] | None = None, runner: Runner = run_checkers) -> Verdict:
    """`soak.check.judge.judge` by this workload's plan (`checkers` default to its own and the generic ones)."""
    return _judge(build, PLAN, checkers, runner)


def _plan_facts(state: Any, info: Any = None, **settings: Any) -> Facts:
    """The plan's `new_facts`: the runs a storm's workers wrote come from its `RunInfo`."""
    if info is not None:
        settings.setdefault("runs", [*info.runs, *info.side_runs])
    return new_facts(state, **settings)


def _load_state(run_dir: Any) -> Any:
    from soak.workloads.runs.state import load_snapshot

    return load_snapshot(run_dir)


def _proven(facts: Facts) -> list[Any]:
    """What settling judged, and what no later operation can undo: operations the fold proved wrong on their own
    (a lease used on another run, a failed boot) and, of tenures still live, an epoch granted twice or below an
    earlier grant (an epoch-resetting store's tenures never retire)."""
    return [*facts.scan_violations, *check_boot(facts), *check_grants(facts, overlap=False),
            *(v for vs in facts.early.values() for v in vs)]


#: How the runs workload's histories are checked (`soak.check.check_run`, `soak.check.parallel`).
PLAN = CheckPlan(
    new_facts=_plan_facts, fold=fold, finish=finish, checkers=CHECKERS, load_state=_load_state,
    undecidable=state_gaps, whole_history=WHOLE_HISTORY, new_part=new_part, merge=merge, settle=settle,
    # a part as the child sends it: without the final state and its index (the parent has them)
    ship=lambda part: dataclasses.replace(part, snapshot=None, index={}),
    unordered=Unordered, overlap=FoldOverlap,
    proven=lambda facts: _proven(facts),
)
