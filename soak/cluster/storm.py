"""The central orchestrator of a storm across hosts: one host agent per Dask worker, one quorum, one verdict.

`ClusterStorm` is the storm engine `run_storm` drives (`soak.storm.orchestrator`), its loop replaced: instead of
spawning workers it starts a `HostAgent` actor pinned to each host, hands each its worker slots (slot k on host
k mod N) and the store as that host reaches it, lets every host's workers boot at once, then, until the quorum,
the time bound or a signal, ships each host's new history lines into the run directory (every record rewritten
onto the orchestrator's clock with its host named: `"h"`), counts the quorum from them as a local storm does,
measures each host's clock (`soak.cluster.clocks`) and runs the host-level nemesis (`soak.cluster.faults`). A host
whose agent is lost (killed, partitioned, crashed) is out of the storm: its operations in flight stay unknown
(an invoke without its completion), and the storm goes on with the others.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dill

from soak.errors import HarnessError, ScenarioError
from soak.history import now_ns
from soak.rundir import write_json
from soak.storm.orchestrator import _Storm
from soak.storm.worker import derive_seed

__all__ = ["ClusterStorm", "ClusterSpec", "HostSpec"]

_SHIP_S = 0.1  # how often each host's new history lines are shipped
_CLOCK_S = 1.0  # how often each host's clock is sampled during the storm
_CALL_TIMEOUT_S = 10.0  # an agent that does not answer within this is lost
_SHIP_WAIT_S = 0.05  # how long a shipping round waits for the hosts' answers before the loop goes on


@dataclass
class HostSpec:
    """One host of the cluster: its name, its Dask worker's address and how its workers reach the store."""

    name: str
    worker: str  # the Dask worker's address, where its agent is pinned
    target: Any  # the store target its workers open (through the forwarder on a simulated host)
    netns: str | None = None  # its network namespace (a simulated host)
    device: str | None = None  # its network device inside the namespace
    process: Any = None  # its `dask worker` process, where the harness started it


@dataclass
class ClusterSpec:
    """The cluster a storm runs on: the Dask client, the hosts, and the faults it can make."""

    client: Any
    hosts: list[HostSpec]
    faults: Any = None  # soak.cluster.faults.HostFaults
    note: str = ""
    shared_fs: bool = False  # the hosts' local directories are readable here (a simulated cluster)


@dataclass(eq=False)
class _Agent:
    host: HostSpec
    actor: Any
    slots: list[int]
    local_dir: str = ""
    lost: str | None = None  # why the host is out of the storm
    workers: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    ops: int = 0
    have: dict[str, int] = field(default_factory=dict)  # its history file -> bytes shipped (its drain's offsets)
    pending: tuple[Any, int] | None = None  # its drain in flight and when it was asked
    slowest_drain_ns: int = 0  # the longest a drain of it went unanswered
    # from its last drain: its workers' tenures, its held strikes wanting a successor, its workers free to be one
    tenures: list[dict[str, Any]] = field(default_factory=list)
    wants: list[list[int]] = field(default_factory=list)
    free: int = 0
    busy: int = 0  # its workers holding a tenure that could be asked when no host has one free
    shipped_ns: int = 0  # every line its workers wrote before this (the orchestrator's clock) is shipped


