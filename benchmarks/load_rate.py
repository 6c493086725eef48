"""Load workers: storm calls/raw and accepted/raw with N load workers, and one load worker's own cost.

    .venv/bin/python benchmarks/load_rate.py 4          # raw limit, then a 5 s quiet storm with 4 load workers
    .venv/bin/python benchmarks/load_rate.py 4 --workers 1
    .venv/bin/python benchmarks/load_rate.py --alone    # one load worker's loop in this process, 2 s, no storm

The storm and the raw limit run back to back, so the ratios come from one run on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raw_limit import raw_limit_detail  # noqa: E402
from storm_rate import storm_rate  # noqa: E402

__all__ = ["alone"]


def alone(seconds: float = 2.0) -> tuple[float, float]:
    """One load worker's loop over `sqlite:` in this process, recording every call: (calls/s, CPU us per call)."""
    from soak.history import HistoryWriter
    from soak.scenario import Scenario
    from soak.stores import resolve
    from soak.workloads import get_workload
    from soak.workloads.context import WorkerContext
    from soak.workloads.runs.load import run_load_worker

    sc = Scenario().replace(load_workers=1)
    with tempfile.TemporaryDirectory(prefix="soak-load-") as d:
        store = resolve("sqlite:").open(d, sc.lease_ttl_ms, timeout_s=None)
        writer = HistoryWriter(os.path.join(d, "h.jsonl"), "w4.1")
        end = time.monotonic() + seconds
        ctx = WorkerContext(store=store, writer=writer, rng=random.Random(1), scenario=sc, process="w4.1",
                            should_stop=lambda: time.monotonic() > end, load=True,
                            **get_workload("runs").context_hooks())
        cpu = time.process_time()
        run_load_worker(ctx)
        cpu = time.process_time() - cpu
        calls = writer.next_index()
        writer.close()
        store.close()
    return calls / seconds, cpu / max(calls, 1) * 1e6


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("load_workers", type=int, nargs="?", default=4)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--alone", action="store_true", help="one load worker's loop alone (no storm)")
    args = p.parse_args()
    if args.alone:
        rate, us = alone()
        print(f"one load worker alone: {rate:,.0f} recorded calls/s, {us:.0f} CPU us per call")
        sys.exit(0)
    raw = raw_limit_detail("sqlite:", processes=4, seconds=3.0).rate
    r = storm_rate(workers=args.workers, seconds=args.seconds, load_workers=args.load_workers)
    print(f"{args.workers} workers + {args.load_workers} load workers ({r.status}): raw {raw:,.0f}/s, "
          f"{r.call_rate:,.0f} calls/s, {r.rate:,.0f} accepted/s: calls/raw {r.call_rate / raw:.2f}, "
          f"accepted/raw {r.rate / raw:.2f}; load average {os.getloadavg()[0]:.1f}")
