"""What the report draws of a claims storm: claim tenures per task, recoveries and returning owners' aborts on
them, and per node its kills, pauses and the health other nodes read of it; with tables of the recoveries, the
aborts and the storm's counters."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from soak.workloads.claims.worker import node_of

__all__ = ["report_tenures", "report_timeline"]

#: The counters the report shows, in order, with what each counts.
_COUNTS: tuple[tuple[str, str], ...] = (
    ("claims_won", "claims that made the claimant the owner (a new epoch)"),
    ("conflicts", "claims refused with CheckoutConflictError naming a holder"),
    ("recoveries", "recoveries of an unreachable owner's task accepted"),
    ("aborts", "a returning owner's heartbeat or progress write refused: it stopped writing"),
    ("splits_repaired", "task rows a reconcile repaired (a split write found and fixed)"),
    ("renewals", "claims and heartbeats of the current owner accepted"),
    ("progress", "progress writes accepted"),
    ("stale_progress", "progress writes of a superseded owner refused"),
    ("releases", "releases accepted"),
    ("pauses", "nodes paused by the nemesis"),
    ("kills", "nodes killed by the nemesis"),
)

_STYLES: dict[str, dict[str, Any]] = {
    "recovery": {"marker": "v", "color": "purple", "label": "recovery: who took which epoch", "annotate": True},
    "abort": {"marker": "x", "color": "black", "label": "returning owner's abort (heartbeat/progress refused)"},
    "kill": {"marker": "X", "color": "red", "label": "node killed"},
    "paused": {"color": "grey", "alpha": 0.4, "height": 0.85, "label": "node paused"},
    "offline": {"color": "tab:red", "alpha": 0.3, "height": 0.4, "label": "read offline by another node"},
    "error": {"color": "magenta", "alpha": 0.3, "height": 0.4, "label": "read in error by another node"},
}


_WORKER = re.compile(r"w\d+(\.\d+)?$")


def _at(op: Any) -> int:
    return op.complete_ns if op.complete_ns is not None else op.invoke_ns


def report_tenures(ops: list[Any], t1: int) -> list[Any]:
    """One tenure per epoch of a task: from the accepted claim that granted it (or an unknown claim of its holder that
    a later accepted call under it proves) to its release, its recovery, the grant of the next epoch (or its own
    last accepted use, if that came later) or the end of the history `t1`.
    The holder is the claim's `node/agent`, its group the node."""
    from soak.report.data import Tenure

    tenures: dict[tuple[str, int], Tenure] = {}
    for op in ops:
        if op.f != "claim" or op.outcome != "ok":
            continue
        claim = op.result.get("claim") or {}
        owner, epoch = claim.get("owner"), claim.get("epoch")
        if not owner or epoch is None:
            continue
        key, at = (op.run, int(epoch)), _at(op)
        t = tenures.get(key)
        if t is None:
            tenures[key] = Tenure(op.run, int(epoch), f"{owner[0]}/{owner[1]}", at, t1, "open", str(owner[0]))
        elif at < t.start_ns:
            t.start_ns = at
    # a claim whose answer is unknown (its caller was killed or timed out) may still have granted a tenure: one
    # that a later accepted call under it proves (a recovery of it, say) starts at that claim's invoke
    unknown: dict[tuple[str, str], list[int]] = defaultdict(list)
    for op in ops:
        if op.f == "claim" and op.outcome == "info" and op.lease is None:
            unknown[(op.run, f"{op.args.get('node')}/{op.args.get('agent')}")].append(op.invoke_ns)
    proved: set[tuple[str, int]] = set()
    last_use: dict[tuple[str, int], int] = {}
    for op in ops:
        if op.outcome != "ok" or op.lease is None:
            continue
        key = (op.lease.key, int(op.lease.epoch))
        t = tenures.get(key)
        if t is None:
            holder = f"{op.lease.node}/{op.lease.agent}"
            # the holder's latest unknown claim of the task invoked before this call
            start = max((at for at in unknown.get((op.lease.key, holder), ()) if at <= op.invoke_ns), default=None)
            if start is None:
                continue
            t = tenures[key] = Tenure(op.lease.key, key[1], holder, start, t1, "open", str(op.lease.node))
            proved.add(key)
        at = _at(op)
        if op.f in ("release", "recover"):
            if t.ended == "open" or at < t.end_ns:  # the first call that ended it
                t.end_ns, t.ended = at, "released" if op.f == "release" else "recovered"
        else:
            last_use[key] = max(last_use.get(key, 0), at)
    by_task: dict[str, list[Tenure]] = defaultdict(list)
    for t in tenures.values():
        by_task[t.run].append(t)
    for task in by_task.values():
        task.sort(key=lambda t: t.epoch)
        for cur, nxt in reversed(list(zip(task, task[1:]))):
            # a claim answered after the next epoch was granted (its caller was held stopped between the store's
            # grant and the answer) took effect before that grant: its bar starts no later
            if nxt.start_ns <= cur.start_ns and (nxt.run, nxt.epoch) not in proved:
                cur.start_ns = nxt.start_ns - 1
        for cur, nxt in zip(task, task[1:]):
            if (nxt.run, nxt.epoch) in proved and nxt.start_ns <= cur.start_ns:
                nxt.start_ns = cur.start_ns + 1  # its unknown claim took effect after the previous epoch's grant
            if cur.ended == "open":
                cur.end_ns = max(min(nxt.start_ns, t1), last_use.get((cur.run, cur.epoch), cur.start_ns))
                cur.ended = "superseded"
    return sorted(tenures.values(), key=lambda t: t.start_ns)


