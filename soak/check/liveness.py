"""Liveness and what a history supports: `call-returns`, `no-crash`, and the gaps that keep a verdict from `pass`.

CONTRACT section 1: every store call returns or raises within a bound (`call-returns`), and a store never kills,
aborts or exits the process that calls it (`no-crash`). Both are judged here from the records the storm writes
itself, never from an exception's class name:

- an operation that completed more than the bound after it was invoked, not counting the time the nemesis held
  its worker stopped (`pause`/`resume` events), broke `call-returns`. A boot has a bound of its own
  (`soak.clauses.boot_bound_s`): the worker's `open`, and a wire store's child restarted inside a call (the
  worker's `reboot` event names the call and how long the boot took), which is not charged to the call's bound
  unless the boot itself ran past its own;
- an operation that never completed (its worker died in it) is judged by how its worker ended, from the
  orchestrator's events: a `timeout-kill` (the storm killed the call at the bound) or a forced kill at the storm's
  end after the bound broke `call-returns`; an `exit` the nemesis did not cause, with the worker inside that call
  (the worker's shared state, read after its death), broke `no-crash` (the signal or exit status is named, and a
  `store-exit` event from the worker says when the store raised `SystemExit` or the like); a nemesis `kill` within
  the bound leaves the operation unknown, as it should;
- a call in flight while the nemesis had its host cut off the store (a storm across hosts) is not judged: how long
  it takes then is the network's retransmission timers', not the store's.

`history_gaps` names what keeps the verdict from `pass` although nothing was violated: no operations at all, a
spawned worker whose history file is missing, the harness's own failure in a worker, a worker that ended outside
any store call for no recorded reason, and a quorum that the checked history does not support (recounted here
from the operations, not read from `run.json`).
"""

from __future__ import annotations

from typing import Any

from soak.check.verdict import Violation

__all__ = ["check_liveness", "exercised", "history_gaps", "lost_workers", "recount"]


def _value(ev: Any) -> dict[str, Any]:
    return ev.value if isinstance(ev.value, dict) else {}


class _Lives:
    """What the storm's events say about each worker: when the nemesis held it stopped, and how it ended."""

    def __init__(self, events: list[Any]) -> None:
        self.pauses: dict[str, list[list[float]]] = {}  # process -> [[stopped, resumed or inf], ...]
        self.ends: dict[str, tuple[int, str, dict[str, Any]]] = {}  # process -> (when, kill|timeout-kill|exit, value)
        self.spawned: dict[str, dict[str, Any]] = {}
        self.started: set[str] = set()
        self.crashes: dict[str, dict[str, Any]] = {}
        self.store_exits: dict[tuple[str, int], dict[str, Any]] = {}
        self.reboots: dict[tuple[str, int], list[tuple[int, int]]] = {}  # (process, op) -> [(boot began, ended)]
        # a storm across hosts: workers of a host lost before all it wrote was shipped -> the host
        self.cut_short: dict[str, str] = {}
        for ev in events:
            v = _value(ev)
            if ev.process != "nemesis":
                if ev.kind == "start":
                    self.started.add(ev.process)
                elif ev.kind == "crash":
                    self.crashes.setdefault(ev.process, v)
                    if v.get("phase") == "starting":
                        self.started.add(ev.process)  # it wrote its history: the crash
                elif ev.kind == "store-exit" and isinstance(v.get("i"), int):
                    self.store_exits[(ev.process, v["i"])] = v
                elif ev.kind == "reboot" and isinstance(v.get("i"), int) and isinstance(v.get("boot_ns"), int):
                    self.reboots.setdefault((ev.process, v["i"]), []).append((ev.time - v["boot_ns"], ev.time))
                continue
            if ev.kind == "host-lost" and v.get("history_complete") is False:
                for w in v.get("workers") or ():
                    self.cut_short[w] = v.get("host")
            target = v.get("target")
            if not isinstance(target, str):
                continue
            if ev.kind == "spawn":
                self.spawned[target] = v
            elif ev.kind == "pause":
                self.pauses.setdefault(target, []).append([ev.time, float("inf")])
            elif ev.kind == "resume":
                open_ = self.pauses.get(target)
                if open_ and open_[-1][1] == float("inf"):
                    open_[-1][1] = ev.time
            elif ev.kind in ("kill", "timeout-kill", "exit") and target not in self.ends:
                self.ends[target] = (ev.time, ev.kind, v)

    def booted(self, process: str, index: int) -> list[float]:
        """How long each boot of a wire store's child restarted inside operation `index` took, not counting pauses."""
        return [max(0.0, b - a - self.paused(process, a, b)) for a, b in self.reboots.get((process, index), ())]

    def paused(self, process: str, start: float, end: float) -> float:
        """How long within [start, end] the nemesis held `process` stopped."""
        total = 0.0
        for a, b in self.pauses.get(process, ()):
            lo, hi = max(a, start), min(b, end)
            if hi > lo:
                total += hi - lo
        return total


