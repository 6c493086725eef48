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
from typing import Any, Callable

import dill
import psutil

from soak.clauses import boot_bound_s
from soak.errors import HarnessError, ScenarioError, crash
from soak.history import HistoryWriter, now_ns
from soak.rundir import (
    EVENTS_FILE,
    HISTORY_DIR,
    RUN_INFO,
    SCENARIO_FILE,
    RunInfo,
    write_json,
)
from soak.scenario import Scenario, dump_scenario
from soak.stores import redact
from soak.storm.netfault import NetFaults, check_netfaults
from soak.storm.nemesis import Nemesis, WorkerHandle, call_elapsed_ns, call_state
from soak.storm.quorum import QuorumTracker
from soak.storm.strike import BOARD_ROWS, BOARD_SPAN
from soak.storm.skew import ClockSkew, check_skew, skewed_worker_entry, spawn_environment
from soak.storm.worker import (
    BOOT_FAILED,
    DONE,
    IN_CALL,
    OP_INDEX,
    PHASE,
    PHASES,
    READY,
    RUNNING,
    SLOTS,
    SURFACE,
    SURFACE_OPEN,
    WorkerSpec,
    derive_seed,
    process_name,
    signal_worker,
    surface_codes,
    worker_entry,
)
from soak.workloads import get_workload

__all__ = ["default_run_dir", "run_storm"]

_TICK_S = 0.005
#: Boots tried per worker slot while no worker has booted yet.
_BOOT_TRIES = 3
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


_GROUP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


#: What the fork server imports before it forks a worker: the worker, both workloads and the store layer.
FORK_PRELOAD = ("soak.storm.worker", "soak.workloads.runs", "soak.workloads.runs.worker", "soak.workloads.claims",
                "soak.stores", "soak.stores.sqlite", "soak.history", "soak.storm.strike", "dill")


def _fork_context() -> tuple[Any, int]:
    """The fork-server context the workers start from, and the server's pid (a forked worker's parent: it dies
    with the server, and the server with this process). Started on first use, with Ctrl-C and SIGTERM ignored
    (`_start`), which the workers it forks inherit."""
    import multiprocess
    from multiprocess import forkserver

    ctx = multiprocess.get_context("forkserver")
    ctx.set_forkserver_preload(list(FORK_PRELOAD))
    server = forkserver._forkserver
    if server._forkserver_pid is None or not psutil.pid_exists(server._forkserver_pid):
        _call_masked(server.ensure_running)
    return ctx, int(server._forkserver_pid)


def _call_masked(start: Callable[[], Any]) -> None:
    """`start()` with Ctrl-C and SIGTERM ignored and blocked around it (see `_start`)."""
    if threading.current_thread() is not threading.main_thread():
        start()
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in _GROUP_SIGNALS}
    try:
        start()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _start(proc: Any) -> None:
    """Start a child with Ctrl-C and SIGTERM ignored from its first instruction on.

    Both reach the storm's whole process group and are the orchestrator's to handle; a child that got one while
    its interpreter was still starting would die with a traceback on the console (or, as a worker, look like a
    worker that died for no reason). An ignored disposition survives exec, so it is set around the start; the two
    signals are blocked meanwhile, so one that arrives then is delivered to the orchestrator's own handler after.
    """
    _call_masked(proc.start)


def _end(exitcode: int | None) -> dict[str, Any]:
    """How a process ended, for an `exit` event: its status, and the signal's name when a signal ended it."""
    if exitcode is not None and exitcode < 0:
        try:
            return {"exitcode": exitcode, "signal": signal.Signals(-exitcode).name}
        except ValueError:
            return {"exitcode": exitcode, "signal": f"signal {-exitcode}"}
    return {"exitcode": exitcode}


def _environment() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
    }


#: Boots the final-state reader tries before it gives up (a flaky bootstrap is evidence, not the end of the check).
_SNAPSHOT_BOOTS = 5
#: One line saying why the final state could not be read, left by the reader for the orchestrator.
SNAPSHOT_ERROR = "snapshot-error.txt"


