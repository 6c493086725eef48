"""Storm rate: accepted fenced mutations per second that a storm with the nemesis off drives.

Runs `soak.storm.orchestrator.run_storm` with no pauses, kills or cooperative stalls and a
quorum it cannot reach, so the storm ends at its time bound; then counts the `ok` mutations in
the history over the window in which workers were running (first boot to last completion), so
process start and the final snapshot are not charged to the store.

    .venv/bin/python benchmarks/storm_rate.py            # 4 workers, 5 s, sqlite:
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak.history import Operation, operations
from soak.workloads.runs import MUTATIONS
from soak.rundir import HISTORY_DIR
from soak.scenario import Scenario

__all__ = ["StormRate", "quiet_scenario", "storm_rate", "count_history"]


@dataclass(frozen=True)
class StormRate:
    """One storm's throughput: accepted mutations, every recorded call, over the running window."""

    accepted: int
    calls: int
    window_s: float
    status: str

    @property
    def rate(self) -> float:
        """Accepted fenced mutations per second."""
        return self.accepted / self.window_s if self.window_s > 0 else 0.0

    @property
    def call_rate(self) -> float:
        """Recorded store calls per second (acquire, load, release and refusals included)."""
        return self.calls / self.window_s if self.window_s > 0 else 0.0


def quiet_scenario(*, workers: int = 4, seconds: float = 5.0, lease_ttl_ms: int = 250, store: str = "sqlite:",
                   seed: int = 1, **knobs: Any) -> Scenario:
    """A scenario with the nemesis off (no pauses, kills, stalls or strikes) that runs `seconds` then stops.

    `knobs` override further scenario fields (`runs`, `mix`, `ops_min`, ...), for diagnosis.
    """
    return Scenario().replace(
        name="bench-quiet", store=store, workers=workers, lease_ttl_ms=lease_ttl_ms, seed=seed,
        time_bound_s=seconds, grace_s=2.0, stall_prob=0.0, strike_prob=0.0, pause_interval_s=0.0,
        kill_interval_s=0.0, quorum={"grants": 10**12},  # never met: the storm runs to its time bound
        **knobs,
    )


def count_history(run_dir: str | Path) -> tuple[int, int, float]:
    """(accepted mutations, recorded calls, running window in s) of one run directory's worker history."""
    paths = [p for p in (Path(run_dir) / HISTORY_DIR).glob("*.jsonl") if p.name != "nemesis.jsonl"]
    accepted = calls = 0
    first: int | None = None
    last = 0
    for op in operations(paths):
        if not isinstance(op, Operation):
            continue
        if op.f == "open":
            if op.outcome == "ok" and op.complete_ns is not None and (first is None or op.complete_ns < first):
                first = op.complete_ns  # the window starts when the first worker has booted
            continue
        calls += 1
        if op.complete_ns is not None and op.complete_ns > last:
            last = op.complete_ns
        if op.outcome == "ok" and op.f in MUTATIONS:
            accepted += 1
    window = (last - first) / 1e9 if first is not None and last > first else 0.0
    return accepted, calls, window


def storm_rate(store: str = "sqlite:", *, workers: int = 4, seconds: float = 5.0, lease_ttl_ms: int = 250,
               out_dir: str | Path | None = None, **knobs: Any) -> StormRate:
    """Run one quiet storm of `seconds` and measure its accepted-mutation rate (`knobs`: see `quiet_scenario`)."""
    from soak.storm.orchestrator import run_storm

    scenario = quiet_scenario(workers=workers, seconds=seconds, lease_ttl_ms=lease_ttl_ms, store=store, **knobs)
    with tempfile.TemporaryDirectory(prefix="soak-storm-rate-") as tmp:
        run_dir = Path(out_dir) if out_dir is not None else Path(tmp) / "run"
        info = run_storm(scenario, store, run_dir, progress=False)
        accepted, calls, window = count_history(run_dir)
    return StormRate(accepted, calls, window, info.status)


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    t0 = time.perf_counter()
    r = storm_rate(seconds=secs)
    print(f"storm ({r.status}): {r.accepted:,} accepted mutations in {r.window_s:.2f} s = {r.rate:,.0f}/s; "
          f"{r.call_rate:,.0f} recorded calls/s; wall {time.perf_counter() - t0:.1f} s")
