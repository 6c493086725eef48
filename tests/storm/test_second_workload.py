"""A second workload, defined only in a test (`toy_workload.Register`), storms, checks and reports through the
same orchestrator, tailer, run directory, checker and report as the runs workload: no generic code names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soak.check import check_run
from soak.errors import ScenarioError
from soak.report import build_report
from soak.scenario import Scenario, dump_scenario, load_scenario
from soak.stores import resolve
from soak.storm import run_storm

WORKLOAD = "tests.storm.toy_workload:Register"


def _scenario(**changes) -> Scenario:
    return Scenario(workload=WORKLOAD, quorum={"writes": 200, "reads": 200, "kills": 1}, workers=3,
                    time_bound_s=30.0, kill_interval_s=0.5, pause_interval_s=0.3).replace(**changes)


def test_the_register_storms_checks_and_reports(tmp_path: Path):
    run_dir = tmp_path / "run"
    info = run_storm(_scenario(), resolve("sqlite:"), run_dir, progress=False)
    assert info.status == "quorum" and info.workload == WORKLOAD
    assert info.quorum_reached["writes"] >= 200 and info.quorum_reached["kills"] >= 1  # its tailer, the nemesis's
    assert json.loads((run_dir / "final_state.json").read_text())["tag"]  # its final-state reader
    verdict = check_run(run_dir)
    assert verdict.result == "pass", (verdict.reasons, verdict.violations[:3])
    assert verdict.stats["operations"] >= 400
    assert (Path(build_report(run_dir))).is_file()
    again = load_scenario(run_dir / "scenario.toml")  # the run directory's scenario reloads with its keys
    assert again.workload == WORKLOAD and again.quorum == _scenario().quorum


def test_its_checker_fails_a_register_that_returns_what_nobody_wrote(tmp_path: Path):
    run_dir = tmp_path / "run"
    run_storm(_scenario(kill_interval_s=0.0), resolve("sqlite:"), run_dir, progress=False)
    history = next((run_dir / "history").glob("w0.1.jsonl"))
    lines = history.read_text().splitlines()
    read = next(k for k, line in enumerate(lines) if '"t":"ok"' in line and '"tag":"w0.1#' in line)
    lines[read] = lines[read].replace('"tag":"w0.1#', '"tag":"w9.9#', 1)  # a read of a value no write made
    history.write_text("\n".join(lines) + "\n")
    verdict = check_run(run_dir)
    assert verdict.result == "fail" and verdict.clauses == ["meta-last-write"]
    assert "which no write made" in verdict.violations[0].statement


def test_its_scenario_keys_are_its_own(tmp_path: Path):
    path = tmp_path / "reg.toml"
    path.write_text(f'workload = "{WORKLOAD}"\nworkers = 2\n[quorum]\nwrites = 5\n')
    sc = load_scenario(path)
    assert sc.workers == 2 and sc.quorum == {"writes": 5} and sc.options == _scenario().options
    path.write_text(f'workload = "{WORKLOAD}"\nruns = 3\n')  # the runs workload's key is not its own
    with pytest.raises(ScenarioError, match="unknown key 'runs'"):
        load_scenario(path)
    assert "runs" not in dump_scenario(_scenario()).split("[quorum]")[0]
