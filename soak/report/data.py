"""What a report shows, extracted from a run directory in one pass over its histories."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.history import Operation, Record, operations
from soak.rundir import VERDICT_FILE, RunInfo, history_paths, load_run_info

__all__ = ["RunData", "Tenure", "load_run_data"]


@dataclass(slots=True)
class Tenure:
    """One granted tenure as the history shows it: from grant to release, loss or last use."""

    run: str
    epoch: int
    process: str
    start_ns: int
    end_ns: int
    ended: str  # released | superseded | open


@dataclass(slots=True)
class RunData:
    run_dir: Path
    info: RunInfo
    verdict: dict[str, Any] | None
    t0: int
    t1: int
    ops: list[Operation] = field(default_factory=list)
    events: list[Record] = field(default_factory=list)
    tenures: list[Tenure] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)
    #: the workload's surfaces, in its order (those seen in the history, for a workload this soak cannot load)
    surfaces: tuple[str, ...] = ()

    def seconds(self, ns: int) -> float:
        return (ns - self.t0) / 1e9

    def surface_counts(self) -> dict[str, Counter]:
        """Per surface, how many operations ended ok, fail and info."""
        out: dict[str, Counter] = defaultdict(Counter)
        for op in self.ops:
            out[op.f][op.outcome] += 1
        return dict(out)

    def latencies_ms(self) -> dict[str, list[float]]:
        """Per surface, the latency of every completed operation in milliseconds."""
        out: dict[str, list[float]] = defaultdict(list)
        for op in self.ops:
            if op.complete_ns is not None:
                out[op.f].append((op.complete_ns - op.invoke_ns) / 1e6)
        return dict(out)

    def per_worker(self) -> list[dict[str, Any]]:
        """Who did how much, and the worst wait each saw (SQLite writers can starve each other)."""
        rows: dict[str, dict[str, Any]] = {}
        for op in self.ops:
            row = rows.setdefault(op.process, {"process": op.process, "ok": 0, "fail": 0, "info": 0, "worst_ms": 0.0})
            row[op.outcome] += 1
            if op.complete_ns is not None:
                row["worst_ms"] = max(row["worst_ms"], (op.complete_ns - op.invoke_ns) / 1e6)
        return [rows[p] for p in self.processes if p in rows]


def _process_key(name: str) -> tuple:
    head = name.lstrip("w")
    parts = head.split(".")
    try:
        return (0, *(int(p) for p in parts))
    except ValueError:
        return (1, name)


def _build_tenures(ops: list[Operation], t1: int) -> list[Tenure]:
    grants: dict[tuple[str, int], Tenure] = {}
    for op in ops:
        if op.f == "acquire" and op.outcome == "ok" and "epoch" in op.result:
            key = (op.run, int(op.result["epoch"]))
            grants[key] = Tenure(op.run, key[1], op.process, op.complete_ns or op.invoke_ns, t1, "open")
    last_use: dict[tuple[str, int], int] = {}
    for op in ops:
        if op.lease is None:
            continue
        key = (op.lease.run_id, op.lease.epoch)
        if key not in grants:
            continue
        end = op.complete_ns or op.invoke_ns
        if op.f == "release" and op.outcome == "ok":
            grants[key].end_ns = end
            grants[key].ended = "released"
        elif op.intent != "stale":
            last_use[key] = max(last_use.get(key, 0), end)
    by_run: dict[str, list[Tenure]] = defaultdict(list)
    for t in grants.values():
        by_run[t.run].append(t)
    for tenures in by_run.values():
        tenures.sort(key=lambda t: t.epoch)
        for cur, nxt in zip(tenures, tenures[1:]):
            if cur.ended == "open":
                cur.end_ns = max(min(nxt.start_ns, t1), last_use.get((cur.run, cur.epoch), cur.start_ns))
                cur.ended = "superseded"
    return sorted(grants.values(), key=lambda t: t.start_ns)


def load_run_data(run_dir: str | os.PathLike[str]) -> RunData:
    run_dir = Path(run_dir)
    info = load_run_info(run_dir)
    verdict_path = run_dir / VERDICT_FILE
    verdict = json.loads(verdict_path.read_text()) if verdict_path.is_file() else None
    ops: list[Operation] = []
    events: list[Record] = []
    from soak.workloads import get_workload

    make_lease = getattr(get_workload(info.workload), "make_lease", None)
    for item in operations(history_paths(run_dir), make_lease):
        (events if isinstance(item, Record) else ops).append(item)
    stamps = [op.invoke_ns for op in ops] + [e.time for e in events]
    ends = [op.complete_ns for op in ops if op.complete_ns is not None] + [e.time for e in events]
    t0 = min(stamps) if stamps else info.started_ns
    t1 = max(ends) if ends else max(t0, info.ended_ns)
    ops.sort(key=lambda o: o.invoke_ns)
    events.sort(key=lambda e: e.time)
    processes = sorted({op.process for op in ops}, key=_process_key)
    data = RunData(run_dir, info, verdict, t0, t1, ops, events, [], processes, _surfaces(info.workload, ops))
    data.tenures = _build_tenures(ops, t1)
    return data


def _surfaces(workload: str, ops: list[Operation]) -> tuple[str, ...]:
    from soak.errors import ScenarioError
    from soak.workloads import get_workload

    try:
        return tuple(get_workload(workload).surfaces)
    except ScenarioError:
        return tuple(sorted({op.f for op in ops} - {"open"}))
