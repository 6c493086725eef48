"""What every workload's facts hold for the generic checks (`soak.check.judge`, `soak.check.liveness`).

A workload's fold fills its own facts, a subclass of `BaseFacts`, with what its clause checkers need, and these
generic fields besides: how the storm ended and the quorum it ran to, the call-returns bound, the storm's own
records (nemesis events; workers' start, crash and store-exit events) and the operations that completed past the
bound or never completed. `fold_generic` is the part of a fold every workload shares: a workload whose checkers
look at its operations one by one (`SimplePlan`) needs nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.check.verdict import Evidence
from soak.history import COMPLETE_NS, INVOKE_NS, Operation, Record

__all__ = ["BaseFacts", "STORM_EVENTS", "SimpleFacts", "fold_generic", "operation_evidence", "simple_plan"]

#: Events a fold keeps besides the nemesis's (`BaseFacts.events`): how a worker started and ended.
STORM_EVENTS = frozenset(("start", "crash", "store-exit", "reboot"))
_NEVER = float("inf")


@dataclass(slots=True, kw_only=True)
class BaseFacts:
    """The generic part of a workload's facts."""

    lease_ttl_ms: int = 0
    #: how the storm ended (`quorum`, `timeout`, ...) and its quorum as run.json says it
    status: str = "quorum"
    quorum: str = ""
    #: the call-returns bound; the quorum the storm ran to (recounted from the history); the workload's name;
    #: whether the history must come with the storm's own records (a run directory's); why the final state is
    #: missing (None: it was read)
    call_bound_ns: int = 0
    quorum_target: dict[str, int] = field(default_factory=dict)
    workload: str = "runs"
    from_storm: bool = False
    state_error: str | None = None
    #: the storm's records (nemesis events; workers' start, crash and store-exit events), in file order
    events: list[Any] = field(default_factory=list)
    #: operations that completed past the bound or never completed: liveness candidates
    slow: list[Any] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    #: what settling judged early, per checker: violations, or why it raised (`soak.check.judge.run_checkers`)
    early: dict[str, list[Any]] = field(default_factory=dict)
    early_errors: dict[str, str] = field(default_factory=dict)
    #: every operation invoked before this is folded (bounded memory)
    settled: float = -_NEVER

    @property
    def ttl_ns(self) -> int:
        return self.lease_ttl_ms * 1_000_000

    def evidence(self, item: Any) -> Evidence:
        """The evidence of one of `slow`'s items (a workload keeping them compact converts them back)."""
        return item if isinstance(item, Evidence) else operation_evidence(item)


def operation_evidence(op: tuple[Any, ...] | Operation) -> Evidence:
    """Evidence of an operation tuple (`soak.history.operation_tuples`) or `Operation`, without a workload's
    reading of its lease (epoch and counter are taken where the lease or the arguments say them)."""
    if type(op) is not tuple:
        op = (op.process, op.index, op.f, op.run, op.lease, op.intent, op.args, op.outcome, op.result, op.error,
              op.message, op.invoke_ns, op.complete_ns)
    lease = op[4]
    epoch = getattr(lease, "epoch", None)
    return Evidence(op[0], op[1], op[2], op[3], epoch, op[6].get("c") if isinstance(op[6], dict) else None, op[7],
                    op[INVOKE_NS], op[COMPLETE_NS], f"{op[0]}#{op[1]}", op[9])


def fold_generic(facts: BaseFacts, items: Iterable[Any], until: float = _NEVER,
                 each: Callable[[tuple[Any, ...]], None] | None = None) -> tuple[Any, ...] | None:
    """Fold what every workload's facts hold: counts, the storm's records, the liveness candidates; `each` gets
    every operation tuple. Stops before the first operation invoked at `until` or later and returns it."""
    stats = facts.stats
    bound = facts.call_bound_ns or _NEVER
    for item in items:
        if type(item) is not tuple:
            if type(item) is not Operation:
                stats["events"] = stats.get("events", 0) + 1
                if isinstance(item, Record):
                    if item.kind == "stall":
                        stats["stalls"] = stats.get("stalls", 0) + 1
                    elif item.process == "nemesis" or item.kind in STORM_EVENTS:
                        facts.events.append(item)
                continue
            item = (item.process, item.index, item.f, item.run, item.lease, item.intent, item.args, item.outcome,
                    item.result, item.error, item.message, item.invoke_ns, item.complete_ns)
        if item[INVOKE_NS] >= until:
            return item
        stats["operations"] = stats.get("operations", 0) + 1
        stats[item[7]] = stats.get(item[7], 0) + 1
        complete = item[COMPLETE_NS]
        if complete is None or complete - item[INVOKE_NS] > bound:
            facts.slow.append(item)
        if each is not None:
            each(item)
    return None


