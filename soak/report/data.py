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

__all__ = ["Mark", "RunData", "Section", "Span", "Tenure", "Timeline", "load_run_data"]

#: the storm's own measurements in a run directory
STORM_FILE = "storm.json"


@dataclass(slots=True)
class Tenure:
    """One granted tenure as the history shows it: from grant to release, loss or last use.

    `run` is the key held (a run, a task), `process` who held it (a worker process, a claim's `node/agent`),
    `group` what the workload's own timeline colours it by (a claim's node; empty for the per-worker timeline)."""

    run: str
    epoch: int
    process: str
    start_ns: int
    end_ns: int
    ended: str  # released | recovered | superseded | open
    group: str = ""


@dataclass(frozen=True, slots=True)
class Mark:
    """A moment a workload's timeline marks on one lane; `kind` names its style in `Timeline.styles`."""

    lane: str
    at_ns: int
    kind: str
    text: str = ""


@dataclass(frozen=True, slots=True)
class Span:
    """A stretch of time a workload's timeline shades on one strip lane (a pause, an offline reading)."""

    lane: str
    start_ns: int
    end_ns: int
    kind: str
    text: str = ""


@dataclass(frozen=True, slots=True)
class Section:
    """A table a workload adds to the report, under its own heading (every cell is escaped)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class Timeline:
    """A workload's own timeline, drawn instead of the per-worker one: its tenures (`RunData.tenures`) as bars on
    key lanes coloured by `Tenure.group`, marks on those lanes, and a strip panel with a lane per `strips` entry
    holding spans and marks. `styles` maps a mark's or span's kind to how it is drawn and named: `label`, `color`,
    and `marker` and `annotate` (a mark: write its text beside it) or `height`/`alpha` (a span)."""

    title: str
    lanes: tuple[str, ...]
    strips: tuple[str, ...]
    marks: tuple[Mark, ...]
    spans: tuple[Span, ...]
    styles: dict[str, dict[str, Any]]
    group_title: str = "group"
    strip_title: str = ""
    sections: tuple[Section, ...] = ()


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
    #: the storm's own measurements (`storm.json`; empty when the run has none)
    storm: dict[str, Any] = field(default_factory=dict)
    #: the workload's own timeline (`Workload.report_timeline`), or None: the per-worker timeline
    timeline: Timeline | None = None

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


def load_run_data(run_dir: str | os.PathLike[str]) -> RunData:
    run_dir = Path(run_dir)
    info = load_run_info(run_dir)
    verdict_path = run_dir / VERDICT_FILE
    verdict = json.loads(verdict_path.read_text()) if verdict_path.is_file() else None
    storm_path = run_dir / STORM_FILE
    storm = json.loads(storm_path.read_text()) if storm_path.is_file() else {}
    ops: list[Operation] = []
    events: list[Record] = []
    workload = _workload(info.workload)
    make_lease = getattr(workload, "make_lease", None)
    for item in operations(history_paths(run_dir), make_lease):
        (events if isinstance(item, Record) else ops).append(item)
    stamps = [op.invoke_ns for op in ops] + [e.time for e in events]
    ends = [op.complete_ns for op in ops if op.complete_ns is not None] + [e.time for e in events]
    t0 = min(stamps) if stamps else info.started_ns
    t1 = max(ends) if ends else max(t0, info.ended_ns)
    ops.sort(key=lambda o: o.invoke_ns)
    events.sort(key=lambda e: e.time)
    processes = sorted({op.process for op in ops}, key=_process_key)
    surfaces = tuple(workload.surfaces) if workload is not None else tuple(sorted({op.f for op in ops} - {"open"}))
    data = RunData(run_dir, info, verdict, t0, t1, ops, events, [], processes, surfaces, storm)
    tenures = getattr(workload, "report_tenures", None)  # optional hooks: without them, no tenures
    if tenures is not None:
        data.tenures = tenures(ops, t1)
    timeline = getattr(workload, "report_timeline", None)
    if timeline is not None:
        data.timeline = timeline(data)
    return data


def _workload(name: str) -> Any:
    """The run's workload, or None for one this soak cannot load (the report then reads the history alone)."""
    from soak.errors import ScenarioError
    from soak.workloads import get_workload

    try:
        return get_workload(name)
    except ScenarioError:
        return None
