"""The unavailable-node handoff policy (seed section 3.6), tested without the checkout mutex's contention.

Ownership rows are pre-seeded through the claim store with an injected `FakeClock` (a claim at a chosen instant),
node health is toggled on a `NodeHealthMonitor`, and the decisions are read off `decide_handoff`,
`recover_unreachable` and `pre_dispatch`. The decision table is written out here, not recomputed by the code
under test. Every test that touches a store runs on each spec in `SPECS` (`sqlite:` once its module lands).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from soak.claims import (
    RECOVER_EVENT, CheckoutConflictError, Claimant, HandoffPolicy, HealthChange, NodeHealth, NodeHealthMonitor,
    NodeRegistry, decide_handoff, pre_dispatch, recover_unreachable, resolve_claims,
)
from soak.clock import FakeClock

SPECS = ["memory:", "sqlite:"]
TTL_MS = 1000
TTL = TTL_MS / 1000.0
A = Claimant("node-a", "agent-1", "run-a")
B = Claimant("node-b", "agent-1", "run-b")


@pytest.fixture(params=SPECS)
def store_and_clock(request, tmp_path):
    if request.param == "sqlite:":
        pytest.importorskip("soak.claims._sqlite")
    clock = FakeClock()
    store = resolve_claims(request.param).open(str(tmp_path), TTL_MS, clock=clock)
    yield store, clock
    store.close()


@pytest.fixture
def monitor():
    clock = FakeClock()
    registry = NodeRegistry(None)
    yield NodeHealthMonitor(registry, offline_after_s=5.0, clock=clock), clock
    registry.close()


# -- the decision table -------------------------------------------------------------------------------
# (policy, owner health, lease expired) -> (action, where a recovered task may be dispatched)

KEEP, BLOCK = ("keep", None), ("block", None)
LOCAL, ANY = ("recover", "local"), ("recover", "any-healthy")
TABLE = {
    ("block", "online", False): KEEP,
    ("block", "offline", False): KEEP,
    ("block", "error", False): KEEP,
    ("block", "unknown", False): KEEP,
    ("block", "online", True): KEEP,
    ("block", "offline", True): BLOCK,
    ("block", "error", True): BLOCK,
    ("block", "unknown", True): KEEP,
    ("reassign-to-local", "online", False): KEEP,
    ("reassign-to-local", "offline", False): KEEP,
    ("reassign-to-local", "error", False): KEEP,
    ("reassign-to-local", "unknown", False): KEEP,
    ("reassign-to-local", "online", True): KEEP,
    ("reassign-to-local", "offline", True): LOCAL,
    ("reassign-to-local", "error", True): LOCAL,
    ("reassign-to-local", "unknown", True): KEEP,
    ("reassign-any-healthy", "online", False): KEEP,
    ("reassign-any-healthy", "offline", False): KEEP,
    ("reassign-any-healthy", "error", False): KEEP,
    ("reassign-any-healthy", "unknown", False): KEEP,
    ("reassign-any-healthy", "online", True): KEEP,
    ("reassign-any-healthy", "offline", True): ANY,
    ("reassign-any-healthy", "error", True): ANY,
    ("reassign-any-healthy", "unknown", True): KEEP,
    ("fallback-local", "online", False): KEEP,
    ("fallback-local", "offline", False): KEEP,
    ("fallback-local", "error", False): KEEP,
    ("fallback-local", "unknown", False): KEEP,
    ("fallback-local", "online", True): KEEP,
    ("fallback-local", "offline", True): LOCAL,
    ("fallback-local", "error", True): LOCAL,
    ("fallback-local", "unknown", True): KEEP,
}


def test_the_table_covers_every_policy_health_and_expiry():
    policies = [p.value for p in HandoffPolicy] + ["fallback-local"]
    healths = [h.value for h in NodeHealth]
    assert set(TABLE) == {(p, h, e) for p in policies for h in healths for e in (False, True)}
    assert len(TABLE) == 32


@pytest.mark.parametrize("policy, health, expired", sorted(TABLE))
def test_decide_handoff_matches_the_table(policy, health, expired):
    decision = decide_handoff(policy, health, expired)
    assert (decision.action, decision.dispatch_to) == TABLE[(policy, health, expired)]
    assert decision.recovers is (decision.action == "recover") and decision.reason


@pytest.mark.parametrize("policy, health, expired", sorted(TABLE))
def test_recover_unreachable_acts_as_the_table_says_on_a_seeded_row(store_and_clock, policy, health, expired):
    store, clock = store_and_clock
    claim = store.claim("p", "t", A)
    store.record_progress("p", "t", A, claim.lease_epoch, 4)
    clock.advance(TTL * (1.5 if expired else 0.5))
    decision, row = recover_unreachable(store, policy, claim, health, expired, by=B)
    action, _ = TABLE[(policy, health, expired)]
    assert decision.action == action
    if action == "recover":
        assert row is not None and row.status == "todo" and row.step == 4 and row.worktree is None
        assert store.get("p", "t").owner is None
        assert [e.kind for e in store.audit("p")] == [RECOVER_EVENT]
    else:
        assert row is None and store.get("p", "t") == claim and store.audit("p") == []


def test_the_legacy_name_maps_to_reassign_to_local_and_unknown_names_say_the_choices():
    assert HandoffPolicy.parse("fallback-local") is HandoffPolicy.REASSIGN_TO_LOCAL
    with pytest.raises(ValueError, match="block, reassign-to-local, reassign-any-healthy"):
        HandoffPolicy.parse("reassign-anywhere")


# -- scheduler integration ----------------------------------------------------------------------------

def schedule(store, monitor: NodeHealthMonitor, clock: FakeClock, policy: str, local: Claimant):
    """Node `local`'s scheduler on task p/t: recover it where the policy allows, then dispatch it if free."""
    claim = store.get("p", "t")
    if claim is not None and claim.owner is not None:
        expired = clock() - claim.renewed_at > store.lease_ttl_ms / 1000.0
        decision, _ = recover_unreachable(store, policy, claim, monitor.health(claim.owner.node_id), expired, local)
        if not decision.recovers:
            return None
    return store.claim("p", "t", local)


