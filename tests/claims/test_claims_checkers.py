"""The claims workload's checkers on small hand-written histories: each clause's bad case fails naming it, and
the legitimate look-alike next to it passes (a renewal, an unknown call that may have ended a tenure, a recovery
past the lease)."""

from __future__ import annotations

from soak.check.base import SimpleFacts
from soak.workloads.claims import ClaimLease
from soak.workloads.claims.check import CHECKERS

MS = 1_000_000
TTL_MS = 100
K = "p0/t0"


def claim_res(node, agent, epoch, renewed=0.0):
    return {"claim": {"owner": [node, agent, f"{node}:{agent}"], "epoch": epoch, "renewed_at": renewed}}


def row(node, agent, epoch, step):
    """The task row mirroring a claim of (node, agent) at `epoch`, at `step`."""
    return {"task": {"status": "in-progress", "step": step, "worktree": "w", "by": agent, "node": node,
                     "run": f"{node}:{agent}", "epoch": epoch, "renewed_at": 0.0}}


class H:
    """A history under construction: `add` one operation at [t0, t1] ms."""

    def __init__(self):
        self.ops, self.n = [], 0

    def add(self, f, lease=None, intent="live", args=None, out="ok", res=None, err=None, t0=0, t1=1, key=K, p="w0.1"):
        self.n += 1
        lease = ClaimLease(*lease) if lease else None
        self.ops.append((p, self.n, f, key, lease, intent, args or {}, out, res or {}, err, None, t0 * MS,
                         None if t1 is None else t1 * MS))
        return self

    def claim(self, node, agent, epoch, t0, t1, **kw):
        args = {"node": node, "agent": agent, "run": f"{node}:{agent}", "look": False, "dispatch": None}
        args.update(kw.pop("args", {}))
        return self.add("claim", intent=kw.pop("intent", "claim"), args=args, res=claim_res(node, agent, epoch),
                        t0=t0, t1=t1, **kw)

    def conflict(self, node, agent, holder, t0, t1):
        args = {"node": node, "agent": agent, "run": None, "look": False, "dispatch": None}
        res = {"holder": None if holder is None else claim_res(*holder)["claim"]}
        return self.add("claim", intent="claim", args=args, out="fail", res=res, err="CheckoutConflictError",
                        t0=t0, t1=t1)


def verdict(h: H, state=None) -> dict[str, list[str]]:
    facts = SimpleFacts(state=state, lease_ttl_ms=TTL_MS, ops=h.ops)
    out: dict[str, list[str]] = {}
    for _, check in CHECKERS:
        for v in check(facts):
            out.setdefault(v.clause, []).append(v.statement)
    return out


def test_a_clean_history_with_release_recovery_and_renewal_passes():
    h = H().claim("n0", "a0", 1, 0, 1)
    h.add("record_progress", ["p0/t0", "n0", "a0", 1], args={"step": 1}, t0=2, t1=3)
    h.claim("n0", "a0", 1, 4, 5, intent="renew", lease=["p0/t0", "n0", "a0", 1], args={"renew": 1})
    h.conflict("n1", "a0", ("n0", "a0", 1), 6, 7)
    h.add("release", ["p0/t0", "n0", "a0", 1], t0=8, t1=9)
    h.claim("n1", "a0", 2, 10, 11)
    h.add("task", ["p0/t0", "n1", "a0", 2], res=row("n1", "a0", 2, 1), t0=12, t1=13)
    h.add("recover", ["p0/t0", "n1", "a0", 2], intent="recover",
          args={"policy": "reassign-to-local", "owner_health": "offline"}, res={"task": {"step": 1}}, t0=200, t1=201)
    h.add("record_progress", ["p0/t0", "n1", "a0", 2], args={"step": 2}, out="fail", err="CheckoutConflictError",
          t0=300, t1=301)
    state = {"p0": {"claims": {"t0": {"owner": None, "epoch": 2, "renewed_at": 0}},
                    "tasks": {"t0": {"status": "todo", "step": 1, "worktree": None, "by": None, "node": None,
                                     "run": None, "epoch": 2, "renewed_at": None}},
                    "audit": [{"task": "t0", "kind": "task:auto-recover-node-unreachable", "epoch": 2, "node": "n2",
                               "detail": ""}]}}
    assert verdict(h, state) == {}


def test_one_epoch_two_owners():
    apart = H().claim("n0", "a0", 1, 0, 1).claim("n1", "a0", 1, 5, 6)
    assert set(verdict(apart)) >= {"claim-epoch-once"}
    together = H().claim("n0", "a0", 1, 0, 4).claim("n1", "a0", 1, 1, 5)
    found = verdict(together)
    assert "claim-atomic" in found and "claim-epoch-once" not in found


def test_epochs_never_go_back_and_never_skip_unexplained():
    back = H().claim("n0", "a0", 1, 0, 1).add("release", ["p0/t0", "n0", "a0", 1], t0=2, t1=3)
    back.claim("n0", "a0", 2, 4, 5).add("release", ["p0/t0", "n0", "a0", 2], t0=6, t1=7).claim("n1", "a0", 1, 8, 9)
    assert "claim-epoch-step" in verdict(back)
    skip = H().claim("n0", "a0", 1, 0, 1).add("release", ["p0/t0", "n0", "a0", 1], t0=2, t1=3)
    skip.claim("n1", "a0", 3, 4, 5)
    assert any("skipped" in s for s in verdict(skip)["claim-epoch-step"])
    # the same gap with a claim of unknown outcome that may have been granted epoch 2: allowed
    skip.add("claim", intent="claim", args={"node": "n2", "agent": "a0"}, out="info", t0=3, t1=None)
    assert "claim-epoch-step" not in verdict(skip)


