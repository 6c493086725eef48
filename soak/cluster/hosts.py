"""A local simulated cluster of N hosts for `soak storm --hosts N`: one network namespace per host.

Each host is a network namespace with its own address on a bridge in the root namespace (a veth pair per host),
running its own `dask worker` (`ip netns exec`); the scheduler runs in the root namespace, listening on the
bridge's address. A host's network is then its own: a blackhole route inside its namespace partitions that host
alone, and killing every process of the namespace kills the host. The store's server listens on the root
namespace's loopback, which a namespace cannot reach: `soak.cluster.forward` listens on a second address of the
bridge and forwards to it (docs/cluster.md says why a forwarder and not NAT).

Without root (or without `ip netns`), `simulated_cluster` says so in one line and starts plain local Dask
workers instead: the storm still spreads over N worker processes, but host-level network faults are off.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from soak.errors import HarnessError

__all__ = ["Host", "SimulatedCluster", "cluster_token", "namespaces_unavailable", "simulated_cluster"]

_START_TIMEOUT_S = 60.0


@dataclass
class Host:
    """One simulated host: its name, namespace (None without namespaces), address and `dask worker` process."""

    name: str
    netns: str | None
    address: str
    device: str | None = None  # the host's end of its veth pair, inside its namespace
    process: subprocess.Popen | None = None


@dataclass
class SimulatedCluster:
    """What `simulated_cluster` started: the scheduler's address, the hosts, and the root side's addresses."""

    scheduler: str
    hosts: list[Host]
    bridge_address: str | None  # where the root namespace is reachable from the hosts (None: no namespaces)
    store_address: str | None  # the root namespace's second address, where the store's forwarder listens
    namespaced: bool
    note: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)


def namespaces_unavailable() -> str | None:
    """Why network namespaces cannot be used here (None when they can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    probe = f"soakprobe{os.getpid()}"
    try:
        subprocess.run(["ip", "netns", "add", probe], check=True, capture_output=True, timeout=10)
    except (subprocess.SubprocessError, OSError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        return f"`ip netns add` failed ({err.decode(errors='replace').strip() or exc})"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True, timeout=10)
    return None


def cluster_token() -> int:
    """What names this process's simulated cluster (namespaces, links, subnet): its pid, kept short."""
    return os.getpid() % 15000


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    out = subprocess.run(cmd, capture_output=True, timeout=10)
    if out.returncode != 0:
        raise HarnessError(f"`{' '.join(cmd)}` failed: {out.stderr.decode(errors='replace').strip()}")


def _subnet(token: int) -> str:
    """A /24 for this cluster's bridge, drawn from the token so that parallel clusters do not collide."""
    return f"10.{180 + (token >> 8) % 60}.{token % 256}"


def _python() -> str:
    return sys.executable


def _dask(kind: str) -> list[str]:
    return [_python(), "-m", f"distributed.cli.dask_{kind}"]


def _wait_workers(scheduler_file: Path, names: set[str], procs: list[subprocess.Popen], timeout_s: float) -> str:
    """Wait until the scheduler file exists and every named worker has joined; return the scheduler's address."""
    from distributed import Client

    deadline = time.monotonic() + timeout_s
    while not scheduler_file.is_file() or not scheduler_file.read_text().strip():
        dead = [p for p in procs if p.poll() is not None]
        if time.monotonic() > deadline or dead:
            raise HarnessError(f"the Dask cluster did not start: {_why(dead[0]) if dead else 'no scheduler file'}")
        time.sleep(0.05)
    address = json.loads(scheduler_file.read_text())["address"]
    with Client(address, timeout=timeout_s) as client:
        while True:
            joined = {w.get("name") for w in client.scheduler_info(n_workers=-1)["workers"].values()}
            if names <= {str(n) for n in joined}:
                return address
            dead = [p for p in procs if p.poll() is not None]
            if time.monotonic() > deadline or dead:
                raise HarnessError(f"Dask workers {sorted(names - {str(n) for n in joined})} did not join the "
                                   f"scheduler within {timeout_s:.0f} s" + (f": {_why(dead[0])}" if dead else ""))
            time.sleep(0.1)


def _why(proc: subprocess.Popen) -> str:
    """One line on how a cluster process ended: its command and the last line of its log."""
    last = ""
    try:
        lines = Path(proc.log).read_text(errors="replace").strip().splitlines()  # type: ignore[attr-defined]
        last = lines[-1] if lines else ""
    except (OSError, AttributeError):
        pass
    return f"`{' '.join(proc.args[:6])} ...` exited with status {proc.returncode}" + (f" ({last[:300]})" if last else "")


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


def kill_netns_processes(netns: str) -> list[int]:
    """SIGKILL every process inside a network namespace (a whole host); returns their pids."""
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=10)
    pids = [int(p) for p in out.stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def signal_netns_processes(netns: str, sig: int) -> list[int]:
    """Send `sig` to every process inside a network namespace; returns their pids."""
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=10)
    pids = [int(p) for p in out.stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return pids


def _remove_stale(tag: str, n: int) -> None:
    """Remove what a dead cluster with this token left behind (the token is this process's: its owner is gone)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    for line in out.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"soak-{tag}-h"):
            kill_netns_processes(name)
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=10)
    subprocess.run(["ip", "link", "delete", f"skb{tag}"], capture_output=True, timeout=10)
    for i in range(n):
        subprocess.run(["ip", "link", "delete", f"skv{tag}h{i}"], capture_output=True, timeout=10)


@contextmanager
def simulated_cluster(n: int, *, log_dir: str | os.PathLike[str] | None = None, quiet: bool = False,
                      clock_offsets_s: dict[str, float] | None = None,
                      namespaces: bool = True) -> Iterator[SimulatedCluster]:
    """Start a scheduler and `n` hosts (namespaced where possible); tear everything down on exit, also on failure.

    `log_dir` keeps the scheduler's and the workers' logs (default: a temporary directory, removed afterwards).
    `clock_offsets_s` moves a host's CLOCK_MONOTONIC (its history clock) forward by that many seconds: a time
    namespace (`unshare --time`), so the host's clock really differs from the orchestrator's. `namespaces` False
    starts the fallback (plain local Dask workers) even where namespaces are available.
    """
    if n < 1:
        raise HarnessError(f"--hosts {n}: a cluster needs at least one host; pass --hosts 1 or more")
    why = namespaces_unavailable() if namespaces else "network namespaces not wanted"
    own_logs = log_dir is None
    logs = Path(tempfile.mkdtemp(prefix="soak-cluster-")) if own_logs else Path(log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    token = cluster_token()
    tag = f"{token}"
    bridge = f"skb{tag}"
    procs: list[subprocess.Popen] = []
    hosts: list[Host] = []
    made_bridge = False
    try:
        if why is None:
            _remove_stale(tag, n)
            net = _subnet(token)
            bridge_ip = f"{net}.1"
            _ip("link", "add", bridge, "type", "bridge")
            made_bridge = True
            _ip("addr", "add", f"{bridge_ip}/24", "dev", bridge)
            # a second address for the store's forwarder alone: a partition from the store is a route to it
            _ip("addr", "add", f"{net}.254/24", "dev", bridge)
            _ip("link", "set", bridge, "up")
            for i in range(n):
                ns, outer, inner = f"soak-{tag}-h{i}", f"skv{tag}h{i}", f"skh{tag}h{i}"
                hosts.append(Host(f"h{i}", ns, f"{net}.{i + 2}", device=inner))
                _ip("netns", "add", ns)
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                _ip("link", "set", inner, "netns", ns)
                _ip("link", "set", outer, "master", bridge)
                _ip("link", "set", outer, "up")
                _ip("addr", "add", f"{net}.{i + 2}/24", "dev", inner, netns=ns)
                _ip("link", "set", inner, "up", netns=ns)
                _ip("link", "set", "lo", "up", netns=ns)
            listen, note = bridge_ip, f"cluster: {n} hosts, each its own network namespace on bridge {bridge} ({net}.0/24)"
        else:
            bridge_ip = None
            listen = "127.0.0.1"
            hosts = [Host(f"h{i}", None, "127.0.0.1") for i in range(n)]
            note = (f"cluster: {why}; falling back to {n} plain local Dask workers (host-level network faults "
                    "are off)")
        if not quiet:
            print(note, flush=True)
        sched_file = logs / "scheduler.json"
        sched_log = open(logs / "scheduler.log", "ab")
        procs.append(subprocess.Popen([*_dask("scheduler"), "--host", listen, "--port", "0", "--no-dashboard",
                                       "--scheduler-file", str(sched_file)], stdout=sched_log, stderr=sched_log,
                                      stdin=subprocess.DEVNULL, start_new_session=True))
        procs[-1].log = sched_log.name  # type: ignore[attr-defined]
        for h in hosts:
            log = open(logs / f"{h.name}.log", "ab")
            cmd = [*_dask("worker"), "--scheduler-file", str(sched_file), "--name", h.name, "--nthreads", "2",
                   "--no-nanny", "--no-dashboard", "--host", h.address, "--death-timeout", "60"]
            offset = (clock_offsets_s or {}).get(h.name)
            if offset:
                if not h.netns:
                    raise HarnessError("a host clock offset needs simulated hosts in namespaces (root)")
                cmd = ["unshare", "--time", f"--monotonic={int(offset)}", "--fork", *cmd]
            if h.netns:
                cmd = ["ip", "netns", "exec", h.netns, *cmd]
            h.process = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
            h.process.log = log.name  # type: ignore[attr-defined]
            procs.append(h.process)
        address = _wait_workers(sched_file, {h.name for h in hosts}, procs, _START_TIMEOUT_S)
        yield SimulatedCluster(address, hosts, bridge_ip, f"{_subnet(token)}.254" if why is None else None,
                               why is None, note, procs)
    finally:
        for p in reversed(procs):
            _kill(p)
        for i, h in enumerate(hosts):
            if h.netns:
                kill_netns_processes(h.netns)
                subprocess.run(["ip", "netns", "delete", h.netns], capture_output=True, timeout=10)
                # the kernel frees a deleted namespace's veth end when it gets to it; deleting ours takes both now
                subprocess.run(["ip", "link", "delete", f"skv{tag}h{i}"], capture_output=True, timeout=10)
        if made_bridge:
            subprocess.run(["ip", "link", "delete", bridge], capture_output=True, timeout=10)
        if own_logs:
            shutil.rmtree(logs, ignore_errors=True)
