"""How often the storm's strikes land inside a window: from one run directory's nemesis events and verdict.

A held strike (a `pause` event with `strike: true`) is *witnessed* when a successor took the struck call's run over
while the call was held (its `resume` event names the successor): a takeover got in mid-call, where a store whose
fence check and write are not one unit lets a stale write through. It *landed* (produced evidence) when the verdict
cites the struck call as evidence of a violation. A correct store shows witnessed strikes and never a landed one;
against a mutant with such a window the landed share is how well the strikes aim. The same counts are kept for the
repeated strikes (`again`: a step position where a takeover got in mid-call before, struck again) and for the
step strikes of the sweep over the boundaries next to the call's exchanges (`io`, `soak.storm.strike`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from soak.history import Operation, Record, operations
from soak.rundir import HISTORY_DIR

__all__ = ["KEYS", "strike_windows"]

#: The counts `strike_windows` returns.
KEYS = ("held", "witnessed", "landed", "held_step", "landed_step", "held_io", "landed_io", "held_again",
        "witnessed_again", "landed_again")


def strike_windows(run_dir: str | Path) -> dict[str, int]:
    """Held strikes of one run, those witnessed (a takeover got in mid-call) and those landed (cited by the verdict),
    for step-mode strikes, those next to an exchange and repeated strikes."""
    hist = Path(run_dir) / HISTORY_DIR
    held: dict[tuple[str, int], dict[str, Any]] = {}  # (process, op index) -> its strike
    open_hold: dict[str, tuple[str, int]] = {}  # target -> the struck call it is held in
    nemesis = hist / "nemesis.jsonl"
    for ev in operations([nemesis]) if nemesis.is_file() else ():
        if not isinstance(ev, Record):
            continue
        v = ev.value
        if ev.kind == "pause" and v.get("strike") and v.get("op") is not None:
            key = (v.get("target"), int(v["op"]))
            held[key] = {"mode": v.get("strike_mode"), "again": bool(v.get("again")), "io": bool(v.get("io")),
                         "witnessed": False}
            open_hold[v.get("target")] = key
        elif ev.kind == "resume" and v.get("target") in open_hold:
            key = open_hold.pop(v.get("target"))
            held[key]["witnessed"] = v.get("successor") is not None
    cited: set[tuple[Any, Any]] = set()
    verdict = Path(run_dir) / "verdict.json"
    if verdict.is_file():
        for viol in json.loads(verdict.read_text()).get("violations", []):
            cited.update((e.get("process"), e.get("index")) for e in viol.get("evidence", []))
    out = dict.fromkeys(KEYS, 0)
    seen: set[tuple[str, int]] = set()
    for op in operations(sorted(hist.glob("w*.jsonl"))):
        if isinstance(op, Operation) and (op.process, op.index) in held:
            seen.add((op.process, op.index))
    for key in seen:
        s = held[key]
        landed = key in cited
        out["held"] += 1
        out["witnessed"] += s["witnessed"]
        out["landed"] += landed
        if s["mode"] == "step":
            out["held_step"] += 1
            out["landed_step"] += landed
        if s["io"]:
            out["held_io"] += 1
            out["landed_io"] += landed
        if s["again"]:
            out["held_again"] += 1
            out["witnessed_again"] += s["witnessed"]
            out["landed_again"] += landed
    return out