@dataclass(slots=True, kw_only=True)
class SimpleFacts(BaseFacts):
    """The facts of a `simple_plan`: the generic part, every operation (tuples, in file order) and the final
    state as the workload saved it."""

    state: Any = None
    ops: list[tuple[Any, ...]] = field(default_factory=list)


def simple_plan(checkers: tuple[tuple[str, Any], ...], load_state: Callable[[Path], Any],
                undecidable: Callable[[Any], list[str]] = lambda facts: [],
                make_lease: Callable[..., Any] | None = None) -> Any:
    """A `CheckPlan` for a small workload: every operation is kept (`SimpleFacts.ops`) and the checkers read them
    at the end, in one process. Enough for a storm of thousands of operations, not for a nightly one."""
    from soak.check.judge import CheckPlan

    def new_facts(state: Any, info: Any = None, *, call_bound_s: float | None = None, **settings: Any) -> SimpleFacts:
        from soak.clauses import default_call_bound_s

        ttl = settings.get("lease_ttl_ms", 0)
        facts = SimpleFacts(state=state, lease_ttl_ms=ttl, status=settings.get("status", "quorum"),
                            quorum=settings.get("quorum", ""),
                            call_bound_ns=int((call_bound_s or default_call_bound_s(ttl)) * 1e9),
                            quorum_target=dict(settings.get("quorum_target") or {}),
                            workload=settings.get("workload", ""), from_storm=settings.get("from_storm", False),
                            state_error=settings.get("state_error"))
        facts.stats.update(operations=0, events=0, ok=0, fail=0, info=0, stalls=0)
        return facts

    def fold(facts: SimpleFacts, items: Iterable[Any], until: float = _NEVER) -> Any:
        return fold_generic(facts, items, until, facts.ops.append)

    return CheckPlan(new_facts=new_facts, fold=fold, finish=lambda facts: facts, checkers=tuple(checkers),
                     load_state=load_state, undecidable=undecidable, make_lease=make_lease)


def host_partitions(events: list[Any]) -> dict[str, list[tuple[float, float]]]:
    """Worker -> the windows (history ns) in which the nemesis had cut its host off the store (`host-partition`
    to `host-heal` with `from` "store", a storm across hosts: soak.cluster.faults); a window never healed runs to
    the end. A partition from the orchestrator is no window: the host's workers reached the store meanwhile.

    A worker's host is the one its slot ran on, as the storm's `cluster` event names the slots of each host."""
    host_of_slot: dict[int, str] = {}
    slots: dict[str, int] = {}
    opened: dict[str, float] = {}
    windows: dict[str, list[tuple[float, float]]] = {}
    for ev in events:
        if getattr(ev, "process", None) != "nemesis":
            continue
        v = ev.value if isinstance(ev.value, dict) else {}
        if ev.kind == "cluster":
            for h in v.get("hosts") or ():
                for s in h.get("slots") or ():
                    host_of_slot[s] = h.get("host")
        elif ev.kind == "spawn" and isinstance(v.get("slot"), int):
            slots[v.get("target")] = v["slot"]
        elif v.get("from", "store") != "store":
            continue  # cut off the orchestrator: its workers still reached the store
        elif ev.kind == "host-partition":
            opened[v.get("host")] = ev.time
        elif ev.kind == "host-heal" and v.get("host") in opened:
            windows.setdefault(v["host"], []).append((opened.pop(v["host"]), ev.time))
    for host, start in opened.items():
        windows.setdefault(host, []).append((start, _NEVER))
    return {p: windows[host_of_slot[s]] for p, s in slots.items() if host_of_slot.get(s) in windows}


def in_partition(windows: dict[str, list[tuple[float, float]]], process: str, start: float, end: float | None,
                 slack_ns: int = 0) -> bool:
    """True where `process`'s host was cut off the store at some point of [start, end] (give or take `slack_ns`)."""
    hi = _NEVER if end is None else end
    return any(a - slack_ns <= hi and start <= b + slack_ns for a, b in windows.get(process, ()))
