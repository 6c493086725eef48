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
