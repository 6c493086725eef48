"""The host-level nemesis of a storm across hosts: kill a whole host, pause a whole host, cut a host off the store.

On a seeded schedule (the scenario's `host_*` keys), each action a `host-*` event in `history/nemesis.jsonl`
naming the host, its workers and what was done:
- `host-kill`: every process of the host is killed at once (on a simulated host every process of its network
  namespace, its Dask worker and agent included; on a real one the agent kills its workers, then itself). Its
  operations in flight stay unknown; the host is out of the storm, which goes on with the others. At most half
  the hosts (rounded down) are killed in one storm.
- `host-pause`: every worker of the host is stopped (SIGSTOP) for `pause_ms`, by its agent (each stop also a
  `pause` event naming the worker); the agent itself keeps answering.
- `host-partition` (`from`: `store` or `orchestrator`, drawn from the scenario's `host_partition_from`): for
  `host_partition_ms`, a blackhole route inside the host's namespace drops every packet it sends to one address,
  then `host-heal` lifts it. From the store: the store's forwarder has an address of its own, so the host still
  reaches the orchestrator; its calls hang, then complete late or fail (refused or unknown, never accepted
  unseen). From the orchestrator: the bridge's address, where the Dask scheduler listens and the orchestrator's
  connections come from, so the host's workers go on with the store while no drain, clock sample or order
  reaches its agent; its history is shipped when the link is back (a host silent past the agent timeout is lost,
  its history read from its disk). Simulated hosts only.
"""

from __future__ import annotations

import random
import subprocess
from typing import Any

from soak.errors import ScenarioError
from soak.history import now_ns

__all__ = ["HostFaults", "check_host_faults"]


def check_host_faults(scenario: Any, namespaced: bool) -> None:
    if scenario.host_partition_interval_s and not namespaced:
        raise ScenarioError("host_partition_interval_s: partitioning a host needs simulated hosts in network "
                            "namespaces (soak storm --hosts N as root); set host_partition_interval_s = 0")
    if scenario.host_partition_interval_s and scenario.host_partition_ms <= 0:
        raise ScenarioError("host_partition_interval_s needs host_partition_ms > 0 (how long a partition lasts)")


def _route(netns: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", netns, "ip", "route", *args], capture_output=True, text=True,
                          timeout=10)


def partition_from(netns: str, address: str) -> None:
    """Cut the namespace off from `address` (the store's forwarder): a blackhole route drops every packet it
    sends there, silently, as a dead link does; nothing else of the host's network changes."""
    out = _route(netns, "add", "blackhole", f"{address}/32")
    if out.returncode != 0:
        raise OSError(f"`ip route add blackhole {address}/32` in {netns} failed: {out.stderr.strip()}")


def heal(netns: str, address: str) -> None:
    _route(netns, "del", "blackhole", f"{address}/32")


