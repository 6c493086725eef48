"""Consecutive storms of one store, back to back: the false-alarm rate behind "100 storms raise no false alarm".

    python benchmarks/storm_loop.py --store sqlite: -n 100
    python benchmarks/storm_loop.py --store postgresql://127.0.0.1:5432/test --scenario networked -n 100

Each storm is `soak storm --quiet --no-report` into its own run directory under --out (removed after a pass
unless --keep-runs; a fail or an inconclusive run is always kept, its path printed). Prints one line per storm
and a summary: verdict counts, time to quorum (median, range) and takeovers/s over R/T. Exit 1 if any storm
failed, 3 if any was inconclusive and none failed, 2 at the first storm that exits 2 (a usage or configuration
error: the rest would repeat it), else 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="sqlite:")
    ap.add_argument("--scenario", default="smoke")
    ap.add_argument("-n", type=int, default=100, help="storms (default 100)")
    ap.add_argument("--out", default="reports/storm-loop", help="parent of the run directories")
    ap.add_argument("--keep-runs", action="store_true", help="keep the run directories of passing storms too")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to soak storm")
    args = ap.parse_args(argv)
    soak = Path(sys.executable).with_name("soak")
    out = Path(args.out) / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    verdicts: dict[str, int] = {}
    quorum_s: list[float] = []
    ratios: list[float] = []
    t_start = time.monotonic()
    for i in range(1, args.n + 1):
        run = out / f"{i:03d}"
        cmd = [str(soak), "storm", "--store", args.store, "--scenario", args.scenario, "--quiet", "--no-report",
               "--out", str(run)] + [a for kv in args.set for a in ("--set", kv)]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        verdict = {0: "pass", 1: "fail", 3: "inconclusive"}.get(proc.returncode, f"exit {proc.returncode}")
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        info = _storm_json(run)
        q, r = info.get("quorum_met_s"), info.get("takeovers_per_s_over_R_T")
        if isinstance(q, (int, float)):
            quorum_s.append(q)
        if isinstance(r, (int, float)):
            ratios.append(r)
        last = (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or [""])[-1]
        print(f"{i:3d} {verdict:12s} {time.monotonic() - t0:6.1f} s  quorum {q}  takeovers/R/T {r}  "
              f"{'' if verdict == 'pass' else run}  {last[:120] if verdict != 'pass' else ''}", flush=True)
        if verdict == "pass" and not args.keep_runs:
            shutil.rmtree(run, ignore_errors=True)
        if proc.returncode == 2:  # a usage or configuration error repeats in every storm: say it once and stop
            print(f"stopped: soak storm exited 2 (usage or configuration): {last}", file=sys.stderr)
            return 2
    wall = time.monotonic() - t_start
    summary = ", ".join(f"{v} {k}" for k, v in sorted(verdicts.items()))
    print(f"{args.n} storms of {args.store} ({args.scenario}) in {wall:.0f} s: {summary}")
    if quorum_s:
        print(f"time to quorum: median {statistics.median(quorum_s):.1f} s ({min(quorum_s):.1f}-{max(quorum_s):.1f})")
    if ratios:
        print(f"takeovers/s over R/T: median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
    if verdicts.get("fail") or any(k.startswith("exit") for k in verdicts):
        return 1
    return 3 if verdicts.get("inconclusive") else 0


def _storm_json(run: Path) -> dict:
    """The figures of a run's storm.json (empty where the storm left none)."""
    try:
        data = json.loads((run / "storm.json").read_text())
    except (OSError, ValueError):
        return {}
    quorum, ratio = data.get("time_to_quorum_s"), data.get("takeovers_per_s_over_R_T")
    return {"quorum_met_s": quorum, "takeovers_per_s_over_R_T": ratio}


if __name__ == "__main__":
    sys.exit(main())
