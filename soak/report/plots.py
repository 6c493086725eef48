"""The report's images (matplotlib, Agg backend): each function returns PNG bytes."""

from __future__ import annotations

import io
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from soak.report.data import RunData, Timeline  # noqa: E402

__all__ = ["activity_png", "latency_png", "timeline_png", "workers_png", "violation_times"]

def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def violation_times(data: RunData) -> list[tuple[float, str]]:
    """(seconds, clause) for every piece of violation evidence with a time."""
    out: list[tuple[float, str]] = []
    for v in (data.verdict or {}).get("violations", []):
        for ev in v.get("evidence", []):
            ns = ev.get("invoke_ns") or ev.get("complete_ns")
            if ns:
                out.append((data.seconds(int(ns)), v.get("clause", "?")))
    return out


def timeline_png(data: RunData) -> bytes:
    """The workload's own timeline where it draws one (`RunData.timeline`), else the per-worker timeline."""
    if data.timeline is not None:
        return _lanes_png(data, data.timeline)
    return _workers_timeline_png(data)


_ENDED_HATCH = {"superseded": "//", "recovered": "xx"}


def _lanes_png(data: RunData, tl: Timeline) -> bytes:
    """Tenures on key lanes (coloured by group) with marks, over a strip panel of spans and marks."""
    lanes = {k: i for i, k in enumerate(tl.lanes)}
    for t in data.tenures:
        lanes.setdefault(t.run, len(lanes))
    strips = {k: i for i, k in enumerate(tl.strips)}
    groups = sorted({t.group for t in data.tenures})
    cmap = plt.get_cmap("tab10")
    colour = {g: cmap(i % 10) for i, g in enumerate(groups)}
    top_h, bottom_h = max(2.0, 0.34 * len(lanes) + 1.2), max(1.0, 0.32 * len(strips) + 0.6)
    fig, (ax, sx) = plt.subplots(2, 1, figsize=(12, top_h + bottom_h + 0.8), sharex=True,
                                 gridspec_kw={"height_ratios": [top_h, bottom_h]})
    span = max(data.seconds(data.t1), 1e-3)
    for t in data.tenures:
        x0, x1 = data.seconds(t.start_ns), data.seconds(t.end_ns)
        y = lanes[t.run]
        ax.barh(y, max(x1 - x0, 0.002), left=x0, height=0.6, color=colour[t.group], hatch=_ENDED_HATCH.get(t.ended),
                edgecolor="#555", linewidth=0.2, alpha=0.55 if t.ended == "open" else 0.9)
        if x1 - x0 > span / 25:
            ax.text(x0 + 0.004 * span, y, f"{t.process} e{t.epoch}", va="center", fontsize=6, clip_on=True)
    handles: list = [Patch(color=colour[g], label=f"{tl.group_title} {g}") for g in groups[:10]]
    for panel, rows in ((ax, lanes), (sx, strips)):
        for kind in sorted({m.kind for m in tl.marks if m.lane in rows}):
            style = tl.styles.get(kind, {})
            ms = [m for m in tl.marks if m.kind == kind and m.lane in rows]
            line, = panel.plot([data.seconds(m.at_ns) for m in ms], [rows[m.lane] for m in ms], linestyle="none",
                               marker=style.get("marker", "o"), color=style.get("color", "black"), markersize=8,
                               zorder=4, label=style.get("label", kind))
            handles.append(line)
            if style.get("annotate"):
                for m in ms:
                    panel.annotate(m.text, (data.seconds(m.at_ns), rows[m.lane]), xytext=(0, 6),
                                   textcoords="offset points", ha="center", fontsize=6, color=style.get("color"),
                                   bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.7})
    for kind in sorted({s.kind for s in tl.spans}):
        style = tl.styles.get(kind, {})
        ss = [s for s in tl.spans if s.kind == kind and s.lane in strips]
        for s in ss:
            x0 = data.seconds(s.start_ns)
            sx.barh(strips[s.lane], max(data.seconds(s.end_ns) - x0, 0.002), left=x0,
                    height=style.get("height", 0.6), color=style.get("color", "grey"), alpha=style.get("alpha", 0.4))
        if ss:
            handles.append(Patch(color=style.get("color", "grey"), alpha=style.get("alpha", 0.4),
                                 label=style.get("label", kind)))
    for x, _clause in violation_times(data)[:50]:
        for panel in (ax, sx):
            panel.axvline(x, color="red", linewidth=0.8, alpha=0.7)
    ax.set_yticks(range(len(lanes)), list(lanes))
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    sx.set_yticks(range(len(strips)), list(strips))
    sx.set_ylim(len(strips) - 0.5, -0.5)
    if tl.strip_title:
        sx.set_ylabel(tl.strip_title)
    sx.set_xlabel("seconds since the first operation")
    ax.set_title(tl.title, fontsize=9)
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=7,
                   bbox_to_anchor=(0.5, -0.02 - 0.025 * (len(handles) // 6)))
    return _png(fig)


def _workers_timeline_png(data: RunData) -> bytes:
    """Tenures per worker (coloured by run), stalls, pauses, kills, stale probes, violations."""
    rows = {p: i for i, p in enumerate(data.processes)}
    runs = sorted({t.run for t in data.tenures})
    cmap = plt.get_cmap("tab10")
    colour = {r: cmap(i % 10) for i, r in enumerate(runs)}
    height = max(3.0, 0.32 * len(rows) + 1.5)
    fig, ax = plt.subplots(figsize=(12, height))
    for t in data.tenures:
        if t.process not in rows:
            continue
        x0, x1 = data.seconds(t.start_ns), data.seconds(t.end_ns)
        ax.barh(rows[t.process], max(x1 - x0, 0.002), left=x0, height=0.6, color=colour[t.run],
                hatch="//" if t.ended == "superseded" else None, edgecolor="black", linewidth=0.2)
    pause_start: dict[str, float] = {}
    last_op: dict[str, float] = {}
    for op in data.ops:
        last_op[op.process] = max(last_op.get(op.process, 0.0), data.seconds(op.complete_ns or op.invoke_ns))
    for e in data.events:
        target = e.value.get("target") or e.process
        y = rows.get(target)
        x = data.seconds(e.time)
        if e.kind == "stall" and y is not None:
            ax.barh(y, e.value.get("ms", 0) / 1000.0, left=x, height=0.25, color="orange", alpha=0.8)
        elif e.kind == "pause":
            pause_start[target] = x
        elif e.kind == "resume" and target in pause_start and y is not None:
            x0 = pause_start.pop(target)
            ax.barh(y, x - x0, left=x0, height=0.9, color="grey", alpha=0.35)
        elif e.kind in ("kill", "timeout-kill") and y is not None:
            ax.plot([x], [y], marker="X", color="red", markersize=9)
        elif e.kind == "clock-skew" and y is not None:  # the incarnation's whole life runs on the shifted clock
            ax.barh(y, max(last_op.get(target, x) - x, 0.002), left=x, height=0.9, color="deepskyblue", alpha=0.15)
        elif e.kind == "net-stall" and y is not None:
            ax.barh(y, e.value.get("ms", 0) / 1000.0, left=x, height=0.25, color="purple", alpha=0.6)
        elif e.kind == "net-cut" and y is not None:
            at = data.seconds(e.value["at_ns"]) if isinstance(e.value.get("at_ns"), int) else x
            ax.plot([at], [y], marker="v", color="purple", markersize=7)
    stale_ok, stale_refused = defaultdict(list), defaultdict(list)
    for op in data.ops:
        if op.intent in ("stale", "cross") and op.lease is not None and op.process in rows:  # probes, not reads
            bucket = stale_ok if op.outcome == "ok" else stale_refused
            bucket[op.process].append(data.seconds(op.invoke_ns))
    for proc, xs in stale_refused.items():
        ax.plot(xs, [rows[proc]] * len(xs), linestyle="none", marker="|", color="darkgreen", markersize=12,
                markeredgewidth=1.5, zorder=3)
    for proc, xs in stale_ok.items():
        ax.plot(xs, [rows[proc]] * len(xs), linestyle="none", marker="*", color="red", markersize=11, zorder=4)
    for x, clause in violation_times(data)[:50]:
        ax.axvline(x, color="red", linewidth=0.8, alpha=0.7)
    ax.set_yticks(range(len(rows)), list(rows))
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first operation")
    ax.set_title("Tenures per worker (hatched: superseded), stalls (orange), pauses (grey), kills (X), "
                 "clock skew (blue shade),\nnetwork stalls (purple bar) and cuts (purple v), "
                 "probes of a lease the worker believed dead (| refused, * accepted: legal while no successor "
                 "was granted), violations (red lines)", fontsize=9)
    handles = [Patch(color=colour[r], label=r) for r in runs[:10]]
    if handles:
        ax.legend(handles=handles, title="run", loc="upper right", fontsize=7)
    return _png(fig)


def activity_png(data: RunData, bins: int = 60) -> bytes:
    """Accepted operations per second over time, per surface."""
    span = max(data.seconds(data.t1), 1e-3)
    width = span / bins
    series: dict[str, list[int]] = {s: [0] * bins for s in data.surfaces}
    for op in data.ops:
        if op.outcome == "ok" and op.f in series and op.complete_ns is not None:
            i = min(int(data.seconds(op.complete_ns) / width), bins - 1)
            series[op.f][max(i, 0)] += 1
    fig, ax = plt.subplots(figsize=(12, 3.6))
    xs = [(i + 0.5) * width for i in range(bins)]
    for surface, counts in series.items():
        if any(counts):
            ax.plot(xs, [c / width for c in counts], label=surface, linewidth=1)
    ax.set_xlabel("seconds")
    ax.set_ylabel("accepted / s")
    ax.set_title("Accepted operations per second, per surface")
    ax.legend(fontsize=7, ncol=4)
    return _png(fig)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    i = min(int(q * (len(sorted_values) - 1) + 0.5), len(sorted_values) - 1)
    return sorted_values[i]


def latency_table(data: RunData) -> list[dict[str, float | str | int]]:
    rows = []
    for surface, values in sorted(data.latencies_ms().items()):
        values.sort()
        rows.append({"surface": surface, "n": len(values), "p50": _percentile(values, 0.5),
                     "p90": _percentile(values, 0.9), "p99": _percentile(values, 0.99), "max": values[-1]})
    return rows


def latency_png(data: RunData) -> bytes:
    rows = latency_table(data)
    fig, ax = plt.subplots(figsize=(12, 3.6))
    names = [r["surface"] for r in rows]
    xs = range(len(rows))
    for k, (q, alpha) in enumerate((("p50", 1.0), ("p90", 0.7), ("p99", 0.45))):
        ax.bar([x + (k - 1) * 0.27 for x in xs], [r[q] for r in rows], width=0.27, alpha=alpha, label=q)
    ax.set_xticks(list(xs), names, fontsize=8)
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.set_title("Latency percentiles per surface (completed calls)")
    ax.legend(fontsize=7)
    return _png(fig)


def workers_png(data: RunData) -> bytes:
    rows = data.per_worker()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, max(2.5, 0.25 * len(rows) + 1)))
    names = [r["process"] for r in rows]
    a1.barh(names, [r["ok"] for r in rows], color="tab:green", label="ok")
    a1.barh(names, [r["fail"] for r in rows], left=[r["ok"] for r in rows], color="tab:orange", label="refused")
    a1.invert_yaxis()
    a1.set_title("Operations per worker")
    a1.legend(fontsize=7)
    a2.barh(names, [r["worst_ms"] for r in rows], color="tab:red")
    a2.invert_yaxis()
    a2.set_title("Worst wait per worker (ms)")
    return _png(fig)
