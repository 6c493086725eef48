"""The activity quorum: counters tailed incrementally from the history files while a storm runs.

Each `poll()` reads only the bytes appended to each history file since the last poll; a last
line without its newline waits for the next poll. Invokes are paired with completions per
process; the workload's counter turns operations into its counters (takeovers, accepted
writes and typed stale refusals per surface, deletion cycles, cross-run refusals), and events
add the nemesis counters (stalls, pauses, pauses inside a store call, kills).

The tailer also notes *suspects*: operations the worker believed stale or cross-run (intent
`stale` or `cross`) that the store nevertheless accepted, or answered with an untyped error.
A suspect is a hint, never a verdict. A lease accepted on another run counts at once. An
operation under a lease of its own run counts only once the tailer has seen a later epoch of
that run granted (completed) before the operation was invoked, the checker's own test of
staleness: a merely expired, unsuperseded lease may be accepted or refused either way.
An acquire refused (`LeaseHeldError`) naming as holder a tenure whose grant and every renew of
it had completed more than twice the ttl before the acquire was invoked, with no renew of it in
flight and no release, is a suspect too (`ttl-honoured`: an expired tenure still blocks).
With the scenario's `stop_on_suspect` the storm ends at the first one and the checker judges.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from soak.history import decode_line
from soak.workloads import QuorumCounter, count_event

__all__ = ["QuorumTracker", "SUSPECT_INTENTS"]

#: Intents under which the worker expects a typed refusal.
SUSPECT_INTENTS = frozenset({"stale", "cross"})
#: How long (monotonic ns) an accepted stale operation waits for a grant line that supersedes it.
_CANDIDATE_WINDOW_NS = 5_000_000_000
#: How far past a refused acquire the tailer reads before judging it (renews invoked before it are seen).
_SETTLE_NS = 500_000_000


class QuorumTracker:
    """Incremental history tailer plus quorum thresholds."""

    def __init__(self, history_dir: str | Path, counter: QuorumCounter, thresholds: dict[str, int],
                 lease_ttl_ms: int | None = None) -> None:
        self.dir = Path(history_dir)
        self.counter = counter
        self.thresholds = dict(thresholds)
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self._pending: dict[str, dict[str, Any]] = {}
        self.events: dict[str, int] = defaultdict(int)
        self.boot_ok = 0
        self.boot_failures: list[str] = []
        self.crashes: list[str] = []
        self.bad_lines = 0
        self.suspects: list[dict[str, Any]] = []
        self._grants: dict[str, list[tuple[int, int]]] = defaultdict(list)  # run -> (complete ts, epoch)
        # (invoke, how it ended): stale ops accepted or answered untyped, not yet known to be superseded
        self._candidates: list[tuple[dict[str, Any], str]] = []
        self._latest_ts = 0
        # ttl-honoured: (run, epoch) -> latest completion of its grant or a renew; released tenures;
        # refused acquires naming a holder, not yet judged
        self._ttl_ns = None if lease_ttl_ms is None else lease_ttl_ms * 1_000_000
        self._touched: dict[tuple[str, int], int] = {}
        self._released: set[tuple[str, int]] = set()
        self._held_refusals: list[tuple[dict[str, Any], tuple[str, int]]] = []
        # per worker incarnation: operations by outcome and the slowest call (starvation shows here)
        self.per_worker: dict[str, dict[str, Any]] = defaultdict(
            lambda: {"ops": 0, "ok": 0, "fail": 0, "info": 0, "unknown": 0, "worst_call_ms": 0.0,
                     "worst_call_surface": None})

    def poll(self) -> None:
        """Read what was appended since the last poll."""
        for path in sorted(self.dir.glob("*.jsonl")):
            offset = self._offsets.get(path, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read()
            except OSError:
                continue
            if not data:
                continue
            self._offsets[path] = offset + len(data)
            data = self._partial.pop(path, b"") + data
            lines = data.split(b"\n")
            if lines[-1]:
                self._partial[path] = lines[-1]  # incomplete last line: wait for the rest
            for raw in lines[:-1]:
                if raw.strip():
                    try:
                        self._line(decode_line(raw))
                    except (ValueError, KeyError, TypeError):
                        self.bad_lines += 1
        self._settle_candidates()

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
        self._suspect(inv, done)
        if inv.get("f") == "open":
            if done is not None and done.get("t") == "ok":
                self.boot_ok += 1
            else:
                msg = (done or {}).get("msg") or "no completion (killed or hung while booting)"
                self.boot_failures.append(f"{inv['p']}: {msg}")
            return
        self.counter.feed(inv, done)

    # -- suspects ---------------------------------------------------------------------------

    def _suspect(self, inv: dict[str, Any], done: dict[str, Any] | None) -> None:
        """Note grants, and stale or cross-run operations accepted or answered untyped."""
        t = done.get("t") if done else None
        if done is not None:
            self._latest_ts = max(self._latest_ts, int(done.get("ts", 0)))
        f = inv.get("f")
        lease = inv.get("lease")
        if t == "ok" and f == "acquire":
            epoch = (done.get("v") or {}).get("epoch")
            if isinstance(epoch, int):
                self._grants[inv.get("run", "")].append((int(done.get("ts", 0)), epoch))
                self._touch((inv.get("run", ""), epoch), int(done.get("ts", 0)))
            return
        if done is not None and self._ttl_ns is not None:
            if f == "renew" and lease:  # whatever its outcome: its completion bounds when it took effect
                self._touch((lease[0], int(lease[2])), int(done.get("ts", 0)))
            elif f == "release" and lease and t == "ok":
                self._released.add((lease[0], int(lease[2])))
            elif f == "acquire" and t == "fail" and done.get("err") == "LeaseHeldError":
                holder = (done.get("v") or {}).get("holder")
                if isinstance(holder, list) and len(holder) == 3 and isinstance(holder[2], int):
                    self._held_refusals.append((inv, (holder[0], holder[2])))
        if inv.get("intent") not in SUSPECT_INTENTS or not lease or done is None:
            return
        if t == "ok" and lease[0] != inv.get("run", ""):
            self._add_suspect(inv, f"lease for run {lease[0]} accepted on run {inv.get('run')}")
        elif t == "ok":
            self._candidates.append((inv, "accepted"))
        elif t == "info" and done.get("err"):
            self._candidates.append((inv, f"answered with untyped {done.get('err')}"))

    def _touch(self, tenure: tuple[str, int], ts: int) -> None:
        if ts > self._touched.get(tenure, 0):
            self._touched[tenure] = ts

    def _settle_held_refusals(self) -> None:
        """Refused acquires whose named holder had surely expired become `ttl-honoured` suspects.

        Judged once the tailer has read half a second past the acquire, so a renew invoked
        before it has been seen: completed (its completion counts) or still in flight (no
        judgement)."""
        keep = []
        for inv, tenure in self._held_refusals:
            ts = int(inv.get("ts", 0))
            if self._latest_ts - ts < _SETTLE_NS:
                keep.append((inv, tenure))
                continue
            last = self._touched.get(tenure)
            if last is None or tenure in self._released or ts - last <= 2 * self._ttl_ns:
                continue
            if any(p.get("f") == "renew" and p.get("lease") and (p["lease"][0], p["lease"][2]) == tenure
                   for p in self._pending.values()):
                continue
            self._add_suspect(inv, f"acquire of run {tenure[0]} refused for epoch {tenure[1]}, whose grant and "
                                   f"renewals had all completed {(ts - last) / 1e6:.0f} ms before (ttl "
                                   f"{self._ttl_ns / 1e6:.0f} ms)")
        self._held_refusals = keep

    def _settle_candidates(self) -> None:
        """Stale operations accepted (or answered untyped) become suspects once the tailer has seen a
        later epoch of their run granted before they were invoked (the checker's own staleness test)."""
        keep = []
        for inv, how in self._candidates:
            run, epoch, ts = inv["lease"][0], int(inv["lease"][2]), int(inv.get("ts", 0))
            later = next((e for done_ts, e in self._grants.get(run, ()) if e > epoch and done_ts < ts), None)
            if later is not None:
                self._add_suspect(inv, f"{inv.get('f')} under epoch {epoch} of run {run} {how} after epoch "
                                       f"{later} was granted")
            elif self._latest_ts - ts < _CANDIDATE_WINDOW_NS:
                keep.append((inv, how))
        self._candidates = keep
        if self._ttl_ns is not None:
            self._settle_held_refusals()

    def _add_suspect(self, inv: dict[str, Any], reason: str) -> None:
        self.suspects.append({"process": inv.get("p"), "index": inv.get("i"), "f": inv.get("f"),
                              "run": inv.get("run"), "intent": inv.get("intent"), "lease": inv.get("lease"),
                              "ts": inv.get("ts"), "reason": reason})

    def finish(self) -> None:
        """After the last poll: invokes never completed count as unknown operations."""
        pending, self._pending = self._pending, {}
        for inv in pending.values():
            self._op(inv, None)
        self._settle_candidates()

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
