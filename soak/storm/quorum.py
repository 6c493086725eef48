"""The activity quorum: counters tailed incrementally from the history files while a storm runs.

Each `poll()` reads only the bytes appended to each history file since the last poll; a last
line without its newline waits for the next poll. Invokes are paired with completions per
process; the workload's counter turns operations into its counters and notes its suspects (see
the workload's `QuorumCounter`), and events add the nemesis counters (stalls, pauses, pauses
inside a store call, kills). Boots (`open`) are counted here, for every workload.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from soak.history import decode_line
from soak.workloads import QuorumCounter, count_event

__all__ = ["QuorumTracker", "read_appended"]


def read_appended(path: Path, offset: int) -> tuple[bytes, int]:
    """The complete lines of `path` from byte `offset` on, and the offset after them: a last line without its
    newline is left for the next read (its writer is still writing it). An unreadable file reads as nothing."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return b"", offset
    end = data.rfind(b"\n") + 1
    return data[:end], offset + end


class QuorumTracker:
    """Incremental history tailer plus quorum thresholds."""

    def __init__(self, history_dir: str | Path, counter: QuorumCounter, thresholds: dict[str, int]) -> None:
        self.dir = Path(history_dir)
        self.counter = counter
        self.thresholds = dict(thresholds)
        self._offsets: dict[Path, int] = {}
        self._pending: dict[str, dict[str, Any]] = {}
        self.events: dict[str, int] = defaultdict(int)
        self.boot_ok = 0
        self.boot_failures: list[str] = []
        self.crashes: list[str] = []
        self.bad_lines = 0
        self._latest_ts = 0
        # per worker incarnation: operations by outcome and the slowest call (starvation shows here)
        self.per_worker: dict[str, dict[str, Any]] = defaultdict(
            lambda: {"ops": 0, "ok": 0, "fail": 0, "info": 0, "unknown": 0, "worst_call_ms": 0.0,
                     "worst_call_surface": None})

    def poll(self) -> None:
        """Read what was appended since the last poll."""
        for path in sorted(self.dir.glob("*.jsonl")):
            data, self._offsets[path] = read_appended(path, self._offsets.get(path, 0))
            for raw in data.split(b"\n"):
                if raw.strip():
                    try:
                        self._line(decode_line(raw))
                    except (ValueError, KeyError, TypeError):
                        self.bad_lines += 1
        self.counter.settle(self._latest_ts, list(self._pending.values()))

    def _line(self, obj: dict[str, Any]) -> None:
        t = obj["t"]
        p = obj["p"]
        if t == "event":
            kind = obj.get("kind", "")
            v = obj.get("v") or {}
            count_event(self.events, p, kind, v)
            if kind == "crash":
                when = " while starting" if v.get("phase") == "starting" else ""
                self.crashes.append(f"{p}{when}: {v.get('error')}: {v.get('message')}")
        elif t == "invoke":
            self._pending[p] = obj
        else:
            inv = self._pending.pop(p, None)
            if inv is None or inv.get("i") != obj.get("i"):
                return
            self._op(inv, obj)

    def _op(self, inv: dict[str, Any], done: dict[str, Any] | None) -> None:
        stats = self.per_worker[inv["p"]]
        stats["ops"] += 1
        if done is None:
            stats["unknown"] += 1
        else:
            stats[done.get("t", "?")] += 1
            wait_ms = (int(done.get("ts", 0)) - int(inv.get("ts", 0))) / 1e6
            if wait_ms > stats["worst_call_ms"]:
                stats["worst_call_ms"] = round(wait_ms, 3)
                stats["worst_call_surface"] = inv.get("f")
        if done is not None:
            self._latest_ts = max(self._latest_ts, int(done.get("ts", 0)))
        if inv.get("f") == "open":
            if done is not None and done.get("t") == "ok":
                self.boot_ok += 1
            else:
                msg = (done or {}).get("msg") or "no completion (killed or hung while booting)"
                self.boot_failures.append(f"{inv['p']}: {msg}")
            return
        self.counter.feed(inv, done)

    def finish(self) -> None:
        """After the last poll: invokes never completed count as unknown operations."""
        pending, self._pending = self._pending, {}
        for inv in pending.values():
            self._op(inv, None)
        self.counter.settle(self._latest_ts, [])

    @property
    def suspects(self) -> list[dict[str, Any]]:
        """What the workload's rules flagged so far (a hint for `stop_on_suspect`, never a verdict)."""
        return self.counter.suspects

    def counts(self) -> dict[str, int]:
        out = dict(self.counter.counts())
        out.update(self.events)
        out["boot_ok"] = self.boot_ok
        out["boot_failed"] = len(self.boot_failures)
        out["suspects"] = len(self.suspects)
        return out

    def reached(self) -> dict[str, int]:
        """The current count of every thresholded counter."""
        counts = self.counts()
        return {k: int(counts.get(k, 0)) for k in self.thresholds}

    def met(self) -> bool:
        """True when every threshold is reached (an empty quorum is met at once)."""
        counts = self.counts()
        return all(counts.get(k, 0) >= v for k, v in self.thresholds.items())
