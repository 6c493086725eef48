"""Reads as evidence, boot failures and in-history takeovers: hand-written histories per clause."""

from __future__ import annotations

from soak.workloads.runs.check import check

from .histories import RUNS, TTL_MS, H


def run_check(h: H, snap=None):
    return check(h.ops, snap if snap is not None else h.state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS)


def found(v, clause: str) -> list:
    return [x for x in v.violations if x.clause == clause]


def _handover() -> tuple[H, object, object, object]:
    """w1 holds epoch 1 of r1 and writes meta; it expires (ttl 100); w2 takes epoch 2 at 200."""
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.append("w1.1", a, 1, 5)
    m1 = h.put_meta("w1.1", a, 10)
    b = h.acquire("w2.1", "r1", 200, 2)
    return h, a, b, m1


def test_read_of_the_previous_epochs_last_write_passes():
    h, a, b, m1 = _handover()
    h.read("w2.1", b, "meta", 202, m1.tag)
    h.read("w2.1", b, "journal", 204, (1, "w1.1#1"))
    h.read("w2.1", b, "t1", 206, None)
    mine = h.put_meta("w2.1", b, 210)
    h.read("w2.1", b, "meta", 215, mine.tag)
    v = run_check(h)
    assert v.result == "pass", v.violations


def test_late_stale_meta_write_seen_by_the_successor_fails():
    h, a, b, m1 = _handover()
    # invoked while epoch 1 was live, it completes (lands) only after w2's own write: split fence
    late = h.put_meta("w1.1", a, 90, dur=130)
    h.read("w2.1", b, "meta", 202, m1.tag)  # before it landed: the serially-last write is still in flight
    mine = h.put_meta("w2.1", b, 205)
    h.read("w2.1", b, "meta", 225, late.tag)  # the stale write overwrote the successor's own
    v = run_check(h)
    hits = found(v, "stale-rejected")
    assert v.result == "fail" and len(hits) == 2, v.violations
    assert {e.tag for e in hits[1].evidence} >= {late.tag, mine.tag, "w2.1#3"}
    assert "took effect after the successor's own write" in hits[1].statement


def test_unknown_write_may_or_may_not_be_seen():
    for seen_new in (True, False):
        h, a, b, m1 = _handover()
        unk = h.put_meta("w1.1", a, 20, outcome="info", error="RuntimeError")
        h.read("w2.1", b, "meta", 202, unk.tag if seen_new else m1.tag)
        v = run_check(h, h.state(RUNS, include={unk.tag} if seen_new else set()))
        assert v.result == "pass", (seen_new, v.violations)


def test_an_older_value_than_the_serially_last_fails():
    h, a, b, m1 = _handover()
    h.put_meta("w1.1", a, 20)  # accepted well before the takeover
    h.read("w2.1", b, "meta", 202, m1.tag)
    v = run_check(h)
    assert found(v, "meta-last-write") and "lost write" in found(v, "meta-last-write")[0].statement


def test_reads_under_an_expired_or_superseded_tenure_get_no_verdict():
    h, a, b, m1 = _handover()
    mine = h.put_meta("w2.1", b, 205)
    h.read("w1.1", a, "meta", 150, None)  # epoch 1 expired at 110 (ttl 100): anything goes
    h.read("w1.1", a, "meta", 230, m1.tag)  # epoch 1 superseded by epoch 2
    h.read("w2.1", b, "meta", 330, m1.tag)  # epoch 2 expired at 300
    v = run_check(h)
    assert v.result == "pass", v.violations
    h.read("w2.1", b, "meta", 280, m1.tag)  # still live: its own write must show
    assert found(run_check(h), "meta-last-write"), mine


def test_lost_own_write_fails():
    h, a, b, m1 = _handover()
    mine = h.append("w2.1", b, 2, 205)
    h.read("w2.1", b, "journal", 210, (1, "w1.1#1"))
    hits = found(run_check(h), "journal-a3")
    assert hits and {mine.tag, "w2.1#2"} <= {e.tag for e in hits[0].evidence}


def test_read_of_a_write_under_another_runs_lease_is_run_match():
    h, a, b, m1 = _handover()
    s = h.acquire("w3.1", "s1", 0, 1)
    cross = h.blob_put("w3.1", s, "t1", 100, run="r1", outcome="fail")  # refused, yet it landed
    h.read("w2.1", b, "t1", 210, cross.tag)
    assert found(run_check(h), "run-match")


# -- concurrent-boot ------------------------------------------------------------------------

def test_boot_failures_other_than_harness_cuts_are_concurrent_boot():
    """Whatever a store's boot raised is its answer, whatever the exception's name (redis-py and socket timeouts
    raise TimeoutError): only a boot without a completion (cut short) is left to the liveness checker."""
    h, a, b, m1 = _handover()
    h.op("w5.1", "open", "", 0, outcome="fail", error="StoreBusyError", intent="boot")
    h.op("w6.1", "open", "", 0, outcome="info", error="OperationalError", intent="boot")
    h.op("w7.1", "open", "", 0, pending=True, intent="boot")  # no completion: the liveness checker judges it
    h.op("w8.1", "open", "", 0, outcome="info", error="TimeoutError", intent="boot")
    h.op("w10.1", "open", "", 0, outcome="info", error="Incomplete", intent="boot")  # a store's class of that name
    h.op("w9.1", "open", "", 0, intent="boot")
    hits = found(run_check(h), "concurrent-boot")
    assert sorted(x.evidence[0].process for x in hits) == ["w10.1", "w5.1", "w6.1", "w8.1"]


