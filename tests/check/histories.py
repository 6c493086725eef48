"""Hand-written histories for checker tests: operations with explicit times (in ms) and the
final state a correct store would leave, built by a tiny serial replay.

`H` records operations the way the storm would (tag `process#index`, per-tenure counter `c`,
payloads from `payload_for`), so a test states a history in a few lines and then breaks it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from soak.history import Operation, payload_for
from soak.rundir import RunInfo, info_to_json, write_json
from soak.workloads.runs.state import Snapshot, save_snapshot
from soak.spi import JournalEntry, Lease, RunMeta

MS = 1_000_000
TTL_MS = 100


class H:
    """A history under construction; times are milliseconds on the shared monotonic clock."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []
        self._index: dict[str, int] = defaultdict(int)
        self._c: dict[Lease, int] = defaultdict(int)

    def op(
        self, p: str, f: str, run: str, at: float, *, lease: Lease | None = None, args: dict[str, Any] | None = None,
        outcome: str = "ok", result: dict[str, Any] | None = None, error: str | None = None, dur: float = 1,
        pending: bool = False, intent: str = "live",
    ) -> Operation:
        index = self._index[p]
        self._index[p] += 1
        if pending:
            outcome, result = "info", {}
        if error is None and outcome == "fail":
            error = "LeaseHeldError"
        op = Operation(
            process=p, index=index, f=f, run=run, lease=lease, intent=intent, args=dict(args or {}), outcome=outcome,
            result=dict(result or {}), error=error if not pending else "Incomplete", message=None,
            invoke_ns=int(at * MS), complete_ns=None if pending else int((at + dur) * MS),
        )
        self.ops.append(op)
        return op

    def _counter(self, lease: Lease) -> int:
        self._c[lease] += 1
        return self._c[lease]

    # -- surfaces --------------------------------------------------------------------------

    def acquire(self, p: str, run: str, at: float, epoch: int | None, *, outcome: str = "ok", **kw: Any) -> Lease:
        result = {"epoch": epoch} if outcome == "ok" and not kw.get("pending") else {"holder": None}
        self.op(p, "acquire", run, at, args={"owner": p}, outcome=outcome, result=result, **kw)
        return Lease(run, p, epoch if epoch is not None else -1)

    def append(self, p: str, lease: Lease, seq: int, at: float, *, run: str | None = None, **kw: Any) -> Operation:
        tag = f"{p}#{self._index[p]}"
        return self.op(p, "append", run or lease.run_id, at, lease=lease,
                       args={"seq": seq, "tag": tag, "c": self._counter(lease)}, **kw)

    def put_meta(self, p: str, lease: Lease, at: float, *, status: str = "running", segments: int = 1, **kw: Any) -> Operation:
        tag = f"{p}#{self._index[p]}"
        return self.op(p, "put_meta", lease.run_id, at, lease=lease,
                       args={"tag": tag, "c": self._counter(lease), "status": status, "segments": segments}, **kw)

    def blob_put(self, p: str, lease: Lease, name: str, at: float, *, run: str | None = None, **kw: Any) -> Operation:
        run = run or lease.run_id
        tag = f"{p}#{self._index[p]}"
        return self.op(p, "blob_put", run, at, lease=lease,
                       args={"ref": f"{run}/{name}", "tag": tag, "c": self._counter(lease)}, **kw)

    def blob_delete(self, p: str, lease: Lease, name: str, at: float, **kw: Any) -> Operation:
        return self.op(p, "blob_delete", lease.run_id, at, lease=lease,
                       args={"ref": f"{lease.run_id}/{name}", "c": self._counter(lease)}, **kw)

    def delete(self, p: str, lease: Lease, at: float, **kw: Any) -> Operation:
        return self.op(p, "delete", lease.run_id, at, lease=lease, args={"c": self._counter(lease)}, **kw)

    def renew(self, p: str, lease: Lease, at: float, **kw: Any) -> Operation:
        return self.op(p, "renew", lease.run_id, at, lease=lease, args={"c": self._counter(lease)}, **kw)

    def release(self, p: str, lease: Lease, at: float, **kw: Any) -> Operation:
        return self.op(p, "release", lease.run_id, at, lease=lease, args={"c": self._counter(lease)}, **kw)

    def read(self, p: str, lease: Lease | None, what: str, at: float, seen: Any, *, run: str | None = None,
             **kw: Any) -> Operation:
        """A tenured read: `what` is "journal" (seen = (tail, tag)), "meta" (seen = tag) or a blob name."""
        run = run or lease.run_id
        tenure = None if lease is None else [lease.run_id, lease.owner, lease.epoch]
        if what == "journal":
            return self.op(p, "load", run, at, args={"tenure": tenure},
                           result={"tail": seen[0], "count": 1 if seen[1] else 0, "tail_tag": seen[1]}, **kw)
        if what == "meta":
            return self.op(p, "get_meta", run, at, args={"tenure": tenure}, result={"tag": seen}, **kw)
        return self.op(p, "blob_get", run, at, args={"ref": f"{run}/{what}", "tenure": tenure}, result={"tag": seen},
                       **kw)

    # -- the state a correct store leaves --------------------------------------------------

    def state(self, runs: list[str], *, include: set[str] = frozenset(), probe: bool = True) -> Snapshot:
        """Replay ok mutations (plus the info ones tagged in `include`) in (epoch, c) order."""
        chosen = [o for o in self.ops if o.lease is not None and (o.outcome == "ok" or o.tag in include)]
        chosen.sort(key=lambda o: (o.lease.epoch, o.args["c"]))
        journals: dict[str, list[JournalEntry]] = {r: [] for r in runs}
        metas: dict[str, RunMeta | None] = {r: None for r in runs}
        blobs: dict[str, dict[str, bytes]] = {r: {} for r in runs}
        for o in chosen:
            if o.f == "append":
                journals[o.run].append(JournalEntry(o.args["seq"], payload_for(o.tag)))
            elif o.f == "put_meta":
                metas[o.run] = RunMeta(o.run, o.args["status"], o.args["segments"], payload_for(o.tag))
            elif o.f == "delete":
                journals[o.run] = []
                metas[o.run] = None
            elif o.f == "blob_put":
                blobs[o.run][o.args["ref"]] = payload_for(o.tag)
            elif o.f == "blob_delete":
                blobs[o.run].pop(o.args["ref"], None)
        top: dict[str, int] = defaultdict(int)
        for o in self.ops:
            if o.f == "acquire" and o.outcome == "ok":
                top[o.run] = max(top[o.run], o.result["epoch"])
        probes = {r: {"epoch": top[r] + 1} for r in runs} if probe else {}
        listed = sorted(r for r, m in metas.items() if m is not None)
        return Snapshot(journals, metas, blobs, listed, probes, [])