class HostFaults:
    """The schedule and the actions; `kill` and `store_port` come from the cluster that made the hosts."""

    def __init__(self, scenario: Any, *, kill: Any, store: tuple[str, int] | None = None,
                 orchestrator: str | None = None) -> None:
        self.sc = scenario
        self.kill_host = kill  # (storm, agent) -> list of pids killed
        self.store = store  # (address, port) the hosts reach the store at (a partition drops packets to it)
        self.orchestrator = orchestrator  # the address the hosts reach the scheduler and orchestrator at
        self.rng: random.Random | None = None
        self.next: dict[str, int | None] = {}
        self.partitioned: dict[str, tuple[Any, int, str]] = {}  # host -> (agent, heal at ns, from what)
        self.counts: dict[str, int] = {}

    def _after(self, t: int, mean_s: float) -> int | None:
        if mean_s <= 0:
            return None
        return t + int(mean_s * self.rng.uniform(0.5, 1.5) * 1e9)

    def begin(self, storm: Any, t: int) -> None:
        self.rng = storm.host_rng
        self.next = {"kill": self._after(t, self.sc.host_kill_interval_s),
                     "pause": self._after(t, self.sc.host_pause_interval_s),
                     "partition": self._after(t, self.sc.host_partition_interval_s)}

    def step(self, storm: Any, now: int) -> None:
        for host, (agent, until, _) in list(self.partitioned.items()):
            if now >= until:
                self._heal(storm, host, agent)
        # a host cut off the orchestrator cannot be given orders (pause, freeze before a kill) until it heals
        live = [a for a in storm.agents if a.lost is None and self.partitioned.get(a.host.name, (0, 0, ""))[2]
                != "orchestrator"]
        for kind, interval in (("kill", self.sc.host_kill_interval_s), ("pause", self.sc.host_pause_interval_s),
                               ("partition", self.sc.host_partition_interval_s)):
            due = self.next.get(kind)
            if due is None or now < due:
                continue
            self.next[kind] = self._after(now, interval)
            if kind == "kill":
                # at most half the hosts (rounded down) are killed: the rest carry the storm to its quorum
                if self.counts.get("host-kill", 0) < len(storm.agents) // 2 and len(live) > 1:
                    victim = self.rng.choice(live)
                    live.remove(victim)
                    self._kill(storm, victim)
            elif kind == "pause":
                if live:
                    self._pause(storm, self.rng.choice(live))
            else:
                free = [a for a in live if a.host.name not in self.partitioned and a.host.netns]
                if free:
                    self._partition(storm, self.rng.choice(free), now)

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _kill(self, storm: Any, agent: Any) -> None:
        # Freeze every worker of the host first, then ship what they wrote: nothing they do can go unrecorded
        # between the last drain and the kill (a call in flight stays an invoke without completion: unknown).
        try:
            storm._call(agent, "freeze")
            frozen = True
        except Exception:  # noqa: BLE001 - killed anyway; what it wrote since the last drain may be lost
            frozen = False
        storm.drain_all(settle=[agent])
        workers = [w["name"] for w in agent.workers]
        pids = self.kill_host(storm, agent)
        storm.events.event("host-kill", {"host": agent.host.name, "workers": workers, "pids": pids,
                                         "frozen": frozen})
        self._count("host-kill")
        storm.lose(agent, "killed by the nemesis (host-kill)", complete=frozen)
        storm.killed(agent, complete=frozen)

    def _pause(self, storm: Any, agent: Any) -> None:
        try:
            storm._call(agent, "pause_host")
        except Exception as exc:  # noqa: BLE001 - the next drain notices a lost host
            storm.events.event("host-pause", {"host": agent.host.name, "failed": str(exc)[:200]})
            return
        storm.events.event("host-pause", {"host": agent.host.name, "workers": [w["name"] for w in agent.workers],
                                          "ms": self.sc.effective_pause_ms})
        self._count("host-pause")

    def _partition(self, storm: Any, agent: Any, now: int) -> None:
        kinds = self.sc.host_partition_from
        kind = kinds[0] if len(kinds) == 1 else self.rng.choice(kinds)
        if kind == "orchestrator":
            # a partition from the orchestrator past the agent timeout loses the host: as with kills, at least half
            # the hosts (rounded up) stay reachable, and they carry the storm to its quorum
            reachable = [a for a in storm.agents if a.lost is None
                         and self.partitioned.get(a.host.name, (0, 0, ""))[2] != "orchestrator"]
            if len(reachable) - 1 < (len(storm.agents) + 1) // 2:
                if "store" not in kinds:
                    return
                kind = "store"
        if kind == "store":
            address, port = self.store
            where = {"store": f"{address}:{port}"}
        else:
            address = self.orchestrator
            where = {"orchestrator": address}
        # logged before the route is in place (the window then holds every packet it dropped), healed after
        storm.events.event("host-partition", {"host": agent.host.name, "from": kind, **where,
                                              "ms": self.sc.host_partition_ms,
                                              "workers": [w["name"] for w in agent.workers]})
        self.partitioned[agent.host.name] = (agent, now + self.sc.host_partition_ms * 1_000_000, kind)
        partition_from(agent.host.netns, address)
        self._count("host-partition")

    def _heal(self, storm: Any, host: str, agent: Any) -> None:
        kind = self.partitioned.pop(host)[2]
        heal(agent.host.netns, self.store[0] if kind == "store" else self.orchestrator)
        # how long the host's agent had left its drain unanswered by then (a partition from the orchestrator: about
        # the partition's length; the history of that time is shipped when the answer comes)
        unanswered = round((now_ns() - agent.pending[1]) / 1e6, 1) if agent.pending else 0.0
        storm.events.event("host-heal", {"host": host, "from": kind, "unanswered_ms": unanswered})

    def heal_all(self, storm: Any) -> None:
        for host, (agent, _, _) in list(self.partitioned.items()):
            self._heal(storm, host, agent)
