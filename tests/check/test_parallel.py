"""Folding history files in two processes gives the verdict one pass gives, byte for byte.

`merge` must continue a fold exactly: the histories below split their processes into an earlier
and a later group (as `soak.check.parallel` splits the sorted files) and compare the merged
verdict with one pass over the same operations in file order. Then `check_run` with the
parallel paths forced on: corrupt and truncated files in the child's group, a process in both
groups, a child that dies mid-history, and checkers that cannot be settled.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import soak.check.parallel as parallel
from soak.check import check_run
from soak.workloads.runs.check import CHECKERS, PLAN, finish, fold, judge, merge, new_facts
from soak.spi import Lease

from .histories import RUNS, TTL_MS, H, clean_history, write_run_dir


def _in_file_order(h: H) -> list:
    return sorted(h.ops, key=lambda o: o.process)  # stable: each process keeps its own order


def _verdicts(h: H, snap, later: set[str]) -> tuple[dict, dict]:
    """(one pass in file order, earlier processes merged with the `later` ones) as JSON."""
    ops = _in_file_order(h)

    def new():
        return new_facts(snap, lease_ttl_ms=TTL_MS, runs=RUNS)

    def one_pass():
        facts = new()
        fold(facts, ops)
        return finish(facts)

    def two_parts():
        first, second = new(), new()
        fold(first, [o for o in ops if o.process not in later])
        fold(second, [o for o in ops if o.process in later])
        merge(first, second)
        return finish(first)

    return judge(one_pass).to_json(), judge(two_parts).to_json()


def _forged_writes() -> H:
    """w0.1 writes under w1.1's lease (a non-grantee the store let in); w1.1 then reads what it wrote."""
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.put_meta("w0.1", a, 5)
    h.append("w0.1", a, 1, 6)
    h.append("w0.1", a, 2, 7, outcome="info", error="RuntimeError")
    mine = h.put_meta("w1.1", a, 8)
    h.read("w1.1", a, "meta", 10, mine.tag)
    h.read("w1.1", a, "journal", 12, (2, "w0.1#2"))
    h.blob_put("w1.1", a, "t1", 14)
    h.read("w1.1", a, "t1", 16, "w0.1#9")  # a value nobody wrote there
    return h


def _late_stale_write() -> H:
    """A stale write lands after the successor's own one, seen by the successor's read; a lost append."""
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.append("w1.1", a, 1, 5)
    m1 = h.put_meta("w1.1", a, 10)
    b = h.acquire("w2.1", "r1", 200, 2)
    late = h.put_meta("w1.1", a, 90, dur=130)
    h.read("w2.1", b, "meta", 202, m1.tag)
    h.put_meta("w2.1", b, 205)
    h.read("w2.1", b, "meta", 225, late.tag)
    h.append("w2.1", b, 2, 230)
    h.renew("w2.1", b, 240)
    h.append("w2.1", b, 3, 250, outcome="fail")  # refused while surely live: spurious
    h.acquire("w3.1", "r1", 260, 2)  # the same epoch granted again
    h.release("w3.1", Lease("r1", "w3.1", 2), 270)
    return h


HISTORIES = {
    "clean": (clean_history, {"w2.1"}),
    "forged": (_forged_writes, {"w1.1"}),
    "late": (_late_stale_write, {"w2.1", "w3.1"}),
}


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_merged_folds_judge_as_one_pass(name: str):
    build, later = HISTORIES[name]
    h = build()
    one, two = _verdicts(h, h.state(RUNS), later)
    assert one == two
    assert (one["result"] == "pass") == (name == "clean"), one
    lossy = h.state(RUNS)
    del lossy.journals["r1"][-1]  # a lost append, found in the final state
    one, two = _verdicts(h, lossy, later)
    assert one == two
    assert "journal-a1" in {v["clause"] for v in one["violations"]}


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork for any size of history (the threshold exists only to save time on small ones)."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)


def _run(tmp_path: Path, h: H) -> Path:
    return write_run_dir(tmp_path / "run", h, h.state(RUNS))


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_check_run_in_two_processes_matches_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str):
    run_dir = _run(tmp_path, HISTORIES[name][0]())
    one = check_run(run_dir, write=False)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    forks = []
    real_fork = parallel.os.fork
    monkeypatch.setattr(parallel.os, "fork", lambda: forks.append(1) or real_fork())
    two = check_run(run_dir, write=False)
    assert len(forks) == 1  # the child folds its share of every slice
    assert two.to_json() == one.to_json()


def test_corrupt_line_in_the_childs_files_is_named(tmp_path: Path, forced: None):
    run_dir = _run(tmp_path, clean_history())
    last = sorted((run_dir / "history").glob("*.jsonl"))[-1]
    text = last.read_text()
    line = text[:text.index('"t": "invoke"')].count("\n") + 1  # the first invoke's line (after the start event)
    last.write_text(text.replace('"t": "invoke"', '"t": "invoke"}{', 1))
    v = check_run(run_dir, write=False)
    assert v.result == "inconclusive"
    assert any(f"{last}:{line}: unreadable history record" in r for r in v.reasons), v.reasons


