"""Load workers: real processes pressing the store beside the tenure workers, every call recorded and checked."""

from __future__ import annotations

import json
from collections import Counter

from soak.check import check_run
from soak.history import Operation, Record, operations
from soak.rundir import history_paths
from soak.scenario import load_scenario
from soak.storm import run_storm
from soak.workloads.runs import RunsCounter
from soak.workloads.runs.load import is_load_run, load_runs


def test_a_load_run_regranted_after_its_lease_lapsed_is_no_takeover():
    counter = RunsCounter()
    for run in ("r0", load_runs(1)[0]):
        for epoch in (1, 2):  # epoch 2 granted while epoch 1 was never released
            counter.feed({"f": "acquire", "run": run, "intent": "live" if run == "r0" else "load"},
                         {"t": "ok", "v": {"epoch": epoch}})
    assert is_load_run("ld0") and not is_load_run("r0")
    assert counter.takeovers() == 1


def test_load_workers_write_and_read_beside_a_storm_the_nemesis_never_touches_them(tmp_path):
    """Two tenure workers under the full nemesis, two load workers beside them: the writer's writes land on its own
    run, the reader reads that run untenured, every call checked like any other (no violation), and no pause, kill
    or strike targets them."""
    # a quorum of nemesis actions ends it (a time bound would count the boot, seconds on a loaded machine)
    sc = load_scenario("smoke").replace(workers=2, load_workers=2, time_bound_s=60.0,
                                        quorum={"pauses": 4, "kills": 2, "takeovers": 3},
                                        pause_interval_s=0.4, kill_interval_s=1.0)
    run_dir = tmp_path / "run"
    info = run_storm(sc, "sqlite:", run_dir, progress=False)
    assert info.status == "quorum"
    by_process: dict[str, Counter] = {}
    leased: Counter = Counter()  # per process, its calls that presented a lease
    for op in operations(history_paths(run_dir)):
        if isinstance(op, Operation) and op.f != "open":
            slot = op.process.split(".")[0]
            by_process.setdefault(slot, Counter())[(op.run, op.f, op.outcome)] += 1
            leased[slot] += op.lease is not None
    writer, reader = by_process["w2"], by_process["w3"]
    assert writer[("ld0", "append", "ok")] > 50  # as fast as the store takes writes
    assert {r for r, _, _ in writer} == {"ld0"}  # its own run only
    assert {(r, f) for r, f, _ in reader} == {("ld0", "get_meta"), ("ld0", "blob_get")}  # the writer's run, read only
    assert reader[("ld0", "get_meta", "ok")] > 50
    assert leased["w3"] == 0 and leased["w2"] > 50  # the reader untenured, the writer under its tenure
    for slot in (0, 1):
        assert not any(is_load_run(r) for r, _, _ in by_process[f"w{slot}"])
    targets = Counter()
    for ev in operations([run_dir / "history" / "nemesis.jsonl"]):
        if isinstance(ev, Record) and ev.kind in ("pause", "kill"):
            targets[ev.value["target"].split(".")[0]] += 1
    assert targets and set(targets) <= {"w0", "w1"}
    verdict = check_run(run_dir)
    assert not verdict.violations, [v.statement for v in verdict.violations][:3]
    final = json.loads((run_dir / "storm.json").read_text())
    assert final["counts"].get("takeovers", 0) >= 1
