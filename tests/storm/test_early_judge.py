"""Real storms with the early judge (`stop_on_violation`): a broken store's storm ends at its first proven
violation and fails; the reference store is never stopped early; an early violation the full check does not
confirm is a harness defect, named, and never a pass."""

from __future__ import annotations

import json
import shutil

import pytest

from soak.check import check_run
from soak.errors import ScenarioError
from soak.rundir import RUN_INFO
from soak.scenario import load_scenario
from soak.storm.orchestrator import run_storm


def test_a_broken_store_is_stopped_at_its_first_proven_violation_and_fails(tmp_path):
    sc = load_scenario("smoke", {"stop_on_violation": True, "time_bound_s": 60.0})
    info = run_storm(sc, "mutant:no-run-match", tmp_path / "run", progress=False)
    verdict = check_run(tmp_path / "run")
    storm = json.loads((tmp_path / "run" / "storm.json").read_text())
    early = storm["early_judge"]
    assert (info.status, storm["stop_reason"], verdict.result) == ("violation", "violation", "fail")
    assert early["violation"]["clause"] in verdict.clauses and early["confirmed"] is True
    assert 0 < early["first_evidence_s"] <= early["found_at_s"] <= storm["elapsed_s"] < 30.0
    assert early["slices"] >= 1 and "error" not in early


def test_the_reference_store_is_never_stopped_early_and_an_unconfirmed_stop_is_a_named_defect(tmp_path):
    sc = load_scenario("smoke", {"stop_on_violation": True})
    info = run_storm(sc, "sqlite:", tmp_path / "run", progress=False)
    verdict = check_run(tmp_path / "run")
    storm = json.loads((tmp_path / "run" / "storm.json").read_text())
    early = storm["early_judge"]
    assert (info.status, verdict.result) == ("quorum", "pass")
    assert early["violation"] is None and early["slices"] >= 10 and "error" not in early
    assert early["horizon_s"] > 0.5 * storm["time_to_quorum_s"]  # it kept up with the storm

    # the same clean history, as if the early judge had stopped it at a violation the check cannot find
    stopped = tmp_path / "stopped"
    shutil.copytree(tmp_path / "run", stopped)
    run = json.loads((stopped / RUN_INFO).read_text())
    run["status"] = "violation"
    (stopped / RUN_INFO).write_text(json.dumps(run))
    storm = json.loads((stopped / "storm.json").read_text())
    storm["early_judge"]["violation"] = {"clause": "stale-rejected", "statement": "made up", "evidence": [
        {"process": "w0.1", "index": 0, "f": "append", "run": "r0", "epoch": 1, "counter": 0, "outcome": "ok",
         "invoke_ns": 1, "complete_ns": 2, "tag": "w0.1#0", "error": None}]}
    (stopped / "storm.json").write_text(json.dumps(storm))
    verdict = check_run(stopped)
    assert verdict.result == "inconclusive" and any("harness defect" in r for r in verdict.reasons)
    after = json.loads((stopped / "storm.json").read_text())["early_judge"]
    assert after["confirmed"] is False and "harness defect" in after["harness_defect"]


def test_a_workload_whose_checker_cannot_settle_slices_refuses_stop_on_violation(tmp_path):
    sc = load_scenario("claims", {"stop_on_violation": True})
    with pytest.raises(ScenarioError, match="stop_on_violation.*claims.*set stop_on_violation = false"):
        run_storm(sc, None, tmp_path / "run", progress=False)