def test_truncated_last_line_in_the_childs_files_is_an_unknown_operation(tmp_path: Path, forced: None):
    run_dir = _run(tmp_path, clean_history())
    whole = check_run(run_dir, write=False)
    w2 = run_dir / "history" / "w2.1.jsonl"
    lines = w2.read_text().splitlines(keepends=True)
    w2.write_text("".join(lines[:-1]) + lines[-1][:-8])  # the refusal of w2.1's last call, cut by a kill
    v = check_run(run_dir, write=False)
    assert v.result == "pass", v.violations
    assert (v.stats["info"], v.stats["fail"]) == (whole.stats["info"] + 1, whole.stats["fail"] - 1)


def test_a_process_in_both_groups_is_folded_in_one_pass(tmp_path: Path, forced: None):
    h = _late_stale_write()
    run_dir = _run(tmp_path, h)
    one = check_run(run_dir, write=False)
    hist = run_dir / "history"
    lines = (hist / "w1.1.jsonl").read_text().splitlines(keepends=True)
    (hist / "w1.1.jsonl").write_text("".join(lines[:5]))  # its start event and two calls
    (hist / "zz.jsonl").write_text("".join(lines[5:]))  # the rest of w1.1's calls, in the last file
    two = check_run(run_dir, write=False)
    assert two.to_json() == one.to_json()
    assert two.result == "fail"


def _one_and_two(run_dir: Path, snap) -> tuple:
    """The verdicts on `run_dir` of one process and of two, sliced small."""
    paths = sorted((run_dir / "history").glob("*.jsonl"))

    def new():
        return new_facts(snap, lease_ttl_ms=TTL_MS, runs=RUNS)

    import soak.workloads.runs.check as runs_check

    plan = runs_check.PLAN  # as a test may have patched it
    with parallel.TwoCores(paths, new, plan, workers=1, slice_ops=3) as cores:
        one = judge(lambda: finish(cores.fold()))
    with parallel.TwoCores(paths, new, plan, slice_ops=3) as cores:
        two = judge(lambda: finish(cores.fold()))
    return one, two


def _patch_plan(monkeypatch: pytest.MonkeyPatch, **changes: object):
    """The runs workload's plan with `changes`, in place of its own for the test (check_run reads it anew)."""
    import dataclasses

    import soak.workloads.runs.check as runs_check

    plan = dataclasses.replace(runs_check.PLAN, **changes)
    monkeypatch.setattr(runs_check, "PLAN", plan)
    return plan


def test_the_child_folds_slices_that_judge_as_one_process(tmp_path: Path, forced: None, monkeypatch: pytest.MonkeyPatch):
    h = _late_stale_write()
    parts = []
    real_merge = PLAN.merge
    _patch_plan(monkeypatch, merge=lambda facts, part: parts.append(part.stats["operations"]) or real_merge(facts, part))
    one, two = _one_and_two(_run(tmp_path, h), h.state(RUNS))
    assert two.to_json() == one.to_json()
    assert len(parts) > 3 and sum(parts) > 0  # the child's slices, merged one by one
    assert two.stats["reads_judged"] == 2
    assert any(v.evidence[0].f == "get_meta" and v.clause == "stale-rejected" for v in two.violations), two.violations


def test_a_child_that_dies_mid_history_leaves_the_verdict_whole(tmp_path: Path, forced: None,
                                                               monkeypatch: pytest.MonkeyPatch):
    h = _late_stale_write()
    run_dir = _run(tmp_path, h)
    parent = os.getpid()
    real_new_part = PLAN.new_part
    made = []

    def dies(facts):
        made.append(1)
        if os.getpid() != parent and len(made) > 2:
            os._exit(3)
        return real_new_part(facts)

    _patch_plan(monkeypatch, new_part=dies)
    streams = []
    real_stream = parallel.stream_files
    monkeypatch.setattr(parallel, "stream_files", lambda *a: streams.append(1) or real_stream(*a))
    one, two = _one_and_two(run_dir, h.state(RUNS))
    assert two.to_json() == one.to_json()
    assert two.result == "fail" and two.stats["reads_judged"] == 2
    assert len(streams) == 2  # the one-process check, and the two-process one done again here


def test_other_checkers_get_the_whole_history_folded_at_once(tmp_path: Path, forced: None,
                                                             monkeypatch: pytest.MonkeyPatch):
    # Settling judges by the checkers of `CHECKERS`: with others, nothing is judged or retired early.
    h = _late_stale_write()
    run_dir = _run(tmp_path, h)
    paths = sorted((run_dir / "history").glob("*.jsonl"))
    seen = []

    def tenures(facts):
        seen.append(sorted(facts.tenures))
        return []

    checkers = (*CHECKERS, ("tenures", tenures))
    settles = []
    plan = _patch_plan(monkeypatch, settle=lambda *a: settles.append(1))
    with parallel.TwoCores(paths, lambda: new_facts(h.state(RUNS), lease_ttl_ms=TTL_MS, runs=RUNS), plan, checkers,
                           slice_ops=1) as cores:
        v = judge(lambda: finish(cores.fold()), checkers)
    assert not settles and seen == [[("r1", 1), ("r1", 2)]]
    assert v.result == "fail"