def _node_key(node: str) -> tuple:
    tail = node.lstrip("n")
    return (0, int(tail), node) if tail.isdigit() else (1, 0, node)


def report_timeline(data: Any) -> Any:
    """The claims timeline (tasks, then a strip per node) and the tables of recoveries, aborts and counters."""
    from soak.report.data import Mark, Section, Span, Timeline
    from soak.workloads.claims import counts_of

    secs = data.seconds
    marks: list[Mark] = []
    recoveries: list[dict[str, Any]] = []
    aborts: list[dict[str, Any]] = []
    for op in data.ops:
        if op.f == "recover" and op.outcome != "fail" and op.lease is not None:
            by, owner = op.args.get("by", "?"), f"{op.lease.node}/{op.lease.agent}"
            recoveries.append({"task": op.run, "epoch": op.lease.epoch, "from owner": owner, "by node": by,
                               "owner read": op.args.get("owner_health", ""), "outcome": op.outcome,
                               "at (s)": f"{secs(_at(op)):.2f}", "call": op.tag})
            if op.outcome == "ok":
                marks.append(Mark(op.run, _at(op), "recovery", f"{by} took e{op.lease.epoch}"))
        elif op.lease is not None and any(name == "aborts" for name, _ in counts_of(
                op.f, op.intent, op.outcome, op.error, op.args, op.result)):
            owner = f"{op.lease.node}/{op.lease.agent}"
            aborts.append({"task": op.run, "epoch": op.lease.epoch, "owner": owner, "refused": op.f,
                           "at (s)": f"{secs(_at(op)):.2f}", "call": op.tag})
            marks.append(Mark(op.run, _at(op), "abort", f"{owner} aborted epoch {op.lease.epoch} ({op.f} refused)"))
    nodes = {node_of(p) for p in data.processes if _WORKER.match(p)}  # not the final-state reader
    spans: list[Span] = []
    paused: dict[str, int] = {}
    seen: dict[tuple[str, str], tuple[str, int]] = {}  # (node, observer) -> (health, since)
    for e in data.events:
        v = e.value
        if e.kind == "health":
            node, observer = str(v.get("node")), str(v.get("seen_by"))
            nodes.add(node)
            prev = seen.get((node, observer))
            if prev is not None and prev[0] in ("offline", "error"):
                spans.append(Span(node, prev[1], e.time, prev[0], f"seen by {observer}"))
            seen[(node, observer)] = (str(v.get("to")), e.time)
        elif e.process == "nemesis" and v.get("target"):
            target = str(v["target"])
            node = node_of(target)
            if e.kind == "pause":
                paused[target] = e.time
            elif e.kind == "resume" and target in paused:
                spans.append(Span(node, paused.pop(target), e.time, "paused", target))
            elif e.kind in ("kill", "timeout-kill"):
                if target in paused:
                    spans.append(Span(node, paused.pop(target), e.time, "paused", target))
                marks.append(Mark(node, e.time, "kill", f"{target} {e.kind}"))
    for (node, observer), (health, since) in seen.items():
        if health in ("offline", "error"):
            spans.append(Span(node, since, data.t1, health, f"seen by {observer}"))
    for target, since in paused.items():
        spans.append(Span(node_of(target), since, data.t1, "paused", target))
    recoveries.sort(key=lambda r: float(r["at (s)"]))
    aborts.sort(key=lambda r: float(r["at (s)"]))
    counts, source = data.storm.get("counts"), "from storm.json (the storm's quorum tailer)"
    if not counts:
        counts, source = data.info.quorum_reached, "from run.json's quorum reached (the run has no storm.json)"
    sections = (
        Section("Counts", ("counter", "count", "what it counts"),
                tuple({"counter": k, "count": counts.get(k, 0), "what it counts": what} for k, what in _COUNTS),
                source),
        Section("Recoveries", ("task", "epoch", "from owner", "by node", "owner read", "outcome", "at (s)", "call"),
                tuple(recoveries), "every recovery invoked and not refused: the epoch taken from its owner, the "
                                   "node that took it and how it read the owner's health"),
        Section("Returning-owner aborts", ("task", "epoch", "owner", "refused", "at (s)", "call"), tuple(aborts),
                "an owner's heartbeat, renewal or progress write refused with CheckoutConflictError: its tenure "
                "had ended and it wrote nothing more under that epoch"),
    )
    lanes = tuple(data.info.runs) or tuple(sorted({t.run for t in data.tenures}))
    return Timeline(
        title="Claim tenures per task, coloured by owner node (hatched: superseded, cross-hatched: recovered, "
              "faded: still held at the end), recoveries (v), returning owners' aborts (x), violations (red lines)\n"
              "below, per node: pauses (grey), read offline by another node (red), kills (X)",
        lanes=lanes, strips=tuple(sorted(nodes, key=_node_key)), marks=tuple(marks), spans=tuple(spans),
        styles=_STYLES, group_title="node", strip_title="nodes", sections=sections)
