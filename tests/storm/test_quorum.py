"""The quorum tailer: incremental reads, partial lines, takeovers and stale refusals per surface."""

from __future__ import annotations

import json

from soak.history import HistoryWriter
from soak.scenario import load_scenario
from soak.spi import Lease
from soak.storm.quorum import QuorumTracker
from soak.workloads import get_workload


def _tracker(tmp_path, thresholds):
    return QuorumTracker(tmp_path, get_workload("runs").new_counter(), thresholds)


def test_takeovers_stale_refusals_and_partial_lines(tmp_path):
    w = HistoryWriter(tmp_path / "w0.1.jsonl", "w0.1")
    q = _tracker(tmp_path, {"takeovers": 1, "stale_append": 1, "stale_cross": 1, "accepted_append": 1})
    e1 = Lease("r0", "w0.1", 1)
    i = w.invoke("acquire", "r0", None, "live", {"owner": "w0.1"})
    w.complete(i, "ok", {"epoch": 1})
    i = w.invoke("append", "r0", e1, "live", {"seq": 1, "tag": "w0.1#1", "c": 1})
    w.complete(i, "ok")
    q.poll()
    assert q.counts()["accepted_append"] == 1 and not q.met()
    # epoch 2 granted while epoch 1 was never released: a takeover
    i = w.invoke("acquire", "r0", None, "live", {"owner": "w0.1"})
    w.complete(i, "ok", {"epoch": 2})
    i = w.invoke("append", "r0", e1, "stale", {"seq": 2, "tag": "w0.1#4", "c": 2})
    # a completion line cut in half: not counted until its newline arrives
    line = json.dumps({"t": "fail", "p": "w0.1", "i": i, "ts": 1, "err": "LeaseHeldError", "v": {}}) + "\n"
    with open(tmp_path / "w0.1.jsonl", "a") as fh:
        fh.write(line[:10])
    q.poll()
    assert q.counts()["takeovers"] == 1 and q.counts().get("stale_append", 0) == 0
    with open(tmp_path / "w0.1.jsonl", "a") as fh:
        fh.write(line[10:])
    i = w.invoke("blob_put", "r1", e1, "stale", {"ref": "r1/b0", "tag": f"w0.1#{w.next_index()}", "c": 3})
    w.complete(i, "fail", error="LeaseHeldError")
    q.poll()
    counts = q.counts()
    assert counts["stale_append"] == 1 and counts["stale_cross"] == 1 and counts["stale_refusals"] == 2
    assert q.met()


def test_released_epoch_is_not_a_takeover_and_events_count(tmp_path):
    w = HistoryWriter(tmp_path / "w1.1.jsonl", "w1.1")
    n = HistoryWriter(tmp_path / "nemesis.jsonl", "nemesis")
    q = _tracker(tmp_path, {"takeovers": 1, "pauses_in_call": 1})
    i = w.invoke("acquire", "r0", None, "live", {"owner": "w1.1"})
    w.complete(i, "ok", {"epoch": 1})
    i = w.invoke("release", "r0", Lease("r0", "w1.1", 1), "live", {})
    w.complete(i, "ok")
    i = w.invoke("acquire", "r0", None, "live", {"owner": "w1.1"})
    w.complete(i, "ok", {"epoch": 2})
    n.event("pause", {"target": "w1.1", "in_call": True})
    n.event("pause", {"target": "w1.1", "in_call": True, "strike": True})
    n.event("pause", {"target": "w1.1", "in_call": False})
    n.event("kill", {"target": "w1.1", "in_call": False})
    w.event("stall", {"ms": 350})
    q.poll()
    counts = q.counts()
    assert counts["takeovers"] == 0 and counts["grants"] == 2
    assert counts["pauses"] == 3 and counts["pauses_in_call"] == 2 and counts["kills"] == 1 and counts["stalls"] == 1
    assert counts["strikes_held"] == 1
    assert not q.met()