class ClusterStorm(_Storm):
    """The storm engine of `run_storm` across the hosts of `cluster`."""

    def __init__(self, scenario: Any, target: Any, run_dir: Path, progress: bool, *, cluster: ClusterSpec) -> None:
        # the network faults are each host's (a fault proxy on every host, between its workers and the store): the
        # orchestrator itself starts none, and ships the whole scenario to the hosts
        quiet = dataclasses.replace(scenario, net_latency_ms=0.0, net_jitter_ms=0.0, net_cut_interval_s=0.0,
                                    net_stall_interval_s=0.0)
        super().__init__(quiet, target, run_dir, progress)
        self.host_sc = scenario
        from soak.cluster.clocks import Clocks

        self.cluster = cluster
        self.agents: list[_Agent] = []
        self.clocks = Clocks()
        self.files: dict[str, Any] = {}  # run-dir history file name -> fd
        self.spawned: dict[str, dict[str, Any]] = {}  # host -> its workers spawned and not yet ended -> pid
        self.host_rng = random.Random(derive_seed(scenario.seed, -4, 0))
        self.relayed: set[tuple[str, int, int]] = set()  # (host, run key, epoch): held strikes a successor was asked for
        self.unrelayed: set[tuple[str, int, int]] = set()  # held strikes that wanted one while no other host had one free
        self.relayed_busy: set[tuple[str, int, int]] = set()  # of `relayed`, those asked of a worker holding another run
        self.shipped_ns: tuple[int, float] | None = None  # what `shipped.json` says, for the early judge

    # -- shipping -----------------------------------------------------------------------------------

    def _file_name(self, host: str, name: str) -> str:
        return f"nemesis-{host}.jsonl" if name == "nemesis.jsonl" else name

    def _write(self, host: str, name: str, data: bytes) -> None:
        from soak.history import _orjson_dumps, decode_line

        fname = self._file_name(host, name)
        fd = self.files.get(fname)
        if fd is None:
            fd = self.files[fname] = os.open(self.history_dir / fname, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        offset = self.clocks.offset_ns(host)
        out = []
        for raw in data.split(b"\n"):
            if not raw.strip():
                continue
            obj = decode_line(raw)
            if "ts" in obj:
                obj["ts"] = int(obj["ts"]) - offset  # onto the orchestrator's clock
            if obj.get("kind") == "net-cut" and isinstance((obj.get("v") or {}).get("at_ns"), int):
                obj["v"]["at_ns"] -= offset  # where the host's proxy cut, as the checker compares it with ts
            obj["h"] = host
            if obj.get("t") == "event" and obj.get("p") == "nemesis":
                v = obj.get("v") or {}
                if obj.get("kind") == "spawn" and "target" in v and "slot" in v:
                    self.worker_seeds[v["target"]] = derive_seed(self.sc.seed, v["slot"], v.get("incarnation", 1))
                    self.spawned.setdefault(host, {})[v["target"]] = v.get("pid")
                elif obj.get("kind") in ("kill", "timeout-kill", "exit") and "target" in v:
                    self.spawned.get(host, {}).pop(v["target"], None)
            out.append(_orjson_dumps(obj))
        if out:
            os.write(fd, b"\n".join(out) + b"\n")

    def ship(self, agent: _Agent, reply: dict[str, Any]) -> None:
        for name, data in sorted(reply.get("lines", {}).items()):
            self._write(agent.host.name, name, data)
        agent.have.update(reply.get("offsets", {}))
        agent.tenures, agent.wants, agent.free = reply.get("tenures", []), reply.get("wants", []), reply.get("free", 0)
        agent.busy = reply.get("busy", 0)
        if isinstance(reply.get("at"), int):  # when its drain began reading, moved onto this clock as its lines are
            agent.shipped_ns = max(agent.shipped_ns, reply["at"] - self.clocks.offset_ns(agent.host.name))
        agent.workers = reply.get("workers", agent.workers)

    def ship_rest(self, agent: _Agent) -> None:
        """After a host is lost: what its local directory still holds, where it can be read (a simulated host's
        disk outlives its processes); on a real host the lines not yet shipped are lost, and stay unknown."""
        if not (self.cluster.shared_fs and agent.local_dir):
            return
        from soak.storm.quorum import read_appended

        for path in sorted((Path(agent.local_dir) / "history").glob("*.jsonl")):
            data, _ = read_appended(path, agent.have.get(path.name, 0))  # a line cut short by the kill is lost
            if data:
                self._write(agent.host.name, path.name, data)

    def killed(self, agent: _Agent, complete: bool, how: str = "host_kill") -> None:
        """After a host-kill, once its history is complete (its workers were frozen before the last drain, or its
        disk is readable here): how each of its workers ended, as the nemesis's kill of one worker is recorded (a
        worker killed before it wrote anything never reached the store). Otherwise its unshipped lines are lost
        and its workers' ends say nothing."""
        if not (complete or self.cluster.shared_fs):
            return
        for name, pid in sorted(self.spawned.pop(agent.host.name, {}).items()):
            started = (self.history_dir / f"{name}.jsonl").is_file()
            self.events.event("kill" if started else "exit",
                              {"target": name, "pid": pid, "host": agent.host.name, how: True,
                               **({} if started else {"forced": True, "phase": "starting"})})

    def _call(self, agent: _Agent, method: str, *args: Any, timeout: float = _CALL_TIMEOUT_S) -> Any:
        return getattr(agent.actor, method)(*args).result(timeout=timeout)

    def lose(self, agent: _Agent, why: str, complete: bool = False) -> None:
        """Take a host out of the storm. `complete`: everything its workers recorded was shipped (they were frozen
        first); else the checker sets aside what needs the whole history, unless its disk is readable here."""
        if agent.lost is not None:
            return
        agent.lost = why
        complete = complete or self.cluster.shared_fs
        self.events.event("host-lost", {"host": agent.host.name, "why": why, "history_complete": complete,
                                        "workers": sorted({*(w["name"] for w in agent.workers),
                                                           *self.spawned.get(agent.host.name, {})})})
        faults = self.cluster.faults
        killed = False
        if faults is not None and "host-kill" not in why:
            # a host out of the storm must not go on writing behind it (the final state is read after the stop)
            try:
                faults.kill_host(self, agent)
                killed = True
            except Exception:  # noqa: BLE001 - unreachable: docs/cluster.md says what that leaves
                pass
        self.ship_rest(agent)
        self.note_shipped()
        if killed:
            # how each of its workers ended, as for a host-kill (`host_lost` marks them): a worker spawned there that
            # wrote nothing before the kill never reached the store, which its disk, read here, shows
            self.killed(agent, complete, how="host_lost")

    def note_shipped(self, floor: int | None = None) -> None:
        """For the early judge (`soak.check.early.SHIPPED_FILE`): the instant before which every live host's history
        is shipped here. `floor`: before any host has drained (the storm's start: nothing was invoked before it)."""
        if not (self.sc.stop_on_violation or self.sc.stop_on_suspect):
            return
        from soak.check.early import SHIPPED_FILE

        live = [a.shipped_ns for a in self.agents if a.lost is None]
        at = floor if floor is not None else min(live) if live else now_ns()  # every host lost: nothing more comes
        # the hosts' clock bound so far: the early judge stands aside once it passes what its rules assume
        bound = round(max((h.worst_ns for h in self.clocks.hosts.values()), default=0) / 1e6, 3)
        if (at, bound) != self.shipped_ns:
            self.shipped_ns = (at, bound)
            write_json(self.run_dir / SHIPPED_FILE, {"shipped_ns": at, "clock_error_ms": bound})

    def relays(self, live: list[_Agent]) -> dict[str, dict[str, Any]]:
        """What each host's next drain carries of the others: their tenures (a held strike's successor may be one of
        them) and the runs their held strikes want taken over, each asked of one other host, once: the one with the
        most workers free of a tenure, else, while no other host has one free, the one with the most workers holding
        a tenure of another run (its worker releases it and takes the run over, `_Worker.asked_away`). On one machine
        the nemesis sees every worker; across hosts it sees its own host's, and a host of one or two workers rarely
        has one free: its strikes would be held to the cap with no successor asked or seen, never where a takeover
        gets in mid-call; and 4 workers on 3 runs rarely leave one free on another host either."""
        out = {a.host.name: {"tenures": [t for b in live if b is not a for t in b.tenures], "want": []} for a in live}
        for a in live:
            for key, epoch in a.wants:
                strike = (a.host.name, key, epoch)
                if strike in self.relayed:
                    continue
                others = [b for b in live if b is not a]
                free = sorted((b for b in others if b.free > 0 and b.pending is None),
                              key=lambda b: (-b.free, b.host.name))
                busy = [] if any(b.free > 0 for b in others) else sorted(
                    (b for b in others if b.busy > 0 and b.pending is None), key=lambda b: (-b.busy, b.host.name))
                if free:
                    free[0].free -= 1
                    out[free[0].host.name]["want"].append(key)
                elif busy:
                    busy[0].busy -= 1
                    out[busy[0].host.name]["want"].append(key)
                    self.relayed_busy.add(strike)
                else:
                    self.unrelayed.add(strike)
                    continue
                self.relayed.add(strike)
        return out

    def drain_all(self, settle: bool | list[_Agent] = False) -> None:
        """Ship what every live host appended. One drain is in flight per host, so a host that does not answer
        (partitioned from the orchestrator, overloaded) holds up neither the others nor the loop: its answer is
        shipped when it comes (the drain names the offsets shipped so far, so nothing is lost or sent twice), and a
        drain unanswered for `_CALL_TIMEOUT_S` loses the host. `settle` (True: every live host; or a list of hosts):
        wait until each has answered a drain asked now, so that everything its workers wrote so far is shipped; the
        others are waited for as usual (a host cut off the orchestrator must not hold up the kill of another)."""
        for _ in range(2 if settle else 1):  # the drains in flight, then (settle) one asked after them
            live = [a for a in self.agents if a.lost is None]
            relays = self.relays(live)
            for a in live:
                if a.pending is None:
                    try:
                        a.pending = (a.actor.drain(dict(a.have), relays[a.host.name]), now_ns())
                    except Exception as exc:  # noqa: BLE001 - a lost host
                        self.lose(a, f"drain failed: {type(exc).__name__}: {exc}")
            must = live if settle is True else [a for a in (settle or []) if a in live]
            deadline = now_ns() + int(_SHIP_WAIT_S * 1e9)
            while True:
                waiting = False
                for a in live:
                    if a.pending is None or a.lost is not None:
                        continue
                    fut, asked = a.pending
                    if fut.done():
                        a.pending = None
                        a.slowest_drain_ns = max(a.slowest_drain_ns, now_ns() - asked)
                        try:
                            reply = fut.result(timeout=1)
                        except Exception as exc:  # noqa: BLE001
                            self.lose(a, f"its agent failed to drain ({type(exc).__name__}: {str(exc)[:200]})")
                            continue
                        self.ship(a, reply)
                        if reply.get("error"):
                            self.lose(a, f"its agent failed: {reply['error'].strip().splitlines()[-1]}")
                    elif now_ns() - asked > _CALL_TIMEOUT_S * 1e9:
                        a.pending = None
                        self.lose(a, f"its agent stopped answering (a drain unanswered for {_CALL_TIMEOUT_S:g} s)")
                    elif a in must or now_ns() < deadline:
                        waiting = True
                if not waiting:
                    break
                time.sleep(0.002)
        self.note_shipped()

    # -- the loop -----------------------------------------------------------------------------------

    def run(self, info: Any) -> dict[str, Any]:
        from soak.cluster.agent import HostAgent

        self.location.mkdir(parents=True, exist_ok=True)
        self.history_dir.mkdir(parents=True, exist_ok=True)
        start = now_ns()
        info.started_ns = start
        self.note_shipped(start)  # before the early judge first reads it
        self.start_early(info, start)  # the early judge reads the shipped history as it grows, as on one machine
        hosts = self.cluster.hosts
        client = self.cluster.client
        slots: dict[str, list[int]] = {h.name: [] for h in hosts}
        for slot in range(self.sc.workers):
            slots[hosts[slot % len(hosts)].name].append(slot)
        for h in hosts:
            actor = client.submit(HostAgent, h.name, actor=True, workers=[h.worker], allow_other_workers=False,
                                  pure=False).result(timeout=60)
            self.agents.append(_Agent(h, actor, slots[h.name]))
        from soak.cluster.agent import code_digest

        here = code_digest()
        for a in self.agents:
            try:
                there = self._call(a, "code")
            except Exception as exc:  # noqa: BLE001 - an agent of an older soak has no such method
                raise ScenarioError(f"host {a.host.name} ({a.host.worker}) did not say which soak code it runs "
                                    f"({type(exc).__name__}): install this soak on every host and restart its dask "
                                    "worker") from exc
            if there != here:
                raise ScenarioError(f"host {a.host.name} ({a.host.worker}) runs other soak code than this orchestrator "
                                    f"({there} there, {here} here): install this soak on every host and restart "
                                    "its dask worker")
        for a in self.agents:
            self.clocks.sync(a.host.name, lambda a=a: self._call(a, "clock"))
        self.events.event("cluster", {"hosts": [{"host": a.host.name, "worker": a.host.worker, "slots": a.slots,
                                                 "netns": a.host.netns} for a in self.agents],
                                      "note": self.cluster.note})
        futures = [(a, a.actor.start(dill.dumps((self.host_sc, a.host.target, str(self.location), a.slots,
                                                 len(hosts))))) for a in self.agents if a.slots]
        for a, fut in futures:
            reply = fut.result(timeout=90)
            a.local_dir = reply["local_dir"]
            a.workers = reply["workers"]
            if reply.get("error"):
                raise HarnessError(f"host {a.host.name}: its agent failed to start: "
                                   f"{reply['error'].strip().splitlines()[-1]}")
        for fut in [a.actor.go() for a in self.agents if a.slots]:
            fut.result(timeout=_CALL_TIMEOUT_S)
        self.go_ns = now_ns()
        self.events.event("boot", {"hosts": [a.host.name for a in self.agents]})
        self.agents = [a for a in self.agents if a.slots]
        faults = self.cluster.faults
        if faults is not None:
            faults.begin(self, self.go_ns)
        # the time bound counts from the boot barrier, as on one machine: starting the agents takes seconds
        bound = self.go_ns + int(self.sc.time_bound_s * 1e9)
        extra: dict[str, Any] = {}
        status = "running"
        last_clock = 0

        def ship(now: int) -> None:
            nonlocal last_clock
            self.drain_all()
            if now - last_clock >= _CLOCK_S * 1e9:
                last_clock = now
                for a in self.agents:
                    # only a host that just answered its drain: one that does not would block the loop
                    if a.lost is None and a.pending is None:
                        try:
                            self.clocks.sample(a.host.name, lambda a=a: self._call(a, "clock", timeout=2))
                        except Exception:  # noqa: BLE001 - the next drain notices a lost host
                            pass

        def step(now: int) -> str | None:
            if all(a.lost is not None for a in self.agents):
                info.error = "every host of the cluster was lost"
                return "workers-lost"
            if faults is not None:
                faults.step(self, now)
            return None

        try:
            status = self.loop(start, bound, extra, step, every_s=_SHIP_S, before_tick=ship)
        finally:
            self.early_stop.value = 1
            extra.update(self.stop_all())
            early = self.finish_early()
            if early is not None:
                extra["early_judge"] = early
        info.status = status
        extra["stop_reason"] = status
        hung: dict[str, int] = {}
        strikes: dict[str, int] = {}
        respawns = unexpected = 0
        net: dict[str, int] = {}
        for a in self.agents:
            s = a.summary or {}
            for k, v in ((s.get("net_faults") or {}).get("faults") or {}).items():
                net[k] = net.get(k, 0) + v
            for k, v in (s.get("hung_calls") or {}).items():
                hung[k] = hung.get(k, 0) + v
            for k, v in (s.get("strikes") or {}).items():
                strikes[k] = strikes.get(k, 0) + v
            respawns += s.get("respawns", 0)
            unexpected += s.get("unexpected_exits", 0)
        extra["hung_calls"] = hung
        extra["strikes"] = strikes
        # held strikes whose successor was asked of another host, and those that found no other host's worker free
        extra["strike_relays"] = {"asked": len(self.relayed), "asked_busy": len(self.relayed_busy),
                                  "none_free": len(self.unrelayed - self.relayed)}
        if net:
            extra["net_faults"] = {"faults": net}
        extra["respawns"] = respawns
        extra["unexpected_exits"] = unexpected
        self.summarize(extra, start)
        extra["cluster"] = self.host_table()
        clocks = self.clocks.summary()
        write_json(self.run_dir / "clocks.json", clocks)
        info.clock_error_ms = clocks["max_error_ms"]
        return extra

    def host_table(self) -> dict[str, Any]:
        """Per host: its slots, whether (and why) it was lost, its operations and throughput, and the longest its
        history went unshipped (a drain unanswered: a partition from the orchestrator, a loaded host)."""
        per: dict[str, dict[str, Any]] = {}
        by_worker = self.quorum.per_worker
        running_s = max(1e-9, (self.stopped_ns - (self.go_ns or self.stopped_ns)) / 1e9)
        for a in self.agents:
            ops = sum(st["ops"] for name, st in by_worker.items() if int(name[1:].split(".")[0]) in a.slots)
            per[a.host.name] = {"worker": a.host.worker, "netns": a.host.netns, "slots": a.slots, "lost": a.lost,
                                "ops": ops, "ops_per_s": round(ops / running_s, 1),
                                "slowest_drain_ms": round(a.slowest_drain_ns / 1e6, 1)}
        return per

    def stop_all(self) -> dict[str, Any]:
        """Stop every host's workers (each agent stops its own: grace, then SIGKILL), ship the rest of the history."""
        self.stop_flag.value = 1
        faults = self.cluster.faults
        if faults is not None:
            faults.heal_all(self)
        self.stopped_ns = now_ns()
        grace = self.sc.grace_s + self.sc.call_bound_s + 10
        futures = []
        for a in self.agents:
            if a.lost is None:
                try:
                    futures.append((a, a.actor.stop(grace)))
                except Exception as exc:  # noqa: BLE001
                    self.lose(a, f"stop failed: {exc}")
        for a, fut in futures:
            try:
                reply = fut.result(timeout=grace + 10)
                a.summary = reply.get("summary") or {}
            except Exception as exc:  # noqa: BLE001
                self.lose(a, f"its agent did not stop ({type(exc).__name__})")
        self.drain_all(settle=True)
        for a in self.agents:
            if a.lost is None:
                try:
                    self._call(a, "discard")
                except Exception:  # noqa: BLE001 - a temporary directory left on that host
                    pass
            elif self.cluster.shared_fs and a.local_dir:
                shutil.rmtree(a.local_dir, ignore_errors=True)
        for fd in self.files.values():
            os.close(fd)
        self.files.clear()
        forced = [n for a in self.agents for n in (a.summary or {}).get("forced_kills", [])]
        return {"forced_kills": forced, "survivors_killed": []}


def check_cluster_scenario(scenario: Any, target: Any) -> None:
    """Refuse what a storm across hosts cannot run: an embedded store, another workload."""
    from soak.storm.netfault import upstream_of

    if scenario.workload != "runs":
        raise ScenarioError(f"a storm across hosts runs the runs workload only (this is {scenario.workload}); "
                            "drop --hosts/--cluster")
    if upstream_of(target) is None:
        raise ScenarioError(f"store {target.spec}: a storm across hosts needs a networked store every host can "
                            "reach (postgresql://... or redis://...)")
    if scenario.workers < 1:
        raise ScenarioError("workers must be at least 1")
