"""`make bench`: every performance figure of soak in one table, measured in one run on this machine.

The machine may be shared, so every ratio is taken within one round (raw limit, recorded raw
loop and storm back to back) and the rounds are repeated: the table gives the median and the
spread (min-max) of each figure. Sections:

- raw limit: `raw_limit.raw_limit` (bare fenced appends, `processes` = the storm's workers);
- recording overhead: the same loop with history recording on, as a ratio to the bare loop;
- storm rate: `storm_rate.storm_rate` (nemesis off) and the ratio storm/raw (target >= 0.7); the same storm with
  `--load-workers` load workers beside its workers (`soak.workloads.runs.load`): storm calls/raw (target >= 0.8)
  and accepted mutations/raw;
- checker: `bench_checker.py` at 100k and 1M operations (10M with `--checker-10m`);
- time to quorum of the smoke preset (median of 3 runs) and of one nightly run, last, when what
  is left of the `--budget` (570 s) allows it (about 310 s here: `--only nightly` runs it alone);
- time to detect mutants: a smoke storm (time bound `--mutant-bound`, `stop_on_violation`: the early judge
  ends it at the first proven violation) against each mutant, then the checker: when the first violation's
  evidence was complete (seconds into the storm), the wall time from storm start to the fail verdict, and when
  the early judge found it.

    .venv/bin/python benchmarks/bench.py             # the full table (about 5 minutes)
    .venv/bin/python benchmarks/bench.py --quick     # one round, fewer sizes (about 1.5 minutes)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from raw_limit import raw_limit_detail  # noqa: E402
from storm_rate import storm_rate  # noqa: E402
from writer_micro import _StdlibWriter, per_call_us  # noqa: E402

from soak.history import HistoryWriter  # noqa: E402

__all__ = ["main", "spread"]

MUTANTS = ("unfenced-meta", "stale-release", "no-run-match")
#: the reference SQLite store served over the wire protocol by the Python wire server
WIRE_SQLITE = f"exec:{shlex.quote(sys.executable)} -m soak.stores.wire_server sqlite:"
STORM_RATIO_TARGET = 0.7
CALL_RATIO_TARGET = 0.8  # storm calls/raw, nemesis off
TAKEOVER_RATIO_TARGET = 0.6  # takeovers/s over R/T in a smoke storm
NIGHTLY_MIN_S = 350.0  # the nightly quorum takes about 310 s here (its 600 stalls), then snapshot and check


def spread(values: Sequence[float], fmt: Callable[[float], str] = lambda v: f"{v:,.0f}") -> str:
    """`median (min-max, n=N)`, or the single value."""
    vals = sorted(values)
    if not vals:
        return "-"
    if len(vals) == 1:
        return fmt(vals[0])
    return f"{fmt(statistics.median(vals))} ({fmt(vals[0])}-{fmt(vals[-1])}, n={len(vals)})"


def _row(name: str, value: str, note: str = "") -> None:
    print(f"| {name:<34} | {value:<42} | {note} |", flush=True)


def _section(title: str) -> None:
    print(f"| **{title}** | | |", flush=True)


def _stock_busy_raw(workers: int, raw_s: float, record: bool = False) -> float:
    """The bare loop (`record`: the recorded loop) with SQLite's own busy handler in place of the store's polled wait
    (`SOAK_SQLITE_POLL=0`, read by the spawned loop processes)."""
    old = os.environ.get("SOAK_SQLITE_POLL")
    os.environ["SOAK_SQLITE_POLL"] = "0"
    try:
        return raw_limit_detail("sqlite:", processes=workers, seconds=raw_s, record=record).rate
    finally:
        if old is None:
            del os.environ["SOAK_SQLITE_POLL"]
        else:
            os.environ["SOAK_SQLITE_POLL"] = old


def _throughput(rounds: int, workers: int, raw_s: float, storm_s: float, load_workers: int) -> None:
    from soak.workloads.runs.options import MIX_KEYS

    raw, rec, storm, calls, ratio, overhead, call_ratio, diag, diag_ratio, cpu_overhead = ([] for _ in range(10))
    wire: list[float] = []
    wire_ratio: list[float] = []  # the wire store's storm rate over the direct store's, the same round
    loaded, loaded_calls, loaded_ratio, loaded_call_ratio = ([] for _ in range(4))
    cpu_us: list[tuple[float, float]] = []
    raw_poll: list[float] = []  # the bare loop as the store waits for the lock (polling), and with SQLite's own wait
    ceiling: list[float] = []  # the recorded loop over the bare one, each the better of both waits
    over_ceiling: list[float] = []  # the loaded storm's calls over the recorded loop
    raw_stock: list[float] = []
    worst: list[float] = []  # the raw loop's longest append, in ms: how long the store starves a writer at its limit
    # diagnostic storm: no acquire contention (8 runs for the workers) and long tenures of writes
    # that are accepted (meta and blob puts): what the harness machinery reaches without the mix
    writes_only = {"runs": 8, "mix": {k: 1.0 if k in ("put_meta", "blob_put") else 0.0 for k in MIX_KEYS},
                   "ops_min": 30, "ops_max": 30}
    for _ in range(rounds):
        bare = raw_limit_detail("sqlite:", processes=workers, seconds=raw_s)
        stock = _stock_busy_raw(workers, raw_s)
        recd = raw_limit_detail("sqlite:", processes=workers, seconds=raw_s, record=True)
        recd_stock = _stock_busy_raw(workers, raw_s, record=True)
        # the ratios' denominator is the better of the two waits for the lock: the store's own wait could make the
        # bare loop slower, which would flatter every ratio
        r, rr = max(bare.rate, stock), recd.rate
        best_recd = max(rr, recd_stock)
        ceiling.append(best_recd / r)  # what recording every call durably leaves of the raw limit
        raw_poll.append(bare.rate)
        raw_stock.append(stock)
        worst.append(bare.worst_call_s * 1e3)
        cpu_overhead.append(bare.cpu_per_op_s / recd.cpu_per_op_s)
        cpu_us.append((bare.cpu_per_op_s * 1e6, recd.cpu_per_op_s * 1e6))
        s = storm_rate("sqlite:", workers=workers, seconds=storm_s)
        d = storm_rate("sqlite:", workers=workers, seconds=storm_s, **writes_only)
        w = storm_rate(WIRE_SQLITE, workers=workers, seconds=storm_s)
        wire.append(w.rate)
        wire_ratio.append(w.rate / s.rate if s.rate else 0.0)
        ld = storm_rate("sqlite:", workers=workers, seconds=storm_s, load_workers=load_workers)
        loaded.append(ld.rate)
        loaded_calls.append(ld.call_rate)
        loaded_ratio.append(ld.rate / r)
        loaded_call_ratio.append(ld.call_rate / r)
        over_ceiling.append(ld.call_rate / best_recd)
        raw.append(r)
        rec.append(rr)
        storm.append(s.rate)
        calls.append(s.call_rate)
        overhead.append(rr / r)
        ratio.append(s.rate / r)
        call_ratio.append(s.call_rate / r)
        diag.append(d.rate)
        diag_ratio.append(d.rate / r)
    pct = lambda v: f"{v:.2f}"  # noqa: E731
    _section(f"sqlite: ({workers} processes, {rounds} rounds; median (min-max))")
    _row("raw limit, fenced appends/s", spread(raw), f"longest append {spread(worst)} ms (starved at the limit); "
         f"the better of: the store's polled wait {spread(raw_poll)}, SQLite's own busy handler {spread(raw_stock)}")
    _row("raw loop with recording, appends/s", spread(rec))
    _row("recording overhead (recorded/bare)", spread(overhead, pct), "rates; 1.00 = free; lock-fairness noise")
    _row("recording overhead, CPU (bare/recorded)", spread(cpu_overhead, pct),
         f"CPU us per append bare {spread([b for b, _ in cpu_us], lambda v: f'{v:.0f}')}, "
         f"recorded {spread([c for _, c in cpu_us], lambda v: f'{v:.0f}')}")
    before = [per_call_us(_StdlibWriter, 20_000) for _ in range(3)]
    after = [per_call_us(HistoryWriter, 20_000) for _ in range(3)]
    us = lambda v: f"{v:.1f}"  # noqa: E731
    _row("history writer, us per recorded call", spread(after, us), f"stdlib json before: {spread(before, us)}")
    _row("storm rate, accepted mutations/s", spread(storm), "nemesis off")
    _row("storm, all recorded store calls/s", spread(calls), "incl. acquire/load/release/refusals")
    met = "met" if statistics.median(ratio) >= STORM_RATIO_TARGET else "NOT met: see README, Performance"
    _row("storm/raw ratio", spread(ratio, pct), f"target >= {STORM_RATIO_TARGET}: {met}")
    _row("storm calls/raw ratio", spread(call_ratio, pct), "every recorded store call counted; no load workers")
    _row(f"storm + {load_workers} load workers, calls/s", spread(loaded_calls),
         f"accepted mutations/s {spread(loaded)}; nemesis off")
    met = "met" if statistics.median(loaded_call_ratio) >= CALL_RATIO_TARGET else "NOT met: see docs/performance.md"
    _row("storm calls/raw, with load workers", spread(loaded_call_ratio, pct),
         f"target >= {CALL_RATIO_TARGET}: {met}")
    _row("recording ceiling (recorded loop/raw)", spread(ceiling, pct),
         "the raw loop recording every append as a storm does (two durable lines a call), the better of both waits: "
         "a storm that records every call reaches about this share of the raw limit at most")
    _row("storm calls/recorded loop, load workers", spread(over_ceiling, pct),
         "the same storm against that ceiling (reads, cheaper than appends, can take it past 1)")
    _row("storm accepted/raw, with load workers", spread(loaded_ratio, pct), "accepted mutations only")
    _row("diagnostic storm, accepted/s", spread(diag), "8 runs, tenures of 30 meta/blob puts")
    _row("diagnostic storm/raw ratio", spread(diag_ratio, pct), "the harness without the workload's mix")
    _row("wire storm rate, accepted mutations/s", spread(wire),
         "exec: the Python wire server over sqlite:, nemesis off (docs/wire.md)")
    _row("wire/direct storm ratio", spread(wire_ratio, pct), "the same round's sqlite: storm rate; 1.00 = free")


def _checker(sizes: Sequence[int]) -> None:
    from bench_checker import TARGET_OPS_PER_S, calibrate, measure

    _section(f"checker (synthetic consistent histories; target >= {TARGET_OPS_PER_S:,} ops/s, flat memory)")
    _row("calibration", f"10M Python additions in {calibrate():.2f} CPU s")
    with tempfile.TemporaryDirectory(prefix="soak-bench-checker-") as tmp:
        for n in sizes:
            try:
                r = measure(n, tmp)
            except (subprocess.CalledProcessError, ValueError, KeyError) as exc:
                _row(f"checker, {n:,} ops", f"benchmark failed: {type(exc).__name__}")
                continue
            _row(f"checker, {r['count']:,} ops", f"{r['rate']:,.0f} ops/s, {r['rate'] / r['raw_rate']:.2f} of the raw "
                 f"limit; peak RSS {r['rss_mb']:.0f} MB + {r['helper_rss_mb']:.0f} MB child",
                 f"{r['size_mb']:.0f} MB history; raw limit (parsing the lines on one core) {r['raw_rate']:,.0f} "
                 f"ops/s; verdict {r['result']}")


def _storm_once(scenario, store: str, run_dir: Path) -> dict:
    """One storm then the checker; times from the storm's start."""
    from soak.check import check_run
    from soak.storm.orchestrator import run_storm

    t0 = time.perf_counter()
    info = run_storm(scenario, store, run_dir, progress=False)
    storm_wall = time.perf_counter() - t0
    verdict = check_run(run_dir, write=False)
    wall = time.perf_counter() - t0
    extra = json.loads((run_dir / "storm.json").read_text())
    first = None
    for v in verdict.violations:
        ends = [e.complete_ns or e.invoke_ns for e in v.evidence]
        if ends:
            at = (max(ends) - info.started_ns) / 1e9
            first = at if first is None else min(first, at)
    early = extra.get("early_judge") or {}
    return {"status": info.status, "quorum_s": extra.get("time_to_quorum_s"), "storm_wall": storm_wall,
            "wall": wall, "verdict": verdict.result, "clauses": verdict.clauses, "first_evidence_s": first,
            "found_s": early.get("found_at_s"), "judge_cpu_s": early.get("cpu_s"),
            "takeovers_over_R_T": extra.get("takeovers_per_s_over_R_T"), "takeovers_per_s": extra.get("takeovers_per_s")}


