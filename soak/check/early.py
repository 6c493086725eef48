"""The early judge: a storm's history checked while the storm runs, to end a broken store's storm at its first
proven violation.

A process beside the storm (`judge_main`) reads the history files as they grow (`soak.history.HistoryTail`) and
folds them into the workload's bounded facts a time slice at a time, as `soak.check.parallel` folds a stored
history, settling after each slice (`CheckPlan.settle`). A slice ends at the *horizon* (`LiveHistory.horizon`):
a time before which every operation of every process is known complete, so that what settling judges is exactly
what the whole check judges at that point (docs/bounded-checker.md). The first violation settling proves
(`CheckPlan.proven`) is written to `early.json` and flagged to the orchestrator, which stops the storm; the full
checker then judges the whole history as always. The early judge never decides a verdict: `check_run` confirms
its violation and names it as a harness defect when the full check does not.

Only a workload whose plan is bounded (settles slices) can be judged early; for another, `early.json` says so.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from soak.check.verdict import Violation
from soak.history import HistoryTail, Record, now_ns

__all__ = ["ASSUMED_CLOCK_ERROR_MS", "EARLY_FILE", "SHIPPED_FILE", "EarlyJudge", "LiveHistory", "first_complete_ns", "judge_main", "unconfirmed"]

#: What the early judge leaves in the run directory (the orchestrator copies it into `storm.json`).
EARLY_FILE = "early.json"
#: Across hosts, where the orchestrator keeps the instant before which every live host's history is shipped.
SHIPPED_FILE = "shipped.json"
#: Across hosts, the clock offset bound (ms) the early judge's real-time rules take as slack, as the full check takes
#: the storm's final bound (`run.json` `clock_error_ms`, known only at the end; 1.0-9.3 ms in 29 storms on 3 simulated
#: hosts): once the hosts' bound so far (`shipped.json`) passes it, the early judge stands aside and the full check
#: alone judges. Without it the early judge proved a ttl-honoured refusal 5 ms inside the full check's slack.
ASSUMED_CLOCK_ERROR_MS = 15.0
#: The events after which a process writes no more (the nemesis's kills, the orchestrator's `exit`s).
_ENDS = frozenset({"kill", "timeout-kill", "exit"})
#: How long after its end is recorded a process's file is taken as final (a write in flight lands by then).
_SETTLE_NS = 20_000_000
_NEMESIS = "nemesis"


def first_complete_ns(v: Violation) -> int | None:
    """When a violation was fully evidenced: the last completion (or invocation, for an operation that never
    completed) among the operations it cites."""
    times = [e.complete_ns if e.complete_ns is not None else e.invoke_ns for e in v.evidence]
    return max(times) if times else None


class LiveHistory:
    """A running storm's history directory: every process's file read as it grows, and the horizon.

    The horizon is the latest time before which every operation is known complete: no process can still add an
    operation invoked before it. A live process bounds it by its pending invoke (its completion is not written
    yet), else by its latest line (its next invoke comes later; after a `stall` event announcing `ms`, that much
    later); a process the storm has spawned but which has written nothing bounds it by its spawn; one the storm
    has recorded as ended (killed, or exited) does not bound it once its file is final.

    Across hosts (`soak.cluster`) everything arrives as the orchestrator ships it, a drain at a time, so a line
    written on a host may not be here yet: the horizon is also bounded by `shipped.json` (`SHIPPED_FILE`, in the
    run directory), the instant before which every live host's history has been shipped, and each host's nemesis
    log (`nemesis-<host>.jsonl`) names its spawns and ends; a process its host ended is final once that end was
    read `_SETTLE_NS` ago (its last lines come in the same drain).
    """

    def __init__(self, history_dir: str | os.PathLike[str], make_lease: Any = None, clock: Any = now_ns) -> None:
        self.dir = Path(history_dir)
        self.clock = clock  # when a host's end was read (the orchestrator's clock, as the horizon's `now`)
        self.make_lease = make_lease
        self.tails: dict[Path, HistoryTail] = {}
        self.events = HistoryTail(self.dir / f"{_NEMESIS}.jsonl")
        self.spawned: dict[str, int] = {}  # process -> when the storm spawned it
        self.ended: dict[str, int] = {}  # process -> when the storm recorded its end
        self.final: set[Path] = set()
        self.host_events: dict[Path, HistoryTail] = {}  # across hosts: each host's nemesis log
        self.host_ended: dict[str, int] = {}  # process its host ended -> when that end was first read
        self.shipped = self.dir.parent / SHIPPED_FILE
        self.shipped_ns: int | None = None  # read from it before the files (None: a storm on one machine)
        self.clock_error_ms = 0.0  # the hosts' clock offset bound so far, read from it

    def poll(self) -> None:
        """Read what every file has gained (the nemesis's events first: an end read there covers the lines read
        after it); across hosts, the instant before which everything was shipped first (a line shipped since then
        bounds nothing it has not)."""
        try:
            shipped = json.loads(self.shipped.read_bytes())
            self.shipped_ns = int(shipped["shipped_ns"])
            self.clock_error_ms = float(shipped.get("clock_error_ms", 0.0))
        except FileNotFoundError:
            pass  # a storm on one machine: every line is written here as it happens
        self.events.read()
        self._take_events(self.events)
        for path in sorted(self.dir.glob(f"{_NEMESIS}-*.jsonl")):
            tail = self.host_events.get(path)
            if tail is None:
                tail = self.host_events[path] = HistoryTail(path, self.make_lease)
            tail.read()
            self._take_events(tail, True)
        for path in sorted(self.dir.glob("w*.jsonl")):
            tail = self.tails.get(path)
            if tail is None:
                tail = self.tails[path] = HistoryTail(path, self.make_lease)
            if path not in self.final:
                tail.read()

    def _take_events(self, tail: HistoryTail, host: bool = False) -> None:
        for item in tail.items:
            if type(item) is Record:
                target = item.value.get("target")
                if item.kind == "spawn" and isinstance(target, str):
                    self.spawned.setdefault(target, item.time)
                elif item.kind in _ENDS and isinstance(target, str):
                    self.ended.setdefault(target, item.time)
                    if host and target not in self.host_ended:
                        self.host_ended[target] = self.clock()

    def horizon(self, now: int) -> int:
        """The horizon at `now` (read before the files were: a line written since bounds nothing it has not)."""
        h = now
        named = {p.stem for p in self.tails}
        for process, at in self.spawned.items():
            if process not in named and process not in self.ended:
                h = min(h, at)
        if self.shipped_ns is not None:
            h = min(h, self.shipped_ns)
        for path, tail in self.tails.items():
            if path in self.final:
                continue
            end = self.ended.get(path.stem)
            if path.stem in self.host_ended:
                end = max(end, self.host_ended[path.stem])  # shipped: its last lines come with its end's drain
            if end is not None and now - end >= _SETTLE_NS:
                tail.end()
                self.final.add(path)
                continue
            if tail.pending_ns is not None:
                h = min(h, tail.pending_ns)
            elif tail.last_ns is None:
                h = min(h, self.spawned.get(path.stem, now))
            else:
                quiet = tail.last_ns
                ev = tail.last_event
                if ev is not None and ev.kind == "stall":
                    quiet += int(float(ev.value.get("ms", 0)) * 1e6)
                h = min(h, quiet)
        return h

    def files(self) -> list[tuple[Path, HistoryTail]]:
        """The worker files in the order the whole check folds them, the nemesis's last (each host's, then the
        orchestrator's)."""
        return [*sorted(self.tails.items()), *sorted(self.host_events.items()),
                (self.dir / f"{_NEMESIS}.jsonl", self.events)]


