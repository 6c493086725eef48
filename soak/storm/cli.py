"""`soak storm`: run one storm, then check it; exit 0 pass, 1 fail, 2 usage, 3 inconclusive."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from soak.scenario import load_scenario, parse_override

__all__ = ["configure_parser", "run_cli"]

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", metavar="SPEC", help="store spec (default: the scenario's, sqlite:)")
    parser.add_argument("--scenario", metavar="NAME|PATH", default=None,
                        help="preset name (smoke, certify, nightly, claims) or a TOML file (default: the "
                             "workload's preset: smoke for runs, claims for claims)")
    parser.add_argument("--workload", metavar="NAME",
                        help="what the storm does: runs (fenced run stores, the default) or claims (task claim "
                             "stores); names the preset when --scenario is not given")
    parser.add_argument("--workers", type=int, metavar="N", help="worker processes")
    parser.add_argument("--ttl-ms", type=int, metavar="N", help="lease ttl in milliseconds")
    parser.add_argument("--seed", type=int, metavar="N", help="storm seed (0: random)")
    parser.add_argument("--time-bound", type=float, metavar="S", help="seconds before an unfinished storm is inconclusive")
    parser.add_argument("--out", metavar="DIR", help="run directory (default: reports/<UTC timestamp>-<scenario>/)")
    parser.add_argument("--quiet", action="store_true", help="no live progress bars")
    parser.add_argument("--keep", action="store_true",
                        help="leave a networked store's namespace (schema, keys) in place after the storm")
    parser.add_argument("--no-report", action="store_true",
                        help="skip report.html, the plots and junit.xml (`soak report DIR` writes them later)")
    parser.add_argument("--stop-on-suspect", action="store_true",
                        help="end the storm at the first stale or cross-run operation accepted (or answered "
                             "untyped); the checker still judges, and a stopped storm without a violation is "
                             "inconclusive")
    parser.add_argument("--stop-on-violation", action="store_true",
                        help="judge the history while the storm runs and end it at the first proven violation "
                             "(the checker then judges the whole history: the verdict is fail)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--hosts", type=int, metavar="N",
                       help="spread the workers over N simulated hosts: a local Dask cluster, each host its own "
                            "network namespace (as root) with its own dask worker (docs/cluster.md)")
    where.add_argument("--cluster", metavar="tcp://HOST:PORT",
                       help="spread the workers over the hosts of a running Dask scheduler (docs/cluster.md)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override any scenario key, e.g. --set quorum.takeovers=80 (repeatable)")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for text in args.overrides:
        key, value = parse_override(text)
        out[key] = value
    if getattr(args, "stop_on_suspect", False):
        out["stop_on_suspect"] = True
    if getattr(args, "stop_on_violation", False):
        out["stop_on_violation"] = True
    for key, value in (("store", args.store), ("workers", args.workers), ("lease_ttl_ms", args.ttl_ms),
                       ("seed", args.seed), ("time_bound_s", args.time_bound)):
        if value is not None:
            out[key] = value
    return out


def _update_latest(run_dir: Path) -> None:
    """Point `reports/latest` at the newest run directory written under `reports/`."""
    parent = run_dir.resolve().parent
    if parent != Path("reports").resolve():
        return
    link = parent / "latest"
    tmp = parent / f".latest.{os.getpid()}"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(run_dir.name)
        os.replace(tmp, link)
    except OSError:
        pass


def run_cli(args: argparse.Namespace) -> int:
    from soak.check import check_run
    from soak.errors import crash
    from soak.stores import resolve
    from soak.storm.orchestrator import default_run_dir, ensure_shared, run_storm

    from soak.errors import ScenarioError
    from soak.workloads import get_workload, store_kind

    name = args.scenario
    if name is None:
        name = get_workload(args.workload).root_preset or "smoke" if args.workload else "smoke"
    scenario = load_scenario(name, _overrides(args))
    if args.workload and get_workload(args.workload).name != get_workload(scenario.workload).name:
        raise ScenarioError(f"scenario {name} is a {scenario.workload} storm, not {args.workload}; drop --workload "
                            f"or pass a {args.workload} scenario")
    target = resolve(scenario.store, kind=store_kind(get_workload(scenario.workload)))
    ensure_shared(target)
    if args.keep:
        target = dataclasses.replace(target, keep=True)
    progress = not args.quiet and sys.stderr.isatty()
    run_dir = Path(args.out) if args.out else default_run_dir(scenario.name)
    if not args.quiet:
        print(f"storm: {scenario.name} on {target.spec} ({scenario.workers} workers, ttl {scenario.lease_ttl_ms} ms, "
              f"time bound {scenario.time_bound_s:g} s) -> {run_dir}", flush=True)
    if args.hosts is not None or args.cluster is not None:
        from soak.cluster import run_cluster_storm

        info = run_cluster_storm(scenario, target, run_dir, hosts=args.hosts, scheduler=args.cluster,
                                 progress=progress, quiet=args.quiet)
    else:
        info = run_storm(scenario, target, run_dir, progress=progress)
    _update_latest(run_dir)
    short = [f"{k} {v}/{info.quorum_target.get(k, 0)}" for k, v in info.quorum_reached.items()
             if v < info.quorum_target.get(k, 0)]
    reached = ", ".join(short[:6]) + (f" and {len(short) - 6} more" if len(short) > 6 else "")
    took = ""
    try:
        extra = json.loads((run_dir / "storm.json").read_text())
        if extra.get("time_to_quorum_s") is not None:
            took = f", quorum in {extra['time_to_quorum_s']:.1f} s"
        if extra.get("takeovers_per_s_over_R_T") is not None:
            took += (f", {extra['takeovers_per_s']:.1f} takeovers/s = {extra['takeovers_per_s_over_R_T']:.2f} of "
                     f"R/T")
    except (OSError, ValueError):
        pass
    print(f"storm: {info.status} (seed {info.seed}, {info.workers} workers, store {info.store}{took})"
          + (f"; short of quorum: {reached}" if reached and info.status not in ("quorum", "error") else ""))
    if info.error and info.status != "error":
        print(f"cause: {info.error}")
    if info.status == "error":
        print(f"soak: storm error: {info.error}", file=sys.stderr)
        print(f"run directory: {run_dir}")
        return EXIT_USAGE
    try:
        verdict = check_run(run_dir)
    except Exception as exc:  # a checker that crashes is inconclusive, never pass
        print(f"verdict: inconclusive ({crash(exc, run_dir, 'the checker')})")
        print(f"run directory: {run_dir}")
        return EXIT_INCONCLUSIVE
    status = verdict.result
    print(f"verdict: {verdict.summary()}")
    if not args.no_report:
        try:
            from soak.report import build_report

            print(f"report: {build_report(run_dir)}")
        except Exception as exc:  # the verdict stands; `soak report DIR` can rebuild the report later
            print(f"report: not written ({type(exc).__name__}: {exc}); rebuild it with `soak report {run_dir}`")
    print(f"run directory: {run_dir}")
    if status == "fail":
        return EXIT_FAIL
    if status == "pass" and info.status == "quorum":
        return EXIT_PASS
    return EXIT_INCONCLUSIVE