def clean_history() -> H:
    """Two workers take turns on r1 (a takeover after expiry, a release), one deletion cycle on s1."""
    h = H()
    a1 = h.acquire("w1.1", "r1", 0, 1)
    h.append("w1.1", a1, 1, 2)
    h.put_meta("w1.1", a1, 4)
    h.blob_put("w1.1", a1, "t1", 6)
    h.renew("w1.1", a1, 50)
    h.append("w1.1", a1, 2, 60)
    h.acquire("w2.1", "r1", 70, None, outcome="fail")  # held: refused
    h.append("w1.1", a1, 3, 120, outcome="info", error="RuntimeError")  # unknown, not applied
    # w1 stalls; w2 takes over after expiry (renewed at 50 -> expires 150)
    b2 = h.acquire("w2.1", "r1", 200, 2)
    h.append("w1.1", a1, 3, 210, outcome="fail")  # stale, refused
    h.put_meta("w1.1", a1, 212, outcome="fail")
    h.append("w2.1", b2, 3, 215)
    h.put_meta("w2.1", b2, 220, status="completed", segments=2)
    h.blob_put("w2.1", b2, "t1", 222)
    h.blob_put("w2.1", b2, "t2", 224)
    h.blob_delete("w2.1", b2, "t2", 226)
    h.release("w2.1", b2, 230)
    h.renew("w1.1", a1, 240, outcome="fail")  # stale renew refused
    # a side run's deletion cycle
    s = h.acquire("w1.1", "s1", 300, 1)
    h.append("w1.1", s, 1, 302)
    h.put_meta("w1.1", s, 304)
    h.blob_put("w1.1", s, "x", 306)
    h.blob_delete("w1.1", s, "x", 308)
    h.delete("w1.1", s, 310)
    h.release("w1.1", s, 312)
    # a cross-run probe refused
    h.blob_put("w2.1", b2, "probe", 320, run="xr", outcome="fail")
    return h


RUNS = ["r1", "s1", "xr"]


def write_run_dir(
    run_dir: Path, h: H, snap: Snapshot, *, status: str = "quorum", ttl_ms: int = TTL_MS,
    runs: tuple[list[str], list[str]] = (["r1"], ["s1"]),
) -> Path:
    """Write a run directory (run.json, history/*.jsonl in the storm's line format, final_state.json); `h` is
    anything with the operations as `ops`, `runs` the runs and side runs the storm wrote."""
    run_dir.mkdir(parents=True, exist_ok=True)
    hist = run_dir / "history"
    hist.mkdir(exist_ok=True)
    grants = sum(1 for o in h.ops if o.f == "acquire" and o.outcome == "ok")
    info = RunInfo(soak_version="0.1.0", workload="runs", store="memory:", seed=1, lease_ttl_ms=ttl_ms, workers=2,
                   runs=runs[0], side_runs=runs[1], status=status, quorum_target={"grants": grants},
                   quorum_reached={"grants": grants})
    write_json(run_dir / "run.json", info_to_json(info))
    save_snapshot(run_dir, snap)
    lines: dict[str, list[str]] = defaultdict(list)
    for o in h.ops:
        lease = None if o.lease is None else [o.lease.run_id, o.lease.owner, o.lease.epoch]
        lines[o.process].append(json.dumps({"t": "invoke", "p": o.process, "i": o.index, "ts": o.invoke_ns, "f": o.f,
                                            "run": o.run, "lease": lease, "intent": o.intent, "v": o.args}))
        if o.complete_ns is not None:
            rec = {"t": o.outcome, "p": o.process, "i": o.index, "ts": o.complete_ns, "v": o.result}
            if o.error:
                rec["err"] = o.error
            lines[o.process].append(json.dumps(rec))
    nemesis = [json.dumps({"t": "event", "p": "nemesis", "ts": 1, "kind": "spawn", "v": {"target": p, "pid": 100 + k}})
               for k, p in enumerate(lines)]
    nemesis.append(json.dumps({"t": "event", "p": "nemesis", "ts": 5, "kind": "stall", "v": {}}))
    for p, ls in lines.items():  # every worker's file starts with its start event, as the storm's do
        start = json.dumps({"t": "event", "p": p, "ts": 2, "kind": "start", "v": {}})
        (hist / f"{p}.jsonl").write_text("".join(x + "\n" for x in [start, *ls]))
    (hist / "nemesis.jsonl").write_text("".join(x + "\n" for x in nemesis))
    return run_dir
