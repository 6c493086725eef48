"""Strikes across hosts: a held strike's successor may run on another host, and the orchestrator relays both ways
(the tenures a host's nemesis cannot see, and the takeover its held strike wants from another host's worker)."""

from __future__ import annotations

import os
import random
import signal
from types import SimpleNamespace

import pytest

from soak.cluster.storm import ClusterStorm, _Agent
from soak.history import HistoryWriter, now_ns
from soak.scenario import load_scenario
from soak.storm.nemesis import Nemesis, RemoteTenure, WorkerHandle, _wait_stopped
from soak.storm.worker import (IN_CALL, OP_INDEX, PHASE, RUNNING, SINCE_NS, SLOTS, STRIKE, TENURE_EPOCH,
                               TENURE_EXPIRES_NS, TENURE_KEY, WITNESSED)
from tests.storm.test_strike import _Proc


@pytest.fixture
def victim():
    proc = _Proc()
    now = now_ns()
    st = [0] * SLOTS
    for k, v in {PHASE: RUNNING, IN_CALL: 1, STRIKE: 2, TENURE_KEY: 1, TENURE_EPOCH: 5,
                 TENURE_EXPIRES_NS: now + 50_000_000, OP_INDEX: 10, SINCE_NS: now}.items():
        st[k] = v
    yield WorkerHandle("w1.1", 1, 1, 0, proc, st)
    proc.popen.kill()
    proc.popen.wait()


def test_a_held_strike_alone_on_its_host_is_let_go_by_a_successor_on_another_host(tmp_path, victim):
    nem = Nemesis(load_scenario("smoke"), random.Random(1), HistoryWriter(tmp_path / "nemesis.jsonl", "nemesis"))
    os.kill(victim.pid, signal.SIGSTOP)
    assert _wait_stopped(victim.pid)
    now = now_ns()
    nem.find_strikes([victim], now)
    expires = victim.hold.expires_ns
    assert nem._let_go(victim, [victim], expires + 1) is None  # nobody here to ask, nobody seen: held on
    assert not victim.hold.asked
    nem.remote = (RemoteTenure("w0.1", key=1, epoch=4, calls=9),)  # an older epoch is no successor
    assert nem._let_go(victim, [victim], expires + 2) is None and victim.hold.successor is None
    nem.remote = (RemoteTenure("w2.1", key=1, epoch=6, calls=1),)  # granted there, its reads not done yet
    assert nem._let_go(victim, [victim], expires + 3) is None and victim.hold.successor.name == "w2.1"
    nem.remote = (RemoteTenure("w2.1", key=1, epoch=6, calls=3),)
    assert nem._let_go(victim, [victim], expires + 4) == "successor"
    nem.resume(victim, "successor")
    # the takeover got in while the call was held: the worker strikes that position again, as on one machine
    assert victim.state[WITNESSED] == 1 and nem.strikes["witnessed"] == 1


def _agent(name: str, **state) -> _Agent:
    a = _Agent(SimpleNamespace(name=name), actor=None, slots=[])
    for k, v in state.items():
        setattr(a, k, v)
    return a


def test_the_orchestrator_relays_each_hosts_tenures_to_the_others_and_asks_one_free_host_once():
    storm = SimpleNamespace(relayed=set(), unrelayed=set())
    h0 = _agent("h0", tenures=[{"name": "w0.1", "key": 2, "epoch": 7, "calls": 4}], free=0,
                wants=[[1, 5]])  # its held strike of run 1, epoch 5, wants a successor
    h1 = _agent("h1", tenures=[], free=1)
    h2 = _agent("h2", tenures=[{"name": "w2.1", "key": 0, "epoch": 3, "calls": 1}], free=2)
    out = ClusterStorm.relays(storm, [h0, h1, h2])
    assert out["h1"]["tenures"] == h0.tenures + h2.tenures and out["h0"]["tenures"] == h2.tenures
    assert out["h2"]["want"] == [1] and out["h1"]["want"] == [] and out["h0"]["want"] == []  # the most free
    again = ClusterStorm.relays(storm, [h0, h1, h2])  # h0 still reports it until a successor is seen
    assert all(not r["want"] for r in again.values())
    assert storm.relayed == {("h0", 1, 5)} and not storm.unrelayed
    lonely = SimpleNamespace(relayed=set(), unrelayed=set())
    busy = ClusterStorm.relays(lonely, [h0, _agent("h1", free=0)])
    assert busy["h1"]["want"] == []  # nobody free: nobody asked (the strike is held to its cap, as before)
    assert lonely.unrelayed == {("h0", 1, 5)} and not lonely.relayed  # storm.json's strike_relays counts it