def _quorum(runs: int) -> None:
    from soak.scenario import load_scenario

    _section("time to quorum (storm only; the checker's time is in the note)")
    with tempfile.TemporaryDirectory(prefix="soak-bench-quorum-") as tmp:
        res = [_storm_once(load_scenario("smoke"), "sqlite:", Path(tmp) / f"smoke{i}") for i in range(runs)]
    ok = [r["quorum_s"] for r in res if r["quorum_s"] is not None]
    checks = [r["wall"] - r["storm_wall"] for r in res]
    verdicts = ",".join(sorted({r["verdict"] for r in res}))
    _row("smoke, time to quorum (s)", spread(ok, lambda v: f"{v:.1f}") + (f"; {runs - len(ok)} missed" if len(ok) < runs else ""),
         f"check {spread(checks, lambda v: f'{v:.1f}')} s; verdicts {verdicts}")
    ratios = [r["takeovers_over_R_T"] for r in res if r["takeovers_over_R_T"] is not None]
    met = "met" if ratios and statistics.median(ratios) >= TAKEOVER_RATIO_TARGET else "NOT met"
    _row("smoke, takeovers/s over R/T", spread(ratios, lambda v: f"{v:.2f}"),
         f"{spread([r['takeovers_per_s'] for r in res if r['takeovers_per_s'] is not None], lambda v: f'{v:.1f}')} "
         f"takeovers/s; R/T = runs / ttl; target >= {TAKEOVER_RATIO_TARGET}: {met}")


