"""`soak trend DIR`: verdicts, storm length and throughput across many stored runs."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from soak.errors import RunDirError
from soak.rundir import RUN_INFO, VERDICT_FILE, load_run_info

__all__ = ["TrendPoint", "collect", "configure_parser", "run_cli", "trend_png"]

_COLOURS = {"pass": "tab:green", "fail": "tab:red", "inconclusive": "tab:orange"}


@dataclass(frozen=True, slots=True)
class TrendPoint:
    name: str
    started: float  # wall-clock seconds
    result: str
    seconds: float
    ops_per_s: float
    violations: int


def _ops(run_dir: Path) -> int:
    """Completed operations, counted from completion lines without parsing every record."""
    total = 0
    for path in (run_dir / "history").glob("w*.jsonl"):
        with open(path, "rb") as fh:
            total += sum(1 for line in fh if line.startswith((b'{"t":"ok"', b'{"t":"fail"', b'{"t":"info"')))
    return total


def collect(root: str | os.PathLike[str]) -> list[TrendPoint]:
    """One point per run directory below `root` (skipping the `latest` link)."""
    points = []
    for info_path in sorted(Path(root).glob(f"*/{RUN_INFO}")):
        run_dir = info_path.parent
        if run_dir.is_symlink():
            continue
        try:
            info = load_run_info(run_dir)
        except RunDirError:
            continue
        verdict_path = run_dir / VERDICT_FILE
        verdict = json.loads(verdict_path.read_text()) if verdict_path.is_file() else {}
        seconds = max(info.ended_ns - info.started_ns, 0) / 1e9
        ops = _ops(run_dir)
        points.append(TrendPoint(run_dir.name, info.wall_started, verdict.get("result", "inconclusive"), seconds,
                                 ops / seconds if seconds else 0.0, len(verdict.get("violations", []))))
    return sorted(points, key=lambda p: p.started)


def trend_png(points: list[TrendPoint]) -> bytes:
    import io

    import matplotlib  # imported here, not at module level: `soak trend --help` need not pay for it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    xs = list(range(len(points)))
    a1.bar(xs, [p.seconds for p in points], color=[_COLOURS.get(p.result, "grey") for p in points])
    a1.set_ylabel("storm length (s)")
    a1.set_title("Verdict (green pass, red fail, orange inconclusive) and storm length per run")
    a2.plot(xs, [p.ops_per_s for p in points], marker="o")
    a2.set_ylabel("operations / s")
    a2.set_xticks(xs, [p.name for p in points], rotation=60, ha="right", fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def configure_parser(parser) -> None:
    parser.add_argument("root", metavar="DIR", nargs="?", default="reports", help="a folder of run directories")
    parser.add_argument("--out", default=None, help="where to write trend.png (default DIR/trend.png)")


def run_cli(args) -> int:
    points = collect(args.root)
    if not points:
        raise RunDirError(f"no run directories under {args.root}; point soak trend at the folder storms write to")
    out = Path(args.out or Path(args.root) / "trend.png")
    out.write_bytes(trend_png(points))
    for p in points:
        print(f"{p.name}  {p.result:<12} {p.seconds:7.1f} s {p.ops_per_s:9.0f} ops/s  {p.violations} violation(s)")
    print(out)
    return 0
