"""The report's host lanes for a storm across hosts (docs/cluster.md): per host its faults over time (pauses,
partitions from the store or the orchestrator, the kill), its throughput, and its clock offset bound. Nothing
here for a storm on one machine."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from soak.report.data import RunData

__all__ = ["host_rows", "hosts_png", "hosts_of"]

_SPAN = {"host-pause": ("#f0a030", "host paused (every worker)"), "host-partition": ("#7040c0", "cut off the store"),
         "host-partition-orchestrator": ("#30a0a0", "cut off the orchestrator")}


def _partition_kind(v: dict[str, Any]) -> str:
    return "host-partition" if v.get("from", "store") == "store" else "host-partition-orchestrator"


def hosts_of(data: RunData) -> dict[str, list[int]] | None:
    """host -> its worker slots, from the storm's `cluster` event; None for a storm on one machine."""
    for ev in data.events:
        if ev.process == "nemesis" and ev.kind == "cluster":
            return {h["host"]: list(h.get("slots") or ()) for h in (ev.value or {}).get("hosts", [])}
    return None


def _host_of_process(hosts: dict[str, list[int]]) -> Any:
    by_slot = {s: h for h, slots in hosts.items() for s in slots}

    def host(process: str) -> str | None:
        try:
            return by_slot.get(int(process[1:].split(".")[0]))
        except (ValueError, IndexError):
            return None
    return host


def _faults(data: RunData, hosts: dict[str, list[int]]) -> tuple[list[tuple[str, str, int, int]], list[tuple[str, str, int]]]:
    """(host, kind, start, end) spans and (host, kind, at) marks of the host-level nemesis."""
    spans, marks = [], []
    open_: dict[tuple[str, str], int] = {}
    for ev in data.events:
        if ev.process != "nemesis":
            continue
        v = ev.value or {}
        host = v.get("host")
        if host not in hosts:
            continue
        if ev.kind == "host-pause" and "ms" in v:
            spans.append((host, ev.kind, ev.time, ev.time + int(v["ms"] * 1e6)))
        elif ev.kind == "host-partition":
            open_[host, _partition_kind(v)] = ev.time
        elif ev.kind == "host-heal" and (host, _partition_kind(v)) in open_:
            spans.append((host, _partition_kind(v), open_.pop((host, _partition_kind(v))), ev.time))
        elif ev.kind in ("host-kill", "host-lost"):
            marks.append((host, ev.kind, ev.time))
    spans.extend((h, kind, t, data.t1) for (h, kind), t in open_.items())
    return spans, marks


def host_rows(data: RunData) -> list[dict[str, Any]]:
    """Per host: slots, operations, operations per second, clock offset and bound, its partitions by what they cut
    it off, whether it was lost."""
    hosts = hosts_of(data)
    if hosts is None:
        return []
    host = _host_of_process(hosts)
    ops = Counter(host(op.process) for op in data.ops)
    running_s = max((data.t1 - data.t0) / 1e9, 1e-9)
    try:
        clocks = json.loads((data.run_dir / "clocks.json").read_text()).get("hosts", {})
    except (OSError, ValueError):
        clocks = {}
    lost = {(ev.value or {}).get("host"): (ev.value or {}).get("why") for ev in data.events
            if ev.process == "nemesis" and ev.kind == "host-lost"}
    cuts: dict[str, Counter] = defaultdict(Counter)
    for ev in data.events:
        if ev.process == "nemesis" and ev.kind == "host-partition":
            cuts[(ev.value or {}).get("host")][(ev.value or {}).get("from", "store")] += 1
    rows = []
    for name, slots in hosts.items():
        c = clocks.get(name, {})
        rows.append({"host": name, "slots": " ".join(map(str, slots)), "operations": ops.get(name, 0),
                     "ops_per_s": round(ops.get(name, 0) / running_s, 1),
                     "offset_ms": round(c["offset_ms"], 3) if "offset_ms" in c else "",
                     "bound_ms": round(c["error_ms"], 3) if "error_ms" in c else "",
                     "partitions": ", ".join(f"{n} from the {k}" for k, n in sorted(cuts[name].items())),
                     "lost": lost.get(name) or ""})
    return rows


def hosts_png(data: RunData) -> bytes | None:
    """Host lanes: the host-level faults over time, and each host's completed operations per second."""
    hosts = hosts_of(data)
    if hosts is None:
        return None
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from soak.report.plots import _png, plt

    names = list(hosts)
    lane = {h: i for i, h in enumerate(names)}
    fig, (ax, rx) = plt.subplots(2, 1, figsize=(12, 1.2 + 0.5 * len(names) + 2.4), sharex=True,
                                 gridspec_kw={"height_ratios": [0.5 * len(names) + 0.6, 2.4]})
    spans, marks = _faults(data, hosts)
    for h, kind, a, b in spans:
        colour = _SPAN[kind][0]
        ax.barh(lane[h], max(data.seconds(b) - data.seconds(a), 0.01), left=data.seconds(a), height=0.6,
                color=colour, alpha=0.7)
    for h, kind, at in marks:
        ax.plot([data.seconds(at)], [lane[h]], marker="X" if kind == "host-kill" else "|", color="#b00020",
                markersize=11, linestyle="none")
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.legend(handles=[*(Patch(color=c, alpha=0.7, label=label) for c, label in _SPAN.values()),
                       Line2D([], [], marker="X", color="#b00020", linestyle="none", label="host killed")],
              loc="upper right", fontsize=7)
    ax.set_title("hosts: faults over time")
    host = _host_of_process(hosts)
    per: dict[str, Counter] = defaultdict(Counter)
    for op in data.ops:
        if op.complete_ns is not None:
            per[host(op.process)][int(data.seconds(op.complete_ns))] += 1
    for h in names:
        xs = sorted(per[h])
        rx.plot(xs, [per[h][x] for x in xs], label=h, drawstyle="steps-post")
    rx.set_ylabel("operations / s")
    rx.set_xlabel("seconds since the storm started")
    rx.legend(fontsize=7, loc="upper right")
    return _png(fig)
