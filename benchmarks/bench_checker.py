"""Checker throughput and memory on synthetic consistent histories (100k and 1M operations).

Generates a run directory whose history is what a correct store would produce (tenures with
a read-back after each grant, appends, metas, blob puts and deletes, renews, tenured reads,
refused takeover attempts, stale refusals after release, periodic run deletions; `SHAPES`),
times `soak.check.check_run` on it in a fresh process and prints operations per second (wall
clock; CPU counts the forked helper too), the ratio to the target and to the raw limit measured
in the same run (parsing every line of the same history, nothing else, on one core: `_raw`),
and the peak RSS of that process and of the helper it forks (`soak.check.parallel`). With two
sizes or more, it prints how much that memory grows per operation from each size to the next:
the checker's memory is bounded, so past the first million operations or so (when the residue
of retired tenures has reached its cap, docs/bounded-checker.md) it grows by about 0.
The check must pass.

    .venv/bin/python benchmarks/bench_checker.py            # 100k and 1M, storm-shaped tenures
    .venv/bin/python benchmarks/bench_checker.py 1000000 3000000 10000000   # chosen sizes (10M: 2.4 GB of disk)
    .venv/bin/python benchmarks/bench_checker.py --shape=dense --shape=storm 1000000
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from soak.history import payload_for
from soak.rundir import RunInfo, info_to_json, write_json
from soak.workloads.runs.state import Snapshot, save_snapshot
from soak.spi import JournalEntry, RunMeta

TTL_MS = 250
TARGET_OPS_PER_S = 300_000


#: Tenure shapes: (operations in a tenure's body, cumulative odds of append, put_meta, blob_put, blob_delete,
#: renew and a refused acquire by another worker (the rest are tenured reads), the new holder's read-back,
#: the superseded holder's refused sweep). "storm" follows the runs workload's storms (a smoke and a nightly
#: storm measured about 30 operations a tenure, 13-15% tenured reads, 11-20% refused acquires and 18% refused
#: stale writes; it generates 31, 15%, 10% and 16%); "dense" is the earlier shape, about 14 operations a
#: tenure (twice the tenures, so twice the per-tenure work per operation).
SHAPES = {
    "storm": ((16, 26), (0.28, 0.50, 0.70, 0.74, 0.77, 0.92), ("load", "get_meta", "blob_get"),
              ("append", "put_meta", "blob_put", "delete", "renew")),
    "dense": ((4, 12), (0.40, 0.55, 0.70, 0.78, 0.88, 0.95), ("load", "get_meta"), ("append", "renew")),
}


def generate(run_dir: Path, n_ops: int, *, workers: int = 8, runs: int = 4, seed: int = 1,
             shape: str = "storm") -> int:
    """Write a consistent synthetic run of about `n_ops` operations; returns the exact count."""
    body, odds, read_back, sweep = SHAPES[shape]
    rng = random.Random(seed)
    hist = run_dir / "history"
    hist.mkdir(parents=True)
    names = [f"w{i}.1" for i in range(workers)]
    fhs = {w: open(hist / f"{w}.jsonl", "w", buffering=1 << 20) for w in names}
    # the storm's own records: the nemesis names each worker it spawned, each worker starts with its start event
    with open(hist / "nemesis.jsonl", "w") as fh:
        fh.writelines(json.dumps({"t": "event", "p": "nemesis", "ts": 1, "kind": "spawn",
                                  "v": {"target": w, "pid": 1000 + k}}) + "\n" for k, w in enumerate(names))
    for w, fh in fhs.items():
        fh.write(json.dumps({"t": "event", "p": w, "ts": 2, "kind": "start", "v": {}}) + "\n")
    index = dict.fromkeys(names, 0)
    run_ids = [f"r{i}" for i in range(runs)]
    epoch = dict.fromkeys(run_ids, 0)
    tenures = dict.fromkeys(run_ids, 0)
    holder: dict[str, list | None] = dict.fromkeys(run_ids, None)
    journals: dict[str, list[tuple[int, str]]] = {r: [] for r in run_ids}
    metas: dict[str, tuple[str, str, int] | None] = dict.fromkeys(run_ids, None)
    blobs: dict[str, dict[str, str]] = {r: {} for r in run_ids}
    clock = 1_000_000_000
    count = 0
    dumps = json.dumps

    def emit(w: str, f: str, run: str, lease: list | None, value: dict, outcome: str = "ok",
             result: dict | None = None, err: str | None = None) -> str:
        nonlocal clock, count
        i = index[w]
        index[w] = i + 1
        clock += 20_000
        fh = fhs[w]
        fh.write(dumps({"t": "invoke", "p": w, "i": i, "ts": clock, "f": f, "run": run, "lease": lease,
                        "intent": "live", "v": value}, separators=(",", ":")) + "\n")
        clock += 30_000
        rec = {"t": outcome, "p": w, "i": i, "ts": clock, "v": result or {}}
        if err:
            rec["err"] = err
        fh.write(dumps(rec, separators=(",", ":")) + "\n")
        count += 1
        return f"{w}#{i}"

    def read(w: str, f: str, run: str, lease: list) -> None:
        """A read made under the tenure `lease`, seeing the serial state (the checker judges it)."""
        if f == "load":
            tail = journals[run][-1] if journals[run] else (0, None)
            emit(w, f, run, None, {"tenure": lease},
                 result={"tail": tail[0], "count": len(journals[run]), "tail_tag": tail[1]})
        elif f == "get_meta":
            emit(w, f, run, None, {"tenure": lease}, result={"tag": metas[run][0] if metas[run] else None})
        else:
            ref = f"{run}/b{rng.randrange(6)}"
            emit(w, f, run, None, {"ref": ref, "tenure": lease}, result={"tag": blobs[run].get(ref)})

    while count < n_ops:
        run = rng.choice(run_ids)
        w = rng.choice(names)
        prev = holder[run]
        epoch[run] += 1
        tenures[run] += 1
        lease = [run, w, epoch[run]]
        emit(w, "acquire", run, None, {"owner": w}, result={"epoch": epoch[run]})
        holder[run] = lease
        for f in read_back:  # the new holder reads the run back, as the runs workload does
            read(w, f, run, lease)
        if prev is not None:  # the previous holder's stale sweep: refused
            p = prev[1]
            for k, f in enumerate(sweep):
                value = {"c": 99 + k}
                if f in ("append", "put_meta", "blob_put"):
                    value.update(seq=10**6, tag=f"{p}#{index[p]}", ref=f"{run}/b0")
                emit(p, f, run, prev, {} if f == "renew" else value, outcome="fail", result={"holder": lease},
                     err="LeaseHeldError")
        c = 0
        a_append, a_meta, a_put, a_del, a_renew, a_acq = odds
        for _ in range(rng.randint(*body)):
            kind = rng.random()
            c += 1
            if kind < a_append:
                seq = (journals[run][-1][0] if journals[run] else 0) + 1
                tag = emit(w, "append", run, lease, {"seq": seq, "tag": f"{w}#{index[w]}", "c": c})
                journals[run].append((seq, tag))
            elif kind < a_meta:
                tag = emit(w, "put_meta", run, lease, {"tag": f"{w}#{index[w]}", "c": c, "status": "running",
                                                        "segments": c})
                metas[run] = (tag, "running", c)
            elif kind < a_put:
                ref = f"{run}/b{rng.randrange(6)}"
                tag = emit(w, "blob_put", run, lease, {"ref": ref, "tag": f"{w}#{index[w]}", "c": c})
                blobs[run][ref] = tag
            elif kind < a_del:
                ref = f"{run}/b{rng.randrange(6)}"
                emit(w, "blob_delete", run, lease, {"ref": ref, "c": c})
                blobs[run].pop(ref, None)
            elif kind < a_renew:
                c -= 1
                emit(w, "renew", run, lease, {}, result={})
            elif kind < a_acq:
                c -= 1
                other = rng.choice(names)
                emit(other, "acquire", run, None, {"owner": other}, outcome="fail", result={"holder": lease},
                     err="LeaseHeldError")
            else:
                c -= 1
                read(w, rng.choice(("load", "get_meta", "blob_get")), run, lease)
        if tenures[run] % 16 == 0:  # the run completes and is deleted: the final state stays bounded
            c += 1
            emit(w, "delete", run, lease, {"c": c})
            journals[run] = []
            metas[run] = None
        emit(w, "release", run, lease, {})
    for fh in fhs.values():
        fh.close()
    snap = Snapshot(
        journals={r: [JournalEntry(s, payload_for(t)) for s, t in journals[r]] for r in run_ids} | {"xr": []},
        metas={r: None if metas[r] is None else RunMeta(r, metas[r][1], metas[r][2], payload_for(metas[r][0]))
               for r in run_ids} | {"xr": None},
        blobs={r: {ref: payload_for(t) for ref, t in blobs[r].items()} for r in run_ids} | {"xr": {}},
        listed_runs=sorted(r for r in run_ids if metas[r] is not None),
        probe={r: {"epoch": epoch[r] + 1} for r in run_ids},
        read_errors=[],
    )
    save_snapshot(run_dir, snap)
    info = RunInfo(soak_version="0.1.0", workload="runs", store="synthetic", seed=seed, lease_ttl_ms=TTL_MS,
                   workers=workers, runs=run_ids, side_runs=[], status="quorum")
    write_json(run_dir / "run.json", info_to_json(info))
    return count


def _child(run_dir: str) -> None:
    """Time one check in this process and print a JSON line (peak RSS is this process's)."""
    import resource

    from soak.check import check_run

    t0, c0 = time.perf_counter(), time.process_time()
    verdict = check_run(run_dir, write=False)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    helper = resource.getrusage(resource.RUSAGE_CHILDREN)  # the forked folding and checking child
    print(json.dumps({"seconds": dt, "cpu": dc, "helper_cpu": helper.ru_utime + helper.ru_stime,
                      "result": verdict.result, "ops": verdict.stats.get("operations"),
                      "rss_mb": rss_kb / 1024, "helper_rss_mb": helper.ru_maxrss / 1024,
                      "violations": [v.statement for v in verdict.violations[:3]],
                      "reasons": list(verdict.reasons[:3])}))


def _raw(run_dir: str) -> None:
    """The raw limit, in this process: parse every history line into plain JSON values, nothing else.

    No checker can beat reading and parsing its input; this is that floor on one core (msgspec,
    a batch of lines per call, as the checker's reader does), timed in the same run as the check.
    """
    import msgspec

    decode = msgspec.json.decode
    t0 = time.perf_counter()
    lines = 0
    for path in sorted(Path(run_dir, "history").glob("*.jsonl")):
        with open(path, "rb") as fh:
            while batch := fh.readlines(32 * 1024):
                lines += len(decode(b"[" + b",".join(batch) + b"]"))
    print(json.dumps({"seconds": time.perf_counter() - t0, "lines": lines}))


def calibrate() -> float:
    """CPU seconds for 10M Python additions (about 0.4 s on a recent laptop core)."""
    c0 = time.process_time()
    x = 0
    for i in range(10_000_000):
        x += i
    return time.process_time() - c0


def measure(n_ops: int, tmp: str | os.PathLike[str], shape: str = "storm") -> dict:
    """Generate a run of about `n_ops` operations (of tenures shaped `shape`) under `tmp`, check it in a fresh process.

    Returns the child's figures (seconds, cpu, result, rss_mb, ...) plus count, size_mb and gen_s.
    """
    run_dir = Path(tmp) / f"{shape}{n_ops}"
    t0 = time.perf_counter()
    count = generate(run_dir, n_ops, shape=shape)
    gen = time.perf_counter() - t0
    size_mb = sum(p.stat().st_size for p in (run_dir / "history").glob("*.jsonl")) / 1e6
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    def run(flag: str) -> dict:
        out = subprocess.run([sys.executable, __file__, flag, str(run_dir)], capture_output=True, text=True,
                             check=True, env=env)
        return json.loads(out.stdout.strip().splitlines()[-1])

    raw = run("--raw")
    r = run("--child")
    return {**r, "count": count, "size_mb": size_mb, "gen_s": gen, "rate": count / r["seconds"],
            "raw_rate": raw["lines"] / 2 / raw["seconds"]}


def main(argv: list[str]) -> int:
    if argv[:1] in (["--child"], ["--raw"]):
        (_child if argv[0] == "--child" else _raw)(argv[1])
        return 0
    shapes = [a.partition("=")[2] for a in argv if a.startswith("--shape=")] or ["storm"]
    sizes = [int(a) for a in argv if not a.startswith("--")] or [100_000, 1_000_000]
    ok = True
    print(f"calibration: 10M Python additions in {calibrate():.2f} CPU s")
    peaks: dict[str, list[tuple[int, float]]] = {}  # shape -> (operations, peak RSS of both processes in MB)
    with tempfile.TemporaryDirectory(prefix="soak-bench-") as tmp:
        for shape, n in [(shape, n) for shape in shapes for n in sizes]:
            r = measure(n, tmp, shape)
            peaks.setdefault(shape, []).append((r["count"], r["rss_mb"] + r["helper_rss_mb"]))
            count, gen, size_mb, rate = r["count"], r["gen_s"], r["size_mb"], r["rate"]
            ok &= r["result"] == "pass" and rate >= TARGET_OPS_PER_S
            cpu = r["cpu"] + r["helper_cpu"]
            print(f"{shape:>5} {count:>9,} ops ({size_mb:6.1f} MB history, generated in {gen:5.1f} s): checked in "
                  f"{r['seconds']:6.2f} s = {rate:>9,.0f} ops/s ({rate / TARGET_OPS_PER_S:4.2f}x target; "
                  f"{count / cpu:,.0f} ops per CPU s; {rate / r['raw_rate']:4.2f}x the raw limit of "
                  f"{r['raw_rate']:,.0f} ops/s, parsing the lines on one core), peak RSS {r['rss_mb']:6.1f} MB "
                  f"(forked helper {r['helper_rss_mb']:6.1f} MB), verdict {r['result']}"
                  + (f" {r['violations']} {r['reasons']}" if r["result"] != "pass" else ""))
    for shape, points in peaks.items():  # bounded memory adds nothing per operation
        points.sort()
        for (n0, m0), (n1, m1) in zip(points, points[1:]):
            if n1 > n0:
                print(f"{shape:>5} memory growth from {n0:,} to {n1:,} ops: {(m1 - m0) * 2**20 / (n1 - n0):,.1f} bytes "
                      f"per operation (peak RSS of both processes: {m0:,.1f} MB, then {m1:,.1f} MB)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
