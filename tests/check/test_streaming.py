"""Checking in bounded memory: a history folded a time slice at a time, and settled after each, gives the
verdict of one fold of the whole.

`soak.check.parallel` reads the history files a slice at a time, on one core or two, and
`soak.workloads.runs.check.settling` judges what can no longer change, then retires the tenures nothing still
to come can consult. Hypothesis drives the simulated correct store of `test_no_false_positives`
(as it is, and with a journal entry lost) through slices of a few operations and compares with the
whole fold; then the cases only retirement meets: operations under a retired tenure, an epoch
granted again after it retired, a file out of invocation order, a checker raising while settling,
and summaries that stay as large as what is in flight however long the history.
"""

from __future__ import annotations

import dataclasses

import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import soak.workloads.runs.check as core
import soak.workloads.runs.check.settling as settling
import soak.workloads.runs.check.summaries as summaries
import soak.check.parallel as parallel
from soak.workloads.runs.check import PLAN, finish, judge, new_facts
from soak.spi import Lease

from .histories import TTL_MS, H, write_run_dir
from .test_no_false_positives import RUNS as SIM_RUNS
from .test_no_false_positives import STEPS
from .test_no_false_positives import _run as simulate

WRITTEN = (["r1", "r2"], [])


def _verdicts(run_dir: Path, snap, *, workers: int = 1, slice_ops: int = 4) -> tuple[dict, dict]:
    """(the whole history folded, then checked; the same sliced and settled) as JSON."""
    paths = sorted((run_dir / "history").glob("*.jsonl"))

    def new():
        return new_facts(snap, lease_ttl_ms=TTL_MS, runs=WRITTEN[0], quorum="epochs 2/2")

    def whole():
        facts = new()
        parallel.fold_files(facts, paths, PLAN)
        return finish(facts)

    with mock.patch.object(parallel, "MIN_PARALLEL_BYTES", 0):
        with parallel.TwoCores(paths, new, PLAN, workers=workers, slice_ops=slice_ops) as cores:
            sliced = judge(lambda: finish(cores.fold()))
    return judge(whole).to_json(), sliced.to_json()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS, st.sampled_from([1, 3, 20]), st.sampled_from([1, 2]), st.booleans())
def test_sliced_and_settled_the_verdict_is_the_whole_folds(steps, slice_ops: int, workers: int, lossy: bool):
    sim, snap = simulate(steps)
    if lossy:  # a journal entry lost: the verdict fails, the same way
        for run in SIM_RUNS[:2]:
            if snap.journals[run]:
                snap.journals[run].pop(len(steps) % len(snap.journals[run]))
                break
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = write_run_dir(Path(tmp) / "run", sim, snap, runs=WRITTEN)
        whole, sliced = _verdicts(run_dir, snap, workers=workers, slice_ops=slice_ops)
    assert sliced == whole


def _retired_then_late() -> H:
    """Epoch 1 is superseded, its ttl runs out, the history goes on; then its holder wakes and is let in."""
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.append("w1.1", a, 1, 5)
    h.put_meta("w1.1", a, 10)
    b = h.acquire("w2.1", "r1", 200, 2)
    for k in range(20):  # the successor works on, long past epoch 1's ttl
        h.append("w2.1", b, 2 + k, 210 + 10 * k)
        h.renew("w2.1", b, 215 + 10 * k)
    h.put_meta("w1.1", a, 500)  # accepted under epoch 1, long retired: stale
    h.renew("w1.1", a, 505)
    h.put_meta("w3.1", Lease("r1", "w3.1", 1), 510)  # epoch 1's lease in another owner's hands
    h.append("w2.1", b, 22, 520)
    return h


def _granted_again() -> H:
    """An epoch reset: epoch 1 granted again long after it retired."""
    h = H()
    a = h.acquire("w1.1", "r1", 0, 1)
    h.put_meta("w1.1", a, 5)
    h.release("w1.1", a, 10)
    b = h.acquire("w2.1", "r1", 200, 2)
    for k in range(20):
        h.append("w2.1", b, 1 + k, 210 + 10 * k)
        h.renew("w2.1", b, 215 + 10 * k)
    h.release("w2.1", b, 420)
    c = h.acquire("w3.1", "r1", 600, 1)
    h.append("w3.1", c, 21, 605)
    return h


@pytest.mark.parametrize("workers", [1, 2])
def test_operations_under_a_retired_tenure_are_judged_as_the_whole_fold_judges_them(tmp_path: Path, workers: int):
    h = _retired_then_late()
    whole, sliced = _verdicts(write_run_dir(tmp_path / "run", h, h.state(["r1"])), h.state(["r1"]), workers=workers)
    assert sliced == whole
    statements = {(v["clause"], v["statement"]) for v in sliced["violations"]}
    assert ("stale-rejected", "put_meta under epoch 1 of run r1 accepted after the tenure was superseded by epoch 2") \
        in statements
    assert ("stale-lease-ops", "renew under epoch 1 of run r1 accepted after the tenure was superseded by epoch 2") \
        in statements
    assert ("stale-rejected", "put_meta accepted from a non-grantee: epoch 1 of run r1 was granted to w1.1, not w3.1") \
        in statements