def _lines(path, *records):
    with open(path, "a") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def _held_refusal_suspects(tmp_path, *holder_ops):
    """Epoch 1 of r0 granted at 1 s, `holder_ops` by its holder, an acquire refused for it at 1.8 s."""
    ms = 1_000_000
    tmp_path.mkdir(parents=True, exist_ok=True)
    q = QuorumTracker(tmp_path, get_workload("runs").new_counter(load_scenario("smoke", {"lease_ttl_ms": 250})), {})
    lease = ["r0", "w0.1", 1]
    _lines(tmp_path / "w0.1.jsonl",
           {"t": "invoke", "p": "w0.1", "i": 0, "ts": 990 * ms, "f": "acquire", "run": "r0", "lease": None,
            "intent": "live", "v": {"owner": "w0.1"}},
           {"t": "ok", "p": "w0.1", "i": 0, "ts": 1000 * ms, "v": {"epoch": 1}},
           *holder_ops)
    _lines(tmp_path / "w1.1.jsonl",
           {"t": "invoke", "p": "w1.1", "i": 0, "ts": 1800 * ms, "f": "acquire", "run": "r0", "lease": None,
            "intent": "live", "v": {"owner": "w1.1"}},
           {"t": "fail", "p": "w1.1", "i": 0, "ts": 1801 * ms, "err": "LeaseHeldError", "v": {"holder": lease}},
           {"t": "invoke", "p": "w1.1", "i": 1, "ts": 2400 * ms, "f": "load", "run": "r1", "lease": None,
            "intent": "live", "v": {}},
           {"t": "ok", "p": "w1.1", "i": 1, "ts": 2401 * ms, "v": {}})
    q.poll()
    return [s["reason"] for s in q.suspects]


def test_an_acquire_refused_for_a_long_expired_tenure_is_a_ttl_suspect(tmp_path):
    (reason,) = _held_refusal_suspects(tmp_path)
    assert "refused for epoch 1" in reason and "800 ms before" in reason


def test_a_renewed_released_or_renewing_holder_is_no_ttl_suspect(tmp_path):
    ms = 1_000_000
    renew = {"t": "invoke", "p": "w0.1", "i": 1, "ts": 1500 * ms, "f": "renew", "run": "r0",
             "lease": ["r0", "w0.1", 1], "intent": "live", "v": {}}
    renewed = {"t": "ok", "p": "w0.1", "i": 1, "ts": 1501 * ms, "v": {}}
    released = {**renew, "f": "release"}
    assert _held_refusal_suspects(tmp_path / "renewed", renew, renewed) == []  # live until 1.75 s + margin
    assert _held_refusal_suspects(tmp_path / "renewing", renew) == []  # a renew in flight may have landed
    assert _held_refusal_suspects(tmp_path / "released", released, renewed) == []
    # a renew that ended unknown long before (a cut; the network may deliver its request after the caller gave up)
    early = {**renew, "ts": 1100 * ms}
    cut = {"t": "info", "p": "w0.1", "i": 1, "ts": 1101 * ms, "err": "OperationalError", "msg": "connection lost"}
    assert _held_refusal_suspects(tmp_path / "unknown", early, cut) == []
    assert len(_held_refusal_suspects(tmp_path / "refused", early, {**cut, "t": "fail", "err": "LeaseHeldError"})) == 1
    # an acquire of the run that ended unknown after the grant: it may have granted meanwhile
    other = {"t": "invoke", "p": "w0.1", "i": 1, "ts": 1200 * ms, "f": "acquire", "run": "r0", "lease": None,
             "intent": "live", "v": {"owner": "w0.1"}}
    assert _held_refusal_suspects(tmp_path / "acquire-unknown", other, {**cut, "ts": 1201 * ms}) == []


def test_takeover_rate_is_measured_against_runs_over_ttl():
    from soak.workloads.runs.quorum import takeover_rates

    # 3 runs at a ttl of 250 ms allow at most 12 expiry-driven takeovers a second
    assert takeover_rates(40, 10.0, 3, 250) == {"takeovers_per_s": 4.0, "takeovers_per_s_over_R_T": 0.333}
    assert takeover_rates(120, 10.0, 3, 250)["takeovers_per_s_over_R_T"] == 1.0
    assert takeover_rates(5, 0.0, 3, 250) == {"takeovers_per_s": 0.0, "takeovers_per_s_over_R_T": 0.0}
