"""The pure checker against hand-written bad histories: each must be flagged under its clause."""

from __future__ import annotations

import dataclasses

import pytest

from soak.workloads.runs.check import check
from soak.workloads.runs.check import CHECKERS, new_facts
from soak.history import payload_for
from soak.spi import JournalEntry, Lease, RunMeta

from .histories import RUNS, TTL_MS, H, clean_history


def run_check(h: H, snap=None, **kw):
    return check(h.ops, snap if snap is not None else h.state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS, **kw)


def clauses(v) -> set[str]:
    return {x.clause for x in v.violations}


def test_clean_history_passes():
    v = run_check(clean_history())
    assert v.result == "pass", v.violations
    assert v.stats["operations"] == 26 and v.stats["tenures"] == 3


def test_clean_history_passes_from_any_file_order():
    h = clean_history()
    ops = sorted(h.ops, key=lambda o: (o.process != "w2.1", o.invoke_ns))  # one worker's file, then the other's
    assert check(ops, h.state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS).result == "pass"


def test_epoch_granted_twice():
    h = clean_history()
    h.acquire("w3.1", "r1", 400, 2)
    v = run_check(h)
    assert v.result == "fail"
    dup = [x for x in v.violations if x.clause == "epoch-monotonic" and "granted 2 times" in x.statement]
    assert dup and {e.process for e in dup[0].evidence} == {"w2.1", "w3.1"}


def test_an_acquire_granted_to_the_live_holder_again_is_lease_exclusive_too():
    h = H()
    h.acquire("w1.1", "r1", 0, 1)
    h.acquire("w1.1", "r1", 30, 1)  # 30 ms into a 100 ms tenure, to its own holder: the same epoch again
    v = run_check(h)
    assert {"epoch-monotonic", "lease-exclusive"} <= clauses(v)
    hit = next(x for x in v.violations if x.clause == "lease-exclusive")
    assert "while that tenure was live" in hit.statement


def test_the_same_epoch_granted_again_after_its_ttl_is_not_lease_exclusive():
    h = H()
    h.acquire("w1.1", "r1", 0, 1)
    h.acquire("w1.1", "r1", 300, 1)  # well past the ttl: a reused epoch, but no live tenure was overlapped
    assert clauses(run_check(h)) & {"epoch-monotonic", "lease-exclusive"} == {"epoch-monotonic"}


def test_epochs_must_rise_with_grant_order():
    h = H()
    h.acquire("w1.1", "r1", 0, 5)
    h.acquire("w2.1", "r1", 500, 3)  # invoked after epoch 5 was granted, yet lower
    assert "epoch-monotonic" in clauses(run_check(h))


def test_accept_from_a_non_grantee():
    h = clean_history()
    forged = Lease("r1", "w3.1", 2)  # epoch 2 was granted to w2.1
    h.put_meta("w3.1", forged, 225, outcome="ok")
    snap = h.state(RUNS)
    v = run_check(h, snap)
    hits = [x for x in v.violations if x.clause == "stale-rejected" and "non-grantee" in x.statement]
    assert hits and hits[0].evidence[0].process == "w3.1"


def test_lost_write():
    h = clean_history()
    snap = h.state(RUNS)
    snap.journals["r1"] = [e for e in snap.journals["r1"] if e.seq != 2]
    v = run_check(h, snap)
    assert v.result == "fail"
    lost = [x for x in v.violations if x.clause == "journal-a1" and "lost write" in x.statement]
    assert lost and lost[0].evidence[0].tag == "w1.1#5"


def test_stale_acceptance_hidden_by_a_later_overwrite():
    h = clean_history()
    # epoch 1's holder writes meta after epoch 2 was granted (at 201) and the store accepts it;
    # epoch 2's later put_meta overwrites it, so the final state looks right.
    stale = h.put_meta("w1.1", Lease("r1", "w1.1", 1), 213)
    snap = h.state(RUNS)
    assert snap.metas["r1"].payload == payload_for("w2.1#3")  # hidden
    v = run_check(h, snap)
    hits = [x for x in v.violations if x.clause == "stale-rejected"]
    assert hits and hits[0].evidence[0].tag == stale.tag
    assert hits[0].evidence[1].f == "acquire" and hits[0].evidence[1].epoch == 2


