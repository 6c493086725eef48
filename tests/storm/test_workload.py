"""The runs workload in-process (threads over the memory store): the invoke values the checker reads."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

from soak.history import HistoryWriter, Operation, meta_fields_for, operations
from soak.workloads.runs import MUTATIONS
from soak.workloads.runs.worker import UNLEASED_RUN
from soak.scenario import load_scenario
from soak.stores.memory import open_memory
from soak.workloads import WorkerContext, get_workload


def _storm_in_threads(tmp_path, workers=3, ops=20_000, seconds=1.5):
    """`workers` threads storming one memory store until each has recorded `ops` records or `seconds` have passed
    (the edge waits write as fast as the store takes writes: a count alone would end inside the first of them)."""
    sc = load_scenario("smoke", {"lease_ttl_ms": 30, "stall_prob": 0.45})
    store = open_memory(str(tmp_path), lease_ttl_ms=sc.lease_ttl_ms)
    workload = get_workload("runs")
    threads = []
    deadline = time.monotonic() + seconds
    for slot in range(workers):
        name = f"w{slot}.1"
        writer = HistoryWriter(tmp_path / f"{name}.jsonl", name)
        ctx = WorkerContext(store=store, writer=writer, rng=random.Random(slot), scenario=sc, process=name,
                            should_stop=lambda w=writer: w.next_index() >= ops or time.monotonic() > deadline,
                            **workload.context_hooks())
        threads.append(threading.Thread(target=workload.worker_loop, args=(ctx,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return [x for x in operations(sorted(tmp_path.glob("w*.jsonl"))) if isinstance(x, Operation)]


def test_invoke_values_follow_the_storm_checker_interface(tmp_path):
    ops = _storm_in_threads(tmp_path)
    intents = {op.intent for op in ops}
    assert {"live", "stale", "cross", "side", "order"} <= intents
    # the probes turn (a probe whose renew is refused waits for the next tenure): a few hundred operations see most
    assert len({"impostor", "future", "unleased", "reentrant", "renewed"} & intents) >= 3
    assert intents <= {"live", "stale", "cross", "side", "order", "superseded", "released", "released_superseded",
                       "impostor", "future", "unleased", "reentrant", "reacquire", "after_delete", "renewed",
                       "unleased_held", "side_empty"}
    counters: dict[tuple, list[int]] = defaultdict(list)
    for op in ops:
        if op.f == "acquire":
            assert op.lease is None and op.args == {"owner": op.process}
            if op.outcome == "ok":
                assert isinstance(op.result["epoch"], int)
            elif op.error == "LeaseHeldError":
                assert "holder" in op.result
        elif op.f in ("load", "get_meta", "blob_get"):
            assert op.lease is None
            tenure = op.args["tenure"]
            if op.intent in ("live", "side") and tenure is not None:
                assert tenure[0] == op.run and tenure[1] == op.process and isinstance(tenure[2], int)
            if op.f == "blob_get":
                assert op.args["ref"].split("/")[0] == op.run
            if op.outcome == "ok" and op.f == "load":
                assert set(op.result) == {"tail", "count", "tail_tag"}
                assert (op.result["tail_tag"] is None) == (op.result["count"] == 0)
            elif op.outcome == "ok":
                assert set(op.result) == {"tag"}
        elif op.f in MUTATIONS:
            assert (op.lease is None) == (op.intent in ("unleased", "unleased_held"))
            if op.lease is None:
                assert op.run == UNLEASED_RUN or (op.f == "blob_delete" and op.args["ref"] == f"{op.run}/ul-never")
                continue
            counters[(op.lease.run_id, op.lease.owner, op.lease.epoch)].append(op.args["c"])
            if op.f in ("append", "put_meta", "blob_put"):
                assert op.args["tag"] == op.tag
            if op.f in ("blob_put", "blob_delete"):
                assert op.args["ref"].split("/")[0] == op.run
            if op.f == "put_meta":
                assert (op.args["status"], op.args["segments"]) == meta_fields_for(op.tag)
        elif op.f in ("renew", "release"):
            assert op.args == {} and op.lease is not None
        if op.intent == "cross":
            assert op.f == "load" or op.lease.run_id != op.run
    # every tenure reads back: tenured reads of all three kinds, seeing values the storm wrote
    tenured = [op for op in ops if op.f in ("load", "get_meta", "blob_get") and op.args.get("tenure")]
    assert {op.f for op in tenured} == {"load", "get_meta", "blob_get"}
    written = {op.tag for op in ops if op.f in ("append", "put_meta", "blob_put")}
    seen = {op.result.get("tag") or op.result.get("tail_tag") for op in tenured if op.outcome == "ok"} - {None}
    assert seen and seen <= written
    # c counts 1, 2, ... per lease in invoke order
    assert counters and all(cs == list(range(1, len(cs) + 1)) for cs in counters.values())


def test_superseded_leases_are_swept_and_refused_typed(tmp_path):
    ops = _storm_in_threads(tmp_path)
    granted_at = {(op.run, op.result["epoch"]): op.complete_ns for op in ops
                  if op.f == "acquire" and op.outcome == "ok"}
    # stale operations invoked after the successor epoch was granted
    superseded = [op for op in ops if op.intent == "stale" and op.lease is not None
                  and granted_at.get((op.lease.run_id, op.lease.epoch + 1), float("inf")) < op.invoke_ns]
    assert len(superseded) > 20
    surfaces = {("cross" if op.run != op.lease.run_id else op.f) for op in superseded}
    assert surfaces == {"append", "put_meta", "blob_put", "blob_delete", "delete", "renew", "release", "cross"}
    # the memory store is correct: no write under a superseded lease is accepted
    accepted = [op for op in superseded if op.outcome == "ok"]
    assert not accepted, [op.tag for op in accepted][:5]
    assert all(op.outcome == "fail" and op.error == "LeaseHeldError" for op in superseded)
    # the stale append went to the fresh tail + 1 (the order guard cannot mask the fence)
    assert any(op.f == "append" for op in superseded)


def test_the_first_probes_of_a_storms_workers_are_all_different_and_move_with_the_seed():
    from soak.workloads.runs.worker import _PROBES, _first_probe

    firsts = {seed: [_first_probe(f"w{slot}.1", seed, random.Random(slot)) for slot in range(4)] for seed in range(1, 40)}
    assert all(len(set(f)) == 4 for f in firsts.values())
    # over storms every probe is somebody's first, the slowest (renewed) included
    assert {k for f in firsts.values() for k in f} == set(range(len(_PROBES)))
    # a replacement worker draws its own: its predecessor's turn is gone with it
    assert {_first_probe("w0.2", 7, random.Random(i)) for i in range(40)} == set(range(len(_PROBES)))