@pytest.mark.parametrize("workers", [1, 2])
def test_an_epoch_granted_again_after_it_retired_is_granted_twice(tmp_path: Path, workers: int):
    h = _granted_again()
    snap = h.state(["r1"])
    whole, sliced = _verdicts(write_run_dir(tmp_path / "run", h, snap), snap, workers=workers)
    assert sliced == whole
    statements = [v["statement"] for v in sliced["violations"]]
    assert "epoch 1 of run r1 was granted 2 times (to w1.1, w3.1)" in statements
    assert "run r1: epoch 1 granted after epoch 2 had been granted" in statements
    assert sliced["stats"]["tenures"] == 2  # two epochs granted, as the whole fold counts them


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_out_of_invocation_order_is_checked_whole(tmp_path: Path, workers: int):
    h = _retired_then_late()
    snap = h.state(["r1"])
    run_dir = write_run_dir(tmp_path / "run", h, snap)
    hist = run_dir / "history"
    # w2.1's calls, then w1.1's (invoked before most of them), in one file
    (hist / "w.jsonl").write_text((hist / "w2.1.jsonl").read_text() + (hist / "w1.1.jsonl").read_text())
    (hist / "w1.1.jsonl").unlink()
    (hist / "w2.1.jsonl").unlink()
    with pytest.raises(core.Unordered):
        parallel.stream_files(new_facts(snap, lease_ttl_ms=TTL_MS, runs=["r1"]), sorted(hist.glob("*.jsonl")), PLAN, 4)
    whole, sliced = _verdicts(run_dir, snap, workers=workers)
    assert sliced == whole and sliced["result"] == "fail"


def test_a_checker_raising_while_settling_makes_the_verdict_inconclusive(tmp_path: Path):
    h = _retired_then_late()
    snap = h.state(["r1"])
    run_dir = write_run_dir(tmp_path / "run", h, snap)

    def boom(facts, tenures=None):
        raise RuntimeError("kaput")

    with mock.patch.object(settling, "check_fencing", boom):  # as settling calls it; the final run keeps its own
        _, sliced = _verdicts(run_dir, snap)
    assert "checker fencing raised RuntimeError: kaput" in sliced["reasons"]
    assert sliced["result"] == "fail"  # what the other checkers found still stands


def _live(facts) -> dict[str, int]:
    """What the facts hold, counted in items."""
    return {
        "tenures": len(facts.tenures),
        "reads": len(facts.reads),
        "object epochs": sum(len(per) for per in facts.objects.values()),
        "tag segments": sum(len(seg[0]) for seg in facts.tagged.values()),
        "retired rows": sum(len(res.epochs) for res in facts.retired.values()),
        "refusals": len(facts.refusals),
        "held": sum(len(ra.held) for ra in facts.run_acc.values()),
        "acquires": sum(len(ra.acq_invokes) for ra in facts.run_acc.values()),
    }


def test_what_the_facts_hold_does_not_grow_with_the_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_checker import generate

    from soak.workloads.runs.state import load_snapshot

    monkeypatch.setattr(summaries._Retired, "KEEP", 64)
    monkeypatch.setattr(summaries._Retired, "TAGS", 32)
    peaks: dict[int, dict[str, int]] = {}
    def settle(facts, until, names=None):
        PLAN.settle(facts, until, names)
        for what, count in _live(facts).items():
            peak[what] = max(peak.get(what, 0), count)

    plan = dataclasses.replace(PLAN, settle=settle)
    for n in (20_000, 80_000):
        run_dir = tmp_path / f"run{n}"
        generate(run_dir, n)
        facts = new_facts(load_snapshot(run_dir), lease_ttl_ms=250, runs=[f"r{i}" for i in range(4)])
        peak = peaks[n] = {}
        parallel.stream_files(facts, sorted((run_dir / "history").glob("*.jsonl")), plan, 2048)
        assert finish(facts).stats["operations"] >= n and facts.stats["tenures"] > n / 40
    small, large = peaks[20_000], peaks[80_000]
    for what, count in large.items():  # four times the history: no more held after any settling
        assert count <= 1.5 * small[what] + 64, (what, small, large)
    assert large["retired rows"] <= 4 * 2 * 64  # four runs, fewer than twice KEEP rows each


def test_only_the_files_of_current_incarnations_are_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # A long storm leaves a file per worker incarnation: each is opened when the slices reach its first call.
    h = H()
    for k in range(40):  # one worker, killed and restarted 40 times, a tenure each
        p = f"w1.{k + 1}"
        lease = h.acquire(p, "r1", 300 * k, k + 1)
        h.append(p, lease, k + 1, 300 * k + 5)
        h.release(p, lease, 300 * k + 10)
    snap = h.state(["r1"])
    run_dir = write_run_dir(tmp_path / "run", h, snap)
    most = []
    real_fold = parallel._Files.fold

    def fold(self, facts, until):
        real_fold(self, facts, until)
        most.append(len(self.open))

    monkeypatch.setattr(parallel._Files, "fold", fold)
    whole, sliced = _verdicts(run_dir, snap, slice_ops=2)
    assert sliced == whole and sliced["result"] == "pass" and sliced["stats"]["tenures"] == 40
    assert len(most) > 20 and max(most) <= 2  # of 41 files (and nemesis.jsonl, read at once)


@pytest.mark.parametrize("first", [2**63 - 5, -20, 0])
def test_epochs_outside_the_residue_arrays_keep_their_tenures_live(tmp_path: Path, first: int):
    # A store's epochs may not fit a residue row (an array of 64-bit integers): never retired, still judged.
    h = H()
    for k in range(12):
        p = f"w{k % 3}.1"
        lease = h.acquire(p, "r1", 300 * k, first + k)
        h.put_meta(p, lease, 300 * k + 5)
        if k == 9:
            h.put_meta(f"w{(k + 2) % 3}.1", Lease("r1", f"w{(k + 2) % 3}.1", first + k - 1), 300 * k + 7)  # stale
        h.release(p, lease, 300 * k + 10)
    snap = h.state(["r1"])
    whole, sliced = _verdicts(write_run_dir(tmp_path / "run", h, snap), snap, slice_ops=2)
    assert sliced == whole
    assert "stale-rejected" in {v["clause"] for v in sliced["violations"]} and not sliced["reasons"]
