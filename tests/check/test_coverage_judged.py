"""Every coverage probe the worker makes has a judgement that can fail (docs/coverage.md): each accepted forged,
released or superseded lease, and each refused unleased write, is flagged under its clause; the same probes
refused (unleased: accepted) pass."""

from __future__ import annotations

from soak.spi import Lease
from soak.workloads.runs.check import check

from .histories import RUNS, TTL_MS, H, clean_history


def run_check(h: H):
    return check(h.ops, h.state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS)


def statements(v, clause: str) -> list[str]:
    return [x.statement for x in v.violations if x.clause == clause]


def test_probes_refused_pass():
    h = clean_history()
    b3 = h.acquire("w2.1", "r1", 400, 3)
    h.put_meta("w2.1", Lease("r1", "w2.1~impostor", 3), 402, outcome="fail", intent="impostor")
    h.put_meta("w2.1", Lease("r1", "w2.1", 4), 404, outcome="fail", intent="future")
    h.append("w2.1", Lease("r1", "w2.1", 2), 4, 406, outcome="fail", intent="released_superseded")
    h.op("w2.1", "put_meta", "ul", 408, args={"tag": "w2.1#x", "c": 1, "status": "running", "segments": 1},
         intent="unleased")
    h.release("w2.1", b3, 410)
    h.renew("w2.1", b3, 412, outcome="fail", intent="released")
    h.put_meta("w2.1", b3, 414, outcome="fail", intent="released")
    v = run_check(h)
    assert v.result == "pass", v.violations


def test_an_impostor_accepted_is_stale_rejected():
    h = clean_history()
    h.acquire("w2.1", "r1", 400, 3)
    h.put_meta("w2.1", Lease("r1", "w2.1~impostor", 3), 402, intent="impostor")
    v = run_check(h)
    assert any("non-grantee" in s and "w2.1~impostor" in s for s in statements(v, "stale-rejected")), v.violations


def test_a_future_epoch_never_granted_is_stale_rejected():
    h = clean_history()
    h.acquire("w2.1", "r1", 400, 3)
    h.put_meta("w2.1", Lease("r1", "w2.1", 1_000_003), 402, intent="future")
    v = run_check(h)
    assert any("never granted" in s for s in statements(v, "stale-rejected")), v.violations


def test_a_future_epoch_granted_later_to_the_same_owner_is_still_caught():
    h = clean_history()
    b3 = h.acquire("w2.1", "r1", 400, 3)
    h.put_meta("w2.1", Lease("r1", "w2.1", 4), 402, intent="future")  # accepted before epoch 4 existed
    h.release("w2.1", b3, 404)
    b4 = h.acquire("w2.1", "r1", 450, 4)  # then granted to the same owner
    h.put_meta("w2.1", b4, 452)
    v = run_check(h)
    assert any("before that epoch's grant was invoked" in s for s in statements(v, "stale-rejected")), v.violations


def test_a_renew_or_a_write_accepted_after_release_is_flagged():
    h = clean_history()
    b3 = h.acquire("w2.1", "r1", 400, 3)
    h.release("w2.1", b3, 402)
    h.renew("w2.1", b3, 404, intent="released")
    h.put_meta("w2.1", b3, 406, intent="released")
    v = run_check(h)
    assert any("released" in s for s in statements(v, "stale-lease-ops")), v.violations
    assert any("released" in s for s in statements(v, "stale-rejected")), v.violations


def test_a_blob_delete_of_another_runs_ref_accepted_is_run_match():
    h = clean_history()
    b3 = h.acquire("w2.1", "r1", 400, 3)
    h.op("w2.1", "blob_delete", "s1", 402, lease=b3, args={"ref": "s1/x", "c": 99}, intent="cross")
    v = run_check(h)
    assert any("blob_delete on run s1" in s for s in statements(v, "run-match")), v.violations


def test_an_unleased_write_refused_by_the_fence_is_unleased_passthrough():
    h = clean_history()
    h.op("w2.1", "put_meta", "ul", 400, args={"tag": "w2.1#y", "c": 1, "status": "running", "segments": 1},
         outcome="fail", intent="unleased")
    h.op("w2.1", "append", "ul", 402, args={"seq": 1, "tag": "w2.1#z", "c": 2}, outcome="fail",
         error="JournalOrderError", intent="unleased")  # the order guard may refuse an unleased append
    v = run_check(h)
    assert len(statements(v, "unleased-passthrough")) == 1, v.violations


def test_a_reentrant_acquire_granted_is_lease_exclusive():
    h = clean_history()
    b3 = h.acquire("w2.1", "r1", 400, 3)
    h.acquire("w2.1", "r1", 410, 4, intent="reentrant")  # the live holder granted its own run again
    h.put_meta("w2.1", b3, 412, outcome="fail")
    v = run_check(h)
    assert statements(v, "lease-exclusive"), v.violations


def test_a_future_epochs_refused_release_before_its_grant_does_not_hide_a_reentrant_grant():
    """The future-epoch probe presents epoch 4 before it exists, release included (refused); epoch 4 is granted
    later and its live holder granted the run again: the refused release, over before epoch 4's grant, cannot have
    ended that tenure, so the reentrant grant is still `lease-exclusive` (it escaped 1 storm in 20 before)."""
    h = clean_history()
    b3 = h.acquire("w2.1", "r1", 400, 3)
    h.release("w2.1", Lease("r1", "w2.1", 4), 402, outcome="fail", intent="future")
    h.release("w2.1", b3, 404)
    b4 = h.acquire("w2.1", "r1", 410, 4)
    h.renew("w2.1", b4, 412)
    h.acquire("w2.1", "r1", 414, 5, intent="reentrant")
    v = run_check(h)
    assert statements(v, "lease-exclusive"), v.violations


def test_a_reacquire_refused_right_after_release_is_ttl_honoured():
    h = clean_history()
    b3 = h.acquire("w2.1", "r1", 400, 3)
    h.release("w2.1", b3, 402)
    h.acquire("w2.1", "r1", 410, None, outcome="fail", intent="reacquire")
    v = run_check(h)
    assert any("released" in s for s in statements(v, "ttl-honoured")), v.violations


def test_a_renewed_holder_refused_past_its_first_renews_ttl_is_live_accepted():
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.renew("w1.1", a, 10)
    h.renew("w1.1", a, 60)  # the tenure is live until at least 160 (ttl 100)
    h.put_meta("w1.1", a, 115, outcome="fail", error="LeaseHeldError", intent="renewed")
    v = run_check(h)
    assert statements(v, "live-accepted"), v.violations


def test_an_unleased_delete_of_a_blob_never_written_refused_on_a_held_run_is_unleased_passthrough():
    h = H()
    h.acquire("w1.1", "r1", 0, 1)
    h.op("w1.1", "blob_delete", "r1", 10, args={"ref": "r1/ul-never"}, outcome="fail", error="LeaseHeldError",
         intent="unleased_held")
    v = run_check(h)
    assert statements(v, "unleased-passthrough"), v.violations


def test_the_same_unleased_delete_accepted_passes():
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.op("w1.1", "blob_delete", "r1", 10, args={"ref": "r1/ul-never"}, intent="unleased_held")
    h.release("w1.1", a, 20)
    v = run_check(h)
    assert v.result == "pass", v.violations