def _how(v: dict[str, Any]) -> str:
    if v.get("signal"):
        return f"signal {v['signal']}"
    return f"exit status {v.get('exitcode')}"


def check_liveness(facts: Any) -> list[Violation]:
    """`call-returns` and `no-crash`, from the operations that completed past the bound or never completed."""
    if not facts.slow:
        return []
    from soak.check.base import host_partitions, in_partition
    from soak.clauses import boot_bound_s

    lives = _Lives(facts.events)
    call_bound = facts.call_bound_ns
    boot_bound = int(boot_bound_s(call_bound / 1e9) * 1e9)
    out: list[Violation] = []
    cut = host_partitions(facts.events)
    for op in facts.slow:
        ev = facts.evidence(op)
        if cut and in_partition(cut, ev.process, ev.invoke_ns, ev.complete_ns if ev.complete_ns is not None else
                                lives.ends.get(ev.process, (None,))[0]):
            continue  # its host was cut off the store meanwhile: how long it took is the network's (TCP's backoff)
        what = f"{ev.f} ({ev.tag}{'' if ev.f == 'open' else ' on run ' + ev.run})"
        bound = boot_bound if ev.f == "open" else call_bound
        limit = f"the call-returns bound of {bound / 1e9:g} s" + (" (a boot's)" if ev.f == "open" else "")
        boots = lives.booted(ev.process, ev.index)
        for took in boots:
            if took > boot_bound:
                out.append(Violation("call-returns", f"{what}: the store's child restarted inside it took "
                                     f"{took / 1e9:.2f} s to boot (not counting pauses), past a boot's bound of "
                                     f"{boot_bound / 1e9:g} s", (ev,)))
        booting = sum(min(took, boot_bound) for took in boots)  # a boot's time is judged by its own bound
        if ev.complete_ns is not None:
            took = ev.complete_ns - ev.invoke_ns - lives.paused(ev.process, ev.invoke_ns, ev.complete_ns) - booting
            if took > bound:
                out.append(Violation("call-returns", f"{what} {'returned' if ev.outcome == 'ok' else 'ended'} "
                                     f"{took / 1e9:.2f} s after it was invoked (not counting pauses), past {limit}",
                                     (ev,)))
            continue
        end = lives.ends.get(ev.process)
        if end is None:
            continue  # the history does not say how its worker ended: unknown, as an incomplete call is
        when, kind, v = end
        took = when - ev.invoke_ns - lives.paused(ev.process, ev.invoke_ns, when) - booting
        if kind == "timeout-kill" or (took > bound and (kind == "kill" or v.get("forced"))):
            how = ("the storm killed it there" if kind == "timeout-kill" else
                   "it was still running when the storm ended" if v.get("forced") else "the nemesis then killed it")
            out.append(Violation("call-returns", f"{what} had not returned {took / 1e9:.2f} s after it was invoked "
                                 f"(not counting pauses), past {limit}: {how}", (ev,)))
        elif kind == "exit" and not v.get("forced") and v.get("in_call") and v.get("op") == ev.index:
            raised = lives.store_exits.get((ev.process, ev.index))
            if raised:
                cause = (f"the store raised {raised.get('error')} ({raised.get('message')}) inside the call, "
                         f"{took / 1e9:.3f} s after it was invoked, to end the process (which soak then ended)")
            else:
                cause = (f"the process ended by {_how(v)} inside the call, {took / 1e9:.3f} s after it was invoked; "
                         "no nemesis action ended it")
            out.append(Violation("no-crash", f"{what}: {cause}", (ev,)))
    return out


