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