def test_when_no_host_has_a_worker_free_a_worker_holding_another_run_is_asked_once():
    storm = SimpleNamespace(relayed=set(), unrelayed=set(), relayed_busy=set())
    h0 = _agent("h0", tenures=[], free=0, busy=0, wants=[[1, 5]])  # its one worker is the held one
    h1 = _agent("h1", free=0, busy=1)
    h2 = _agent("h2", free=0, busy=2)
    out = ClusterStorm.relays(storm, [h0, h1, h2])
    assert out["h2"]["want"] == [1] and out["h1"]["want"] == []  # the most workers holding a tenure
    assert storm.relayed == storm.relayed_busy == {("h0", 1, 5)} and not storm.unrelayed
    assert all(not r["want"] for r in ClusterStorm.relays(storm, [h0, h1, h2]).values())  # once
    # a free worker on another host goes first, even while its drain is in flight: the strike waits for it
    waiting = SimpleNamespace(relayed=set(), unrelayed=set(), relayed_busy=set())
    free_later = _agent("h1", free=1, busy=0, pending=object())
    out = ClusterStorm.relays(waiting, [h0, free_later, h2])
    assert all(not r["want"] for r in out.values()) and not waiting.relayed and not waiting.relayed_busy


def test_a_host_asks_a_worker_holding_another_run_only_when_none_is_free():
    from soak.cluster.agent import _engine_class
    from soak.storm.worker import WANTED

    engine = _engine_class()

    def handle(slot, key, **kw):
        st = [0] * SLOTS
        st[TENURE_KEY] = key
        st[PHASE] = RUNNING
        return SimpleNamespace(slot=slot, state=st, killed=False, paused_since=kw.get("paused"), hold=kw.get("hold"),
                               alive=lambda: True)

    held, on_run_2, on_run_0, paused = handle(0, 1, hold=object(), paused=1), handle(1, 2), handle(2, 0), \
        handle(3, 2, paused=1)
    host = SimpleNamespace(nemesis=SimpleNamespace(remote=()), free_workers=lambda: [],
                           targets=lambda: [held, on_run_2, on_run_0, paused])
    host.busy_workers = lambda: engine.busy_workers(host)
    assert host.busy_workers() == [on_run_2, on_run_0]  # neither the held nor the paused one
    engine.relay(host, [], [0])  # run 0: the worker already on run 0 is not asked to take it
    assert on_run_2.state[WANTED] == 1 and on_run_0.state[WANTED] == 0
    assert host.busy_workers() == [on_run_0]  # asked once
    free = handle(4, -1)
    host.free_workers = lambda: [free]
    engine.relay(host, [], [2])
    assert free.state[WANTED] == 3 and on_run_0.state[WANTED] == 0  # a free worker goes first


def test_a_worker_asked_in_its_tenure_releases_it_and_takes_the_held_strikes_run_over(tmp_path):
    import threading
    import time

    from soak.history import Operation, operations
    from soak.stores.memory import open_memory
    from soak.workloads import WorkerContext, get_workload

    # every tenure would stall (no release of its own) and run 40 operations: a release is the asking's doing
    sc = load_scenario("smoke", {"lease_ttl_ms": 60, "stall_prob": 1.0, "strike_prob": 0.0, "ops_min": 40,
                                 "ops_max": 40})
    runs = sc.options.main_runs()
    store = open_memory(str(tmp_path), lease_ttl_ms=sc.lease_ttl_ms)
    workload = get_workload("runs")
    held: list[str | None] = []  # every tenure the worker published (None: it ended)
    ask: dict[str, str] = {}  # the run it is asked to take over, and whether the ask was read

    def publish(key, epoch=0, expires_ns=0):
        held.append(key)
        if key is not None and not ask:  # in its first tenure: another main run is wanted from now on
            ask["run"] = next(r for r in runs if r != key)

    def wanted():
        if "run" in ask and "read" not in ask:
            ask["read"] = "yes"
            return ask["run"]
        return None

    writer = HistoryWriter(tmp_path / "w0.1.jsonl", "w0.1")
    deadline = time.monotonic() + 10
    ctx = WorkerContext(store=store, writer=writer, rng=random.Random(3), scenario=sc, process="w0.1",
                        should_stop=lambda: time.monotonic() > deadline or ask.get("run") in held[1:],
                        publish_tenure=publish, wanted=wanted, **workload.context_hooks())
    t = threading.Thread(target=workload.worker_loop, args=(ctx,))
    t.start()
    t.join(30)
    writer.close()
    assert not t.is_alive() and ask.get("read")
    ops = [x for x in operations([tmp_path / "w0.1.jsonl"]) if isinstance(x, Operation)]
    first = next(o for o in ops if o.f == "acquire" and o.outcome == "ok")
    rest = ops[ops.index(first) + 1:]
    release = next(o for o in rest if o.f == "release" and o.run == first.run)
    assert release.outcome == "ok" and release.intent == "live"
    during = rest[:rest.index(release)]
    assert len([o for o in during if o.run == first.run]) < 40  # cut short: 40 operations would have stalled
    after = rest[rest.index(release) + 1:]
    take = next(o for o in after if o.f == "acquire")
    assert take.run == ask["run"] and take.outcome == "ok"
