"""The early judge (soak.check.early): growing history files read as they grow, the horizon every operation before
which is complete, and the first violation proven while the storm runs, confirmed by the full check."""

from __future__ import annotations

import json
from pathlib import Path

from soak.check.early import EarlyJudge, LiveHistory, unconfirmed
from soak.check.verdict import Evidence, Violation
from soak.history import HistoryTail, HistoryWriter, operation_tuples
from soak.spi import Lease
from soak.workloads.runs.check import PLAN


def _line(path: Path, obj: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(obj, separators=(",", ":")) + "\n")


def _inv(p: str, i: int, ts: int, f: str = "append", lease: list | None = None, **v: object) -> dict:
    return {"t": "invoke", "p": p, "i": i, "ts": ts, "f": f, "run": "r1", "lease": lease, "intent": "live", "v": v}


def test_a_tail_reads_complete_lines_as_they_come_and_pairs_them_as_the_whole_reader_does(tmp_path: Path) -> None:
    path = tmp_path / "w0.1.jsonl"
    w = HistoryWriter(path, "w0.1")
    i = w.invoke("append", "r1", Lease("r1", "w0.1", 2), "live", {"seq": 1, "tag": "w0.1#0", "c": 0})
    tail = HistoryTail(path)
    tail.read()
    assert not tail.items and tail.pending_ns is not None  # pending: not handed out
    w.complete(i, "ok")
    w.event("stall", {"ms": 300})
    with open(path, "ab") as fh:
        fh.write(b'{"t":"invoke","p":"w0.1"')  # a line still being written
    tail.read()
    assert tail.pending_ns is None and tail.last_event is not None and tail.last_event.kind == "stall"
    with open(path, "ab") as fh:
        fh.write(b',"i":1,"ts":5,"f":"load","run":"r1","lease":null,"intent":"live","v":{}}\n')
    tail.read()
    assert tail.pending_ns == 5
    tail.end()  # the process was killed: its pending call never completes
    assert list(tail.items) == list(operation_tuples(path))


def test_the_horizon_waits_for_pending_calls_spawned_processes_and_stalls_but_not_for_ended_ones(tmp_path) -> None:
    hist = tmp_path / "history"
    hist.mkdir()
    nem = hist / "nemesis.jsonl"
    for p in ("w0.1", "w1.1", "w2.1"):
        _line(nem, {"t": "event", "p": "nemesis", "ts": 10, "kind": "spawn", "v": {"target": p}})
    _line(hist / "w0.1.jsonl", _inv("w0.1", 0, 100))
    _line(hist / "w0.1.jsonl", {"t": "ok", "p": "w0.1", "i": 0, "ts": 110, "v": {}})
    live = LiveHistory(hist)
    live.poll()
    assert live.horizon(1_000) == 10  # w1.1 and w2.1 were spawned and have written nothing yet
    _line(hist / "w1.1.jsonl", _inv("w1.1", 0, 200))  # w1.1 is inside a call
    _line(hist / "w2.1.jsonl", {"t": "event", "p": "w2.1", "ts": 150, "kind": "stall", "v": {"ms": 0.0001}})
    live.poll()
    assert live.horizon(1_000) == 110  # w0.1's next call comes after its last line
    _line(hist / "w0.1.jsonl", _inv("w0.1", 1, 300))
    live.poll()
    assert live.horizon(1_000) == 200  # w1.1's pending call
    _line(nem, {"t": "event", "p": "nemesis", "ts": 400, "kind": "kill", "v": {"target": "w1.1"}})
    live.poll()
    assert live.horizon(401) == 200  # a kill just recorded: a write in flight may still land
    assert live.horizon(400 + 30_000_000) == 250  # w1.1 is final now; w2.1 stalls 100 ns after 150
    tail = live.tails[hist / "w1.1.jsonl"]
    assert [op[7] for op in tail.items] == ["info"]  # its call never completed


MS = 1_000_000


def _two_tenures(tmp_path: Path, second: tuple[int, int]) -> tuple[Path, Path]:
    """History files where w0.1 is granted epoch 1 of r1 at 1-2 ms and w1.1 epoch 2 over `second` (ms): the
    history directory and w0.1's file."""
    hist = tmp_path / "history"
    hist.mkdir()
    a, b = hist / "w0.1.jsonl", hist / "w1.1.jsonl"
    _line(a, _inv("w0.1", 0, 1 * MS, "acquire", owner="w0.1"))
    _line(a, {"t": "ok", "p": "w0.1", "i": 0, "ts": 2 * MS, "v": {"epoch": 1}})
    _line(b, _inv("w1.1", 0, second[0] * MS, "acquire", owner="w1.1"))
    _line(b, {"t": "ok", "p": "w1.1", "i": 0, "ts": second[1] * MS, "v": {"epoch": 2}})
    return hist, a