# -- ttl-honoured inside the history ---------------------------------------------------------

def test_acquire_refused_long_after_expiry_is_ttl_honoured():
    h, a, b, m1 = _handover()
    h.acquire("w3.1", "r1", 125, None, outcome="fail")  # 124 ms after epoch 1: inside 1.2 x ttl + margin
    assert run_check(h).result == "pass"
    h.acquire("w3.1", "r1", 340, None, outcome="fail")  # epoch 2 granted at 201, never renewed
    hits = found(run_check(h), "ttl-honoured")
    assert len(hits) == 1 and hits[0].evidence[0].tag == "w3.1#1"


def test_acquire_refused_after_a_release_is_ttl_honoured():
    h, a, b, m1 = _handover()
    h.release("w2.1", b, 210)
    h.acquire("w3.1", "r1", 215, None, outcome="fail")
    hits = found(run_check(h), "ttl-honoured")
    assert hits and "released" in hits[0].statement


def test_takeover_refusals_skip_pending_and_unknown_acquires():
    h, a, b, m1 = _handover()
    h.acquire("w4.1", "r1", 300, None, pending=True)  # may have been granted
    h.acquire("w3.1", "r1", 340, None, outcome="fail")
    assert not found(run_check(h), "ttl-honoured")
    h2, a, b, m1 = _handover()
    h2.acquire("w4.1", "r1", 330, 3, dur=30)  # granted, completing after the refused one was invoked
    h2.acquire("w3.1", "r1", 340, None, outcome="fail")
    assert not found(run_check(h2), "ttl-honoured")
    h3, a, b, m1 = _handover()
    h3.renew("w2.1", b, 250, outcome="info", error="RuntimeError", dur=40)  # may have renewed at 290
    h3.acquire("w3.1", "r1", 340, None, outcome="fail")
    assert not found(run_check(h3), "ttl-honoured")


def test_takeover_refusal_paused_inside_the_call_is_not_judged():
    h, a, b, m1 = _handover()
    h.acquire("w3.1", "r1", 340, None, outcome="fail", dur=200)  # judged as late as 540
    h.acquire("w4.1", "r1", 400, 3)  # granted meanwhile: the refusal may be right
    assert not found(run_check(h), "ttl-honoured")


def test_stale_write_landing_after_later_epochs_is_stale_rejected():
    h, a, b, m1 = _handover()
    late = h.put_meta("w1.1", a, 90, dur=300)  # completes at 390, long after epoch 2 was granted
    mine = h.put_meta("w2.1", b, 205)
    h.release("w2.1", b, 210)
    c = h.acquire("w3.1", "r1", 400, 3)
    h.read("w3.1", c, "meta", 405, late.tag)  # it overwrote epoch 2's write
    hits = found(run_check(h), "stale-rejected")
    assert hits and "completed after its tenure was superseded" in hits[0].statement, mine


def test_takeover_refusals_skip_any_grant_in_between():
    h, a, b, m1 = _handover()
    h.release("w2.1", b, 210)
    h.acquire("w4.1", "r1", 212, 1)  # an epoch reset (epoch-monotonic's business): this tenure may hold r1
    h.acquire("w3.1", "r1", 215, None, outcome="fail")
    assert not found(run_check(h), "ttl-honoured")


def test_a_meta_read_mixing_two_writes_is_meta_last_write_not_a_stale_write():
    from soak.history import meta_fields_for, payload_for
    from soak.spi import RunMeta
    from soak.workloads.runs.worker import _meta_value

    first = payload_for("w1.1#1")
    status, segments = meta_fields_for("w2.1#7")
    assert _meta_value(RunMeta("r1", status, segments, payload_for("w2.1#7"))) == {"tag": "w2.1#7"}
    assert _meta_value(RunMeta("r1", status, segments, first)) == {"tag": "w1.1#1", "mixed": True}
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.op("w1.1", "get_meta", "r1", 10, args={"tenure": ["r1", "w1.1", 1]}, result={"tag": "w1.1#1", "mixed": True})
    h.release("w1.1", a, 20)
    v = check(h.ops, h.state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS)
    assert {x.clause for x in v.violations} == {"meta-last-write"}
    assert "read back mixed" in v.violations[0].statement


def test_a_refused_write_seen_by_a_read_and_overwritten_since_is_typed_refusal():
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    refused = h.blob_put("w1.1", a, "t1", 150, outcome="fail", error="LeaseHeldError")  # expired; written anyway
    b = h.acquire("w2.1", "r1", 200, 2)
    h.read("w2.1", b, "t1", 210, refused.tag)
    h.blob_put("w2.1", b, "t1", 220)  # the final state holds this one: the refused write's call is not indexed
    h.release("w2.1", b, 230)
    v = check(h.ops, h.state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS)
    assert {x.clause for x in v.violations} == {"typed-refusal"}, v.violations
