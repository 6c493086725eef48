"""Storms across hosts on a Dask cluster: `soak storm --hosts N` (simulated hosts) or `--cluster tcp://...`.

Dask distributed is the engine: each host is a `dask worker`, and a host agent (a Dask actor pinned to it,
`soak.cluster.agent`) runs that host's worker processes with the one-machine storm's own machinery. The central
orchestrator (`soak.cluster.storm`) keeps the quorum, the time bound, the host-level nemesis
(`soak.cluster.faults`), each host's clock offset (`soak.cluster.clocks`) and the verdict. `--hosts N` starts the
cluster itself (`soak.cluster.hosts`: one network namespace per host); docs/cluster.md says how to run one by hand.
"""

from __future__ import annotations

import functools
from typing import Any

from soak.errors import ScenarioError

__all__ = ["run_cluster_storm"]


def _client(address: str, timeout_s: float = 30.0) -> Any:
    try:
        from distributed import Client
    except ImportError as exc:
        raise ScenarioError("a storm across hosts needs Dask distributed: pip install 'soak[cluster]'") from exc
    try:
        return Client(address, timeout=timeout_s)
    except (OSError, TimeoutError) as exc:
        raise ScenarioError(f"--cluster {address}: no Dask scheduler answered ({exc}); start one with "
                            "`dask scheduler` and pass its tcp://HOST:PORT (docs/cluster.md)") from exc


def _kill_simulated(cluster: Any) -> Any:
    from soak.cluster.hosts import kill_netns_processes

    def kill(storm: Any, agent: Any) -> list[int]:
        host = cluster.host(agent.host.name)
        if host.netns:
            return kill_netns_processes(host.netns)
        pid = host.process.pid
        host.process.kill()  # its workers die with it (PR_SET_PDEATHSIG)
        return [pid]
    return kill


def _kill_remote(storm: Any, agent: Any) -> list[int]:
    try:
        agent.actor.kill_host()  # the agent kills its workers, then its own process: no answer comes back
    except Exception:  # noqa: BLE001
        pass
    return []


def run_cluster_storm(scenario: Any, target: Any, out_dir: Any, *, hosts: int | None = None,
                      scheduler: str | None = None, progress: bool = True, quiet: bool = False,
                      clock_offsets_s: dict[str, float] | None = None, namespaces: bool = True) -> Any:
    """`run_storm` across the hosts of a simulated cluster (`hosts`) or of the Dask scheduler at `scheduler`.

    `clock_offsets_s` (simulated hosts): host name -> seconds its history clock runs ahead of the orchestrator's;
    `namespaces` False: simulated hosts as plain local Dask workers (the fallback without root)."""
    from soak.cluster.faults import HostFaults, check_host_faults
    from soak.cluster.storm import ClusterSpec, ClusterStorm, HostSpec, check_cluster_scenario
    from soak.storm.netfault import proxied_target, upstream_of
    from soak.storm.orchestrator import run_storm

    if scheduler is None and (hosts is None or hosts < 1):
        raise ScenarioError(f"--hosts {hosts}: a storm across hosts needs at least one host; pass --hosts 2 or more")
    check_cluster_scenario(scenario, target)
    if scheduler is not None:
        if scheduler.startswith(("tcp://", "tls://")) is False:
            raise ScenarioError(f"--cluster {scheduler}: give the scheduler's address as tcp://HOST:PORT")
        check_host_faults(scenario, namespaced=False)
        client = _client(scheduler)
        try:
            workers = client.scheduler_info(n_workers=-1)["workers"]
            if not workers:
                raise ScenarioError(f"--cluster {scheduler}: the scheduler has no workers; start `dask worker "
                                    f"{scheduler}` on each host (docs/cluster.md)")
            specs = [HostSpec(str(w.get("name") if w.get("name") is not None else addr), addr, target)
                     for addr, w in sorted(workers.items())]
            spec = ClusterSpec(client, specs, HostFaults(scenario, kill=_kill_remote),
                               note=f"external Dask scheduler {scheduler}, {len(specs)} hosts")
            return run_storm(scenario, target, out_dir, progress=progress,
                             engine=functools.partial(ClusterStorm, cluster=spec))
        finally:
            client.close()
    from soak.cluster.forward import Forwarder
    from soak.cluster.hosts import simulated_cluster

    with simulated_cluster(hosts, quiet=quiet, clock_offsets_s=clock_offsets_s, namespaces=namespaces) as sim:
        check_host_faults(scenario, namespaced=sim.namespaced)
        forwarder = None
        try:
            host_target, store_at = target, None
            if sim.namespaced:
                forwarder = Forwarder(sim.store_address, upstream_of(target)[1])
                host_target = proxied_target(target, forwarder.port, sim.store_address)
                store_at = (sim.store_address, forwarder.port)
            client = _client(sim.scheduler)
            try:
                addrs = {str(w.get("name")): a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
                specs = [HostSpec(h.name, addrs[h.name], host_target, h.netns, h.device, h.process)
                         for h in sim.hosts]
                spec = ClusterSpec(client, specs, HostFaults(scenario, kill=_kill_simulated(sim), store=store_at,
                                                                orchestrator=sim.bridge_address),
                                   note=sim.note, shared_fs=True)
                return run_storm(scenario, target, out_dir, progress=progress,
                                 engine=functools.partial(ClusterStorm, cluster=spec))
            finally:
                client.close()
        finally:
            if forwarder is not None:
                forwarder.close()

