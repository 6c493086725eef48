"""The storm orchestrator: spawn workers, drive the nemesis, tail the quorum, stop, snapshot.

`run_storm(scenario, target, out_dir)` owns one run directory (see `soak.rundir`): a fresh
store location under `store/`, the scenario as run, one history file per worker incarnation
plus `history/nemesis.jsonl`, the final snapshot read back after every worker stopped, and
`run.json`. Extra measurements (time to quorum, load, respawns) go to `storm.json` and the
quorum's progress over time to `quorum.jsonl`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import random
import secrets
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from soak.errors import HarnessError, ScenarioError
from soak.history import HistoryWriter, now_ns
from soak.rundir import (
    EVENTS_FILE,
    HISTORY_DIR,
    RUN_INFO,
    SCENARIO_FILE,
    RunInfo,
    read_snapshot,
    save_snapshot,
    write_json,
)
from soak.scenario import Scenario, dump_scenario
from soak.stores import redact
from soak.storm.nemesis import Nemesis, WorkerHandle, call_state
from soak.storm.quorum import QuorumTracker
from soak.storm.worker import (
    BOOT_FAILED,
    DONE,
    IN_CALL,
    OP_INDEX,
    PHASE,
    PHASES,
    READY,
    RUNNING,
    SINCE_NS,
    SLOTS,
    WorkerSpec,
    derive_seed,
    process_name,
    worker_main,
)
from soak.workloads import get_workload

__all__ = ["default_run_dir", "run_storm"]

_TICK_S = 0.005
STORE_DIR = "store"
QUORUM_FILE = "quorum.jsonl"


def default_run_dir(scenario_name: str, root: str | os.PathLike[str] = "reports") -> Path:
    """`reports/<UTC timestamp>-<scenario>/`, made unique if a storm started the same second."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = Path(root) / f"{stamp}-{scenario_name}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _environment() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
    }


def _snapshot_main(target: Any, location: str, ttl_ms: int, run_ids: list[str], run_dir: str, parent_pid: int) -> None:
    """Child process: open a fresh store over the location, read the final state back, save it."""
    from soak.storm.worker import _die_with_parent

    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    store = target.open(location, ttl_ms, timeout_s=None)
    try:
        save_snapshot(run_dir, read_snapshot(store, run_ids))
    finally:
        store.close()


