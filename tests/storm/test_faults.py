"""The clock-skew and network fault nemeses (soak.storm.skew, soak.storm.netfault), against the real servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from soak.cli import main
from soak.storm import skew
from tests.stores.net import PG, REDIS, location, target


def _faketime() -> str:
    try:
        return skew.libfaketime()
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("SOAK_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{exc}; SOAK_REQUIRE_SERVICES=1 says it must be there (.ci/run installs it)")
        pytest.skip(str(exc))


@pytest.mark.parametrize("spec", ["sqlite:", "mutant:split-fence"])
def test_clock_skew_is_refused_for_an_embedded_store_in_one_line(spec, tmp_path, capsys):
    assert main(["storm", "--quiet", "--store", spec, "--set", "clock_skew_ms=400", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "is embedded" in err and "set clock_skew_ms = 0" in err
    assert not (tmp_path / "r").exists()


def test_clock_skew_refuses_the_memory_store_too():
    from soak.errors import ScenarioError
    from soak.scenario import Scenario

    with pytest.raises(ScenarioError, match="is embedded"):
        skew.check_skew(Scenario(clock_skew_ms=400), target("memory:"))


def test_network_faults_are_refused_without_a_server_to_stand_in_front_of(tmp_path, capsys):
    assert main(["storm", "--quiet", "--set", "net_cut_interval_s=0.3", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "set the net_* keys to 0" in err, err


def test_a_skewed_process_has_its_wall_clock_shifted_and_its_monotonic_clock_true():
    lib = _faketime()
    env = {**os.environ, **skew.skew_environment(-3000, lib)}
    code = ("import time, json; from soak.storm.skew import _sleep; m0 = time.monotonic(); _sleep(0.05); "
            "print(json.dumps([time.time(), time.monotonic(), time.monotonic() - m0]))")
    before = time.time()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    wall, mono, slept = json.loads(out)
    after = time.time()
    assert before - 3.0 - 0.5 < wall < after - 3.0 + 0.05
    assert abs(mono - time.monotonic()) < 2.0  # the same monotonic clock as this process
    assert 0.05 <= slept < 1.0


def _storm(spec: str, tmp_path, **keys) -> tuple[str, dict, list[dict]]:
    from soak.check import check_run
    from soak.scenario import load_scenario
    from soak.storm.orchestrator import run_storm

    sc = load_scenario("smoke", keys)
    run = tmp_path / "run"
    info = run_storm(sc, spec, run, progress=False)
    verdict = check_run(run)
    events = [json.loads(line) for line in (run / "history" / "nemesis.jsonl").read_text().splitlines()]
    return verdict.result, {"info": info, "verdict": verdict,
                            "storm": json.loads((run / "storm.json").read_text())}, events


def _clauses(verdict) -> set[str]:
    return {v.clause for v in verdict.violations}


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_stays_green_under_clock_skew_and_its_store_clock_mutant_is_caught(tmp_path):
    _faketime()
    result, run, events = _storm(PG, tmp_path / "ref", clock_skew_ms=400)
    assert result == "pass", run["verdict"].violations[:3]
    skews = [e["v"] for e in events if e.get("kind") == "clock-skew"]
    assert skews and all(abs(s["offset_ms"]) >= 400 for s in skews)
    result, run, _ = _storm("mutant:pg-store-clock", tmp_path / "mutant", clock_skew_ms=400, stop_on_violation=True)
    assert result == "fail"
    assert _clauses(run["verdict"]) & {"lease-exclusive", "ttl-honoured", "live-accepted"}


@pytest.mark.redis
@pytest.mark.slow
def test_redis_stays_green_under_clock_skew_and_its_store_clock_mutant_is_caught(tmp_path):
    _faketime()
    result, run, _ = _storm(REDIS, tmp_path / "ref", clock_skew_ms=400)
    assert result == "pass", run["verdict"].violations[:3]
    result, run, _ = _storm("mutant:redis-store-clock", tmp_path / "mutant", clock_skew_ms=400, stop_on_violation=True)
    assert result == "fail"
    assert _clauses(run["verdict"]) & {"lease-exclusive", "ttl-honoured", "live-accepted"}