def test_stale_renew_accepted_after_release():
    h = clean_history()
    h.renew("w2.1", Lease("r1", "w2.1", 2), 235)  # released at 231
    assert "stale-lease-ops" in clauses(run_check(h))


def test_epoch_inversion_in_the_journal():
    h = clean_history()
    # epoch 1's holder appends seq 4 after epoch 2 was granted (at 201); the store accepts it
    h.append("w1.1", Lease("r1", "w1.1", 1), 4, 250)
    snap = h.state(RUNS)  # serial order puts it before epoch 2's seq 3 entry; the store has it last
    j = snap.journals["r1"]
    stale = j.pop(2)
    j.append(stale)
    v = run_check(h, snap)
    inv = [x for x in v.violations if "epoch inversion" in x.statement]
    assert inv and inv[0].clause == "stale-rejected" and inv[0].evidence[-1].tag == "w1.1#17"


def test_append_accepted_below_the_tail():
    h = clean_history()
    snap = h.state(RUNS)
    j = snap.journals["r1"]
    # seq order holds but serial order does not, and nobody was stale: the epoch-2 append (seq 2 here)
    # was accepted at or below the tail seq 3 the epoch-1 append had set
    j[-2], j[-1] = JournalEntry(2, j[-1].payload), JournalEntry(3, j[-2].payload)
    v = run_check(h, snap)
    assert any(x.clause == "journal-a5" and "below the tail" in x.statement for x in v.violations)
    assert "stale-rejected" not in v.clauses


def test_deleted_runs_surviving_journal_and_meta():
    h = clean_history()
    snap = h.state(RUNS)
    snap.journals["s1"] = [JournalEntry(1, payload_for("w1.1#11"))]
    snap.metas["s1"] = RunMeta("s1", "running", 1, payload_for("w1.1#12"))
    snap.listed_runs.append("s1")
    v = run_check(h, snap)
    survived = [x for x in v.violations if x.clause == "delete-semantics"]
    assert len(survived) == 2 and all(x.evidence[-1].f == "delete" for x in survived)


def test_deleted_runs_surviving_blob():
    h = clean_history()
    snap = h.state(RUNS)
    snap.blobs["s1"]["s1/x"] = payload_for("w1.1#13")
    v = run_check(h, snap)
    hits = [x for x in v.violations if x.clause == "blob-semantics"]
    assert hits and "deletion of run s1" in hits[0].statement


def test_refusal_of_the_wrong_type():
    h = clean_history()
    # a stale append (epoch 2 granted at 201) answered with an untyped error
    h.append("w1.1", Lease("r1", "w1.1", 1), 4, 250, outcome="info", error="RuntimeError")
    v = run_check(h)
    hits = [x for x in v.violations if x.clause == "typed-refusal"]
    assert hits and "RuntimeError" in hits[0].statement


def test_untyped_error_on_a_live_tenure_is_not_flagged():
    h = clean_history()  # holds an info RuntimeError append at 120 under the then-current epoch 1
    assert run_check(h).result == "pass"


def test_a_refused_write_that_was_written():
    h = clean_history()
    snap = h.state(RUNS)
    snap.blobs["r1"]["r1/t3"] = payload_for("w2.1#9")
    h.blob_put("w2.1", Lease("r1", "w2.1", 2), "t3", 228, outcome="fail", error="StoreBusyError")
    v = run_check(h, snap)
    hits = [x for x in v.violations if x.clause == "typed-refusal"]
    assert hits and "mutates nothing" in hits[0].statement


def test_a_refused_stale_write_that_was_written():
    h = clean_history()  # w1.1#7 is a stale append refused at 210; the store wrote it anyway
    snap = h.state(RUNS)
    snap.journals["r1"].append(JournalEntry(4, payload_for("w1.1#7")))
    v = run_check(h, snap)
    assert any(x.clause == "stale-rejected" and "refused stale append" in x.statement for x in v.violations)


def test_spurious_refusal():
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.append("w1.1", a, 1, 10)
    h.append("w1.1", a, 2, 20, outcome="fail")  # live, nobody else tried: must be accepted
    v = run_check(h)
    hits = [x for x in v.violations if x.clause == "live-accepted"]
    assert hits and hits[0].evidence[0].f == "append"


def test_refusal_after_a_takeover_attempt_is_not_spurious():
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.acquire("w2.1", "r1", 15, None, pending=True)  # unknown: may have taken over
    h.append("w1.1", a, 1, 20, outcome="fail")
    assert "live-accepted" not in clauses(run_check(h))


