"""The host agent: a Dask actor pinned to one host that runs that host's share of a storm.

On its host the agent runs today's machinery for its worker slots (`_HostEngine`, the storm's own engine over a
local directory): it spawns the worker processes (real OS processes, sharing memory with the agent as on one
machine), reaps and replaces them, and runs the process-level nemesis (pauses, kills, strikes held past the
lease) over them, because all of that needs the workers' shared state at millisecond grain. What crosses hosts is
small and goes through the agent's methods: the boot barrier (`start`, `go`), host-level orders (`pause_host`,
`kill_host`), the history as it grows (`drain`: every complete line appended since the last call, from which the
central orchestrator counts the quorum), the host's clock (`clock`, for Cristian's algorithm) and the end
(`stop`). Its history files stay on its host (`local_dir`) and are shipped as they grow.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import dill

__all__ = ["HostAgent", "code_digest"]

_TICK_S = 0.005
_STAMP_MARGIN_NS = 50_000_000


def code_digest() -> str:
    """A digest of the soak package's source files as they are now: every host must run the orchestrator's code."""
    import hashlib

    root = Path(__file__).resolve().parent.parent
    h = hashlib.blake2b(digest_size=8)
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


#: the code this process loaded (a Dask worker started before soak changed keeps running the old code)
_LOADED = code_digest()


def _engine_class() -> Any:
    from soak.storm.orchestrator import _Storm
    from soak.storm.worker import OP_INDEX, PHASE, READY, TENURE_EPOCH, TENURE_KEY, TENURE_OP, WANTED

    class _HostEngine(_Storm):
        """The storm engine over one host's worker slots; the central orchestrator owns the quorum and the end."""

        def __init__(self, scenario: Any, target: Any, local_dir: Path, location: str, slots: list[int],
                     host: str, n_hosts: int) -> None:
            # the process-level nemesis of each host acts as often as the whole storm's would, divided among hosts
            scaled = dataclasses.replace(scenario, pause_interval_s=scenario.pause_interval_s * n_hosts,
                                         kill_interval_s=scenario.kill_interval_s * n_hosts,
                                         net_cut_interval_s=scenario.net_cut_interval_s * n_hosts,
                                         net_stall_interval_s=scenario.net_stall_interval_s * n_hosts)
            # each host draws its own pauses, kills, strikes, clock skews and network cuts: with the storm's draws on
            # every host, every host's first worker was shifted by the same offset (the first draw is always skewed),
            # so the workers of one-worker hosts agreed with each other and a store judging expiry by its caller's
            # clock escaped; and every host paused and killed on one schedule
            index = slots[0] % n_hosts if slots else 0
            super().__init__(scaled, target, local_dir, progress=False, draws=index + 1)
            self.skew._first = index == 0  # the storm's first skewed worker is one host's, as on one machine
            self.worker_sc = scenario
            self.location = Path(location)
            self.slots = slots
            self.host = host
            self.orders: list[tuple[str, Any]] = []
            self.lock = threading.Lock()
            self.ready = threading.Event()
            self.go_event = threading.Event()
            self.done = threading.Event()
            self.stop_requested = False
            self.frozen = False  # set by `HostAgent.freeze`: the loop stands still (the host is about to be killed)
            self.idle = threading.Event()  # the loop has seen `frozen` and does nothing more
            self.summary: dict[str, Any] = {}
            self.error: str | None = None

        def main(self) -> None:
            try:
                self.history_dir.mkdir(parents=True, exist_ok=True)
                self.location.mkdir(parents=True, exist_ok=True)
                for slot in self.slots:
                    self.spawn(slot, "start")
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not self.stop_requested:
                    if all(int(h.state[PHASE]) == READY or not h.process.is_alive() for h in self.handles):
                        break
                    time.sleep(0.005)
                self.ready.set()
                self.go_event.wait(60)
                self.go_flag.value = 1
                self.go_ns = self.now()
                self.events.event("boot", {"workers": [h.name for h in self.handles], "host": self.host})
                self.nemesis = self._nemesis(self.go_ns)
                while not self.stop_requested:
                    if self.frozen:  # no reaping, no replacing, no nemesis, no stop: the kill comes next
                        self.idle.set()
                        time.sleep(_TICK_S)
                        continue
                    self.take_orders()
                    self.nemesis.step(self.live())
                    self.net.step(self.targets())  # this host's fault proxy, between its workers and the store
                    self.check_call_timeouts()
                    self.reap()
                    time.sleep(_TICK_S)
                self.summary = self.stop_all()
                self.summary.update(hung_calls=dict(self.hung), strikes=dict(self.nemesis.strikes),
                                    respawns=self.respawns, unexpected_exits=self.unexpected_exits,
                                    net_faults=self.net.stop())
            except BaseException:  # noqa: BLE001 - the central orchestrator reports it
                self.error = traceback.format_exc()[-4000:]
                self.ready.set()
                try:
                    self.stop_all()
                    self.net.stop()
                except Exception:
                    pass
            finally:
                self.events.close()
                self.done.set()

        @staticmethod
        def now() -> int:
            from soak.history import now_ns

            return now_ns()

        def take_orders(self) -> None:
            with self.lock:
                orders, self.orders = self.orders, []
            for kind, arg in orders:
                if kind == "pause":
                    # every worker of the host stopped for pause_ms; each stop is a pause event naming its worker
                    for w in self.live():
                        if not w.killed and w.alive() and w.paused_since is None:
                            self.nemesis.pause(w)

        def workers(self) -> list[dict[str, Any]]:
            return [{"name": h.name, "pid": h.pid, "slot": h.slot} for h in self.live() if h.alive()]

        def tenures(self) -> list[dict[str, Any]]:
            """This host's workers holding a tenure, for the orchestrator to relay to the other hosts' nemeses."""
            return [{"name": h.name, "key": int(h.state[TENURE_KEY]), "epoch": int(h.state[TENURE_EPOCH]),
                     "calls": int(h.state[OP_INDEX]) - int(h.state[TENURE_OP])}
                    for h in self.targets() if h.alive() and not h.killed and int(h.state[TENURE_KEY]) >= 0]

        def free_workers(self) -> list[Any]:
            return [h for h in self.targets() if h.alive() and not h.killed and h.paused_since is None
                    and int(h.state[TENURE_KEY]) < 0]

        def busy_workers(self) -> list[Any]:
            """The workers holding a tenure that could be asked to take another host's held strike over when no
            host has one free: running, neither paused nor held, not asked already (the runs workload's worker then
            releases its tenure and takes the run, `_Worker.asked_away`)."""
            return [h for h in self.targets() if h.alive() and not h.killed and h.paused_since is None
                    and h.hold is None and int(h.state[TENURE_KEY]) >= 0 and not int(h.state[WANTED])]

        def wants(self) -> list[list[int]]:
            """The held strikes past their lease that no worker of this host could be asked to take over (each
            [run key, epoch]): the orchestrator asks a worker of another host."""
            return [[w.hold.key, w.hold.epoch] for w in list(self.nemesis.paused)
                    if w.hold is not None and not w.hold.asked and w.hold.successor is None
                    and self.now() >= w.hold.expires_ns]

        def relay(self, tenures: list[dict[str, Any]], want: list[int]) -> None:
            """What the other hosts hold (a held strike's successor may run there), and the runs another host's
            held strike wants taken over: a free worker here is asked, as the nemesis asks one of its own, else
            one holding a tenure of another run (it releases it first)."""
            from soak.storm.nemesis import RemoteTenure

            self.nemesis.remote = tuple(RemoteTenure(**t) for t in tenures)
            for key in want:
                pick = self.free_workers() or [h for h in self.busy_workers() if int(h.state[TENURE_KEY]) != key]
                if pick:
                    min(pick, key=lambda o: o.slot).state[WANTED] = key + 1

    return _HostEngine