def _nightly(left_s: float, force: bool) -> None:
    """One nightly storm, bounded by what is left of the budget (it takes about 310 s here: its 600 stalls, about 2 a
    second, set its pace; 312 s at `e6d2eb6`), or a line saying why it did not run."""
    from soak.scenario import load_scenario

    sc = load_scenario("nightly")
    need = NIGHTLY_MIN_S
    if not force and left_s < need:
        _row("nightly, time to quorum", f"not run: {left_s:.0f} s left of the budget, needs ~{need:.0f}",
             "benchmarks/bench.py --only nightly")
        return
    bound = sc.time_bound_s if force else max(left_s - 20.0, 1.0)  # snapshot and check fit in the rest
    sc = dataclasses.replace(sc, time_bound_s=bound)
    with tempfile.TemporaryDirectory(prefix="soak-bench-nightly-") as tmp:
        r = _storm_once(sc, "sqlite:", Path(tmp) / "nightly")
    q = f"missed within {bound:.0f} s" if r["quorum_s"] is None else f"{r['quorum_s']:.0f}"
    _row("nightly, time to quorum (s)", q, f"1 run; check {r['wall'] - r['storm_wall']:.1f} s; verdict {r['verdict']}")


def _mutants(runs: int, bound_s: float) -> None:
    from soak.scenario import load_scenario

    _section(f"time to detect (smoke storm, stop_on_violation, time bound {bound_s:g} s, then check; {runs} runs each)")
    sc = dataclasses.replace(load_scenario("smoke"), time_bound_s=bound_s, stop_on_violation=True)
    with tempfile.TemporaryDirectory(prefix="soak-bench-mutant-") as tmp:
        for name in MUTANTS:
            res = [_storm_once(sc, f"mutant:{name}", Path(tmp) / f"{name}{i}") for i in range(runs)]
            caught = [r for r in res if r["verdict"] == "fail"]
            firsts = [r["first_evidence_s"] for r in caught if r["first_evidence_s"] is not None]
            walls = [r["wall"] for r in caught]
            found = [r["found_s"] for r in caught if r["found_s"] is not None]
            clauses = sorted({c for r in caught for c in r["clauses"]})
            _row(f"mutant:{name}", f"first evidence {spread(firsts, lambda v: f'{v:.1f}')} s, fail verdict after "
                 f"{spread(walls, lambda v: f'{v:.1f}')} s",
                 f"caught {len(caught)}/{runs}; early judge found it at {spread(found, lambda v: f'{v:.1f}')} s; "
                 f"{', '.join(clauses) or '-'}")


