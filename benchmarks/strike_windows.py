"""How often a strike lands inside its window: per run directory (or per mutant of a `soak selftest --out` tree).

The counting is `soak.check.strikes.strike_windows`. A held strike landed inside the store's window, and was
proved there, when the run's verdict cites the struck call as the evidence of a violation: its fence check passed before the takeover and its write landed after it,
where the successor's reads or the journal's order show it. A correct store never shows one (its rate is 0);
against a mutant whose fence check and write are not one unit (`split-fence`, `check-then-write`) the rate is how
well the strikes aim. Each held strike's step k of n (step mode) is in its `pause` event; the rate is also given
for step-mode strikes alone.

    .venv/bin/soak selftest --runs 2 --no-conformance --mutant split-fence --out /tmp/st
    .venv/bin/python benchmarks/strike_windows.py /tmp/st
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from soak.check.strikes import strike_windows

__all__ = ["strike_windows"]


def _runs(root: Path) -> dict[str, list[Path]]:
    """name -> run directories: one run directory, or a selftest tree (`<mutant>/run<i>`)."""
    if (root / "history").is_dir():
        return {root.name: [root]}
    return {d.name: sorted(r for r in d.iterdir() if (r / "history").is_dir()) for d in sorted(root.iterdir())
            if d.is_dir() and any((r / "history").is_dir() for r in d.iterdir())}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: strike_windows.py RUN_DIR|SELFTEST_OUT_DIR", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if not Path(argv[0]).is_dir():
        print(f"strike_windows.py: {argv[0]} is not a directory; give a run directory or a soak selftest --out one",
              file=sys.stderr)
        return 2
    print(f"| {'store':<20} | runs | strikes held | takeover mid-call | landed in window | rate | step mode: held, "
          f"landed | next to an exchange: held, landed | repeated: held, mid-call, landed |")
    for name, dirs in _runs(Path(argv[0])).items():
        tot: dict[str, int] = defaultdict(int)
        for d in dirs:
            for k, v in strike_windows(d).items():
                tot[k] += v
        rate = tot["landed"] / tot["held"] if tot["held"] else 0.0
        print(f"| {name:<20} | {len(dirs):>4} | {tot['held']:>12} | {tot['witnessed']:>17} | {tot['landed']:>16} | "
              f"{rate:.2f} | {tot['held_step']}, {tot['landed_step']} | {tot['held_io']}, {tot['landed_io']} | {tot['held_again']}, "
              f"{tot['witnessed_again']}, {tot['landed_again']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
