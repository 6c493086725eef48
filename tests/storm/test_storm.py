"""Storms with real worker processes: quorum, clean histories, nemesis, failures that end cleanly."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from soak.check import check_run
from soak.errors import ScenarioError
from soak.history import Operation, operations
from soak.rundir import history_paths, load_run_info
from soak.workloads.runs.state import load_snapshot
from soak.scenario import load_scenario
from soak.stores import resolve
from soak.storm import run_storm

# -- vendor-style factories defined in this test file: they reach the workers through dill ----


def exploding_store(location: str, *, lease_ttl_ms: int):
    raise RuntimeError("vendor bootstrap exploded: no schema")


def hanging_store(location: str, *, lease_ttl_ms: int):
    """The reference SQLite store, except that every append hangs forever."""
    from soak.stores.sqlite import open_sqlite

    store = open_sqlite(location, lease_ttl_ms=lease_ttl_ms)

    def append(run_id, entry, lease=None):
        time.sleep(3600)

    store.append = append
    return store


def loads_hang_store(location: str, *, lease_ttl_ms: int):
    """The reference SQLite store, except that reading a journal hangs forever."""
    from soak.stores.sqlite import open_sqlite

    store = open_sqlite(location, lease_ttl_ms=lease_ttl_ms)
    store.load = lambda run_id: time.sleep(3600)
    return store


def first_two_boots_fail(location: str, *, lease_ttl_ms: int):
    """The reference SQLite store, except that the first two opens of a location raise."""
    from soak.stores.sqlite import open_sqlite

    for n in range(2):
        try:
            os.close(os.open(os.path.join(location, f"boot-failure-{n}"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        raise RuntimeError(f"boot failure {n} (deliberate)")
    return open_sqlite(location, lease_ttl_ms=lease_ttl_ms)


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history" / "nemesis.jsonl").read_text().splitlines()]


def _worker_pids(run_dir: Path) -> set[int]:
    pids = set()
    for path in (run_dir / "history").glob("w*.jsonl"):
        for line in path.read_text().splitlines():
            if line.endswith("}"):
                rec = json.loads(line)
                if rec.get("kind") == "start":
                    pids.add(rec["v"]["pid"])
    return pids


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _small_smoke():
    """The smoke preset with a quorum small enough for the fast test tier (every kind still > 0)."""
    sc = load_scenario("smoke", {"time_bound_s": 40.0, "kill_interval_s": 1.0})
    small = {k: max(1, v // 5) for k, v in sc.quorum.items()}
    return dataclasses.replace(sc, quorum=small)


def test_small_storm_reaches_quorum_with_every_nemesis_kind_and_clean_history(tmp_path):
    sc = _small_smoke()
    run_dir = tmp_path / "run"
    info = run_storm(sc, resolve("sqlite:"), run_dir, progress=False)
    assert info.status == "quorum", info.quorum_reached
    assert info.seed > 0 and len(info.worker_seeds) >= sc.workers
    assert load_run_info(run_dir).status == "quorum"
    # every history file pairs cleanly (raises HistoryCorruptError otherwise)
    ops = [x for x in operations(history_paths(run_dir)) if isinstance(x, Operation)]
    assert sum(op.f == "open" and op.outcome == "ok" for op in ops) >= sc.workers
    assert {op.intent for op in ops} >= {"live", "stale", "cross", "side", "boot"}
    # stale refusals are typed
    stale = [op for op in ops if op.intent == "stale" and op.f not in ("load",)]
    assert stale and all(op.outcome != "fail" or op.error in ("LeaseHeldError", "StoreBusyError",
                                                                 "JournalOrderError") for op in stale)
    kinds = {e["kind"] for e in _events(run_dir)}
    assert {"pause", "resume", "kill", "spawn"} <= kinds
    # a SIGSTOP landed inside a store call: the flag is read after the kernel reported the stop
    assert any(e["kind"] == "pause" and e["v"]["in_call"] and e["v"]["stopped"] for e in _events(run_dir))
    snap = load_snapshot(run_dir)
    assert set(snap.journals) == {*info.runs, *info.side_runs, "xr"}
    assert snap.journals["xr"] == [] and not snap.read_errors
    assert (run_dir / "scenario.toml").read_text().count(f"seed = {info.seed}") == 1
    # the takeover rate over the physical limit R/T, from the quorum's own count over the running window
    extra = json.loads((run_dir / "storm.json").read_text())
    limit = len(info.runs) / (sc.lease_ttl_ms / 1000.0)
    assert 0 < extra["running_s"] <= extra["elapsed_s"]
    assert extra["takeovers_per_s_over_R_T"] == pytest.approx(
        extra["counts"]["takeovers"] / extra["running_s"] / limit, abs=0.002)
    # every worker incarnation is gone once run_storm returns
    assert len(_worker_pids(run_dir)) >= sc.workers
    assert not [p for p in _worker_pids(run_dir) if _alive(p)]


def test_memory_store_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match="shared across processes"):
        run_storm(load_scenario("smoke"), resolve("memory:"), tmp_path / "run", progress=False)
    with pytest.raises(ScenarioError, match="shared across processes"):
        run_storm(load_scenario("smoke", {"store": "memory:"}), None, tmp_path / "run2", progress=False)


def test_factory_that_raises_ends_with_error_naming_it(tmp_path):
    sc = load_scenario("smoke", {"workers": 2, "time_bound_s": 30.0})
    started = time.monotonic()
    info = run_storm(sc, resolve(exploding_store), tmp_path / "run", progress=False)
    assert time.monotonic() - started < 25
    assert info.status == "error"
    assert "vendor bootstrap exploded" in info.error and "every one of the 6 boots the storm tried failed" in info.error
    ops = [x for x in operations(history_paths(tmp_path / "run")) if isinstance(x, Operation)]
    assert [op.outcome for op in ops if op.f == "open"] == ["info"] * 6  # 3 tries for each of the 2 slots


def test_store_whose_calls_hang_ends_with_the_ops_unknown(tmp_path):
    sc = load_scenario("smoke", {"workers": 2, "time_bound_s": 5.0, "call_timeout_s": 1.0,
                                 "pause_interval_s": 0.0, "kill_interval_s": 0.0, "grace_s": 0.5})
    started = time.monotonic()
    info = run_storm(sc, resolve(hanging_store), tmp_path / "run", progress=False)
    assert time.monotonic() - started < 30
    assert info.status == "timeout"
    verdict = check_run(tmp_path / "run")
    assert verdict.result == "fail" and verdict.clauses == ["call-returns"]
    assert all("append" in v.statement and "bound of 1 s" in v.statement for v in verdict.violations)
    timeouts = [e for e in _events(tmp_path / "run") if e["kind"] == "timeout-kill"]
    assert timeouts and all(e["v"]["surface"] == "append" and e["v"]["in_call"] for e in timeouts)
    # every append hangs, whatever lease it presents (a worker's first tenure opens with a coverage probe, so in some
    # storms no append under a live lease is ever reached)
    appends = [x for x in operations(history_paths(tmp_path / "run")) if isinstance(x, Operation) and x.f == "append"]
    assert appends and all(op.outcome == "info" for op in appends)


def test_sigkill_of_the_orchestrator_leaves_no_worker_alive(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "soak.cli", "storm", "--quiet", "--out", str(run_dir),
         "--time-bound", "60", "--set", "kill_interval_s=0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        pids: set[int] = set()
        while time.monotonic() < deadline and len(pids) < 4:
            time.sleep(0.1)
            pids = _worker_pids(run_dir) if (run_dir / "history").is_dir() else set()
        assert len(pids) >= 4, "workers did not start"
        time.sleep(0.5)  # mid-storm
        assert all(psutil.pid_exists(p) for p in pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_ends_the_storm_cleanly_as_interrupted(tmp_path, sig):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "soak.cli", "storm", "--quiet", "--out", str(run_dir), "--time-bound", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        pids: set[int] = set()
        while time.monotonic() < deadline and len(pids) < 4:
            time.sleep(0.1)
            pids = _worker_pids(run_dir) if (run_dir / "history").is_dir() else set()
        time.sleep(0.5)
        # every worker ignores both from its start (it is spawned so): a worker still starting never dies of them
        for pid in pids:
            if _alive(pid):
                ignored = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                                   if line.startswith("SigIgn:")), 16)
                assert ignored & (1 << (signal.SIGINT - 1)) and ignored & (1 << (signal.SIGTERM - 1)), hex(ignored)
        os.killpg(proc.pid, sig)  # like Ctrl-C in a terminal: the whole process group gets it
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 3, out + err
    assert "Traceback" not in err
    info = load_run_info(run_dir)
    assert info.status == "interrupted"
    assert (run_dir / "final_state.json").is_file()
    assert not [p for p in _worker_pids(run_dir) if _alive(p)]
    list(operations(history_paths(run_dir)))  # what was recorded still pairs cleanly


def test_cli_storm_that_hits_its_time_bound_is_inconclusive_never_pass(tmp_path, capsys):
    from soak.cli import main

    code = main(["storm", "--quiet", "--out", str(tmp_path / "run"), "--workers", "1", "--time-bound", "1",
                 "--set", "kill_interval_s=0", "--set", "pause_interval_s=0"])
    out = capsys.readouterr().out
    assert code == 3
    assert "verdict: inconclusive" in out and f"run directory: {tmp_path / 'run'}" in out
    assert load_run_info(tmp_path / "run").status == "timeout"
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["result"] == "inconclusive"


def test_cli_refuses_a_single_process_store_before_creating_anything(tmp_path, capsys):
    from soak.cli import main

    assert main(["storm", "--store", "memory:", "--out", str(tmp_path / "run")]) == 2
    captured = capsys.readouterr()
    assert "lives inside one process" in captured.err and captured.out == ""
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_store_whose_reads_hang_still_ends_and_names_the_missing_final_state(tmp_path):
    sc = load_scenario("smoke", {"workers": 2, "time_bound_s": 3.0, "call_timeout_s": 1.0,
                                 "pause_interval_s": 0.0, "kill_interval_s": 0.0, "grace_s": 0.5})
    started = time.monotonic()
    info = run_storm(sc, resolve(loads_hang_store), tmp_path / "run", progress=False)
    assert time.monotonic() - started < 30
    assert info.status == "timeout"
    assert "reading the final state back did not finish" in info.error
    assert not (tmp_path / "run" / "final_state.json").exists()
    verdict = check_run(tmp_path / "run")  # judged without the final state: the hung loads are proved
    assert verdict.result == "fail" and "call-returns" in verdict.clauses
    assert any(v.statement.startswith("load (") for v in verdict.violations)


def test_workers_that_fail_to_boot_beside_booted_ones_are_recorded_and_replaced(tmp_path):
    sc = dataclasses.replace(load_scenario("smoke", {"time_bound_s": 30.0}),
                             quorum={"takeovers": 12, "stale_refusals": 5})  # long enough to reap both failures
    info = run_storm(sc, resolve(first_two_boots_fail), tmp_path / "run", progress=False)
    assert info.status == "quorum"
    opens = [x for x in operations(history_paths(tmp_path / "run")) if isinstance(x, Operation) and x.f == "open"]
    failed = [op for op in opens if op.outcome != "ok"]
    assert len(failed) == 2 and all("deliberate" in op.message for op in failed)
    # the others booted (a replacement may still be booting when this small quorum is met, under load)
    assert sum(op.outcome == "ok" for op in opens) >= sc.workers - len(failed)
    spawns = [e for e in _events(tmp_path / "run") if e["kind"] == "spawn"]
    # each failed boot is replaced: as a worker that failed to boot once another had booted, or as a retried boot
    # when none had yet (under load the two deliberate failures can be reaped before any boot completes)
    replaced = [e for e in spawns if "failed to boot" in e["v"]["reason"] or "retry the boot" in e["v"]["reason"]]
    assert len(replaced) == 2, [e["v"]["reason"] for e in spawns]
