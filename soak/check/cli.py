"""`soak check RUN_DIR`: re-check a stored run offline and print its verdict."""

from __future__ import annotations

import argparse
import json
import os
import sys

from soak.check import check_run
from soak.check.verdict import Verdict
from soak.clauses import clause_title

__all__ = ["configure_parser", "exit_code", "format_verdict", "run_cli"]

_EXIT = {"pass": 0, "fail": 1, "inconclusive": 3}


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory a storm wrote")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")


def exit_code(verdict: Verdict) -> int:
    """0 pass, 1 fail, 3 inconclusive."""
    return _EXIT[verdict.result]


def format_verdict(verdict: Verdict, *, per_clause: int | None = 20) -> str:
    """The verdict line, then each violation with the operations that prove it, then reasons.

    At most `per_clause` violations of each clause are spelled out (None: all); the rest are
    counted, and `--json` always has them all.
    """
    lines = [f"verdict: {verdict.summary()}"]
    shown: dict[str, int] = {}
    for v in verdict.violations:
        shown[v.clause] = shown.get(v.clause, 0) + 1
        if per_clause is not None and shown[v.clause] > per_clause:
            continue
        lines.append(f"  [{v.clause}] {v.statement}")
        lines.append(f"      clause: {clause_title(v.clause)}")
        lines.extend(f"      - {e.describe()}" for e in v.evidence)
    for clause, n in shown.items():
        if per_clause is not None and n > per_clause:
            lines.append(f"  [{clause}] ... and {n - per_clause} more (see verdict.json or --json)")
    if verdict.result != "inconclusive":
        lines.extend(f"  inconclusive: {r}" for r in verdict.reasons)
    return "\n".join(lines)


def run_cli(args: argparse.Namespace) -> int:
    verdict = check_run(args.run_dir)
    text = json.dumps(verdict.to_json(), indent=1, sort_keys=True) if args.json else format_verdict(verdict)
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `soak check RUN | head`: the reader left; the exit code still tells
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return exit_code(verdict)
