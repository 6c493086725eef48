"""What the report draws of a runs storm: the tenures per worker, read from the acquires, releases and uses."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from soak.workloads.runs.quorum import SUSPECT_INTENTS

__all__ = ["report_tenures"]


def report_tenures(ops: list[Any], t1: int) -> list[Any]:
    """Every granted tenure, from its acquire to its release, its successor's grant (or its own last use, if that
    came later) or the end of the history `t1`."""
    from soak.report.data import Tenure

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
        elif op.intent not in SUSPECT_INTENTS:  # dead and forged leases presented by probes are not uses
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