def test_refusal_near_expiry_is_not_spurious():
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.append("w1.1", a, 1, TTL_MS - 5, outcome="fail")  # within the margin of expiry
    assert run_check(h).result == "pass"


def test_overlapping_tenures():
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.renew("w1.1", a, 40)
    h.acquire("w2.1", "r1", 60, 2)  # epoch 1 renewed at 40 is live until 140
    v = run_check(h)
    hits = [x for x in v.violations if x.clause == "lease-exclusive"]
    assert hits and hits[0].evidence[-1].process == "w2.1" and hits[0].evidence[-1].epoch == 2


def test_two_acquires_that_raced_and_both_granted_are_lease_exclusive():
    h = H()
    h.acquire("w2.1", "r1", 0, 2, dur=15)  # invoked first, granted epoch 2: after epoch 1 (epochs rise), by 15 ms
    h.acquire("w1.1", "r1", 1, 1, dur=11)  # epoch 1's grant completed at 12
    v = run_check(h)
    hits = [x for x in v.violations if x.clause == "lease-exclusive"]
    assert hits and "raced" in hits[0].statement and {e.process for e in hits[0].evidence} == {"w1.1", "w2.1"}
    # the higher epoch completed more than a ttl after the other's acquire was invoked: it may have been an expiry
    h = H()
    h.acquire("w2.1", "r1", 0, 2, dur=TTL_MS + 20)
    h.acquire("w1.1", "r1", 1, 1, dur=5)
    assert "lease-exclusive" not in clauses(run_check(h))
    # the higher epoch completed before the other acquire was invoked: granted first (epoch-monotonic), no race
    h = H()
    h.acquire("w2.1", "r1", 0, 2, dur=3)
    h.acquire("w1.1", "r1", 5, 1, dur=3)
    v = run_check(h)
    assert "epoch-monotonic" in clauses(v) and not any("raced" in x.statement for x in v.violations)
    # released before the higher epoch's grant could have completed: no overlap is certain
    h = H()
    h.acquire("w2.1", "r1", 0, 2, dur=40)
    a = h.acquire("w1.1", "r1", 1, 1, dur=5)
    h.release("w1.1", a, 7)
    assert "lease-exclusive" not in clauses(run_check(h))


def test_takeover_after_release_is_fine():
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.release("w1.1", a, 10)
    h.acquire("w2.1", "r1", 20, 2)
    assert run_check(h).result == "pass"


def test_probe_epoch_not_above_the_granted_ones():
    h = clean_history()
    snap = h.state(RUNS)
    snap.probe["r1"] = {"epoch": 2}
    v = run_check(h, snap)
    hits = [x for x in v.violations if x.clause == "epoch-monotonic"]
    assert hits and "probe" in hits[0].statement


def test_probe_refused_after_every_worker_stopped():
    h = clean_history()
    snap = h.state(RUNS)
    snap.probe["r1"] = {"error": "LeaseHeldError", "message": "held"}
    assert "ttl-honoured" in clauses(run_check(h, snap))


@pytest.mark.parametrize("applied", [False, True])
def test_ops_left_unknown_by_a_kill_pass_either_way(applied):
    h = clean_history()
    c = h.acquire("w3.1", "r1", 400, 3)
    h.put_meta("w3.1", c, 402, outcome="info", error="Timeout")
    h.append("w3.1", c, 4, 404, pending=True)  # killed mid-call
    h.blob_delete("w4.1", h.acquire("w4.1", "r1", 600, 4), "t1", 602, pending=True)
    killed = {o.tag for o in h.ops if o.outcome == "info" and o.invoke_ns > 400 * 10**6}
    v = run_check(h, h.state(RUNS, include=killed if applied else set()))
    assert v.result == "pass", v.violations


def test_unknown_delete_explains_missing_writes():
    h = clean_history()
    s = h.acquire("w3.1", "s2", 400, 1)
    h.append("w3.1", s, 1, 402)
    h.delete("w3.1", s, 404, pending=True)
    runs = RUNS + ["s2"]
    snap = h.state(runs, include={o.tag for o in h.ops if o.complete_ns is None})
    assert snap.journals["s2"] == []
    assert check(h.ops, snap, lease_ttl_ms=TTL_MS, runs=runs).result == "pass"


