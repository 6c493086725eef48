"""One storm worker: an OS process that opens its own store and runs the workload loop.

The worker dies with the orchestrator (`PR_SET_PDEATHSIG`), boots its store like every other
worker at the same moment (boot is part of the test: recorded as `f="open"`), then runs the
workload until the shared stop flag is set. While a store call runs it publishes, in shared
memory, that it is inside a call, the op index, the surface and since when, so the nemesis can
record where a SIGSTOP or SIGKILL landed and the orchestrator can kill a call that hangs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PHASES",
    "SLOTS",
    "STORE_EXIT_STATUS",
    "SURFACE_OPEN",
    "WorkerSpec",
    "derive_seed",
    "process_name",
    "signal_worker",
    "surface_codes",
    "worker_entry",
    "worker_main",
]

#: Indices into a worker's shared state array. `STRIKE` is 1 while a strike timer is armed for
#: the call in flight (`soak.storm.strike`); `TENURE_KEY` (index into the workload's run ids,
#: -1 for none), `TENURE_EPOCH` and `TENURE_EXPIRES_NS` publish the tenure the worker holds and
#: the latest monotonic instant its lease can expire (completion of its grant or renewal + ttl).
#: `WANTED` is set by the nemesis (key index + 1) to ask a worker without a tenure to take that
#: run over next: the successor a held strike waits for. `TENURE_OP` is the op index of the call
#: that granted the published tenure (its acquire), so the nemesis can count the calls made since.
#: `STRIKE_STEP` and `STRIKE_STEPS` are the step k and the n a step-mode strike sweeps (0 for kernel mode).
#: `WITNESSED` is set by the nemesis when it lets a held strike go after a successor took the run over during the
#: hold (a takeover got in mid-call); the worker reads it as the call returns and strikes that position again soon;
#: `BLOCKED` there says the held call blocked the store (the worker's sweeps skip that position).
#: `AGAIN` has bit 1 while the armed step-mode strike is such a re-strike, and `AGAIN_IO` while it is of the sweep
#: over the boundaries next to the call's exchanges (`soak.storm.strike`).
(IN_CALL, OP_INDEX, SINCE_NS, SURFACE, PHASE, STRIKE, TENURE_KEY, TENURE_EPOCH, TENURE_EXPIRES_NS, WANTED,
 TENURE_OP, STRIKE_STEP, STRIKE_STEPS, WITNESSED, AGAIN) = range(15)
SLOTS = 15
AGAIN_IO = 2
BLOCKED = 2  # `WITNESSED` when the nemesis let the held strike go because it blocked the store
#: Worker phases (shared `PHASE` slot).
STARTING, RUNNING, BOOT_FAILED, DONE, CRASHED, READY, BOOTING = range(7)
PHASES = ("starting", "running", "boot-failed", "done", "crashed", "ready", "booting")


#: The boot's code in the `SURFACE` slot: the worker's `open`, and a wire store's child restarting inside a call
#: (judged by a boot's bound, `soak.clauses.boot_bound_s`).
SURFACE_OPEN = 1


def surface_codes(workload: Any) -> tuple[str, ...]:
    """The surfaces a worker publishes in its `SURFACE` slot, by position: none, the boot, then the workload's."""
    return ("", "open", *workload.surfaces)