class StandAside(Exception):
    """The early judge cannot judge this storm as the full check will (its storm goes on to its quorum)."""


class EarlyJudge:
    """Fold a running storm's history up to each new horizon, settle, and report the first proven violation."""

    def __init__(self, history: LiveHistory, plan: Any, facts: Any) -> None:
        self.history, self.plan, self.facts = history, plan, facts
        self.slices = 0
        self.horizon: int | None = None
        self.errors: list[str] = []

    def step(self, now: int | None = None) -> list[Violation]:
        """One round: read, fold every operation invoked before the horizon, settle there; the violations proven
        so far."""
        now = now_ns() if now is None else now
        self.history.poll()
        if self.history.clock_error_ms > ASSUMED_CLOCK_ERROR_MS:
            raise StandAside(f"the hosts' clock offset bound ({self.history.clock_error_ms:.1f} ms) passed the "
                             f"{ASSUMED_CLOCK_ERROR_MS:g} ms the early judge's real-time rules assume: the full check "
                             "judges alone")
        h = self.history.horizon(now)
        settled = self.facts.settled
        if h <= settled:
            return []
        fold = self.plan.fold
        for _path, tail in self.history.files():
            items = tail.items
            if not items:
                continue
            left = fold(self.facts, _drain(items), h)
            if left is not None:
                items.appendleft(left)
        self.plan.settle(self.facts, h)
        self.slices += 1
        self.horizon = h
        self.errors = sorted(set(getattr(self.facts, "early_errors", {}).values()))
        return self.plan.proven(self.facts)


