"""How often a strike lands inside its window: per run directory (or per mutant of a `soak selftest --out` tree).

A held strike landed inside the store's window, and was proved there, when the run's verdict cites the struck
call as the evidence of a violation: its fence check passed before the takeover and its write landed after it,
where the successor's reads or the journal's order show it. A correct store never shows one (its rate is 0);
against a mutant whose fence check and write are not one unit (`split-fence`, `check-then-write`) the rate is how
well the strikes aim. Each held strike's step k of n (step mode) is in its `pause` event; the rate is also given
for step-mode strikes alone.

    .venv/bin/soak selftest --runs 2 --no-conformance --mutant split-fence --out /tmp/st
    .venv/bin/python benchmarks/strike_windows.py /tmp/st
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from soak.history import Operation, Record, operations

__all__ = ["strike_windows"]


def strike_windows(run_dir: str | Path) -> dict[str, int]:
    """held, landed (cited by the verdict), and the same for step-mode strikes, of one run."""
    hist = Path(run_dir) / "history"
    strikes: dict[tuple[str, int], str] = {}  # (process, op index) -> strike mode
    for ev in operations([hist / "nemesis.jsonl"]):
        if isinstance(ev, Record) and ev.kind == "pause" and ev.value.get("strike") and ev.value.get("op") is not None:
            strikes[(ev.value["target"], int(ev.value["op"]))] = ev.value.get("strike_mode", "?")
    struck: list[tuple[Operation, str]] = []
    for op in operations(sorted(p for p in hist.glob("w*.jsonl"))):
        if not isinstance(op, Operation):
            continue
        if (op.process, op.index) in strikes:
            struck.append((op, strikes[(op.process, op.index)]))
    verdict = Path(run_dir) / "verdict.json"
    cited = set()
    if verdict.is_file():
        for v in json.loads(verdict.read_text()).get("violations", []):
            cited.update((e.get("process"), e.get("index")) for e in v.get("evidence", []))
    out = {"held": len(struck), "landed": 0, "held_step": 0, "landed_step": 0}
    for op, mode in struck:
        landed = (op.process, op.index) in cited
        out["landed"] += landed
        if mode == "step":
            out["held_step"] += 1
            out["landed_step"] += landed
    return out


def _runs(root: Path) -> dict[str, list[Path]]:
    """name -> run directories: one run directory, or a selftest tree (`<mutant>/run<i>`)."""
    if (root / "history").is_dir():
        return {root.name: [root]}
    return {d.name: sorted(r for r in d.iterdir() if (r / "history").is_dir()) for d in sorted(root.iterdir())
            if d.is_dir() and any((r / "history").is_dir() for r in d.iterdir())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: strike_windows.py RUN_DIR|SELFTEST_OUT_DIR", file=sys.stderr)
        return 2
    print(f"| {'store':<20} | runs | strikes held | landed in window | rate | step mode: held, landed |")
    for name, dirs in _runs(Path(argv[0])).items():
        tot: dict[str, int] = defaultdict(int)
        for d in dirs:
            for k, v in strike_windows(d).items():
                tot[k] += v
        rate = tot["landed"] / tot["held"] if tot["held"] else 0.0
        print(f"| {name:<20} | {len(dirs):>4} | {tot['held']:>12} | {tot['landed']:>16} | {rate:.2f} | "
              f"{tot['held_step']}, {tot['landed_step']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