def test_online_owner_protection_even_past_the_lease(store_and_clock):
    store, clock = store_and_clock
    registry = NodeRegistry(None)
    health = NodeHealthMonitor(registry, offline_after_s=5.0, clock=clock)
    health.beat("node-a")
    health.beat("node-b")
    seeded = store.claim("p", "t", A)
    for _ in range(3):  # within the lease, then past it: node A keeps beating, so it is online
        assert schedule(store, health, clock, "reassign-to-local", B) is None
        with pytest.raises(CheckoutConflictError) as info:
            store.claim("p", "t", B)
        assert info.value.current_holder.owner == A
        clock.advance(TTL * 0.9)
        health.beat("node-a")
    assert store.get("p", "t") == seeded and store.audit("p") == []
    registry.close()


def test_reassign_to_local_after_expiry_with_the_owner_offline(store_and_clock):
    store, clock = store_and_clock
    registry = NodeRegistry(None)
    health = NodeHealthMonitor(registry, offline_after_s=2.0, clock=clock)
    health.beat("node-a")
    health.beat("node-b")
    seeded = store.claim("p", "t", A)
    store.record_progress("p", "t", A, seeded.lease_epoch, 7)
    assert store.task("p", "t").worktree is not None
    clock.advance(3.0)  # past the lease; node A has been silent past offline_after
    health.beat("node-b")
    seen = {c.node_id: c.new for c in health.sweep()}  # this observer's first sweep: both nodes, first seen
    assert seen == {"node-a": NodeHealth.OFFLINE, "node-b": NodeHealth.ONLINE}
    assert health.health("node-a") is NodeHealth.OFFLINE
    decision, row = recover_unreachable(store, "reassign-to-local", seeded, NodeHealth.OFFLINE, True, B)
    assert decision.recovers and decision.dispatch_to == "local"
    assert store.get("p", "t").owner is None
    assert (row.status, row.step, row.worktree, row.checked_out_by) == ("todo", 7, None, None)
    events = store.audit("p")
    assert len(events) == 1 and events[0].kind == RECOVER_EVENT and events[0].epoch == seeded.lease_epoch
    # dispatch-eligible on the local node B, at the next epoch
    taken = schedule(store, health, clock, "reassign-to-local", B)
    assert taken.owner == B and taken.lease_epoch == seeded.lease_epoch + 1
    assert store.task("p", "t").step == 7 and store.task("p", "t").status == "in-progress"
    # the returning owner fences itself at its next heartbeat, before any write
    with pytest.raises(CheckoutConflictError) as info:
        store.heartbeat("p", "t", A, seeded.lease_epoch)
    assert info.value.current_holder.owner == B
    with pytest.raises(CheckoutConflictError):
        store.record_progress("p", "t", A, seeded.lease_epoch, 99)
    assert store.task("p", "t").step == 7 and len(store.audit("p")) == 1
    registry.close()