def test_cross_run_acceptance_and_a_written_cross_run_target():
    h = clean_history()
    h.blob_put("w2.1", Lease("r1", "w2.1", 2), "probe2", 229, run="xr")
    snap = h.state(RUNS)
    v = run_check(h, snap)
    hits = [x for x in v.violations if x.clause == "run-match"]
    assert len(hits) >= 2  # the accepted op, and the value it left in xr
    assert all(x.evidence and x.evidence[0].run == "xr" for x in hits)


def test_altered_payload():
    h = clean_history()
    snap = h.state(RUNS)
    e = snap.journals["r1"][0]
    snap.journals["r1"][0] = JournalEntry(e.seq, e.payload[:-1] + b"\x00")
    assert "journal-a4" in clauses(run_check(h, snap))


@pytest.mark.parametrize("what", ["journal", "meta", "b0"])
def test_a_read_of_altered_bytes_is_proven_by_the_read_alone(what):
    """A read whose bytes are not what its tag's writer wrote (the worker records `altered`) is journal-a4, with the
    final state intact: the read is the evidence, found while folding."""
    h = clean_history()
    lease = h.acquire("p0", "r1", 900, 9)
    seen = (1, "p0#0") if what == "journal" else "p0#0"
    rd = h.read("p0", lease, what, 901, seen)
    assert "journal-a4" not in clauses(run_check(h))
    rd.result["altered"] = True
    v = run_check(h)
    hits = [x for x in v.violations if x.clause == "journal-a4"]
    assert hits and hits[0].evidence[0].f == rd.f and "read back altered" in hits[0].statement


def test_final_meta_not_the_last_accepted():
    h = clean_history()
    snap = h.state(RUNS)
    snap.metas["r1"] = RunMeta("r1", "running", 1, payload_for("w1.1#2"))
    v = run_check(h, snap)
    assert any(x.clause == "meta-last-write" and "lost write" in x.statement for x in v.violations)


def test_phantom_value():
    h = clean_history()
    snap = h.state(RUNS)
    snap.blobs["r1"]["r1/zz"] = payload_for("w9.9#1")
    assert "blob-semantics" in clauses(run_check(h, snap))


def test_a_checker_that_raises_gives_inconclusive():
    def boom(facts):
        raise RuntimeError("bug")

    v = run_check(clean_history(), checkers=[*CHECKERS, ("boom", boom)])
    assert v.result == "inconclusive" and any("boom" in r for r in v.reasons)


def test_a_checker_that_raises_on_bad_input_gives_inconclusive():
    h = clean_history()
    snap = dataclasses.replace(h.state(RUNS), probe={"r1": None})
    v = run_check(h, snap)
    assert v.result == "inconclusive"


def test_fail_outranks_inconclusive():
    h = clean_history()
    snap = h.state(RUNS)
    snap.probe["r1"] = {"epoch": 1}
    v = run_check(h, snap, status="timeout")
    assert v.result == "fail" and any("timeout" in r for r in v.reasons)


def test_quorum_not_met_is_inconclusive():
    v = run_check(clean_history(), status="timeout", quorum="epochs 1/4")
    assert v.result == "inconclusive" and "epochs 1/4" in v.reasons[0]


def test_unreadable_final_state_is_inconclusive():
    h = clean_history()
    snap = h.state(RUNS)
    snap.read_errors.append("reading run r1: OperationalError: disk I/O error")
    assert run_check(h, snap).result == "inconclusive"


def test_altered_blob_bytes():
    h = clean_history()
    snap = h.state(RUNS)
    snap.blobs["r1"]["r1/t1"] = snap.blobs["r1"]["r1/t1"][:-2] + b"\xef\xbf"
    v = run_check(h, snap)
    assert [x.clause for x in v.violations] == ["journal-a4"] and "r1/t1" in v.violations[0].statement


def test_a_run_named_with_the_empty_string_is_a_run_like_any_other():
    # The per-run caches once kept their "no such run" entry under "": a run of that name overwrote it, and
    # a run without granted tenures then read that run's grants.
    from soak.workloads.runs.check.summaries import _Tenure

    facts = new_facts(H().state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS)
    for epoch, at in ((1, 100), (2, 200)):
        t = facts.tenures[("", epoch)] = _Tenure("", epoch)
        t.grants.append((at, at + 1, "w1.1", None))
    assert facts.stale_at("r9", 1) == (float("inf"), None)
    assert facts.next_grant("r9", 1, 0) == float("inf")
    assert facts.stale_at("", 1) == (201, None)
    assert facts.next_grant("", 1, 100) == 200