class _Storm:
    """The state of one storm while it runs."""

    def __init__(self, scenario: Scenario, target: Any, run_dir: Path, progress: bool) -> None:
        import multiprocess

        self.sc = scenario
        self.target = target
        self.run_dir = run_dir
        self.show_progress = progress
        self.mp = multiprocess.get_context("spawn")
        self.workload = get_workload(scenario.workload)
        self.location = run_dir / STORE_DIR
        self.history_dir = run_dir / HISTORY_DIR
        self.stop_flag = self.mp.RawValue("b", 0)
        self.go_flag = self.mp.RawValue("b", 0)  # the boot barrier (see worker_main)
        self.handles: list[WorkerHandle] = []
        self.incarnations: dict[int, int] = {}
        self.worker_seeds: dict[str, int] = {}
        self.respawns = 0
        self.unexpected_exits = 0
        self.boot_deferred: list[int] = []  # slots whose worker failed to boot before any worker booted
        self.interrupted: str | None = None
        self.rng = random.Random(derive_seed(scenario.seed, -1, 0))
        self.events = HistoryWriter(run_dir / EVENTS_FILE, "nemesis")
        self.nemesis = Nemesis(scenario, self.rng, self.events)
        self.quorum = QuorumTracker(self.history_dir, self.workload.new_counter(), scenario.quorum,
                                    scenario.lease_ttl_ms)
        self.timeline = open(run_dir / QUORUM_FILE, "a")  # one line of counts per second, written live
        self.hung: dict[str, int] = {}  # surface -> store calls killed for exceeding call_timeout_s

    # -- workers ----------------------------------------------------------------------------

    def spawn(self, slot: int, reason: str) -> WorkerHandle:
        inc = self.incarnations.get(slot, 0) + 1
        self.incarnations[slot] = inc
        name = process_name(slot, inc)
        seed = derive_seed(self.sc.seed, slot, inc)
        self.worker_seeds[name] = seed
        spec = WorkerSpec(slot, inc, seed, self.target, str(self.location), self.sc, str(self.history_dir), os.getpid())
        state = self.mp.RawArray("q", SLOTS)
        proc = self.mp.Process(target=worker_main, args=(spec, state, self.stop_flag, self.go_flag), name=name,
                               daemon=True)
        proc.start()
        handle = WorkerHandle(name, slot, inc, seed, proc, state)
        self.handles.append(handle)
        self.events.event("spawn", {"target": name, "pid": proc.pid, "slot": slot, "incarnation": inc,
                                    "reason": reason})
        return handle

    def release_boot_barrier(self, timeout_s: float = 30.0) -> None:
        """Once every first worker waits at the barrier (or died), let them all boot at once."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.interrupted:
            if all(int(h.state[PHASE]) == READY or not h.process.is_alive() for h in self.handles):
                break
            time.sleep(0.005)
        self.go_flag.value = 1
        self.events.event("boot", {"workers": [h.name for h in self.handles],
                                   "ready": sum(int(h.state[PHASE]) == READY for h in self.handles)})

    def live(self) -> list[WorkerHandle]:
        return [h for h in self.handles if not h.reaped]

    def reap(self) -> None:
        """Notice workers that ended; replace the ones the nemesis killed or that crashed."""
        if self.boot_deferred and self.booted_any() and not self.stop_flag.value:
            for slot in self.boot_deferred:
                self.respawns += 1
                self.spawn(slot, "replace worker that failed to boot")
            self.boot_deferred.clear()
        for h in self.live():
            if h.process.is_alive():
                continue
            h.process.join(0)
            h.reaped = True
            phase = int(h.state[PHASE])
            if h.killed:
                if not self.stop_flag.value:
                    self.respawns += 1
                    self.spawn(h.slot, "replace killed worker")
                continue
            self.events.event("exit", {"target": h.name, "pid": h.pid, "exitcode": h.process.exitcode,
                                       "phase": PHASES[phase] if 0 <= phase < len(PHASES) else phase})
            if self.stop_flag.value:
                continue
            if phase == BOOT_FAILED and not self.booted_any():
                # replaced only once some worker has booted: if none ever does, boot_error ends the storm
                self.boot_deferred.append(h.slot)
                continue
            self.unexpected_exits += 1
            if self.unexpected_exits <= 3 * self.sc.workers:
                self.respawns += 1
                self.spawn(h.slot, "replace worker that failed to boot" if phase == BOOT_FAILED else
                           f"replace worker that exited ({PHASES[phase] if 0 <= phase < len(PHASES) else phase})")

    def booted_any(self) -> bool:
        """True once some worker has opened the store (a failed boot beside it is evidence, not the end)."""
        return any(int(h.state[PHASE]) in (RUNNING, DONE) for h in self.handles)

    def check_call_timeouts(self) -> None:
        """SIGKILL a worker whose store call has run longer than `call_timeout_s` (not counting pauses)."""
        limit = int(self.sc.call_bound_s * 1e9)
        now = now_ns()
        for h in self.live():
            if h.killed or h.paused_since is not None or not h.state[IN_CALL]:
                continue
            op = int(h.state[OP_INDEX])
            elapsed = now - int(h.state[SINCE_NS]) - h.pause_credit.get(op, 0)
            if elapsed > limit and h.state[IN_CALL] and int(h.state[OP_INDEX]) == op:
                surface = call_state(h)["surface"] or "?"
                self.hung[surface] = self.hung.get(surface, 0) + 1
                self.nemesis.kill(h, "timeout-kill", elapsed_ms=round(elapsed / 1e6, 1),
                                  call_bound_s=self.sc.call_bound_s)

    def boot_error(self) -> str | None:
        """A message when no worker could boot the store (and none is still trying)."""
        if any(h.alive() for h in self.handles):
            return None
        if self.handles and all(int(h.state[PHASE]) == BOOT_FAILED for h in self.handles):
            first = self.quorum.boot_failures[0] if self.quorum.boot_failures else "no message recorded"
            return f"every worker failed to boot the store ({len(self.handles)} of {len(self.handles)}): {first}"
        if self.handles:
            crashes = self.quorum.crashes[:1] or self.quorum.boot_failures[:1] or ["no message recorded"]
            return f"no worker left running (boot failures, crashes or exits): {crashes[0]}"
        return None

    # -- stop -------------------------------------------------------------------------------

    def stop_all(self) -> dict[str, Any]:
        """Stop flag, grace period, then SIGKILL; reap every worker and verify none survives."""
        self.nemesis.resume_all(self.live())
        self.stop_flag.value = 1
        deadline = time.monotonic() + self.sc.grace_s
        while time.monotonic() < deadline and any(h.process.is_alive() for h in self.live()):
            time.sleep(0.01)
        forced = []
        for h in self.live():
            if h.process.is_alive():
                forced.append(h.name)
                st = call_state(h)
                try:
                    os.kill(h.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.events.event("exit", {"target": h.name, "pid": h.pid, "forced": True, **st})
        for h in self.handles:
            h.process.join(5)
            if not h.reaped:
                h.reaped = True
                if h.name not in forced and not h.killed:
                    phase = int(h.state[PHASE])
                    self.events.event("exit", {"target": h.name, "pid": h.pid, "exitcode": h.process.exitcode,
                                               "phase": PHASES[phase] if 0 <= phase < len(PHASES) else phase})
        pids = {h.pid for h in self.handles}
        survivors = []
        for child in psutil.Process().children(recursive=True):
            if child.pid in pids:
                survivors.append(child.pid)
                try:
                    child.kill()
                except psutil.Error:
                    pass
        return {"forced_kills": forced, "survivors_killed": survivors}

    def snapshot(self) -> str | None:
        """Read the final state back in a child process (bounded); returns an error or None."""
        proc = self.mp.Process(
            target=_snapshot_main,
            args=(self.target, str(self.location), self.sc.lease_ttl_ms, self.workload.run_ids(self.sc),
                  str(self.run_dir), os.getpid()),
            name="snapshot", daemon=True,
        )
        proc.start()
        # process start and boot, a few calls' worth of call timeouts, the probe's 1.2 x ttl wait
        limit = 5.0 + 3 * self.sc.call_bound_s + 1.2 * self.sc.lease_ttl_ms / 1000.0
        proc.join(limit)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
            return f"reading the final state back did not finish within {limit:.0f} s"
        if proc.exitcode != 0:
            return f"reading the final state back failed (exit code {proc.exitcode}); see the traceback above"
        return None

    def _sample(self, elapsed_ns: int) -> None:
        row = {"t_s": round(elapsed_ns / 1e9, 3), **self.quorum.counts()}
        self.timeline.write(json.dumps(row, separators=(",", ":")) + "\n")
        self.timeline.flush()

    # -- the loop ---------------------------------------------------------------------------

    def run(self, info: RunInfo) -> dict[str, Any]:
        self.location.mkdir(parents=True, exist_ok=True)
        self.history_dir.mkdir(parents=True, exist_ok=True)
        start = now_ns()
        info.started_ns = start
        for slot in range(self.sc.workers):
            self.spawn(slot, "start")
        self.release_boot_barrier()
        self.nemesis = Nemesis(self.sc, self.rng, self.events, start_ns=start)
        bound = start + int(self.sc.time_bound_s * 1e9)
        display = _Display(self.sc.quorum, self.sc.time_bound_s, enabled=self.show_progress)
        quorum_at: float | None = None
        last_poll = last_sample = 0
        extra: dict[str, Any] = {}
        status = "running"
        try:
            with display:
                while True:
                    now = now_ns()
                    if now - last_poll >= 50_000_000:
                        last_poll = now
                        self.quorum.poll()
                        display.update(self.quorum.counts(), (now - start) / 1e9)
                        if now - last_sample >= 1_000_000_000:
                            last_sample = now
                            self._sample(now - start)
                        if self.quorum.met():
                            quorum_at = (now - start) / 1e9
                            status = "quorum"
                            break
                        if self.sc.stop_on_suspect and self.quorum.suspects:
                            # stop at the first suspect; the checker decides from the history
                            status = "suspect"
                            first = self.quorum.suspects[0]
                            extra["stopped_early"] = {"reason": first["reason"], "at_s": round((now - start) / 1e9, 3),
                                                      "suspect": first}
                            break
                    if self.interrupted:
                        status = "interrupted"
                        break
                    if now >= bound:
                        status = "timeout"
                        break
                    self.nemesis.step(self.live())  # killed workers are replaced in reap()
                    self.check_call_timeouts()
                    self.reap()
                    err = self.boot_error()
                    if err:
                        self.quorum.poll()
                        err = self.boot_error() or err  # with the boot messages read
                        status = "error"
                        info.error = err
                        break
                    time.sleep(_TICK_S)
        finally:
            extra.update(self.stop_all())
        info.status = status
        if self.hung and info.error is None:
            calls = ", ".join(f"{f} x{n}" for f, n in sorted(self.hung.items()))
            info.error = (f"store calls hung past call_timeout_s={self.sc.call_bound_s:g} s and were killed "
                          f"({calls}); their operations are unknown")
        extra["hung_calls"] = dict(self.hung)
        extra["strikes"] = dict(self.nemesis.strikes)
        self.quorum.poll()
        self.quorum.finish()
        self._sample(now_ns() - start)
        extra["time_to_quorum_s"] = quorum_at
        extra["elapsed_s"] = round((now_ns() - start) / 1e9, 3)
        extra["respawns"] = self.respawns
        extra["unexpected_exits"] = self.unexpected_exits
        extra["counts"] = self.quorum.counts()
        extra["suspects"] = len(self.quorum.suspects)
        extra["first_suspects"] = self.quorum.suspects[:20]
        extra["boot_failures"] = self.quorum.boot_failures[:20]
        extra["crashes"] = self.quorum.crashes[:20]
        extra["workers"] = {name: dict(st) for name, st in sorted(self.quorum.per_worker.items())}
        return extra


class _Display:
    """Live rich progress bars, one per quorum threshold (a no-op when disabled)."""

    def __init__(self, thresholds: dict[str, int], time_bound_s: float, *, enabled: bool) -> None:
        self.thresholds = thresholds
        self.time_bound_s = time_bound_s
        self.clock = None
        self.enabled = enabled and bool(thresholds)
        self.progress = None
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> _Display:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.progress = Progress(
                TextColumn("{task.description:>18}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[note]}"), console=Console(stderr=True), transient=False,
            )
            self.progress.__enter__()
            self.clock = self.progress.add_task("time bound (s)", total=self.time_bound_s, note="")
            for key, target in self.thresholds.items():
                self.tasks[key] = self.progress.add_task(key, total=max(target, 1), note="")
        return self

    def update(self, counts: dict[str, int], elapsed_s: float) -> None:
        if self.progress is None:
            return
        self.progress.update(self.clock, completed=min(elapsed_s, self.time_bound_s), note=f"{elapsed_s:.1f}s")
        for key, task in self.tasks.items():
            target = self.thresholds[key]
            self.progress.update(task, completed=min(counts.get(key, 0), max(target, 1)),
                                 note=f"{counts.get(key, 0)}" if counts.get(key, 0) > target else "")

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)


def ensure_shared(target: Any) -> None:
    """Refuse a store that lives inside one process: a storm needs one shared across processes."""
    if getattr(target, "single_process", False):
        raise ScenarioError(
            f"store {target.spec} lives inside one process; a storm needs a store shared across "
            "processes: use sqlite: or a networked store"
        )


def run_storm(
    scenario: Scenario,
    target: Any = None,
    out_dir: str | os.PathLike[str] | None = None,
    *,
    progress: bool = True,
) -> RunInfo:
    """Run one storm of `scenario` against `target`; return its `RunInfo`.

    `target` is a `soak.stores.StoreTarget`, a spec string, or None for the scenario's `store`.

    The run directory is `out_dir`, or `reports/<UTC timestamp>-<scenario>/`. The storm ends at
    quorum, at the time bound, on SIGINT/SIGTERM (`interrupted`), when no worker can boot the
    store (`error`), or, with `scenario.stop_on_suspect`, at the first suspect operation
    (`suspect`; storm.json's `stopped_early` names it). Every worker is stopped and reaped before this returns.
    """
    from soak import __version__
    from soak.stores import resolve

    if target is None or isinstance(target, str):
        target = resolve(target or scenario.store)
    ensure_shared(target)
    seed = scenario.seed or secrets.randbelow(2**31 - 1) + 1
    scenario = dataclasses.replace(scenario, seed=seed, store=redact(target.spec))
    run_dir = Path(out_dir) if out_dir is not None else default_run_dir(scenario.name)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ScenarioError(f"run directory {run_dir} already exists and is not empty; pass a new --out DIR")
    (run_dir / HISTORY_DIR).mkdir(parents=True, exist_ok=True)
    (run_dir / SCENARIO_FILE).write_text(dump_scenario(scenario))
    workload = get_workload(scenario.workload)
    info = RunInfo(
        soak_version=__version__,
        workload=scenario.workload,
        store=redact(target.spec),
        seed=seed,
        lease_ttl_ms=scenario.lease_ttl_ms,
        workers=scenario.workers,
        runs=scenario.main_runs(),
        side_runs=scenario.side_run_ids(),
        quorum_target=dict(scenario.quorum),
        environment=_environment(),
    )
    write_json(run_dir / RUN_INFO, dataclasses.asdict(info))
    storm = _Storm(scenario, target, run_dir, progress)

    def _on_signal(signum: int, frame: Any) -> None:
        storm.interrupted = signal.Signals(signum).name

    on_main = threading.current_thread() is threading.main_thread()
    old = {}
    if on_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, _on_signal)
    extra: dict[str, Any] = {}
    try:
        try:
            extra = storm.run(info)
        except HarnessError:
            raise
        except Exception as exc:  # the storm itself broke: keep what was recorded
            info.status = "error"
            info.error = f"storm failed: {type(exc).__name__}: {exc}"
            storm.stop_all()
        if info.status != "error" or storm.quorum.boot_ok:
            snap_error = storm.snapshot()
            if snap_error:
                # no final state: the checker cannot decide (inconclusive, with this reason)
                extra["snapshot_error"] = snap_error
                info.error = snap_error if info.error is None else f"{info.error}; {snap_error}"
        if storm.interrupted:
            info.status = "interrupted"
            extra["signal"] = storm.interrupted
    finally:
        if on_main:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        storm.events.close()
        info.ended_ns = now_ns()
        info.quorum_reached = storm.quorum.reached()
        info.worker_seeds = dict(storm.worker_seeds)
        info.environment["loadavg_end"] = list(os.getloadavg())
        write_json(run_dir / RUN_INFO, dataclasses.asdict(info))
        extra["seed"] = seed
        write_json(run_dir / "storm.json", extra)
        storm.timeline.close()
    return info