class HostAgent:
    """The Dask actor of one host (created by `soak.cluster.storm` with `actor=True`, pinned to that host)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.engine: Any = None
        self.thread: threading.Thread | None = None
        self.local_dir: Path | None = None

    def code(self) -> str:
        """The digest of the soak code this host's process loaded."""
        return _LOADED

    def clock(self) -> int:
        """This host's history clock (CLOCK_MONOTONIC ns), as its workers read it."""
        from soak.history import now_ns

        return now_ns()

    def start(self, blob: bytes) -> dict[str, Any]:
        """Spawn this host's workers and wait until each is ready at the boot barrier."""
        scenario, target, location, slots, n_hosts = dill.loads(blob)
        self.local_dir = Path(tempfile.mkdtemp(prefix=f"soak-agent-{self.host}-"))
        (self.local_dir / "history").mkdir()
        self.engine = _engine_class()(scenario, target, self.local_dir, location, slots, self.host, n_hosts)
        self.thread = threading.Thread(target=self.engine.main, name=f"soak-agent-{self.host}", daemon=True)
        self.thread.start()
        self.engine.ready.wait(60)
        return {"host": self.host, "pid": os.getpid(), "local_dir": str(self.local_dir),
                "workers": self.engine.workers(), "error": self.engine.error}

    def go(self) -> int:
        """Let this host's workers boot (the storm-wide boot barrier); returns when, by this host's clock."""
        self.engine.go_event.set()
        return self.clock()

    def drain(self, have: dict[str, int], relay: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every complete history line of this host past `have` (file name -> the byte offset the orchestrator has
        received up to), by file, with the offsets after them, and the live workers. The orchestrator holds the
        offsets: a reply lost on the way (a partition, a timeout) is read again by the next drain, never dropped.

        `relay` (the orchestrator's, from the other hosts' last drains): their tenures and the runs their held
        strikes want taken over (`_HostEngine.relay`); the reply carries this host's own (`tenures`, `wants`)."""
        from soak.history import now_ns
        from soak.storm.quorum import read_appended

        # every line its workers stamped before this is read below (a line is written just after it is stamped: the
        # margin covers a writer descheduled in between)
        at = now_ns() - _STAMP_MARGIN_NS
        engine = self.engine
        if relay and engine is not None and engine.go_event.is_set():
            engine.relay(relay.get("tenures", []), relay.get("want", []))

        out: dict[str, bytes] = {}
        offsets: dict[str, int] = {}
        hist = self.local_dir / "history" if self.local_dir else None
        if hist is not None and hist.is_dir():
            for path in sorted(hist.glob("*.jsonl")):
                data, end = read_appended(path, have.get(path.name, 0))
                if data:
                    out[path.name], offsets[path.name] = data, end
        cross = {"tenures": engine.tenures(), "wants": engine.wants(), "free": len(engine.free_workers()),
                 "busy": len(engine.busy_workers())} if (
            engine is not None and engine.go_event.is_set() and engine.error is None) else {}
        return {"lines": out, "offsets": offsets, "at": at, **cross, "workers": engine.workers() if engine is not None else [],
                "error": engine.error if engine is not None else None,
                "done": bool(engine is not None and engine.done.is_set())}

    def pause_host(self) -> None:
        """Pause every worker process of this host for the scenario's pause_ms."""
        with self.engine.lock:
            self.engine.orders.append(("pause", None))

    def stop(self, timeout_s: float) -> dict[str, Any]:
        """Stop this host's workers (grace, then SIGKILL), and return the engine's summary."""
        self.engine.stop_requested = True
        self.engine.go_event.set()
        self.engine.done.wait(timeout_s)
        return {"summary": self.engine.summary, "error": self.engine.error, "done": self.engine.done.is_set()}

    def freeze(self) -> list[str]:
        """Stop (SIGSTOP) every worker process of this host and wait until the kernel shows each stopped: what they
        wrote is then all there is, for a drain before the host is killed. Returns the workers frozen."""
        from soak.storm.nemesis import _wait_stopped

        # the engine loop must not continue, replace or stop them now: it stands still, and they are stopped where
        # they are (a call in flight stays an invoke without completion: unknown)
        self.engine.frozen = True
        self.engine.idle.wait(1.0)
        frozen = []
        for h in self.engine.handles:
            try:
                os.kill(h.pid, signal.SIGSTOP)
            except (ProcessLookupError, TypeError):
                continue
            _wait_stopped(h.pid, 1.0)
            frozen.append(h.name)
        return frozen

    def discard(self) -> None:
        """Remove this host's local directory, once everything in it was shipped."""
        import shutil

        if self.local_dir is not None:
            shutil.rmtree(self.local_dir, ignore_errors=True)

    def kill_host(self) -> None:
        """Kill this whole host's storm: every worker with SIGKILL, then this Dask worker process itself."""
        if self.engine is not None:
            for h in self.engine.handles:
                try:
                    os.kill(h.pid, signal.SIGKILL)
                except (ProcessLookupError, TypeError):
                    pass
        os.kill(os.getpid(), signal.SIGKILL)
