"""The outsider red team (issue 18): smoke storms and conformance against `tests/redteam_stores.py`.

For every broken store of `REDTEAM` it runs N smoke storms (`soak storm --store SPEC`, one at a
time) and `soak conformance --store SPEC` once, then prints one table row per store: the clause
and cell the store breaks, each storm's verdict (`F` fail naming the store's clause, `f` fail
naming only other clauses, `P` pass, `I` inconclusive, `E` error), the clauses the storms named,
the wall time from storm start to a fail verdict (median), and the conformance verdict with
whether it named the store's clause. A footer gives the catch rate of both.

    nice -n 10 .venv/bin/python benchmarks/redteam.py                     # 3 storms per store
    nice -n 10 .venv/bin/python benchmarks/redteam.py --storms 1 AppendSuperseded MetaReleased
    nice -n 10 .venv/bin/python benchmarks/redteam.py --json out.json     # also the raw results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.redteam_stores import REDTEAM  # noqa: E402

SOAK = os.path.join(os.path.dirname(sys.executable), "soak")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def storm(spec: str, out: str, extra: list[str]) -> dict:
    """One smoke storm; its verdict, the clauses its violations name and its wall time."""
    start = time.monotonic()
    proc = subprocess.run([SOAK, "storm", "--store", spec, "--quiet", "--no-report", "--out", out, *extra],
                          cwd=ROOT, env=_env(), capture_output=True, text=True)
    elapsed = time.monotonic() - start
    try:
        with open(os.path.join(out, "verdict.json")) as fh:
            verdict = json.load(fh)
    except (OSError, ValueError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return {"result": "error", "clauses": [], "elapsed_s": elapsed, "rc": proc.returncode, "detail": tail[0]}
    clauses = sorted({v["clause"] for v in verdict.get("violations", [])})
    return {"result": verdict["result"], "clauses": clauses, "elapsed_s": elapsed, "rc": proc.returncode,
            "reasons": verdict.get("reasons", [])[:3]}


def conformance(spec: str) -> dict:
    proc = subprocess.run([SOAK, "conformance", "--store", spec, "--json"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return {"verdict": "error", "failed": [], "rc": proc.returncode}
    failed = sorted(c for c, status in report.get("clauses", {}).items() if status == "fail")
    return {"verdict": report.get("verdict"), "failed": failed, "rc": proc.returncode}


def _mark(run: dict, clause: str) -> str:
    if run["result"] == "fail":
        return "F" if clause in run["clauses"] else "f"
    return {"pass": "P", "inconclusive": "I"}.get(run["result"], "E")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="stores of REDTEAM to run (default: all)")
    parser.add_argument("--storms", type=int, default=3, help="smoke storms per store (default 3)")
    parser.add_argument("--no-conformance", action="store_true", help="skip soak conformance")
    parser.add_argument("--json", metavar="FILE", help="also write the raw results here")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to soak storm")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in REDTEAM]
    if unknown:
        parser.error(f"no red-team store {', '.join(unknown)}; pick from {', '.join(REDTEAM)}")
    names = args.names or list(REDTEAM)
    extra = [a for kv in args.set for a in ("--set", kv)]
    results: dict[str, dict] = {}
    header = f"{'store':26} {'clause':21} {'storms':7} {'fail s':>6}  {'conformance':16} storm clauses"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="soak-redteam-") as tmp:
        for name in names:
            spec, clause, cell = REDTEAM[name]
            runs = [storm(spec, os.path.join(tmp, f"{name}-{i}"), extra) for i in range(args.storms)]
            conf = None if args.no_conformance else conformance(spec)
            results[name] = {"spec": spec, "clause": clause, "cell": cell, "storms": runs, "conformance": conf}
            marks = "".join(_mark(r, clause) for r in runs)
            fail_times = [r["elapsed_s"] for r in runs if r["result"] == "fail"]
            fail_s = f"{statistics.median(fail_times):6.1f}" if fail_times else "     -"
            named = sorted({c for r in runs for c in r["clauses"]})
            if conf is None:
                conf_s = "-"
            else:
                conf_s = conf["verdict"] + ("" if conf["verdict"] != "fail" else
                                            " (clause)" if clause in conf["failed"] else " (other)")
            print(f"{name:26} {clause:21} {marks:7} {fail_s}  {conf_s:16} {', '.join(named) or '-'}", flush=True)
    caught = [n for n in names if any(_mark(r, REDTEAM[n][1]) == "F" for r in results[n]["storms"])]
    always = [n for n in names if all(_mark(r, REDTEAM[n][1]) == "F" for r in results[n]["storms"])]
    print(f"\nstorm: {len(always)}/{len(names)} stores failed naming their clause in every storm, "
          f"{len(caught)}/{len(names)} in at least one")
    if not args.no_conformance:
        conf_caught = [n for n in names if REDTEAM[n][1] in results[n]["conformance"]["failed"]]
        conf_any = [n for n in names if results[n]["conformance"]["verdict"] == "fail"]
        print(f"conformance: {len(conf_caught)}/{len(names)} failed naming the clause, {len(conf_any)}/{len(names)} failed")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
