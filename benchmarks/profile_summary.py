"""Summarise a py-spy raw (collapsed) profile of a storm: where the worker processes spend time.

    py-spy record --subprocesses --idle -f raw -o prof.txt -- .venv/bin/python benchmarks/storm_rate.py 6
    .venv/bin/python benchmarks/profile_summary.py prof.txt

Prints, over the samples of storm worker processes only (stacks through `worker_main`), the
share of time inside each function (inclusive) and the leaf functions (self time).
"""

from __future__ import annotations

import re
import sys
from collections import Counter

__all__ = ["summarise"]

_FRAME = re.compile(r"^(.*) \((.*?):\d+\)$")


def summarise(path: str, *, top: int = 25, match: str = "worker_main") -> str:
    """The text summary of one raw profile, restricted to stacks containing `match`."""
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    with open(path) as fh:
        for line in fh:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if match not in stack:
                continue
            n = int(count)
            total += n
            frames = []
            for raw in stack.split(";"):
                m = _FRAME.match(raw)
                if m:
                    frames.append(f"{m.group(1)} ({m.group(2)})")
            for name in set(frames):
                inclusive[name] += n
            if frames:
                leaf[frames[-1]] += n
    out = [f"{total} samples in stacks through {match}", "", "inclusive:"]
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    out += ["", "self (leaf):"]
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in leaf.most_common(top)]
    return "\n".join(out)


if __name__ == "__main__":
    print(summarise(sys.argv[1], top=int(sys.argv[2]) if len(sys.argv) > 2 else 25,
                    match=sys.argv[3] if len(sys.argv) > 3 else "worker_main"))