NETWORKED = (os.environ.get("SOAK_POSTGRES_URL", "postgresql://127.0.0.1:5432/test"),
             os.environ.get("SOAK_REDIS_URL", "redis://127.0.0.1:6379/0"))
#: what bounds each networked backend's raw limit (measured, docs/networked.md "Raw fenced-write limit")
NET_BOUND = {"postgresql": "a WAL flush per commit (synchronous_commit on) and one round trip per statement",
             "redis": "one round trip per script and the shared CPU (nothing on disk)"}


def _networked(rounds: int, workers: int, raw_s: float, storm_s: float) -> None:
    """Each networked reference store's raw fenced-append limit and the quiet storm's rates against it, the same
    round; a server that does not answer is a row saying so (the sqlite: rows above are still measured)."""
    from soak.stores import resolve

    for spec in NETWORKED:
        kind = spec.partition(":")[0]
        _section(f"{spec} ({workers} processes, {rounds} rounds; median (min-max))")
        try:
            with tempfile.TemporaryDirectory(prefix="soak-bench-net-") as d:
                target = resolve(spec)
                target.open(d, 1000).close()
                target.cleanup(d)
        except Exception as exc:  # noqa: BLE001 - any failure to reach the server is one line, not a traceback
            _row("raw limit and storm rate", "not measured", f"{spec} did not answer: {type(exc).__name__}: "
                 f"{str(exc).splitlines()[0][:120] if str(exc) else ''}; start the server or set SOAK_"
                 f"{'POSTGRES' if kind == 'postgresql' else 'REDIS'}_URL")
            continue
        raw, calls, accepted, call_ratio, ratio = ([] for _ in range(5))
        for _ in range(rounds):
            r = raw_limit_detail(spec, processes=workers, seconds=raw_s).rate
            s = storm_rate(spec, workers=workers, seconds=storm_s)
            raw.append(r)
            calls.append(s.call_rate)
            accepted.append(s.rate)
            call_ratio.append(s.call_rate / r if r else 0.0)
            ratio.append(s.rate / r if r else 0.0)
        pct = lambda v: f"{v:.2f}"  # noqa: E731
        _row("raw limit, fenced appends/s", spread(raw), f"bound by {NET_BOUND[kind]}")
        _row("storm, all recorded store calls/s", spread(calls), f"accepted mutations/s {spread(accepted)}; "
             "nemesis off")
        _row("storm calls/raw", spread(call_ratio, pct), "reads and refusals count as calls")
        _row("storm/raw (accepted mutations)", spread(ratio, pct))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one round, checker at 100k, one smoke and mutant run")
    p.add_argument("--rounds", type=int, default=3, help="raw/recorded/storm rounds (default 3)")
    p.add_argument("--workers", type=int, default=4, help="processes for raw loop and storm (default 4)")
    p.add_argument("--load-workers", type=int, default=4,
                   help="load workers beside the storm's workers in the loaded throughput storm (default 4)")
    p.add_argument("--checker-10m", action="store_true", help="add the 10M-operation checker run (about 7 min)")
    p.add_argument("--budget", type=float, default=570.0, help="seconds the whole table may take (default 570)")
    p.add_argument("--mutant-bound", type=float, default=10.0, help="time bound of each mutant storm (s)")
    p.add_argument("--only", choices=("throughput", "checker", "quorum", "mutants", "nightly"), action="append",
                   help="run only these sections (repeatable)")
    args = p.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    runs = 1 if args.quick else 3
    sizes = [100_000] if args.quick else [100_000, 1_000_000] + ([10_000_000] if args.checker_10m else [])
    only = set(args.only or ("throughput", "checker", "quorum", "mutants", "nightly"))
    t0 = time.perf_counter()
    load = os.getloadavg()
    print(f"soak bench: {os.cpu_count()} cores, load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
          f"Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n", flush=True)
    print(f"| {'figure':<34} | {'value':<42} | note |")
    print(f"|{'-' * 36}|{'-' * 44}|------|")
    if "throughput" in only:
        _throughput(rounds, args.workers, raw_s=3.0, storm_s=5.0, load_workers=args.load_workers)
        _networked(rounds, args.workers, raw_s=3.0, storm_s=5.0)
    if "checker" in only:
        _checker(sizes)
        if not args.checker_10m:
            _row("checker, 10M ops", "not run: about 7 min here, beyond the budget", "benchmarks/bench.py --checker-10m")
    if "quorum" in only:
        _quorum(runs)
    if "mutants" in only:
        _mutants(runs, args.mutant_bound)
    if "nightly" in only and not args.quick:
        _nightly(args.budget - (time.perf_counter() - t0), force=args.only is not None)
    elif "nightly" in only:
        _row("nightly, time to quorum", "not run (--quick)")
    load = os.getloadavg()
    print(f"\nbench took {time.perf_counter() - t0:.0f} s; load average at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