_PR_SET_PDEATHSIG = 1
#: The status a worker ends with when a store call raised SystemExit or another exception outside `Exception`:
#: the store tried to end the process (`no-crash`); its `store-exit` event says how.
STORE_EXIT_STATUS = 70
#: The status of a worker that could not start (its spec would not load, e.g. a store factory that does not
#: import in a fresh process); its `crash` event says why.
START_FAILED_STATUS = 71


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker incarnation needs; pickled (with dill) into the spawned process."""

    slot: int
    incarnation: int
    seed: int
    target: Any  # soak.stores.StoreTarget
    location: str
    scenario: Any  # soak.scenario.Scenario
    history_dir: str
    parent_pid: int

    @property
    def process(self) -> str:
        return process_name(self.slot, self.incarnation)


def process_name(slot: int, incarnation: int) -> str:
    """`w3.2`: slot 3, incarnation 2."""
    return f"w{slot}.{incarnation}"


def derive_seed(storm_seed: int, slot: int, incarnation: int) -> int:
    """The seed of one worker incarnation, derived from the storm seed (stable across Pythons)."""
    digest = hashlib.blake2b(f"{storm_seed}:{slot}:{incarnation}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        os._exit(0)


def _untie_from_fork_server() -> None:
    """A worker forked by the storm's fork server holds the write end of the server's liveness pipe (multiprocess
    hands it to every child, for a fork server of the child's own): close it, so the server ends as soon as the
    orchestrator does, and with the server this worker (its parent-death signal). A spawned worker holds none."""
    try:
        from multiprocess import forkserver
    except ImportError:
        return
    server = forkserver._forkserver
    fd, server._forkserver_alive_fd = server._forkserver_alive_fd, None
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def signal_worker(pid: int, sig: int) -> None:
    """Send `sig` to a worker's process group (itself and what it started for its store), or to the worker alone
    while it does not lead one yet (it is still starting); a process already gone raises `ProcessLookupError`."""
    if os.getpgid(pid) == pid:
        os.killpg(pid, sig)
    else:
        os.kill(pid, sig)


def worker_entry(process: str, history_dir: str, spec_blob: bytes, state: Any, stop: Any, go: Any,
                 board: Any = None, calls: Any = None, strike_board: Any = None) -> None:
    """Process entry: send this process's stderr to `history/<process>.stderr`, load the spec, run `worker_main`.

    The spec travels as dill bytes and is loaded here, so a store factory that cannot be loaded in a fresh process
    is recorded in the worker's history (a `crash` event naming it) instead of a traceback on the console; what
    the store prints to stderr stays in the run directory.
    """
    # Ctrl-C and SIGTERM reach the whole process group: they are the orchestrator's to handle (it stops the
    # workers through the stop flag), never a worker's death inside a store call, which the checker would judge.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _untie_from_fork_server()
    # The worker leads a process group of its own: what the nemesis sends it (pause, resume, kill) reaches every
    # process it starts for its store too, such as a wire store's child (`signal_worker`).
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    err = os.open(os.path.join(history_dir, f"{process}.stderr"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(err, 2)
    os.close(err)
    try:
        import dill

        spec = dill.loads(spec_blob)
    except BaseException as exc:  # noqa: BLE001 - recorded for the orchestrator and the checker
        from soak.history import HistoryWriter

        writer = HistoryWriter(os.path.join(history_dir, f"{process}.jsonl"), process)
        writer.event("crash", {"phase": "starting", "error": type(exc).__name__, "message": str(exc)[:500],
                               "traceback": traceback.format_exc()[-4000:]})
        writer.close()
        os._exit(START_FAILED_STATUS)
    worker_main(spec, state, stop, go, board, calls, strike_board)


def worker_main(spec: WorkerSpec, state: Any, stop: Any, go: Any, board: Any = None, calls: Any = None,
                strike_board: Any = None) -> None:
    """Process entry: wait for `go`, boot the store, run the workload until `stop.value` is set.

    The first workers wait at the `go` barrier so they all call the store factory within a
    millisecond of each other: a bootstrap that races with itself shows up here. `board` is the
    storm's shared run board (one slot per workload key: the latest monotonic ns a tenure of it can
    expire, 0 for free), so a worker without a tenure can wait at the next expiry. `calls` holds, per slot, the
    monotonic ns the store call in flight began (0: none), so a load worker can yield to a starved call.
    """
    _die_with_parent(spec.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the orchestrator's to handle
    import random

    from soak.errors import StoreBootError
    from soak.retry import BusyExhausted
    from soak.history import HistoryWriter
    from soak.spi import StoreError
    from soak.storm.strike import HELD_SLOT, MODES, StrikeTimer
    from soak.storm.wire_aim import ChildAim
    from soak.workloads import StoreEndedProcess, WorkerContext, get_workload

    aim = ChildAim()  # a wire store's child: step strikes aimed next to its exchanges
    workload = get_workload(spec.scenario.workload)
    keys = {k: i for i, k in enumerate(workload.keys(spec.scenario))}
    codes = {s: i for i, s in enumerate(surface_codes(workload))}
    timer = StrikeTimer(strike_board, codes)
    state[TENURE_KEY] = -1

    mine = spec.slot if calls is not None and 0 <= spec.slot < len(calls) else None

    def enter(index: int, f: str, strike: Any = None, kill: bool = False) -> None:
        state[OP_INDEX] = index
        state[SURFACE] = codes.get(f, 0)
        state[SINCE_NS] = since = time.monotonic_ns()
        state[IN_CALL] = 1
        if mine is not None:
            calls[mine] = since
        if strike is not None:
            # the mode, negative where the nemesis is to kill the worker at the stop instead of holding it
            state[STRIKE] = (1 + MODES.index(strike[1])) * (-1 if kill else 1)
            child = getattr(opened.get("store"), "strike_next", None) if timer.available else None
            if child is None:
                timer.arm(strike)
            else:  # the store's code runs in a child process (a wire store): strike it there
                surface, mode, lead_ns, delay_ns, u = strike
                k, n, again = timer.plan_step(surface, u) if mode == "step" else (0, 0, False)
                if mode == "step" and not again:
                    k = aim.pick(surface, n, u) or k  # next to the child's exchanges, SHARE of the time
                timer.position, timer.again = (k, n), again
                child(mode, k, lead_ns + delay_ns)
                opened["struck"] = surface if mode == "step" else None
            state[STRIKE_STEP], state[STRIKE_STEPS] = timer.position
            state[AGAIN] = int(timer.again) | (AGAIN_IO if timer.io and child is None else 0)
        elif f != "open" and timer.wants_count(f) and getattr(opened.get("store"), "strike_next", None) is None:
            # (the boot is never struck: counting it would only slow it, and the first workers boot at once to race)
            timer.learn(f)  # count the surface's boundaries before its first strike (never stops)
            opened["counting"] = f
        elif timer.available and not aim.counted(f) and getattr(opened.get("store"), "strike_next", None):
            opened["store"].strike_next("step", 0)  # learn the child's n and exchanges before its first strike
            opened["counting"] = f

    def leave(ok: bool = True) -> None:
        """The call has ended; `ok`: it returned, so its boundaries are those of the path that writes (a refused or
        failed call's are not counted: a window lies on the path of a call that is accepted)."""
        state[IN_CALL] = 0
        if mine is not None:
            calls[mine] = 0
        if state[STRIKE]:
            # a position is struck again where a takeover got in mid-call and the call was still accepted (a refusal
            # there is the fence working: nothing to find by striking it again)
            witnessed, blocked = state[WITNESSED] == 1 and ok, state[WITNESSED] == BLOCKED
            if "struck" in opened:
                surface = opened.pop("struck")
                store = opened["store"]
                seen, waits, refused = store.strike_seen, store.strike_waits, store.strike_refused
                store.strike_next(None)  # a strike the call never carried to the child ends with the call (and resets)
                if surface is not None and isinstance(seen, int) and seen > 0:
                    # step mode in a wire store's child: the boundaries it counted (its exchanges are its own)
                    timer.note_steps(surface, seen, exchanges=0, waits=0)
                    aim.note(surface, seen, waits)
                if surface is not None and witnessed:
                    timer.note_witnessed(surface)
                elif surface is not None and blocked:
                    timer.note_blocked(surface)
                if surface is not None and state[WITNESSED] == 1 and refused \
                        and any(w > timer.position[0] for w in waits):
                    # refused by an exchange after the stop: the fence ran after it, the boundaries up to it precede it
                    aim.before_check(surface, *timer.position)
            else:
                timer.disarm(witnessed=witnessed, blocked=blocked, counted=ok)
            state[STRIKE] = state[WITNESSED] = state[AGAIN] = 0
        elif "counting" in opened:
            surface, store = opened.pop("counting"), opened.get("store")
            if getattr(store, "strike_next", None) is None:
                timer.disarm(counted=ok)
            else:
                seen, waits = store.strike_seen, store.strike_waits
                store.strike_next(None)
                if isinstance(seen, int) and seen > 0:
                    timer.note_steps(surface, seen, exchanges=0, waits=0)
                aim.note(surface, seen if isinstance(seen, int) else 0, waits)  # a child that counts nothing: once

    run_ids = list(keys)
    opened: dict[str, Any] = {}  # the store object once booted; while a wire store's child is struck, the surface

    def held_run() -> str | None:
        held = int(strike_board[HELD_SLOT]) if strike_board is not None else 0
        return run_ids[held - 1] if 0 < held <= len(run_ids) else None

    def wanted() -> str | None:
        want = int(state[WANTED])
        if not want:
            return None
        state[WANTED] = 0
        return run_ids[want - 1] if 0 < want <= len(run_ids) else None

    def publish_tenure(key: str | None, epoch: int = 0, expires_ns: int = 0) -> None:
        code = keys.get(key, -1) if key is not None else -1
        if code != state[TENURE_KEY] or epoch != state[TENURE_EPOCH]:
            state[TENURE_OP] = state[OP_INDEX]  # a new tenure: granted by the call just made
        state[TENURE_EPOCH] = epoch
        state[TENURE_EXPIRES_NS] = expires_ns
        state[TENURE_KEY] = code

    def note_expiry(key: str, expires_ns: int) -> None:
        code = keys.get(key, -1)
        if board is not None and 0 <= code < len(board):
            board[code] = expires_ns

    def expiry(key: str) -> int:
        code = keys.get(key, -1)
        return int(board[code]) if board is not None and 0 <= code < len(board) else 0

    def oldest_call_ns() -> int:
        """When the oldest store call in flight of another worker began (monotonic ns; 0: none)."""
        if calls is None:
            return 0
        began = [int(v) for i, v in enumerate(calls) if v and i != mine]
        return min(began) if began else 0

    writer = HistoryWriter(Path(spec.history_dir) / f"{spec.process}.jsonl", spec.process)
    writer.event("start", {"pid": os.getpid(), "seed": spec.seed, "slot": spec.slot,
                           "incarnation": spec.incarnation})
    sc = spec.scenario
    state[PHASE] = READY
    deadline = time.monotonic() + 60
    while not go.value and not stop.value and time.monotonic() < deadline:
        time.sleep(0.0005)
    state[PHASE] = BOOTING
    index = writer.invoke("open", "", None, "boot", {})
    enter(index, "open")
    try:
        try:
            store = spec.target.open_retrying(spec.location, sc.lease_ttl_ms, timeout_s=None)
        except Exception:
            raise
        except BaseException as exc:  # the factory tried to end the process: end it, still inside the call
            writer.event("store-exit", {"i": index, "f": "open", "error": type(exc).__name__,
                                        "message": (str(exc) or repr(exc))[:300]})
            writer.close()
            os._exit(STORE_EXIT_STATUS)
    except BusyExhausted as exc:  # busy on every attempt: undecided, never a violation
        leave()
        writer.complete(index, "info", error="BusyExhausted", message=str(exc))
        state[PHASE] = BOOT_FAILED
        writer.close()
        sys.exit(4)
    except StoreBootError as exc:
        leave()
        cause = exc.__cause__
        kind = "fail" if isinstance(cause, StoreError) else "info"
        writer.complete(index, kind, error=type(cause).__name__ if cause else "StoreBootError", message=str(exc))
        state[PHASE] = BOOT_FAILED
        writer.close()
        sys.exit(4)
    leave()
    writer.complete(index, "ok")
    opened["store"] = store

    def on_boot(boot_ns: int | None) -> None:
        # a wire store's child restarts inside the call in flight: the boot is judged by a boot's bound (published as
        # the `open` surface meanwhile), the call by its own from the boot's end (its `reboot` event says how long)
        if boot_ns is None:
            opened["surface"] = int(state[SURFACE])
            state[SURFACE] = SURFACE_OPEN
            return
        state[SURFACE] = opened.pop("surface", int(state[SURFACE]))
        state[SINCE_NS] += boot_ns
        writer.event("reboot", {"i": int(state[OP_INDEX]), "boot_ns": int(boot_ns)})

    if hasattr(store, "on_boot"):
        store.on_boot = on_boot
    state[PHASE] = RUNNING
    ctx = WorkerContext(
        store=store,
        writer=writer,
        rng=random.Random(spec.seed),
        scenario=sc,
        process=spec.process,
        should_stop=lambda: bool(stop.value),
        enter_call=enter,
        leave_call=leave,
        publish_tenure=publish_tenure,
        wanted=wanted,
        note_expiry=note_expiry,
        expiry=expiry,
        can_strike=timer.available,
        unswept=lambda surface: bool(timer.untried_gaps(surface)),
        held_run=held_run,
        load=spec.slot >= sc.workers,
        load_index=spec.slot - sc.workers,
        oldest_call_ns=oldest_call_ns,
        workdir=str(Path(spec.history_dir).parent),
        **workload.context_hooks(),
    )
    try:
        workload.worker_loop(ctx)
    except StoreEndedProcess:
        writer.close()
        os._exit(STORE_EXIT_STATUS)  # the store asked to end the process: end it, still inside the call
    except BaseException as exc:  # a harness bug: record it, let the orchestrator decide
        state[IN_CALL] = 0
        writer.event("crash", {"error": type(exc).__name__, "message": str(exc)[:500],
                               "traceback": traceback.format_exc()[-4000:]})
        state[PHASE] = CRASHED
        writer.close()
        sys.exit(1)
    try:
        store.close()
    except Exception:
        pass
    writer.event("stop", {})
    writer.close()
    state[PHASE] = DONE