def _drain(items: Any) -> Any:
    """Take items from the left of a deque as the fold asks for them (what it hands back goes back)."""
    while items:
        yield items.popleft()


def unconfirmed(early: dict[str, Any], final: list[Violation]) -> str | None:
    """Why the early judge's violation (as `early.json` records it) is not among the full check's `final`
    violations, or None when it is: a violation of the same clause about the same operation (the first it cites:
    the stale write, the read, the second grant's first grant, the failed boot).

    The rest of the evidence may differ: a read is judged against the writes folded when it settles, so the
    full check, settling later, may name a later write in flight as the one the read should have seen. And where
    the early violation explains itself by an accepted write of a tenure (a read that missed a superseded epoch's
    write), the full check may convict that tenure through another of its writes first: a later write of the same
    tenure, folded after the early judge stopped, can change what the read should have seen (a stale delete of the
    run). A violation of the same clause whose first cited operation is an accepted write of that tenure confirms it."""
    v = early.get("violation")
    if not v:
        return None
    cited = [e["tag"] for e in v.get("evidence", [])]
    if not cited and any(f.clause == v["clause"] for f in final):
        return None
    if cited and any(f.clause == v["clause"] and f.evidence and f.evidence[0].tag == cited[0] for f in final):
        return None
    tenures = {(e.get("run"), e.get("epoch")) for e in v.get("evidence", [])[1:]
               if e.get("outcome") == "ok" and e.get("epoch") is not None}
    if tenures and any(f.clause == v["clause"] and f.evidence and f.evidence[0].outcome == "ok"
                       and (f.evidence[0].run, f.evidence[0].epoch) in tenures for f in final):
        return None
    return (f"the early judge stopped the storm at a {v['clause']} violation ({v.get('statement', '')[:200]}) "
            "that the full check does not confirm: a harness defect, please report it with this run directory")


def _write(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def judge_main(run_dir: str, workload: str, info: Any, settings: dict[str, Any], start_ns: int, stop: Any,
               found: Any, poll_s: float = 0.1) -> None:
    """The early judge's process: judge `run_dir`'s history until `stop` is set or a violation is proven (then
    `found` is set). What it found, when, and what it cost go to `early.json`; its stderr to `early.stderr`."""
    from soak.errors import save_traceback
    from soak.workloads import get_workload

    err = os.open(os.path.join(run_dir, "early.stderr"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(err, 2)
    os.close(err)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    out = Path(run_dir, EARLY_FILE)
    record: dict[str, Any] = {"supported": True, "violation": None}
    cpu0 = time.process_time()
    judge: EarlyJudge | None = None
    try:
        plan = get_workload(workload).check_plan()
        if not plan.bounded:
            record.update(supported=False, why=f"the {workload} workload's checker does not settle time slices, so "
                                               "it cannot judge a storm while it runs")
            return
        if Path(run_dir, SHIPPED_FILE).exists():  # across hosts: the final clock bound is not known yet
            settings = {**settings, "clock_error_ms": max(settings.get("clock_error_ms", 0.0), ASSUMED_CLOCK_ERROR_MS)}
        facts = plan.new_facts(None, info, **settings)
        judge = EarlyJudge(LiveHistory(Path(run_dir, "history"), plan.make_lease), plan, facts)
        while not stop.value:
            found_now = judge.step()
            if found_now:
                first = min(found_now, key=lambda v: first_complete_ns(v) or 0)
                at = now_ns()
                evidenced = first_complete_ns(first)
                record.update(
                    violation=first.to_json(), found_at_s=round((at - start_ns) / 1e9, 3),
                    first_evidence_s=None if evidenced is None else round((evidenced - start_ns) / 1e9, 3),
                    proven=len(found_now))
                found.value = 1
                return
            time.sleep(poll_s)
    except StandAside as exc:
        record["stood_aside"] = str(exc)
    except BaseException as exc:  # noqa: BLE001 - the early judge only ever ends a storm early; the check decides
        where = save_traceback(run_dir, exc, "early judge")
        record["error"] = f"the early judge raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]} ({where})"
    finally:
        if judge is not None:
            record.update(slices=judge.slices, operations=judge.facts.stats.get("operations", 0),
                          horizon_s=None if judge.horizon is None else round((judge.horizon - start_ns) / 1e9, 3))
            if judge.errors:
                record["checker_errors"] = judge.errors
        record["cpu_s"] = round(time.process_time() - cpu0, 3)
        _write(out, record)