def test_a_renewal_keeps_the_epoch():
    h = H().claim("n0", "a0", 1, 0, 1)
    h.claim("n0", "a0", 2, 2, 3, intent="renew", lease=["p0/t0", "n0", "a0", 1], args={"renew": 1})
    assert any("renewal" in s for s in verdict(h)["claim-epoch-step"])


def test_a_conflict_names_a_holder_that_held_the_claim_then():
    h = H().claim("n0", "a0", 1, 0, 1).add("release", ["p0/t0", "n0", "a0", 1], t0=2, t1=3)
    h.claim("n1", "a0", 2, 4, 5).conflict("n2", "a0", ("n0", "a0", 1), 6, 7)  # names the released owner
    assert any("had ended" in s for s in verdict(h)["conflict-holder"])
    assert "conflict-holder" in verdict(H().claim("n0", "a0", 1, 0, 1).conflict("n1", "a0", None, 2, 3))
    assert "conflict-holder" in verdict(H().claim("n0", "a0", 1, 0, 1).conflict("n1", "a0", ("n1", "a0", 1), 2, 3))
    assert "conflict-holder" not in verdict(H().claim("n0", "a0", 1, 0, 1).conflict("n1", "a0", ("n0", "a0", 1), 2, 3))


def test_stale_calls_are_refused_and_live_ones_accepted():
    h = H().claim("n0", "a0", 1, 0, 1)
    h.add("recover", ["p0/t0", "n0", "a0", 1], intent="recover", args={"policy": "block"}, t0=200, t1=201)
    h.add("record_progress", ["p0/t0", "n0", "a0", 1], args={"step": 1}, t0=300, t1=301)
    h.add("heartbeat", ["p0/t0", "n0", "a0", 1], res=claim_res("n0", "a0", 1), t0=302, t1=303)
    found = verdict(h)
    assert "progress-fenced" in found and "heartbeat-fenced" in found and "handoff-policy" in found
    live = H().claim("n0", "a0", 1, 0, 1)
    live.add("heartbeat", ["p0/t0", "n0", "a0", 1], out="fail", err="CheckoutConflictError", t0=2, t1=3)
    assert "claim-live-accepted" in verdict(live)
    # a recovery of unknown outcome invoked before the refusal may have ended the tenure: no violation
    live.add("recover", ["p0/t0", "n0", "a0", 1], intent="recover", out="info", t0=1, t1=None)
    assert "claim-live-accepted" not in verdict(live)


def test_no_owner_change_within_the_lease():
    h = H().claim("n0", "a0", 1, 0, 1)
    h.add("recover", ["p0/t0", "n0", "a0", 1], intent="probe", args={"decision": "probe"}, t0=40, t1=41)
    assert "claim-lease-protected" in verdict(h)
    late = H().claim("n0", "a0", 1, 0, 1)
    late.add("recover", ["p0/t0", "n0", "a0", 1], intent="recover",
             args={"policy": "reassign-to-local", "owner_health": "error"}, t0=150, t1=151)
    assert verdict(late) == {}
    taken = H().claim("n0", "a0", 1, 0, 1).claim("n1", "a0", 2, 500, 501)  # no release, no recovery of epoch 1
    assert "claim-lease-protected" in verdict(taken)


def test_progress_survives_recovery():
    h = H().claim("n0", "a0", 1, 0, 1)
    h.add("record_progress", ["p0/t0", "n0", "a0", 1], args={"step": 4}, t0=2, t1=3)
    h.add("recover", ["p0/t0", "n0", "a0", 1], intent="recover",
          args={"policy": "reassign-to-local", "owner_health": "offline"}, t0=200, t1=201)
    h.claim("n1", "a0", 2, 202, 203)
    h.add("task", ["p0/t0", "n1", "a0", 2], res=row("n1", "a0", 2, 0), t0=204, t1=205)
    assert list(verdict(h)) == ["progress-preserved"]
    assert any("saw step 0 after step 4" in s for s in verdict(h)["progress-preserved"])


def test_a_claim_leaves_its_task_row_mirroring_it_unless_another_write_ran_meanwhile():
    h = H().claim("n0", "a0", 1, 0, 1)
    h.add("release", ["p0/t0", "n0", "a0", 1], t0=2, t1=3).claim("n1", "a0", 2, 4, 5)
    h.add("task", ["p0/t0", "n1", "a0", 2], res=row("n0", "a0", 1, 0), t0=6, t1=7)  # still the old owner's row
    assert any("does not mirror" in s for s in verdict(h)["rows-reconciled"])
    # a reconcile of the project that rewrote this row meanwhile: not judged
    h.add("reconcile", None, intent="dispatch", res={"repaired": ["t0"]}, t0=5, t1=8, key="p0")
    assert "rows-reconciled" not in verdict(h)


def test_every_recovery_has_one_audit_event_and_rows_mirror_the_central_row():
    h = H().claim("n0", "a0", 1, 0, 1)
    h.add("recover", ["p0/t0", "n0", "a0", 1], intent="recover",
          args={"policy": "reassign-to-local", "owner_health": "offline"}, t0=200, t1=201)
    row = {"status": "in-progress", "step": 0, "worktree": "w", "by": "a0", "node": "n0", "run": "n0:a0", "epoch": 1,
           "renewed_at": 0.0}
    state = {"p0": {"claims": {"t0": {"owner": None, "epoch": 1, "renewed_at": 0}}, "tasks": {"t0": row},
                    "audit": []}}
    found = verdict(h, state)
    assert "recovery-audited" in found and "rows-reconciled" in found