def test_every_clause_names_the_module_that_checks_it():
    """The runs checker's table (checkers.py) names, for every clause the storm can judge, the one module to read."""
    import re

    from soak.clauses import CLAUSES
    from soak.workloads.runs.check import checkers

    table = {}
    for line in checkers.__doc__.splitlines():
        m = re.match(r"\| `([\w.]+)` \| (.+) \|$", line.strip())
        if m:
            table[m.group(1)] = m.group(2)
    named = " ".join(table.values()).replace("journal-a1..a5", "journal-a1 journal-a2 journal-a3 journal-a4 journal-a5")
    # never cited by a storm's finding: a broken atomic fence shows as the late write it lets in (stale-rejected),
    # store-clock needs a caller's clock to differ (clock skew) and expired-unsuperseded is the store's choice
    not_judged = {"store-clock", "expired-unsuperseded", "atomic-fence"}
    assert {c for c in CLAUSES if c not in not_judged} <= set(re.findall(r"[a-z][a-z0-9-]+[a-z0-9]", named))
    for module in table:
        if not module.startswith("soak."):
            __import__(f"soak.workloads.runs.check.{module}")


def test_an_untyped_answer_to_a_stale_call_a_network_cut_landed_in_is_unknown_not_typed_refusal():
    from soak.history import Record

    h = clean_history()
    # the stale append of test_refusal_of_the_wrong_type, answered untyped because the fault proxy cut its connection
    h.append("w1.1", Lease("r1", "w1.1", 1), 4, 250, outcome="info", error="OperationalError", dur=3)
    h.ops.append(Record("event", "nemesis", int(251.5 * 1_000_000), kind="net-cut",
                        value={"target": "w1.1", "fault": "cut-request", "at_ns": int(251 * 1_000_000)}))
    assert not [x for x in run_check(h).violations if x.clause == "typed-refusal"]
    # a cut of another worker, or one after the call ended, excuses nothing
    h2 = clean_history()
    h2.append("w1.1", Lease("r1", "w1.1", 1), 4, 250, outcome="info", error="OperationalError", dur=3)
    h2.ops.append(Record("event", "nemesis", int(251.5 * 1_000_000), kind="net-cut",
                         value={"target": "w2.1", "fault": "cut-request", "at_ns": int(251 * 1_000_000)}))
    h2.ops.append(Record("event", "nemesis", int(260 * 1_000_000), kind="net-cut",
                         value={"target": "w1.1", "fault": "cut-request", "at_ns": int(259 * 1_000_000)}))
    assert [x for x in run_check(h2).violations if x.clause == "typed-refusal"]


def test_an_untyped_answer_to_a_stale_call_while_its_host_was_cut_off_the_store_is_unknown_not_typed_refusal():
    from soak.history import Record

    def history(cut_from_ms: float, cut_to_ms: float, source: str = "store"):
        h = clean_history()
        # a storm across hosts: w1.1 ran on h1, and h1 was cut off the store (soak.cluster.faults) around the stale
        # append of test_refusal_of_the_wrong_type, answered untyped (its fault proxy's connection reset)
        h.ops.append(Record("event", "nemesis", 0, kind="cluster",
                            value={"hosts": [{"host": "h0", "slots": [0]}, {"host": "h1", "slots": [1]}]}))
        h.ops.append(Record("event", "nemesis", 0, kind="spawn", value={"target": "w1.1", "slot": 1}))
        h.ops.append(Record("event", "nemesis", int(cut_from_ms * 1_000_000), kind="host-partition",
                            value={"host": "h1", "from": source, "ms": 600}))
        h.ops.append(Record("event", "nemesis", int(cut_to_ms * 1_000_000), kind="host-heal",
                            value={"host": "h1", "from": source}))
        h.append("w1.1", Lease("r1", "w1.1", 1), 4, 250, outcome="info", error="ConnectionError", dur=3)
        return h

    assert not [x for x in run_check(history(200, 800)).violations if x.clause == "typed-refusal"]
    # a partition healed long before the call, or one from the orchestrator (the store was reachable), excuses nothing
    for late in (history(10, 60), history(200, 800, "orchestrator")):
        assert [x for x in run_check(late).violations if x.clause == "typed-refusal"]
