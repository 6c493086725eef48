"""The checker's real-time rules across hosts: a rule fires only when the order is certain given the clock bound."""

from __future__ import annotations

from soak.spi import Lease
from soak.workloads.runs.check import check
from tests.check.histories import RUNS, TTL_MS, clean_history


def _stale_meta_12ms_after_the_takeover():
    # epoch 2 is granted to w2.1 at 200..201 ms; w1.1 (another host) writes meta under epoch 1 at 213 ms, accepted
    h = clean_history()
    h.put_meta("w1.1", Lease("r1", "w1.1", 1), 213)
    return h


def _stale(clock_error_ms: float) -> bool:
    h = _stale_meta_12ms_after_the_takeover()
    v = check(h.ops, h.state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS, clock_error_ms=clock_error_ms)
    return "stale-rejected" in {x.clause for x in v.violations}


def test_an_order_the_clock_bound_makes_uncertain_is_no_violation():
    # each host's clock may be 7 ms off: the two records may be 14 ms apart either way, more than the 12 ms seen
    assert not _stale(7.0)


def test_an_order_certain_within_the_clock_bound_still_fails():
    assert _stale(0.0)
    assert _stale(5.0)  # 10 ms of slack, 12 ms apart: the write surely came after the takeover


def _slow_renew_history(partitioned: bool):
    from soak.history import Record

    h = clean_history()
    h.renew("w1.1", Lease("r1", "w1.1", 1), 400, dur=6000, outcome="fail")  # 6 s: past the 2 s call bound
    events = [Record("event", "nemesis", 0, kind="cluster", value={"hosts": [{"host": "h0", "slots": [1]},
                                                                            {"host": "h1", "slots": [2]}]}),
              Record("event", "nemesis", 0, kind="spawn", value={"target": "w1.1", "slot": 1, "incarnation": 1})]
    if partitioned:
        events += [Record("event", "nemesis", 300_000_000, kind="host-partition", value={"host": "h0"}),
                   Record("event", "nemesis", 900_000_000, kind="host-heal", value={"host": "h0"})]
    return [*events, *h.ops], h


def test_a_call_its_host_was_cut_off_the_store_during_is_not_judged_for_call_returns():
    for partitioned, expect in ((False, True), (True, False)):
        ops, h = _slow_renew_history(partitioned)
        v = check(ops, h.state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS)
        assert ("call-returns" in {x.clause for x in v.violations}) is expect, (partitioned, v.summary())
