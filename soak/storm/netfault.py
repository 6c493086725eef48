"""The network fault nemesis: a fault proxy on 127.0.0.1, owned by the storm, between each worker and the server.

Why a proxy and not network namespaces with `tc netem` and packet filters (Jepsen's way): a proxy that owns
each connection sees where one request ends and its reply begins, so it can cut a connection at an exact
point of a call: before the request reached the server (nothing happened) or after the server answered (it
committed, and the caller never hears so: a lost COMMIT). A packet filter cannot aim at a COMMIT. The proxy
also needs no root, no `ip netns`, and works wherever the storm runs; what it cannot do is lose or reorder
single packets inside one TCP stream (the kernel's loopback TCP stays reliable), which no store sees anyway.

One proxy process serves the storm; each worker slot has its own listening port, and a worker's spec points
at its slot's port (`NetFaults.target_for`). Faults, each a scenario key (0 disables it):
- latency and jitter: every chunk, each direction, is held `net_latency_ms` +- `net_jitter_ms` (order kept);
- a cut, every `net_cut_interval_s`, aimed at a worker inside a store call: the next request on one of its
  connections is cut after a random prefix (`cut-request`: the server never ran it), or forwarded whole and the
  server's reply dropped after a random prefix (`cut-reply`: the statement ran, a COMMIT included), or the
  server side is closed while the worker's side is left open and silent until it is reset (`half-open`);
- a stall of one direction, every `net_stall_interval_s`, for `net_stall_ms`: a worker's requests or its
  replies are held.
Each is a `net-*` event in `history/nemesis.jsonl` (a cut is logged where the proxy made it, with the bytes it
let through). The call a cut lands in raises the driver's error: the reference stores answer it
indeterminate (`info`), never accepted or refused; a store that answers `StoreBusyError` (nothing written)
to a lost COMMIT is caught by the final state holding what it said was not written (`typed-refusal`).
"""

from __future__ import annotations

import dataclasses
import os
import random
import selectors
import signal
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from soak.errors import ScenarioError

__all__ = ["NetFaults", "check_netfaults", "net_faults_on", "proxy_main", "proxied_target", "upstream_of"]

#: per slot in the shared control array: cut mode, cut arm counter, stalled direction, stall end (monotonic ns)
CUT_MODE, CUT_SEQ, STALL_DIR, STALL_UNTIL, CTL = 0, 1, 2, 3, 4
CUT_MODES = ("", "cut-request", "cut-reply", "half-open")
C2S, S2C = 1, 2  # directions: worker to server, server to worker
DIRECTIONS = ("", "requests", "replies")
#: the first client chunks of a connection are its startup and the store's boot: never cut
_ESTABLISHED = 3
_SURFACE_OPEN = 1  # the boot's code in a worker's SURFACE slot (`soak.storm.worker.surface_codes`)


def net_faults_on(scenario: Any) -> bool:
    return bool(scenario.net_latency_ms or scenario.net_jitter_ms or scenario.net_cut_interval_s
                or (scenario.net_stall_interval_s and scenario.net_stall_ms))


def upstream_of(target: Any) -> tuple[str, tuple[str, int]] | None:
    """(backend, (host, port)) of a networked reference store's target (or its mutant's), else None."""
    options = getattr(target, "options", {}) or {}
    if "dsn" in options:
        from psycopg.conninfo import conninfo_to_dict

        d = conninfo_to_dict(options["dsn"])
        host = d.get("hostaddr") or d.get("host") or "127.0.0.1"
        if host.startswith("/") or "," in host:
            return None
        return "postgres", (host, int(d.get("port") or 5432))
    url = options.get("url")
    if isinstance(url, str) and url.startswith("redis://"):
        from urllib.parse import urlsplit

        u = urlsplit(url)
        return "redis", (u.hostname or "127.0.0.1", u.port or 6379)
    return None


def check_netfaults(scenario: Any, target: Any) -> None:
    """Refuse network faults where the proxy cannot stand between the workers and a server."""
    if net_faults_on(scenario) and upstream_of(target) is None:
        raise ScenarioError(f"net_* faults: store {target.spec} is not a postgresql:// or redis:// store over TCP, "
                            "so there is no connection for the fault proxy to own; set the net_* keys to 0")