def _storm_history(tmp_path: Path) -> Path:
    """Two tenures of one run, the first one's holder writing after the second was granted (stale-rejected)."""
    hist, a = _two_tenures(tmp_path, (400, 401))
    ms = MS
    _line(a, _inv("w0.1", 1, 500 * ms, "append", ["r1", "w0.1", 1], seq=1, tag="w0.1#1", c=0))
    _line(a, {"t": "ok", "p": "w0.1", "i": 1, "ts": 501 * ms, "v": {}})
    for p in ("w0.1", "w1.1"):
        _line(hist / "nemesis.jsonl", {"t": "event", "p": "nemesis", "ts": 700 * ms, "kind": "exit", "v": {"target": p}})
    return hist


def test_the_early_judge_proves_a_stale_write_once_the_horizon_passes_it(tmp_path: Path) -> None:
    hist = _storm_history(tmp_path)
    facts = PLAN.new_facts(None, None, lease_ttl_ms=100, runs=["r1"], status="running", quorum="")
    judge = EarlyJudge(LiveHistory(hist), PLAN, facts)
    assert judge.step(now=300 * 1_000_000) == []  # before the takeover: nothing to judge
    assert judge.step(now=700 * 1_000_000) == [] and judge.horizon == 401 * 1_000_000  # w1.1 may still write
    found = []
    for t in (900, 1_200, 1_500):
        found = judge.step(now=t * 1_000_000)
        if found:
            break
    assert found and found[0].clause == "stale-rejected"
    assert any(e.tag == "w0.1#1" for e in found[0].evidence)


def _violation(clause: str, *tags: str) -> Violation:
    """Evidence of one tenure each: a tag's writer's slot number is the epoch (`w3.1#38`: epoch 3 of r1)."""
    return Violation(clause, "s", tuple(Evidence("w0.1", 1, "append", "r1", int(t[1]), 0, "ok", 1, 2, t)
                                        for t in tags))


def test_an_early_violation_the_full_check_does_not_confirm_is_named_a_harness_defect() -> None:
    early = {"violation": _violation("stale-rejected", "w1.1#56", "w3.1#38", "w3.1#35").to_json()}
    assert unconfirmed(early, [_violation("stale-rejected", "w1.1#56", "w3.1#38", "w3.1#35")]) is None
    # the same read, the full check naming a later write in flight: confirmed
    assert unconfirmed(early, [_violation("stale-rejected", "w1.1#56", "w3.1#41", "w3.1#35")]) is None
    assert "harness defect" in unconfirmed(early, [_violation("run-match", "w1.1#56")])
    # another first operation, of no tenure the early violation cites past its first: not confirmed
    assert "harness defect" in unconfirmed(early, [_violation("stale-rejected", "w2.1#38", "w1.1#56")])
    assert "harness defect" in unconfirmed(early, [_violation("stale-rejected", "w1.1#57", "w3.1#38")])
    assert "harness defect" in unconfirmed(early, [])
    assert unconfirmed({"violation": None}, []) is None
    # a read that missed a stale write of epoch 3: the full check convicts epoch 3 through another of its writes first
    # (a cluster storm of redis-setnx-lock: a stale delete of the run, folded after the stop, emptied what the read
    # should have seen)
    assert unconfirmed(early, [_violation("stale-rejected", "w3.1#44", "w0.1#14")]) is None
    assert "harness defect" in unconfirmed(early, [_violation("stale-rejected", "w2.1#44", "w3.1#38")])  # another
    assert "harness defect" in unconfirmed(early, [_violation("lease-exclusive", "w3.1#44")])  # another clause


def _runs_facts():
    return PLAN.new_facts(None, None, lease_ttl_ms=100, runs=["r1"], status="running", quorum="")


def test_a_takeover_is_not_an_overlap_while_the_holders_release_may_still_be_in_flight(tmp_path: Path) -> None:
    from soak.workloads.runs.check.leases import check_grants

    hist, a = _two_tenures(tmp_path, (50, 60))
    ms = MS
    _line(a, _inv("w0.1", 1, 55 * ms, "release", ["r1", "w0.1", 1]))  # w0.1's release, invoked before the grant ended
    judge = EarlyJudge(LiveHistory(hist), PLAN, _runs_facts())
    assert judge.step(now=80 * ms) == [] and judge.horizon == 55 * ms
    # the takeover looks like an overlap until the release is read: the early judge must not call it one
    assert [v.clause for v in check_grants(judge.facts)] == ["lease-exclusive"]
    _line(a, {"t": "ok", "p": "w0.1", "i": 1, "ts": 56 * ms, "v": {}})
    for p in ("w0.1", "w1.1"):
        _line(hist / "nemesis.jsonl", {"t": "event", "p": "nemesis", "ts": 90 * ms, "kind": "exit", "v": {"target": p}})
    assert judge.step(now=500 * ms) == [] and judge.horizon == 500 * ms
    assert check_grants(judge.facts) == []  # and, with the release read, the full check agrees