def lost_workers(facts: Any) -> list[str]:
    """The spawned workers whose history is missing (a storm's run directory only), sorted."""
    if not facts.from_storm:
        return []
    lives = _Lives(facts.events)
    lost = sorted(lives.cut_short)
    for name in sorted(lives.spawned):
        if name in lives.cut_short:
            continue
        if name in lives.started:
            continue
        end = lives.ends.get(name, (0, "", {}))[2]
        if end.get("forced") and end.get("phase") in ("starting", 0):
            continue  # stopped at the storm's end before it could start: it never reached the store
        lost.append(name)
    return lost


def history_gaps(facts: Any, whole_history: frozenset[str] = frozenset()) -> list[str]:
    """Why the history cannot support a `pass` even without a violation (each reason names what is missing).

    `whole_history`: the workload's checkers set aside when a worker's history is missing (their findings are
    proofs only over a whole history: that worker may have made the write, delete or acquire that explains them).
    """
    reasons: list[str] = []
    if facts.stats.get("operations", 0) == 0:
        reasons.append("the history holds no store operations: nothing was checked")
    lives = _Lives(facts.events)
    if facts.from_storm:
        if not lives.spawned:
            reasons.append("history/nemesis.jsonl names no spawned worker: the storm's own record is missing, so "
                           "which workers ran, paused and died is unknown")
        lost = lost_workers(facts)
        for name in lost:
            if name in lives.cut_short:
                reasons.append(f"worker {name}'s host {lives.cut_short[name]} was lost before everything it recorded "
                               "was shipped: the end of its history is missing, so its last operations are unknown")
                continue
            reasons.append(f"spawned worker {name} (pid {lives.spawned[name].get('pid')}) left no history: "
                           f"history/{name}.jsonl is missing, so its operations are unknown")
        if lost and whole_history:
            reasons.append("with a worker's history missing, what needs the whole history cannot be judged "
                           f"({', '.join(sorted(whole_history))} set aside)")
    for name, crash in sorted(lives.crashes.items()):
        if crash.get("phase") == "starting":
            reasons.append(f"worker {name} could not start: {crash.get('error')}: {crash.get('message')} (see "
                           f"history/{name}.stderr)")
        else:
            reasons.append(f"the harness failed inside worker {name}: {crash.get('error')}: {crash.get('message')} "
                           f"(the traceback is in its history's crash event); its operations after that are unknown")
    for name, (_, kind, v) in sorted(lives.ends.items()):
        if kind != "exit" or v.get("forced") or v.get("in_call") or name in lives.crashes:
            continue
        code, phase = v.get("exitcode"), v.get("phase")
        if code == 0 or (phase == "boot-failed" and code == 4):
            continue  # a worker that finished, or one whose failed boot is recorded (concurrent-boot judges it)
        reasons.append(f"worker {name} ended by {_how(v)} outside any store call (phase {phase}), which neither "
                       "the nemesis nor the harness caused: nothing can be concluded about why")
    if facts.quorum_target:
        got = recount(facts, lives)
        short = [f"{k} {got.get(k, 0)}/{v}" for k, v in sorted(facts.quorum_target.items()) if got.get(k, 0) < v]
        if short:
            reasons.append("the quorum the storm reported is not supported by the checked history: "
                           + ", ".join(short[:8]) + (f" and {len(short) - 8} more" if len(short) > 8 else ""))
    return reasons


def recount(facts: Any, lives: _Lives | None = None) -> dict[str, int]:
    """The workload's quorum counters, recounted from the operations and events the checker read
    (`Workload.recount`), with the nemesis's counters from the events."""
    from soak.workloads import count_event, get_workload

    out = dict(get_workload(facts.workload).recount(facts))
    events: dict[str, int] = {"stalls": facts.stats.get("stalls", 0)}
    for ev in facts.events:
        count_event(events, ev.process, ev.kind, _value(ev))
    out.update(events)
    return out


def exercised(facts: Any) -> dict[str, int]:
    """clause -> recorded operations that exercised it (the workload's reading); certificates show these."""
    from soak.workloads import get_workload

    held = sum(1 for ev in facts.events if ev.process == "nemesis" and ev.kind == "pause"
               and _value(ev).get("strike") and _value(ev).get("in_call"))
    return get_workload(facts.workload).exercised(facts, held)
