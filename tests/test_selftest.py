"""`soak selftest` and stop-at-first-suspect storms: mutants caught early, reference stores untouched."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from soak.check import check_run
from soak.check.verdict import Evidence, Verdict, Violation
from soak.cli import main
from soak.errors import ScenarioError
from soak.history import HistoryWriter
from soak.rundir import RUN_INFO
from soak.scenario import dump_scenario, load_scenario
from soak.selftest import SelftestUsageError, _first_violation_s, selftest, storm_once
from soak.spi import Lease
from soak.storm.quorum import QuorumTracker
from soak.workloads import get_workload

# -- the suspect tailer (no processes) --------------------------------------------------------


def _tracker(tmp_path):
    return QuorumTracker(tmp_path, get_workload("runs").new_counter(), {})


def _op(w, f, run, lease, intent, outcome, value=None, error=None):
    i = w.invoke(f, run, lease, intent, {})
    w.complete(i, outcome, value, error=error)
    return i


def test_stale_accept_is_suspect_only_once_a_later_epoch_was_granted_before_it(tmp_path):
    w = HistoryWriter(tmp_path / "w0.1.jsonl", "w0.1")
    q = _tracker(tmp_path)
    e1 = Lease("r0", "w0.1", 1)
    _op(w, "acquire", "r0", None, "live", "ok", {"epoch": 1})
    # expired but unsuperseded: may be accepted (expired-unsuperseded), so not a suspect
    _op(w, "release", "r0", e1, "stale", "ok")
    _op(w, "renew", "r0", e1, "stale", "info")  # indeterminate without an error (a kill): not a suspect
    q.poll()
    assert q.suspects == [] and q.counts()["suspects"] == 0
    _op(w, "acquire", "r0", None, "live", "ok", {"epoch": 2})
    i = _op(w, "put_meta", "r0", e1, "stale", "ok")
    q.poll()
    assert [(s["index"], s["f"]) for s in q.suspects] == [(i, "put_meta")]
    assert "after epoch 2 was granted" in q.suspects[0]["reason"]


def test_cross_run_accept_is_suspect_at_once_and_untyped_stale_refusal_too(tmp_path):
    w = HistoryWriter(tmp_path / "w0.1.jsonl", "w0.1")
    q = _tracker(tmp_path)
    e1 = Lease("r0", "w0.1", 1)
    _op(w, "acquire", "r0", None, "live", "ok", {"epoch": 1})
    _op(w, "append", "xr", e1, "cross", "fail", error="LeaseHeldError")  # refused typed: fine
    q.poll()
    assert q.suspects == []
    cross = _op(w, "append", "xr", e1, "cross", "ok")
    q.poll()
    assert [s["index"] for s in q.suspects] == [cross] and "accepted on run xr" in q.suspects[0]["reason"]
    _op(w, "acquire", "r0", None, "live", "ok", {"epoch": 2})
    untyped = _op(w, "append", "r0", e1, "stale", "info", error="RuntimeError")
    q.poll()
    assert [s["index"] for s in q.suspects] == [cross, untyped]
    assert "untyped RuntimeError" in q.suspects[1]["reason"] and q.counts()["suspects"] == 2


# -- the scenario knob and the storm flag -----------------------------------------------------


def test_stop_on_suspect_is_off_by_default_and_round_trips(tmp_path):
    assert load_scenario("smoke").stop_on_suspect is False
    sc = load_scenario("smoke", {"stop_on_suspect": True})
    assert sc.stop_on_suspect is True
    path = tmp_path / "s.toml"
    path.write_text(dump_scenario(sc))
    assert load_scenario(path) == sc
    with pytest.raises(ScenarioError, match="stop_on_suspect.*true or false"):
        load_scenario("smoke", {"stop_on_suspect": "yes"})


def test_storm_flag_sets_the_knob():
    import argparse

    from soak.storm.cli import _overrides, configure_parser

    p = argparse.ArgumentParser()
    configure_parser(p)
    assert _overrides(p.parse_args(["--stop-on-suspect"]))["stop_on_suspect"] is True
    assert "stop_on_suspect" not in _overrides(p.parse_args([]))


# -- time to the first violation ----------------------------------------------------------------


def _ev(invoke, complete):
    return Evidence("w0.1", 1, "append", "r0", 1, 1, "ok", invoke, complete, "w0.1#1")


def test_first_violation_time_is_the_earliest_fully_evidenced_violation():
    v = Verdict.build([
        Violation("stale-rejected", "late", (_ev(4_000_000_000, 4_100_000_000),)),
        Violation("run-match", "early", (_ev(1_000_000_000, 1_500_000_000), _ev(2_000_000_000, None))),
    ])
    assert _first_violation_s(v, 500_000_000, 99.0) == 1.5
    # no usable evidence time: the storm's length stands in
    assert _first_violation_s(Verdict.build([Violation("run-match", "x")]), 500_000_000, 7.0) == 7.0


# -- real storms --------------------------------------------------------------------------------


def test_early_stop_on_an_unfenced_mutant_stops_well_before_the_bound_and_fails(tmp_path):
    sc = load_scenario("smoke", {"stop_on_suspect": True, "time_bound_s": 60.0})
    out = storm_once(sc, "mutant:unfenced-append", tmp_path / "run")
    # stop_on_suspect implies stop_on_violation: whichever comes first ends the storm (the early judge may prove a
    # violation before the suspect rule sees a stale write accepted)
    assert out.status in ("suspect", "violation")
    assert out.verdict == "fail" and out.clauses
    assert out.seconds < 20.0 and out.first_violation_s is not None and out.first_violation_s <= out.seconds + 1
    extra = json.loads((tmp_path / "run" / "storm.json").read_text())
    assert extra["stopped_early"]["reason"]
    assert extra["suspects"] >= 1 or out.status == "violation"


def test_early_stop_never_passes_or_fails_a_correct_store_by_itself(tmp_path):
    sc = load_scenario("smoke", {"stop_on_suspect": True})
    out = storm_once(sc, "sqlite:", tmp_path / "run")
    # the reference store gives no suspect: the storm runs to quorum and passes on its own merits
    assert (out.status, out.verdict) == ("quorum", "pass")
    assert json.loads((tmp_path / "run" / "storm.json").read_text())["suspects"] == 0
    # the same clean history, had it stopped early, is inconclusive: never pass, never fail
    stopped = tmp_path / "stopped"
    shutil.copytree(tmp_path / "run", stopped)
    info = json.loads((stopped / RUN_INFO).read_text())
    info["status"] = "suspect"
    (stopped / RUN_INFO).write_text(json.dumps(info))
    verdict = check_run(stopped, write=False)
    assert verdict.result == "inconclusive" and "suspect" in verdict.reasons[0]


def test_selftest_table_on_one_mutant_without_conformance(tmp_path):
    report = selftest(runs=1, mutants=["no-run-match"], reference=(), out_root=tmp_path, conformance=False)
    (m,) = report.mutants
    assert m.conformance_caught is None and len(m.storms) == 1
    assert m.caught == 1 and not m.escaped and "run-match" in m.storm_clauses
    row = report.rows()[0]
    assert row["mutant"] == "no-run-match" and row["breaks"] == "run-match" and row["storm"] == "1/1"
    assert row["conformance"] == "-" and row["median_s"] != "-"
    assert report.exit_code == 0 and "selftest: PASS" in report.table()


@pytest.mark.slow
def test_selftest_two_mutants_and_the_reference(tmp_path):
    report = selftest(runs=1, mutants=["unfenced-append", "stale-release"], reference=("sqlite:",),
                      out_root=tmp_path)
    by = {m.name: m for m in report.mutants}
    assert by["unfenced-append"].conformance_caught and "stale-rejected" in by["unfenced-append"].conformance_clauses
    assert by["stale-release"].conformance_caught and "stale-lease-ops" in by["stale-release"].conformance_clauses
    assert all(m.caught == 1 for m in report.mutants), report.mutants
    (ref,) = report.references
    assert ref.spec == "sqlite:" and ref.count("pass") == 1 and ref.count("fail") == 0, ref.storms
    text = report.table()
    assert "unfenced-append  stale-rejected" in text and "reference sqlite:  pass 1/1" in text
    assert report.exit_code == 0
    data = report.to_dict()
    assert data["escaped"] == [] and data["mutants"][0]["caught"] == 1


def test_escape_and_false_positive_set_the_exit_code():
    from soak.selftest import MutantResult, ReferenceResult, SelftestReport, StormOutcome

    caught = StormOutcome("d", "suspect", "fail", ("run-match",), 1.0, 0.5)
    missed = StormOutcome("d", "quorum", "pass", (), 7.0)
    report = SelftestReport(2, "smoke", "x", [MutantResult("m", "run-match", "", storms=[caught, caught])],
                            [ReferenceResult("sqlite:", [missed, missed])])
    assert report.exit_code == 0
    report.mutants[0].storms[1] = missed
    assert report.escaped == ["m"] and report.exit_code == 1 and "1/2" in report.table()
    report.mutants[0].storms[1] = caught
    report.references[0].storms[0] = dataclasses.replace(missed, verdict="inconclusive", note="timeout")
    assert report.exit_code == 3
    report.references[0].storms[1] = dataclasses.replace(missed, verdict="fail")
    assert report.false_positives == ["sqlite:"] and report.exit_code == 1


def test_cli_rejects_an_unknown_mutant_and_zero_runs(capsys):
    assert main(["selftest", "--mutant", "no-such-mutant"]) == 2
    err = capsys.readouterr().err
    assert "no mutant 'no-such-mutant'" in err and "unfenced-append" in err and len(err.strip().splitlines()) == 1
    assert main(["selftest", "--runs", "0"]) == 2
    assert "use 1 or more" in capsys.readouterr().err
    with pytest.raises(SelftestUsageError):
        selftest(runs=0)
    assert main(["selftest", "--mutant", "unfenced-append", "--reference", "memory:"]) == 2
    assert "one process" in capsys.readouterr().err


def test_the_table_shows_the_median_times_to_first_evidence_and_to_the_fail_verdict():
    from soak.selftest import MutantResult, SelftestReport, StormOutcome

    storms = [StormOutcome("d", "violation", "fail", ("stale-rejected",), 2.0, first, verdict_s=wall)
              for first, wall in ((1.0, 2.5), (1.4, 3.5), (0.8, 9.0))]
    storms.append(StormOutcome("d", "quorum", "pass", (), 9.0, None, verdict_s=1.0))  # an escape: not a fail time
    report = SelftestReport(4, "smoke", "x", [MutantResult("split-fence", "atomic-fence", "", storms=storms)])
    [row] = report.rows()
    assert (row["median_s"], row["verdict_s"]) == ("1.0", "3.5")
    assert "median s to fail" in report.table().splitlines()[0]
    assert report.to_dict()["mutants"][0]["median_verdict_s"] == 3.5