def test_an_epoch_granted_twice_is_proven_while_both_tenures_are_live(tmp_path: Path) -> None:
    hist = tmp_path / "history"
    hist.mkdir()
    ms = 1_000_000
    for k, p in enumerate(("w0.1", "w1.1")):
        _line(hist / f"{p}.jsonl", _inv(p, 0, (1 + 10 * k) * ms, "acquire", owner=p))
        _line(hist / f"{p}.jsonl", {"t": "ok", "p": p, "i": 0, "ts": (2 + 10 * k) * ms, "v": {"epoch": 1}})
        _line(hist / f"{p}.jsonl", _inv(p, 1, 30 * ms, "load", None, tenure=["r1", p, 1]))  # both still busy
    found = EarlyJudge(LiveHistory(hist), PLAN, _runs_facts()).step(now=40 * ms)
    assert [v.clause for v in found] == ["epoch-monotonic"] and "granted 2 times" in found[0].statement


def test_across_hosts_the_horizon_waits_for_what_is_shipped_and_for_each_hosts_spawns_and_ends(tmp_path) -> None:
    from soak.check.early import SHIPPED_FILE

    hist = tmp_path / "history"
    hist.mkdir()
    shipped = tmp_path / SHIPPED_FILE  # the orchestrator's: every live host's history before it is here

    def ship(ns):
        shipped.write_text(json.dumps({"shipped_ns": ns}))

    ship(5)  # the storm's start: no host has drained yet
    read_at = [0]
    live = LiveHistory(hist, clock=lambda: read_at[0])
    live.poll()
    assert live.horizon(1_000) == 5  # nothing is here yet, but a host may have written anything since the start
    h0 = hist / "nemesis-h0.jsonl"  # a host's own nemesis log
    _line(h0, {"t": "event", "p": "nemesis", "ts": 10, "kind": "spawn", "v": {"target": "w0.1"}, "h": "h0"})
    _line(hist / "w1.1.jsonl", _inv("w1.1", 0, 100))
    _line(hist / "w1.1.jsonl", {"t": "ok", "p": "w1.1", "i": 0, "ts": 900, "v": {}})
    ship(950)
    live.poll()
    assert live.horizon(1_000) == 10  # w0.1 was spawned on h0 and nothing of it is shipped yet
    _line(hist / "w0.1.jsonl", _inv("w0.1", 0, 300))
    _line(h0, {"t": "event", "p": "nemesis", "ts": 400, "kind": "kill", "v": {"target": "w0.1"}, "h": "h0"})
    _line(hist / "w1.1.jsonl", _inv("w1.1", 1, 1000))
    _line(hist / "w1.1.jsonl", {"t": "ok", "p": "w1.1", "i": 1, "ts": 1100, "v": {}})
    read_at[0] = 50_000_000  # the kill is shipped 50 ms after it: final only 20 ms after that
    live.poll()
    assert live.horizon(60_000_000) == 300 and not live.final
    assert live.horizon(71_000_000) == 950  # w0.1 is final; what is shipped bounds it, not w1.1's latest line
    assert [op[7] for op in live.tails[hist / "w0.1.jsonl"].items] == ["info"]  # its call never completed
    ship(1_500)
    assert live.horizon(71_000_000) == 950  # read before the files at the next poll, not now
    live.poll()
    assert live.horizon(71_000_000) == 1100
    assert {p.name for p, _ in live.files()[-2:]} == {"nemesis-h0.jsonl", "nemesis.jsonl"}  # folded too


def test_across_hosts_the_early_judge_stands_aside_once_the_clock_bound_passes_what_it_assumes(tmp_path) -> None:
    import pytest

    from soak.check.early import ASSUMED_CLOCK_ERROR_MS, SHIPPED_FILE, StandAside

    hist, _ = _two_tenures(tmp_path, (400, 401))
    shipped = tmp_path / SHIPPED_FILE
    facts = PLAN.new_facts(None, None, lease_ttl_ms=100, runs=["r1"], status="running", quorum="",
                           clock_error_ms=ASSUMED_CLOCK_ERROR_MS)
    judge = EarlyJudge(LiveHistory(hist, PLAN.make_lease), PLAN, facts)
    shipped.write_text(json.dumps({"shipped_ns": 1000 * MS, "clock_error_ms": ASSUMED_CLOCK_ERROR_MS}))
    judge.step(now=2000 * MS)
    assert judge.slices == 1 and judge.horizon == 2 * MS  # judged: w0.1's latest line bounds it
    shipped.write_text(json.dumps({"shipped_ns": 1000 * MS, "clock_error_ms": ASSUMED_CLOCK_ERROR_MS + 0.1}))
    with pytest.raises(StandAside, match="clock offset bound"):
        judge.step(now=2000 * MS)