def proxied_target(target: Any, port: int, host: str = "127.0.0.1") -> Any:
    """`target` with its server address replaced by the proxy's `host`:`port`."""
    options = dict(target.options)
    if "dsn" in options:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        d = conninfo_to_dict(options["dsn"])
        d.pop("hostaddr", None)
        d.update(host=host, port=str(port))
        options["dsn"] = make_conninfo(**d)
    else:
        from urllib.parse import urlsplit, urlunsplit

        u = urlsplit(options["url"])
        auth = u.netloc.rpartition("@")[0]
        options["url"] = urlunsplit(u._replace(netloc=(auth + "@" if auth else "") + f"{host}:{port}"))
    return dataclasses.replace(target, options=options)


# -- the proxy process ------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Conn:
    slot: int
    client: socket.socket
    server: socket.socket
    chunks: int = 0  # client chunks seen
    drop_reply: bool = False  # the next reply is cut (cut-reply armed on this connection)
    cut: int = 0  # the id of the cut that ended the server side; the worker's side waits for it to be logged
    hold_until: int = 0  # ... and at least until this instant (half-open), at most until `cap`
    cap: int = 0
    reset: bool = False  # end the worker's side with RST (half-open) rather than FIN
    queues: dict[int, list[tuple[int, bytes]]] = field(default_factory=lambda: {C2S: [], S2C: []})
    last_release: dict[int, int] = field(default_factory=lambda: {C2S: 0, S2C: 0})
    closed: bool = False


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the peer's next read fails at once."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class _Proxy:
    def __init__(self, upstream: tuple[str, int], slots: int, ctl: Any, ack: Any, events: Any, seed: int,
                 latency_ms: float, jitter_ms: float, half_open_ms: int) -> None:
        self.upstream = upstream
        self.ctl = ctl
        self.ack = ack
        self.cut_ids = 0
        self.events = events
        self.rng = random.Random(seed)
        self.latency_ns = int(latency_ms * 1e6)
        self.jitter_ns = int(jitter_ms * 1e6)
        self.half_open_ns = int(half_open_ms * 1e6)
        self.sel = selectors.DefaultSelector()
        self.listeners = []
        for slot in range(slots):
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.1", 0))
            ls.listen(64)
            ls.setblocking(False)
            self.sel.register(ls, selectors.EVENT_READ, ("listen", slot))
            self.listeners.append(ls)
        self.seen_seq = [0] * slots
        self.pending = [0] * slots  # cut mode armed for the slot's next established request
        self.conns: list[_Conn] = []
        self.stats = {"connections": 0, "chunks": 0, "bytes": 0, "cuts": 0}

    def ports(self) -> list[int]:
        return [ls.getsockname()[1] for ls in self.listeners]

    def send(self, kind: str, **value: Any) -> None:
        try:
            self.events.send({"kind": kind, "at_ns": time.monotonic_ns(), **value})
        except (OSError, ValueError):
            pass

    def accept(self, ls: socket.socket, slot: int) -> None:
        try:
            client, _ = ls.accept()
        except OSError:
            return
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _reset(client)  # the worker sees its connect fail: nothing was sent
            return
        for s in (client, server):
            s.setblocking(True)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(slot, client, server)
        self.conns.append(conn)
        self.stats["connections"] += 1
        self.sel.register(client, selectors.EVENT_READ, (conn, C2S))
        self.sel.register(server, selectors.EVENT_READ, (conn, S2C))

    def close(self, conn: _Conn, *, reset_client: bool = False) -> None:
        if conn.closed:
            return
        conn.closed = True
        for s in (conn.client, conn.server):
            try:
                self.sel.unregister(s)
            except (KeyError, ValueError):
                pass
        (_reset if reset_client else socket.socket.close)(conn.client)
        try:
            conn.server.close()
        except OSError:
            pass
        self.conns.remove(conn)

    def poll_ctl(self, now: int) -> None:
        for slot in range(len(self.seen_seq)):
            base = slot * CTL
            seq = int(self.ctl[base + CUT_SEQ])
            if seq != self.seen_seq[slot]:
                self.seen_seq[slot] = seq
                self.pending[slot] = int(self.ctl[base + CUT_MODE])

    def stalled(self, conn: _Conn, direction: int, now: int) -> bool:
        base = conn.slot * CTL
        return int(self.ctl[base + STALL_DIR]) == direction and now < int(self.ctl[base + STALL_UNTIL])

    def data(self, conn: _Conn, direction: int, chunk: bytes, now: int) -> None:
        self.stats["chunks"] += 1
        self.stats["bytes"] += len(chunk)
        if conn.cut:
            return  # the server side is gone; what the worker sends goes nowhere
        if direction == C2S:
            conn.chunks += 1
            mode = self.pending[conn.slot]
            if mode and conn.chunks > _ESTABLISHED:
                self.pending[conn.slot] = 0
                if mode == 1:  # cut-request: a prefix of the request reaches the server, then it is cut
                    self.prefix_then_cut(conn, C2S, chunk, now, "cut-request")
                    return
                if mode == 2:  # cut-reply: the request goes through; the reply is cut when it comes
                    conn.drop_reply = True
                else:  # half-open: the server side closes now; the worker's side stays open, silent, then resets
                    self.cut_off(conn, now, "half-open", 0, len(chunk), hold_ns=self.half_open_ns)
                    return
        elif conn.drop_reply or (self.pending[conn.slot] == 2 and conn.chunks > _ESTABLISHED):
            # the reply of the call in flight when the cut was armed, or of the request let through for it
            if not conn.drop_reply:
                self.pending[conn.slot] = 0
            self.prefix_then_cut(conn, S2C, chunk, now, "cut-reply")
            return
        delay = self.latency_ns
        if self.jitter_ns:
            delay = max(0, delay + self.rng.randint(-self.jitter_ns, self.jitter_ns))
        release = max(conn.last_release[direction], now + delay)
        conn.last_release[direction] = release
        conn.queues[direction].append((release, chunk))
        self.flush(conn, direction, now)

    def prefix_then_cut(self, conn: _Conn, direction: int, chunk: bytes, now: int, fault: str) -> None:
        """What was queued, then a random prefix of `chunk` (maybe none of it), then the cut."""
        self.flush(conn, direction, now, force=True)
        k = self.rng.randrange(len(chunk))
        try:
            (conn.server if direction == C2S else conn.client).sendall(chunk[:k])
        except OSError:
            pass
        self.cut_off(conn, now, fault, k, len(chunk))

    def cut_off(self, conn: _Conn, now: int, fault: str, forwarded: int, of: int, hold_ns: int = 0) -> None:
        """End the server side of `conn` now; its worker's side ends once the storm has logged the cut (so the event
        precedes the completion of the call it landed in) and `hold_ns` has passed, or at a cap."""
        self.cut_ids += 1
        self.stats["cuts"] += 1
        conn.cut, conn.hold_until, conn.cap = self.cut_ids, now + hold_ns, now + hold_ns + 1_000_000_000
        conn.reset = fault == "half-open"
        try:
            self.sel.unregister(conn.server)
        except (KeyError, ValueError):
            pass
        conn.server.close()
        conn.queues = {C2S: [], S2C: []}
        self.send("cut", id=self.cut_ids, slot=conn.slot, fault=fault, forwarded=forwarded, of=of,
                  **({"ms": round(hold_ns / 1e6, 1)} if hold_ns else {}))

    def flush(self, conn: _Conn, direction: int, now: int, force: bool = False) -> None:
        q = conn.queues[direction]
        if not q or (not force and self.stalled(conn, direction, now)):
            return
        out = conn.server if direction == C2S else conn.client
        while q and (force or q[0][0] <= now):
            _, chunk = q.pop(0)
            try:
                out.sendall(chunk)
            except OSError:
                self.close(conn)
                return

    def next_due(self, now: int) -> float:
        due = [q[0][0] for c in self.conns for q in c.queues.values() if q]
        due += [c.hold_until for c in self.conns if c.cut]
        if not due:
            return 0.005
        return min(0.005, max(0.0, (min(due) - now) / 1e9))

    def run(self, stop: Any) -> None:
        while not stop.value:
            now = time.monotonic_ns()
            for key, _ in self.sel.select(self.next_due(now)):
                now = time.monotonic_ns()
                if key.data[0] == "listen":
                    self.accept(key.fileobj, key.data[1])
                    continue
                conn, direction = key.data
                if conn.closed:
                    continue
                try:
                    chunk = key.fileobj.recv(65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    self.close(conn)
                    continue
                self.poll_ctl(now)
                self.data(conn, direction, chunk, now)
            now = time.monotonic_ns()
            for conn in list(self.conns):
                if conn.cut:
                    if (now >= conn.hold_until and int(self.ack.value) >= conn.cut) or now >= conn.cap:
                        self.close(conn, reset_client=conn.reset)
                    continue
                for direction in (C2S, S2C):
                    if not conn.closed:
                        self.flush(conn, direction, now)
        self.send("stats", **self.stats)


def proxy_main(upstream: tuple[str, int], slots: int, ctl: Any, ack: Any, ports: Any, ready: Any, events: Any, stop: Any,
               seed: int, latency_ms: float, jitter_ms: float, half_open_ms: int, parent_pid: int) -> None:
    """Process entry of the fault proxy: listen on one port per slot (published in `ports`), forward, fault."""
    from soak.storm.worker import _die_with_parent

    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    proxy = _Proxy(upstream, slots, ctl, ack, events, seed, latency_ms, jitter_ms, half_open_ms)
    for i, port in enumerate(proxy.ports()):
        ports[i] = port
    ready.value = 1
    proxy.run(stop)


#: the surfaces where a call writes
_WRITES = frozenset({"append", "put_meta", "blob_put", "blob_delete", "delete", "acquire", "renew", "release"})


def _surface(w: Any) -> str:
    from soak.storm.worker import SURFACE

    code = int(w.state[SURFACE])
    return w.surfaces[code] if 0 <= code < len(w.surfaces) else ""


# -- the nemesis in the orchestrator ---------------------------------------------------------------------------


class NetFaults:
    """The orchestrator's side: starts the proxy, points each worker at its port, schedules cuts and stalls, and
    logs what the proxy did as `net-*` events."""

    def __init__(self, scenario: Any, target: Any, mp: Any, writer: Any, rng: random.Random, start: Any) -> None:
        self.sc = scenario
        self.on = net_faults_on(scenario)
        self.target = target
        self.writer = writer
        self.rng = rng
        self.proc = None
        self.cuts: list[tuple[str, int]] = []  # (worker, monotonic ns) of each cut the proxy made
        self.counts: dict[str, int] = {}
        self.stats: dict[str, Any] = {}
        if not self.on:
            return
        _, upstream = upstream_of(target)
        n = scenario.workers
        self.ctl = mp.RawArray("q", n * CTL)
        self.ports = mp.RawArray("q", n)
        self.ack = mp.RawValue("q", 0)  # the id of the latest cut logged (the proxy waits for it)
        self.ready = mp.RawValue("b", 0)
        self.stop_flag = mp.RawValue("b", 0)
        self.recv, send = mp.Pipe(duplex=False)
        # a half-open connection is reset well inside the call bound: the call ends unknown, never hung
        half_open_ms = int(min(2 * scenario.lease_ttl_ms, scenario.call_bound_s * 1000 / 4))
        self.proc = mp.Process(target=proxy_main, name="fault-proxy", daemon=True,
                               args=(upstream, n, self.ctl, self.ack, self.ports, self.ready, send, self.stop_flag,
                                     rng.randrange(2**62), scenario.net_latency_ms, scenario.net_jitter_ms,
                                     half_open_ms, os.getpid()))
        start(self.proc)
        deadline = time.monotonic() + 15
        while not self.ready.value:
            if time.monotonic() > deadline or not self.proc.is_alive():
                raise ScenarioError("the network fault proxy did not start within 15 s; see the storm's stderr")
            time.sleep(0.005)
        self.next_cut = self._after(time.monotonic_ns(), scenario.net_cut_interval_s)
        self.next_stall = (self._after(time.monotonic_ns(), scenario.net_stall_interval_s)
                           if scenario.net_stall_ms else None)
        self.names: dict[int, str] = {}
        writer.event("net-proxy", {"pid": self.proc.pid, "upstream": f"{upstream[0]}:{upstream[1]}",
                                   "ports": list(self.ports), "latency_ms": scenario.net_latency_ms,
                                   "jitter_ms": scenario.net_jitter_ms})

    def _after(self, t: int, mean_s: float) -> int | None:
        if mean_s <= 0:
            return None
        return t + int(mean_s * self.rng.uniform(0.5, 1.5) * 1e9)

    def target_for(self, slot: int, name: str) -> Any:
        """The target a worker in `slot` opens: through its slot's proxy port when the faults are on."""
        if not self.on:
            return self.target
        self.names[slot] = name
        # a cut armed for the slot's last incarnation and not yet made is void: it must not land in this one's boot
        self.ctl[slot * CTL + CUT_MODE] = 0
        self.ctl[slot * CTL + CUT_SEQ] += 1
        return proxied_target(self.target, int(self.ports[slot]))

    def step(self, workers: list[Any]) -> None:
        """Drain the proxy's reports into events; arm the cuts and stalls that are due."""
        if not self.on:
            return
        self.drain()
        now = time.monotonic_ns()
        from soak.storm.worker import IN_CALL, OP_INDEX, SURFACE

        if self.next_cut is not None and now >= self.next_cut:
            stuck = self.sc.lease_ttl_ms * 1_000_000
            from soak.storm.nemesis import call_elapsed_ns

            inside = [w for w in workers if w.running() and w.paused_since is None and w.state[IN_CALL]
                      and int(w.state[SURFACE]) != _SURFACE_OPEN and call_elapsed_ns(w, now) < stuck]
            if inside:  # else try again next tick
                mode = self.rng.choices((1, 2, 3), (2, 6, 2))[0]
                # a lost reply matters most where a call wrote: an append above all (a retry of it is refused
                # by the order guard, so a write that was answered "not written" stays in the journal)
                writing = [w for w in inside if _surface(w) in _WRITES] if mode == 2 else []
                w = self.rng.choice([w for w in writing if _surface(w) == "append"] or writing or inside)
                base = w.slot * CTL
                self.ctl[base + CUT_MODE] = mode
                self.ctl[base + CUT_SEQ] += 1
                self.writer.event("net-arm", {"target": w.name, "fault": CUT_MODES[mode], "op": int(w.state[OP_INDEX])})
                self.next_cut = self._after(now, self.sc.net_cut_interval_s)
        if self.next_stall is not None and now >= self.next_stall:
            live = [w for w in workers if w.running()]
            if live:
                w = self.rng.choice(live)
                direction = self.rng.choice((C2S, S2C))
                base = w.slot * CTL
                self.ctl[base + STALL_UNTIL] = now + self.sc.net_stall_ms * 1_000_000
                self.ctl[base + STALL_DIR] = direction
                self.count("stall")
                self.writer.event("net-stall", {"target": w.name, "direction": DIRECTIONS[direction],
                                                "ms": self.sc.net_stall_ms})
            self.next_stall = self._after(now, self.sc.net_stall_interval_s)

    def count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def drain(self) -> None:
        try:
            while self.recv.poll():
                msg = self.recv.recv()
                kind = msg.pop("kind")
                if kind == "stats":
                    self.stats = msg
                    continue
                name = self.names.get(msg.pop("slot"), "?")
                self.cuts.append((name, msg["at_ns"]))
                self.count(msg["fault"])
                self.writer.event("net-cut", {"target": name, **msg})
                self.ack.value = max(int(self.ack.value), int(msg["id"]))
        except (EOFError, OSError):
            pass

    def excused(self, suspect: dict[str, Any]) -> bool:
        """A stale operation answered untyped because the proxy cut its connection mid-call: the cut made it
        unknown, so it is no reason to stop the storm early (the checker judges it as any unknown)."""
        if "untyped" not in str(suspect.get("reason", "")):
            return False
        ts = int(suspect.get("ts") or 0)
        bound = int(self.sc.call_bound_s * 1e9)
        return any(p == suspect.get("process") and ts <= at <= ts + bound for p, at in self.cuts)

    def stop(self) -> dict[str, Any] | None:
        if not self.on or self.proc is None:
            return None
        self.stop_flag.value = 1
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.drain()
        return {"faults": dict(self.counts), **({"proxy": self.stats} if self.stats else {})}
