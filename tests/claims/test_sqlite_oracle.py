"""The sqlite: claim store behaves exactly like the claims oracle, call for call (Hypothesis, injected clock)."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soak.claims import CheckoutConflictError, Claimant
from soak.claims._sqlite import open_sqlite_claims
from soak.claims.oracle import ClaimsOracle
from soak.clock import FakeClock

TTL_MS = 1000
PROJECTS = ["p", "P", "a/b", "ü"]
TASKS = ["t1", "t2"]
CLAIMANTS = [Claimant("n1", "a1", "r1"), Claimant("n1", "a1", "r2"), Claimant("n1", "a2"), Claimant("n2", "a1", "r3")]

op = st.one_of(
    st.tuples(st.just("claim"), st.sampled_from(PROJECTS), st.sampled_from(TASKS), st.sampled_from(CLAIMANTS)),
    st.tuples(st.just("heartbeat"), st.sampled_from(PROJECTS), st.sampled_from(TASKS), st.sampled_from(CLAIMANTS),
              st.integers(0, 4)),
    st.tuples(st.just("release"), st.sampled_from(PROJECTS), st.sampled_from(TASKS), st.sampled_from(CLAIMANTS),
              st.integers(0, 4)),
    st.tuples(st.just("record_progress"), st.sampled_from(PROJECTS), st.sampled_from(TASKS),
              st.sampled_from(CLAIMANTS), st.integers(0, 4), st.integers(0, 9)),
    st.tuples(st.just("recover"), st.sampled_from(PROJECTS), st.sampled_from(TASKS), st.integers(0, 4),
              st.sampled_from(CLAIMANTS), st.just("node offline")),
    st.tuples(st.just("advance"), st.sampled_from([0.0, 0.25, 1.0, 1.5])),
)


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except CheckoutConflictError as exc:
        return ("conflict", exc.current_holder)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=25))
def test_sqlite_claim_store_equals_oracle(ops):
    clock = FakeClock()
    oracle = ClaimsOracle(TTL_MS / 1000.0)
    with tempfile.TemporaryDirectory() as loc:
        store = open_sqlite_claims(loc, lease_ttl_ms=TTL_MS, clock=clock)
        try:
            for o in ops:
                name, args = o[0], o[1:]
                if name == "advance":
                    clock.advance(args[0])
                    continue
                timed = name in ("claim", "heartbeat", "recover")
                want = _outcome(getattr(oracle, name), *args, *((clock.now,) if timed else ()))
                got = _outcome(getattr(store, name), *args)
                assert got == want, (o, got, want)
            for p in PROJECTS:
                assert store.claims(p) == oracle.project_claims(p)
                assert store.tasks(p) == oracle.project_tasks(p)
                assert store.audit(p) == oracle.audit(p)
                assert store.reconcile(p) == []
                for t in TASKS:
                    assert store.get(p, t) == oracle.get(p, t)
                    assert store.task(p, t) == oracle.task(p, t)
        finally:
            store.close()