def test_a_recovery_of_a_moved_on_claim_is_refused(store_and_clock):
    store, clock = store_and_clock
    seeded = store.claim("p", "t", A)
    clock.advance(TTL * 2)
    assert recover_unreachable(store, "reassign-any-healthy", seeded, "error", True, B)[0].recovers
    store.claim("p", "t", B)
    with pytest.raises(CheckoutConflictError):  # a second scheduler acting on the stale row
        recover_unreachable(store, "reassign-any-healthy", seeded, "error", True, B)
    assert len(store.audit("p")) == 1


# -- pre-dispatch (transition A) ------------------------------------------------------------------------

def test_pre_dispatch_fallback_local_falls_back_and_block_refuses_with_a_reason():
    health = {"node-a": "offline", "node-b": "online", "node-c": "online"}
    fallback = pre_dispatch("fallback-local", "node-a", health, local_node="node-b")
    assert fallback.allowed and fallback.node == "node-b" and "node-a is offline" in fallback.reason
    blocked = pre_dispatch("block", "node-a", health, local_node="node-b")
    assert not blocked.allowed and blocked.node is None
    assert "node-a is offline" in blocked.reason and "block" in blocked.reason
    # a healthy placement is honoured under every policy
    for policy in ("block", "reassign-to-local", "reassign-any-healthy", "fallback-local"):
        assert pre_dispatch(policy, "node-c", health, local_node="node-b").node == "node-c"
    # the local node offline too: only any-healthy finds another
    down = {"node-a": "error", "node-b": "offline", "node-c": "online"}
    assert pre_dispatch("fallback-local", "node-a", down, local_node="node-b").node is None
    assert pre_dispatch("reassign-any-healthy", "node-a", down, local_node="node-b").node == "node-c"
    assert pre_dispatch("block", "node-x", {}, local_node="node-b").reason.startswith("node-x is unknown")


# -- the node health monitor ------------------------------------------------------------------------------

def test_health_follows_heartbeats_silence_and_marks(monitor):
    health, clock = monitor
    assert health.health("n1") is NodeHealth.UNKNOWN and health.snapshot() == {} and health.sweep() == []
    health.beat("n1")
    assert health.health("n1") is NodeHealth.ONLINE
    assert health.sweep() == [HealthChange("n1", NodeHealth.UNKNOWN, NodeHealth.ONLINE, clock.now)]
    clock.advance(4.0)
    assert health.health("n1") is NodeHealth.ONLINE and health.sweep() == []
    clock.advance(2.0)  # silent 6 s > 5 s
    assert health.health("n1") is NodeHealth.OFFLINE  # read, before any sweep
    assert health.sweep() == [HealthChange("n1", NodeHealth.ONLINE, NodeHealth.OFFLINE, clock.now)]
    assert health.sweep() == []  # seen once
    health.beat("n1")
    assert health.sweep() == [HealthChange("n1", NodeHealth.OFFLINE, NodeHealth.ONLINE, clock.now)]
    health.mark("n1", "error")
    assert health.health("n1") is NodeHealth.ERROR and health.snapshot() == {"n1": NodeHealth.ERROR}
    clock.advance(60.0)
    assert health.health("n1") is NodeHealth.ERROR  # error is not silence
    assert [c.new for c in health.sweep()] == [NodeHealth.ERROR]
    health.beat("n1")  # the node's own beat clears the mark
    assert health.health("n1") is NodeHealth.ONLINE


def test_the_shared_file_registry_across_two_processes(tmp_path):
    path = str(tmp_path / "nodes")
    clock = FakeClock(start=100.0)
    registry = NodeRegistry(path)
    health = NodeHealthMonitor(registry, offline_after_s=5.0, clock=clock)
    health.beat("n1")
    child = textwrap.dedent(f"""
        from soak.claims import NodeHealthMonitor, NodeRegistry
        reg = NodeRegistry({path!r})
        mon = NodeHealthMonitor(reg, offline_after_s=5.0, clock=lambda: 102.0)
        print(mon.health("n1").value)
        mon.beat("n2")
        mon.mark("n3", "error")
        reg.close()
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["online"]  # the child saw the parent's beat
    clock.advance(3.0)
    assert health.snapshot() == {"n1": NodeHealth.ONLINE, "n2": NodeHealth.ONLINE, "n3": NodeHealth.ERROR}
    assert len(health.sweep()) == 3  # first seen
    clock.advance(5.0)  # n2 beat at 102, n1 at 100: both silent past 5 s now (108)
    assert sorted(c.node_id for c in health.sweep()) == ["n1", "n2"]
    registry.close()
