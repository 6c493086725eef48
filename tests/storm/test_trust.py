"""Trust both ways: a verdict never passes what was not seen, and names every fault a store inflicts.

Each case runs `soak storm` / `soak check` as a user does (a subprocess: exit code, console, run directory) with a
small store of `tests/trust_stores.py` that misbehaves the way real stores do, or a run directory damaged the way
a disk or a harness bug damages one. Every path ends with the exit code CONTRACT section 3 gives and one line
naming the cause, never a raw traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from soak.check import check_run, read_history
from soak.rundir import load_run_info

ROOT = Path(__file__).resolve().parents[2]


def _soak(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # the test stores import as tests.trust_stores
    return subprocess.run([sys.executable, "-m", "soak.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def _storm(tmp_path: Path, store: str, *sets: str, bound: float = 25) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = tmp_path / "run"
    extra = [a for s in sets for a in ("--set", s)]
    res = _soak("storm", "--quiet", "--no-report", "--store", f"tests.trust_stores:{store}", "--out", str(run_dir),
                "--time-bound", str(bound), *extra)
    return res, run_dir


def _no_traceback(res: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr


def _verdict(run_dir: Path) -> dict:
    return json.loads((run_dir / "verdict.json").read_text())


# -- liveness -------------------------------------------------------------------------------

def test_a_call_that_never_returns_fails_call_returns_naming_the_call(tmp_path):
    res, run_dir = _storm(tmp_path, "open_hanging_meta")
    _no_traceback(res)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "fail" in res.stdout and "call-returns" in res.stdout
    v = _verdict(run_dir)
    hung = [x for x in v["violations"] if x["clause"] == "call-returns"]
    assert hung and all(x["statement"].startswith("put_meta (") for x in hung)
    assert all("past the call-returns bound of 5 s" in x["statement"] for x in hung)
    assert all(x["evidence"][0]["f"] == "put_meta" and x["evidence"][0]["complete_ns"] is None for x in hung)


@pytest.mark.parametrize("store, surface, how", [
    ("open_segfaulting_append", "append", "signal SIGSEGV"),
    ("open_exiting_blob_put", "blob_put", "exit status 3"),
    ("open_raising_system_exit", "renew", "the store raised SystemExit (2)"),
])
def test_a_store_that_ends_its_process_fails_no_crash_naming_the_call(tmp_path, store, surface, how):
    res, run_dir = _storm(tmp_path, store)
    _no_traceback(res)
    assert res.returncode == 1, res.stdout + res.stderr
    v = _verdict(run_dir)
    crashes = [x for x in v["violations"] if x["clause"] == "no-crash"]
    assert crashes, v["violations"][:3]
    assert all(x["statement"].startswith(f"{surface} (") and how in x["statement"] for x in crashes)
    # a worker the nemesis killed is never counted as a crash: every crash named is one the store caused
    killed = {json.loads(line)["v"]["target"] for line in (run_dir / "history" / "nemesis.jsonl").read_text()
              .splitlines() if json.loads(line).get("kind") == "kill"}
    assert not killed & {x["evidence"][0]["process"] for x in crashes}


# -- boots ----------------------------------------------------------------------------------

@pytest.mark.parametrize("store, error", [
    ("open_flaky_boot", "RuntimeError"),
    ("open_first_boots_fail", "RuntimeError"),
    ("open_timeout_boot", "TimeoutError"),
])
def test_boots_that_fail_beside_boots_that_come_up_fail_concurrent_boot(tmp_path, store, error):
    """Half the boots failing (the final-state reader's first too), every first boot failing, or boots raising
    TimeoutError (the store's answer, whatever its name): a fail naming concurrent-boot, never exit 2 or 3."""
    res, run_dir = _storm(tmp_path, store)
    _no_traceback(res)
    assert res.returncode == 1, res.stdout + res.stderr
    v = _verdict(run_dir)
    assert {x["clause"] for x in v["violations"]} == {"concurrent-boot"}
    assert all(x["evidence"][0]["error"] == error for x in v["violations"])
    assert (run_dir / "final_state.json").is_file()  # the reader retried its failed boot
    if store == "open_flaky_boot":
        assert any(x["evidence"][0]["process"] == "final-state" for x in v["violations"])


# -- busy: nothing was written ---------------------------------------------------------------

def _busy_then(run_dir: Path) -> list[tuple]:
    """For each tenured put_meta or blob_put answered StoreBusyError before the storm's stop flag (a stopping worker
    leaves at once): (the call, its process's next call)."""
    from soak.history import Operation

    by_process: dict[str, list] = {}
    stop_ns = float("inf")
    for x in read_history(run_dir):
        if isinstance(x, Operation):
            by_process.setdefault(x.process, []).append(x)
        elif getattr(x, "kind", None) == "boot":  # the boot barrier; the stop flag is running_s after it
            stop_ns = x.time + json.loads((run_dir / "storm.json").read_text())["running_s"] * 1e9
    pairs = []
    for ops in by_process.values():
        ops.sort(key=lambda op: op.index)
        pairs += [(op, nxt) for op, nxt in zip(ops, ops[1:]) if op.f in ("put_meta", "blob_put")
                  and op.intent == "live" and op.error == "StoreBusyError" and op.complete_ns < stop_ns]
    return pairs


def test_a_write_answered_busy_is_read_back_before_its_retry_and_a_busy_lie_fails_typed_refusal(tmp_path):
    """Busy promises nothing was written, and the retry writes a fresh tag over whatever was: a store that commits
    and then answers busy (a lost COMMIT called busy) is seen only by the tenure's read between the two."""
    res, run_dir = _storm(tmp_path, "open_busy_after_write", "stop_on_violation=true")
    _no_traceback(res)
    assert res.returncode == 1, res.stdout + res.stderr
    pairs = _busy_then(run_dir)
    assert pairs
    for op, nxt in pairs:  # the read of what the busy write would have changed, under the same tenure
        assert nxt.f == ("get_meta" if op.f == "put_meta" else "blob_get"), (op, nxt)
        assert nxt.args["tenure"] == [op.lease.run_id, op.lease.owner, op.lease.epoch]
        if op.f == "blob_put":
            assert nxt.args["ref"] == op.args["ref"]
    cited = [x for x in _verdict(run_dir)["violations"] if x["clause"] == "typed-refusal"]
    assert cited, _verdict(run_dir)["violations"][:3]
    busy = {op.tag for op, _ in pairs}
    assert any(e["f"] in ("put_meta", "blob_put") and e["outcome"] == "fail" and e["tag"] in busy
               for x in cited for e in x["evidence"])


def test_a_store_that_answers_busy_before_writing_passes(tmp_path):
    """The same busy answers without the write: the read-backs see the earlier value, and the storm passes."""
    res, run_dir = _storm(tmp_path, "open_busy_before_write")
    _no_traceback(res)
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(_busy_then(run_dir)) > 10


# -- what the history must hold -------------------------------------------------------------

@pytest.fixture(scope="module")
def passing_run(tmp_path_factory) -> Path:
    """One passing smoke storm on the reference store, copied by the tests that damage it."""
    run_dir = tmp_path_factory.mktemp("pass") / "run"
    res = _soak("storm", "--quiet", "--no-report", "--out", str(run_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    return run_dir


def _copy(run_dir: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(run_dir, dest)
    (dest / "verdict.json").unlink()
    return dest


def _check(run_dir: Path) -> tuple[subprocess.CompletedProcess, dict]:
    res = _soak("check", str(run_dir))
    _no_traceback(res)
    return res, _verdict(run_dir)


def test_a_history_with_no_worker_file_is_inconclusive_not_pass(passing_run, tmp_path):
    run_dir = _copy(passing_run, tmp_path / "run")
    for path in (run_dir / "history").glob("*.jsonl"):
        if path.name != "nemesis.jsonl":  # only the storm's own record is left
            path.unlink()
    res, v = _check(run_dir)
    assert res.returncode == 3 and v["result"] == "inconclusive"
    assert any("no store operations" in r for r in v["reasons"])
    assert any("left no history" in r for r in v["reasons"])


def test_a_spawned_worker_without_its_file_is_inconclusive_naming_it(passing_run, tmp_path):
    run_dir = _copy(passing_run, tmp_path / "run")
    (run_dir / "history" / "w2.1.jsonl").unlink()
    res, v = _check(run_dir)
    assert res.returncode == 3 and v["result"] == "inconclusive", v
    assert any(r.startswith("spawned worker w2.1 ") and "history/w2.1.jsonl is missing" in r for r in v["reasons"])
    assert res.stdout.startswith("verdict: inconclusive: ") and "w2.1" in res.stdout.splitlines()[0]


def test_a_quorum_the_history_does_not_support_is_inconclusive(passing_run, tmp_path):
    run_dir = _copy(passing_run, tmp_path / "run")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "quorum"
    info["quorum_target"]["takeovers"] = 10_000  # run.json claims a quorum no history of this storm holds
    info["quorum_reached"]["takeovers"] = 10_000
    (run_dir / "run.json").write_text(json.dumps(info))
    res, v = _check(run_dir)
    assert res.returncode == 3 and v["result"] == "inconclusive"
    assert any("not supported by the checked history" in r and "takeovers" in r and "/10000" in r
               for r in v["reasons"]), v["reasons"]


def test_the_recount_agrees_with_the_storms_own_tailer(passing_run):
    """The checker's recount from the history and the storm's live tailer count the same quorum."""
    from soak.check.liveness import recount
    from soak.check.parallel import fold_files
    from soak.rundir import history_paths
    from soak.workloads.runs.check import PLAN, finish, new_facts
    from soak.workloads.runs.state import load_snapshot

    info = load_run_info(passing_run)
    facts = new_facts(load_snapshot(passing_run), lease_ttl_ms=info.lease_ttl_ms, runs=info.runs)
    fold_files(facts, history_paths(passing_run), PLAN)
    got = recount(finish(facts))
    assert {k: got.get(k, 0) for k in info.quorum_reached} == info.quorum_reached


def test_a_missing_final_state_still_judges_the_history(passing_run, tmp_path):
    run_dir = _copy(passing_run, tmp_path / "run")
    (run_dir / "final_state.json").unlink()
    res, v = _check(run_dir)
    assert res.returncode == 3 and v["result"] == "inconclusive"
    assert any(r.startswith("final state not read") for r in v["reasons"]), v["reasons"]
    assert v["stats"]["operations"] > 1000  # the history was judged all the same


def test_a_crash_inside_soak_check_is_exit_3_with_the_traceback_saved(passing_run, tmp_path):
    run_dir = _copy(passing_run, tmp_path / "run")
    # a run.json the checker reads past the judge with: an unexpected exception in soak check itself
    (run_dir / "run.json").write_text(json.dumps({**json.loads((run_dir / "run.json").read_text()),
                                                  "quorum_target": ["not", "a", "table"]}))
    res = _soak("check", str(run_dir))
    assert res.returncode == 3, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    line, = res.stderr.strip().splitlines()
    assert "failed unexpectedly" in line and "soak-traceback.txt" in line
    assert "Traceback" in (run_dir / "soak-traceback.txt").read_text()


def test_the_reference_store_still_passes(passing_run):
    v = check_run(passing_run, write=False)
    assert v.result == "pass", (v.reasons, v.violations[:3])
    assert v.stats["exercised"]["call-returns"] == v.stats["operations"]
    assert all(v.stats["exercised"][c] > 0 for c in ("lease-exclusive", "stale-rejected", "stale-lease-ops",
                                                     "run-match", "atomic-fence", "concurrent-boot", "no-crash"))


def test_a_harness_crash_mid_storm_is_inconclusive_with_the_traceback_saved(tmp_path, monkeypatch, capsys):
    """The storm itself failing is soak's problem: exit 3 (not 2, a usage error), one line, the traceback in the
    run directory, and what the workers recorded until then is still checked."""
    from soak.cli import main
    from soak.storm import nemesis

    steps = {"n": 0}
    real = nemesis.Nemesis.step

    def failing_step(self, workers):
        steps["n"] += 1
        if steps["n"] == 300:  # about 1.5 s into the storm
            raise RuntimeError("the nemesis lost its place")
        return real(self, workers)

    monkeypatch.setattr(nemesis.Nemesis, "step", failing_step)
    run_dir = tmp_path / "run"
    code = main(["storm", "--quiet", "--no-report", "--out", str(run_dir)])
    out = capsys.readouterr().out
    assert code == 3, out
    info = load_run_info(run_dir)
    assert info.status == "crashed" and "the nemesis lost its place" in info.error
    assert "soak-traceback.txt" in info.error and "RuntimeError" in (run_dir / "soak-traceback.txt").read_text()
    assert "Traceback" not in out
    v = _verdict(run_dir)
    assert v["result"] == "inconclusive" and v["stats"]["operations"] > 0
    assert any("status 'crashed" in r for r in v["reasons"])


def test_a_worker_stopped_inside_a_call_as_the_storm_ends_is_continued(tmp_path):
    """A stop the nemesis did not hold (a strike landing after its last look, as the storm ends) is continued at
    once, so the stopped worker does not sit on the store's lock while the others wait out their timeouts: the
    reference store's storm still passes, with no call past the bound."""
    res, run_dir = _storm(tmp_path, "open_stops_itself_in_meta", "strike_prob=0.0", "quorum.strikes_held=0",
                          "quorum.swept_append=0", "quorum.swept_put_meta=0", "quorum.swept_blob_put=0")
    _no_traceback(res)
    v = _verdict(run_dir)
    assert v["result"] == "pass", (v["reasons"], [x["statement"] for x in v["violations"]][:3])
    assert res.returncode == 0