def _snapshot_main(target_blob: bytes, location: str, scenario_blob: bytes, run_dir: str, parent_pid: int) -> None:
    """Child process: open a fresh store over the location, read the final state back, save it.

    A boot that fails is retried (`_SNAPSHOT_BOOTS` times, backing off), each recorded in
    `history/final-state.jsonl` as a worker's boot is; whatever goes wrong leaves one line in
    `snapshot-error.txt` and its traceback in the run directory, and what the store prints goes to
    `snapshot.stderr`, never to the console.
    """
    from soak.errors import StoreBootError, save_traceback
    from soak.spi import StoreError
    from soak.storm.worker import _die_with_parent

    err = os.open(os.path.join(run_dir, "snapshot.stderr"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(err, 2)
    os.close(err)
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def fail(line: str, status: int) -> None:
        Path(run_dir, SNAPSHOT_ERROR).write_text(line + "\n")
        os._exit(status)

    try:
        target, scenario = dill.loads(target_blob), dill.loads(scenario_blob)
        workload = get_workload(scenario.workload)
        ttl_ms = scenario.lease_ttl_ms
        store, errors = None, []
        # its boots are recorded like a worker's: a failed one is evidence too (concurrent-boot)
        writer = HistoryWriter(Path(run_dir, HISTORY_DIR, "final-state.jsonl"), "final-state")
        writer.event("start", {"pid": os.getpid()})
        for attempt in range(_SNAPSHOT_BOOTS):
            index = writer.invoke("open", "", None, "boot", {})
            try:
                store = target.open(location, ttl_ms, timeout_s=None)
            except StoreBootError as exc:
                cause = exc.__cause__
                writer.complete(index, "fail" if isinstance(cause, StoreError) else "info",
                                error=type(cause).__name__ if cause else "StoreBootError", message=str(exc))
                errors.append(str(exc))
                time.sleep(0.05 * 2 ** attempt)
                continue
            writer.complete(index, "ok")
            break
        writer.close()
        if store is None:
            fail(f"the final-state reader could not boot the store in {_SNAPSHOT_BOOTS} attempts (last: "
                 f"{errors[-1]})", 3)
        try:
            workload.save_final_state(Path(run_dir), workload.read_final_state(store, scenario))
        finally:
            store.close()
    except BaseException as exc:  # noqa: BLE001 - the parent reports it in one line
        if isinstance(exc, SystemExit) and exc.code == 0:
            raise
        where = save_traceback(run_dir, exc, "final-state reader")
        fail(f"reading the final state back raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
             f"(traceback in {where})", 1)


class _Storm:
    """The state of one storm while it runs."""

    def __init__(self, scenario: Scenario, target: Any, run_dir: Path, progress: bool, draws: int = 0) -> None:
        """`draws`: which of the storm's random streams its nemeses draw from (0 on one machine; a host engine of a
        storm across hosts its host's index + 1, so hosts pause, kill, skew and cut on schedules of their own)."""
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
        self.board = self.mp.RawArray("q", max(1, len(self.workload.keys(scenario))))  # the run board (worker_main)
        # per slot, the monotonic ns the store call in flight began (0: none): load workers yield to a starved call
        self.calls = self.mp.RawArray("q", scenario.workers + scenario.load_workers)
        self.handles: list[WorkerHandle] = []
        self.incarnations: dict[int, int] = {}
        self.worker_seeds: dict[str, int] = {}
        self.respawns = 0
        self.unexpected_exits = 0
        self.boot_tries: dict[int, int] = {}  # slot -> boots tried while no worker had booted yet
        self.interrupted: str | None = None
        self.rng = random.Random(derive_seed(scenario.seed, -1, draws))
        self.events = HistoryWriter(run_dir / EVENTS_FILE, "nemesis")
        self.surfaces = surface_codes(self.workload)
        # per surface and step position, the n of the calls whose held strike there blocked the store, and the aimed
        # positions tried storm-wide (soak.storm.strike)
        self.strike_board = self.mp.RawArray("i", max(1, len(self.surfaces)) * BOARD_ROWS * BOARD_SPAN)
        self.nemesis = self._nemesis()
        self.skew = ClockSkew(scenario, random.Random(derive_seed(scenario.seed, -2, draws)), self.events)
        # the fault proxy between the workers and a networked store's server (soak.storm.netfault)
        self.net = NetFaults(scenario, target, self.mp, self.events, random.Random(derive_seed(scenario.seed, -3, draws)),
                             _start)
        self.quorum = QuorumTracker(self.history_dir, self.workload.new_counter(scenario), scenario.quorum)
        self.timeline = open(run_dir / QUORUM_FILE, "a")  # one line of counts per second, written live
        self.hung: dict[str, int] = {}  # surface -> store calls killed for exceeding call_timeout_s
        self.early: Any = None  # the early judge's process (`start_early`)
        self.early_stop = self.mp.RawValue("b", 0)
        self.early_found = self.mp.RawValue("b", 0)
        self.go_ns: int | None = None  # when the workers were let boot (the running window starts)
        self.stopped_ns = 0  # when the stop flag was set (it ends)
        self.quorum_at: float | None = None  # seconds from the start to the quorum, once met (`tick`)
        self.last_sample_ns = 0  # when the timeline was last written (`tick`)

    def _successor_calls(self) -> int | None:
        calls = getattr(self.workload, "successor_calls", None)
        return calls(self.sc) if calls is not None else None

    def _nemesis(self, start_ns: int | None = None) -> Nemesis:
        return Nemesis(self.sc, self.rng, self.events, start_ns=start_ns, surfaces=self.surfaces,
                       strike_board=self.strike_board,
                       successor_calls=self._successor_calls(),
                       blocked_pauses_end=bool(getattr(self.workload, "blocked_pauses_end_at_expiry", False)),
                       mutations=self.workload.mutations, kill_surfaces=getattr(self.workload, "kill_surfaces", None))

    # -- workers ----------------------------------------------------------------------------

    def spawn(self, slot: int, reason: str) -> WorkerHandle:
        inc = self.incarnations.get(slot, 0) + 1
        self.incarnations[slot] = inc
        name = process_name(slot, inc)
        seed = derive_seed(self.sc.seed, slot, inc)
        self.worker_seeds[name] = seed
        target = self.net.target_for(slot, name) if slot < self.sc.workers else self.target  # load: no faults
        state = self.mp.RawArray("q", SLOTS)
        skew = self.skew.draw(name)  # the environment of a worker whose wall clock is shifted (soak.storm.skew)
        # a worker forks from the storm's fork server, where soak and the store layer are imported once (booting a
        # fresh interpreter per worker took 0.4-3.7 s on 2 loaded cores); a skewed one is spawned, as its libfaketime
        # must be preloaded into a fresh process
        mp, parent = (self.mp, os.getpid()) if skew else _fork_context()
        spec = WorkerSpec(slot, inc, seed, target, str(self.location), self.sc, str(self.history_dir), parent)
        proc = mp.Process(target=skewed_worker_entry if skew else worker_entry,
                               args=(name, str(self.history_dir), dill.dumps(spec), state, self.stop_flag,
                                     self.go_flag, self.board, self.calls, self.strike_board), name=name, daemon=True)
        with spawn_environment(skew):
            _start(proc)
        handle = WorkerHandle(name, slot, inc, seed, proc, state, self.surfaces)
        self.handles.append(handle)
        self.events.event("spawn", {"target": name, "pid": proc.pid, "slot": slot, "incarnation": inc,
                                    "reason": reason})
        self.skew.log(name, proc.pid)
        return handle

    def release_boot_barrier(self, timeout_s: float = 30.0) -> None:
        """Once every first worker waits at the barrier (or died), let them all boot at once."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.interrupted:
            if all(int(h.state[PHASE]) == READY or not h.process.is_alive() for h in self.handles):
                break
            time.sleep(0.005)
        self.go_flag.value = 1
        self.go_ns = now_ns()
        self.events.event("boot", {"workers": [h.name for h in self.handles],
                                   "ready": sum(int(h.state[PHASE]) == READY for h in self.handles)})

    def live(self) -> list[WorkerHandle]:
        return [h for h in self.handles if not h.reaped]

    def targets(self) -> list[WorkerHandle]:
        """The live workers the nemeses act on: the tenure workers (load workers only load the store)."""
        return [h for h in self.live() if h.slot < self.sc.workers]

    def reap(self) -> None:
        """Notice workers that ended; replace the ones the nemesis killed, and those that ended on their own.

        Every end the nemesis did not cause is an `exit` event naming the exit status or signal, the phase and the
        store call in flight (read from the worker's shared state, which outlives it): the checker judges it
        (`no-crash` inside a call). Until some worker has booted, a failed boot is retried up to `_BOOT_TRIES`
        times per slot (a store whose first boots fail and later ones come up is a `concurrent-boot` violation to
        judge, not a store that cannot boot); after that, up to 3 x workers unexpected ends are replaced.
        """
        for h in self.live():
            if h.process.is_alive():
                continue
            h.process.join(0)
            h.reaped = True
            if h.killed:
                if not self.stop_flag.value and not self.interrupted:
                    self.respawns += 1
                    self.spawn(h.slot, "replace killed worker")
                continue
            phase = int(h.state[PHASE])
            self.events.event("exit", {"target": h.name, "pid": h.pid, **_end(h.process.exitcode),
                                       "phase": PHASES[phase] if 0 <= phase < len(PHASES) else phase,
                                       **call_state(h)})
            if self.stop_flag.value or self.interrupted:
                continue
            if not self.booted_any():
                tries = self.boot_tries[h.slot] = self.boot_tries.get(h.slot, 1) + 1
                if tries <= _BOOT_TRIES:
                    self.respawns += 1
                    self.spawn(h.slot, f"retry the boot (attempt {tries} of {_BOOT_TRIES}): no worker has booted yet")
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
        """SIGKILL a worker whose store call has run longer than the `call-returns` bound (not counting pauses; a
        boot, published as the `open` surface, by a boot's bound)."""
        now = now_ns()
        for h in self.live():
            if h.killed or h.paused_since is not None or not h.state[IN_CALL]:
                continue
            op = int(h.state[OP_INDEX])
            elapsed = call_elapsed_ns(h, now)
            if elapsed > self.call_limit_ns(h) and h.state[IN_CALL] and int(h.state[OP_INDEX]) == op:
                surface = call_state(h)["surface"] or "?"
                self.hung[surface] = self.hung.get(surface, 0) + 1
                self.nemesis.kill(h, "timeout-kill", elapsed_ms=round(elapsed / 1e6, 1),
                                  call_bound_s=self.sc.call_bound_s)

    def call_limit_ns(self, h: WorkerHandle) -> int:
        """The `call-returns` bound of the call `h` is in: a boot's while it boots (its `open`, or a wire store's child
        restarting inside a call), else a store call's."""
        if int(h.state[SURFACE]) == SURFACE_OPEN:
            return int(boot_bound_s(self.sc.call_bound_s) * 1e9)
        return int(self.sc.call_bound_s * 1e9)

    def ended(self) -> tuple[str, str] | None:
        """Why the storm cannot go on, once no worker is left running: (status, message), or None.

        `error`: no worker ever booted the store, every boot attempt having failed (or no worker could start): a
        store that cannot boot here, a configuration problem. `workers-lost`: workers booted, but every one has
        ended since and the replacements are used up; the history says why (the checker judges it).
        """
        if any(h.alive() for h in self.handles) or not self.handles:
            return None
        if not self.booted_any():
            crashes = [c for c in self.quorum.crashes if "starting" in c]
            if crashes and not self.quorum.boot_failures:
                return "error", (f"no worker process could start ({len(self.handles)} tried): {crashes[0]}; the "
                                 "store factory must be importable in a fresh process (a module on sys.path, not "
                                 "__main__)")
            first = (self.quorum.boot_failures or self.quorum.crashes or ["no message recorded"])[0]
            fix = "" if "fix the store" in first else "; fix the store or its options"
            return "error", f"every one of the {len(self.handles)} boots the storm tried failed (first: {first}){fix}"
        return "workers-lost", (f"no worker left running: {self.unexpected_exits} workers ended on their own and "
                                f"the {3 * self.sc.workers} replacements are used up")

    # -- stop -------------------------------------------------------------------------------

    def stop_all(self) -> dict[str, Any]:
        """Stop flag, grace period, then SIGKILL; reap every worker and verify none survives.

        While the workers stop, any of them found stopped is continued at once: a strike armed before the stop
        flag can still stop its worker inside a call after the nemesis's last look, and nothing would hold or
        release it (it would sit on the store's lock while the others wait out their busy timeouts)."""
        self.nemesis.resume_all(self.live())
        self.stop_flag.value = 1
        self.stopped_ns = now_ns()
        deadline = time.monotonic() + self.sc.grace_s
        while time.monotonic() < deadline and any(h.process.is_alive() for h in self.live()):
            self.nemesis.resume_all(self.live())
            time.sleep(0.01)
        # A worker still inside a store call now has either hung or waits on one that has: let the call run to the
        # call-returns bound (or return), so the checker can tell which, instead of cutting it short unknown.
        while any(h.process.is_alive() and h.state[IN_CALL] and call_elapsed_ns(h, now_ns()) < self.call_limit_ns(h)
                  + 50_000_000 for h in self.live() if not h.killed):
            self.nemesis.resume_all(self.live())
            time.sleep(0.01)
        forced = []
        for h in self.live():
            if h.process.is_alive():
                forced.append(h.name)
                st = call_state(h)
                try:
                    signal_worker(h.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                phase = int(h.state[PHASE])
                self.events.event("exit", {"target": h.name, "pid": h.pid, "forced": True,
                                           "phase": PHASES[phase] if 0 <= phase < len(PHASES) else phase, **st})
        for h in self.handles:
            h.process.join(5)
            if not h.reaped:
                h.reaped = True
                if h.name not in forced and not h.killed:
                    phase = int(h.state[PHASE])
                    self.events.event("exit", {"target": h.name, "pid": h.pid, **_end(h.process.exitcode),
                                               "phase": PHASES[phase] if 0 <= phase < len(PHASES) else phase,
                                               **call_state(h)})
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
        """Read the final state back in a child process (bounded); returns why it could not, or None."""
        proc = self.mp.Process(
            target=_snapshot_main,
            args=(dill.dumps(self.target), str(self.location), dill.dumps(self.sc), str(self.run_dir), os.getpid()),
            name="snapshot", daemon=True,
        )
        _start(proc)
        # process start, its boots, a few calls' worth of call bounds, the probe's 1.2 x ttl wait
        limit = 10.0 + (3 + _SNAPSHOT_BOOTS) * self.sc.call_bound_s + 1.2 * self.sc.lease_ttl_ms / 1000.0
        proc.join(limit)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
            return f"reading the final state back did not finish within {limit:.0f} s"
        why = self.run_dir / SNAPSHOT_ERROR
        if proc.exitcode != 0:
            if why.is_file():
                return why.read_text().strip()
            end = _end(proc.exitcode)
            how = f"signal {end['signal']}" if "signal" in end else f"exit status {proc.exitcode}"
            return f"the final-state reader ended by {how} before saving the state (see {self.run_dir / 'snapshot.stderr'})"
        return None

    # -- the early judge ---------------------------------------------------------------------

    def start_early(self, info: RunInfo, start: int) -> None:
        """With `stop_on_violation` (or `stop_on_suspect`), start the early judge beside the storm: a process that
        checks the history as it grows and flags its first proven violation (`soak.check.early`)."""
        if not (self.sc.stop_on_violation or self.sc.stop_on_suspect):
            return
        from soak.check import run_settings
        from soak.check.early import judge_main

        settings = run_settings(info, "the storm is still running")
        self.early = self.mp.Process(target=judge_main, name="early-judge", daemon=True,
                                     args=(str(self.run_dir), self.sc.workload, info, settings, start,
                                           self.early_stop, self.early_found))
        _start(self.early)

    def finish_early(self) -> dict[str, Any] | None:
        """Stop the early judge and return what it recorded (`early.json`), or None when none ran."""
        if self.early is None:
            return None
        from soak.check.early import EARLY_FILE

        self.early_stop.value = 1
        self.early.join(10)
        if self.early.is_alive():
            self.early.kill()
            self.early.join(5)
            return {"error": "the early judge did not stop within 10 s"}
        try:
            return json.loads((self.run_dir / EARLY_FILE).read_text())
        except (OSError, ValueError) as exc:
            end = _end(self.early.exitcode)
            return {"error": f"the early judge left no {EARLY_FILE} ({exc}; exit {end})"}

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
        self.start_early(info, start)
        for slot in range(self.sc.workers + self.sc.load_workers):
            self.spawn(slot, "start")
        self.release_boot_barrier()
        self.nemesis = self._nemesis(start)
        # the time bound counts from the boot barrier: spawning the workers takes seconds on a loaded machine
        bound = (self.go_ns or start) + int(self.sc.time_bound_s * 1e9)
        extra: dict[str, Any] = {}
        status = "running"

        def step(now: int) -> str | None:
            self.nemesis.step(self.targets())  # killed workers are replaced in reap()
            for h in self.nemesis.paused:  # a held call is not a starved one: the load goes on beside it
                self.calls[h.slot] = 0
            self.net.step(self.targets())
            self.check_call_timeouts()
            self.reap()
            if not self.ended():
                return None
            self.quorum.poll()
            ended, info.error = self.ended() or ("error", "no worker left running")  # messages read
            return ended

        try:
            status = self.loop(start, bound, extra, step, every_s=0.05)
        finally:
            self.early_stop.value = 1
            extra.update(self.stop_all())
            net = self.net.stop()
            if net is not None:
                extra["net_faults"] = net
            early = self.finish_early()
            if early is not None:
                extra["early_judge"] = early
        info.status = status
        extra["stop_reason"] = status
        extra["hung_calls"] = dict(self.hung)  # the checker names each one (call-returns)
        extra["strikes"] = dict(self.nemesis.strikes)
        if self.skew.ms:
            extra["clock_skew"] = self.skew.summary()
        extra["respawns"] = self.respawns
        extra["unexpected_exits"] = self.unexpected_exits
        self.summarize(extra, start)
        return extra

    def loop(self, start: int, bound: int, extra: dict[str, Any], step: Any, *, every_s: float,
             before_tick: Any = None) -> str:
        """The storm's loop until it ends; returns why (`tick`'s statuses, `interrupted`, `timeout`, or what `step`
        returns). Every `every_s` the quorum is looked at (after `before_tick(now)`, e.g. shipping a cluster's
        history); between, `step(now)` runs the engine's own work (the nemesis, reaping) every tick."""
        display = _Display(self.sc.quorum, self.sc.time_bound_s, enabled=self.show_progress)
        last = 0
        with display:
            while True:
                now = now_ns()
                if now - last >= every_s * 1e9:
                    last = now
                    if before_tick is not None:
                        before_tick(now)
                    ended = self.tick(now, start, display, extra)
                    if ended is not None:
                        return ended
                if self.interrupted:
                    return "interrupted"
                if now >= bound:
                    return "timeout"
                ended = step(now)
                if ended is not None:
                    return ended
                time.sleep(_TICK_S)

    def tick(self, now: int, start: int, display: _Display, extra: dict[str, Any]) -> str | None:
        """One look at the quorum (its tailer read on, the display and the per-second timeline updated); the
        status that ends the storm (quorum met, a violation proven early, a suspect to stop at), or None."""
        self.quorum.poll()
        display.update(self.quorum.counts(), (now - start) / 1e9)
        if now - self.last_sample_ns >= 1_000_000_000:
            self.last_sample_ns = now
            self._sample(now - start)
        if self.quorum.met():
            self.quorum_at = (now - start) / 1e9
            return "quorum"
        if self.early_found.value:
            # the early judge proved a violation; the checker judges the whole history
            extra["stopped_early"] = {"reason": "violation", "at_s": round((now - start) / 1e9, 3)}
            return "violation"
        suspects = [s for s in self.quorum.suspects if not self.net.excused(s)]
        if self.sc.stop_on_suspect and suspects:
            # stop at the first suspect; the checker decides from the history
            first = suspects[0]
            extra["stopped_early"] = {"reason": first["reason"], "at_s": round((now - start) / 1e9, 3),
                                      "suspect": first}
            return "suspect"
        return None

    def summarize(self, extra: dict[str, Any], start: int) -> None:
        """The end-of-storm summary into `extra`: the quorum's last counts and rates, coverage, suspects, per-worker
        operations, after the tailer has read everything the workers wrote."""
        self.quorum.poll()
        self.quorum.finish()
        self._sample(now_ns() - start)
        extra["time_to_quorum_s"] = self.quorum_at
        extra["elapsed_s"] = round((now_ns() - start) / 1e9, 3)
        extra["counts"] = self.quorum.counts()
        rates = getattr(self.workload, "storm_rates", None)
        if rates is not None:  # the running window: from the boot barrier to the stop flag
            running_s = (self.stopped_ns - (self.go_ns or start)) / 1e9
            extra["running_s"] = round(running_s, 3)
            extra.update(rates(self.sc, extra["counts"], running_s))
        coverage = getattr(self.workload, "coverage", None)  # a workload's probe coverage table, where it has one
        if coverage is not None:
            extra["coverage"] = coverage(extra["counts"])
        extra["suspects"] = len(self.quorum.suspects)
        extra["first_suspects"] = self.quorum.suspects[:20]
        extra["boot_failures"] = self.quorum.boot_failures[:20]
        extra["crashes"] = self.quorum.crashes[:20]
        extra["workers"] = {name: dict(st) for name, st in sorted(self.quorum.per_worker.items())}


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
    engine: Any = None,
) -> RunInfo:
    """Run one storm of `scenario` against `target`; return its `RunInfo`.

    `target` is a `soak.stores.StoreTarget`, a spec string, or None for the scenario's `store`.

    The run directory is `out_dir`, or `reports/<UTC timestamp>-<scenario>/`. The storm ends at
    quorum, at the time bound, on SIGINT/SIGTERM (`interrupted`), when no worker can boot the
    store (`error`), or, with `scenario.stop_on_suspect`, at the first suspect operation
    (`suspect`; storm.json's `stopped_early` names it), with `stop_on_violation` (or `stop_on_suspect`) at the first
    violation the early judge proves while the storm runs (`violation`; storm.json's `early_judge` has it, with when
    its evidence was complete and when the judge found it), when every worker has ended and the replacements are used up
    (`workers-lost`), or when the harness itself fails (`crashed`: the traceback is in the run directory). Every
    worker is stopped and reaped before this returns. `engine` replaces the one-machine storm engine (a storm across
    hosts: `soak.cluster`).
    """
    from soak import __version__
    from soak.stores import resolve

    from soak.workloads import store_kind

    if target is None or isinstance(target, str):
        target = resolve(target or scenario.store, kind=store_kind(get_workload(scenario.workload)))
    ensure_shared(target)
    check_skew(scenario, target)
    check_netfaults(scenario, target)
    if scenario.stop_on_violation and not get_workload(scenario.workload).check_plan().bounded:
        raise ScenarioError(f"stop_on_violation: the {scenario.workload} workload's checker cannot judge a storm "
                            "while it runs yet (it does not settle time slices); set stop_on_violation = false")
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
        call_bound_s=scenario.call_bound_s,
        workers=scenario.workers,
        **workload.run_info(scenario),
        quorum_target=dict(scenario.quorum),
        environment=_environment(),
    )
    write_json(run_dir / RUN_INFO, dataclasses.asdict(info))
    storm = (engine or _Storm)(scenario, target, run_dir, progress)

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
        except Exception as exc:  # the storm itself broke: keep what was recorded, and say where the traceback is
            info.status = "crashed"
            info.error = str(crash(exc, run_dir, "the storm"))
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
        target.cleanup(storm.location)  # a networked store's namespace, once every process over it is done
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
        for path in [*run_dir.glob("*.stderr"), *(run_dir / HISTORY_DIR).glob("*.stderr")]:
            if path.stat().st_size == 0:  # what a process printed is kept; an empty file says nothing
                path.unlink()
    return info
