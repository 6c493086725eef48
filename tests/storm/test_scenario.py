"""Scenario loading: presets, overrides, and errors that name the key."""

from __future__ import annotations

import pytest

from soak.errors import ScenarioError
from soak.scenario import QUORUM_KEYS, dump_scenario, load_scenario, parse_override, preset_names


def test_presets_load_and_smoke_quorum_is_ten_times_the_seed():
    assert {"smoke", "certify", "nightly"} <= set(preset_names())
    smoke = load_scenario("smoke")
    assert smoke.name == "smoke" and smoke.store == "sqlite:" and smoke.workload == "runs"
    assert smoke.quorum["takeovers"] >= 40 and smoke.quorum["stale_refusals"] >= 100
    for surface in ("append", "put_meta", "blob_put", "blob_delete", "delete", "renew", "release", "cross"):
        assert smoke.quorum[f"stale_{surface}"] >= 10
    assert smoke.effective_pause_ms > smoke.lease_ttl_ms
    nightly, certify = load_scenario("nightly"), load_scenario("certify")
    assert nightly.quorum["takeovers"] > certify.quorum["takeovers"] > smoke.quorum["takeovers"]
    assert set(smoke.quorum) <= set(QUORUM_KEYS)


def test_dump_round_trips(tmp_path):
    sc = load_scenario("smoke", {"seed": 7, "workers": 6, "quorum.takeovers": 3, "mix.cross": 0})
    path = tmp_path / "as_run.toml"
    path.write_text(dump_scenario(sc))
    again = load_scenario(path)
    assert again == sc
    assert again.seed == 7 and again.workers == 6 and again.quorum["takeovers"] == 3 and again.mix["cross"] == 0


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"wokers": 3}, "'wokers'"),
        ({"workers": 0}, "'workers' must be an integer >= 1"),
        ({"workers": "many"}, "'workers'"),
        ({"lease_ttl_ms": 1.5}, "'lease_ttl_ms'"),
        ({"stall_prob": 2}, "'stall_prob' must be a number >= 0 and <= 1"),
        ({"stall_prob": 0.6, "strike_prob": 0.6}, "'strike_prob' (0.6) are shares of the tenures"),
        ({"quorum.takeover": 5}, "'quorum.takeover'"),
        ({"quorum.takeovers": -1}, "'quorum.takeovers'"),
        ({"mix.teleport": 1}, "'mix.teleport'"),
        ({"pause_ms": 100}, "'pause_ms'"),
        ({"ops_min": 5, "ops_max": 2}, "'ops_max'"),
        ({"nemesis.kill": 1}, "'nemesis.kill'"),
    ],
)
def test_bad_values_name_the_key(overrides, needle):
    with pytest.raises(ScenarioError) as err:
        load_scenario("smoke", overrides)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_key_in_file_and_broken_toml_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('workers = 2\ncolour = "red"\n')
    with pytest.raises(ScenarioError, match="unknown key 'colour'"):
        load_scenario(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("workers = 2\nttl = = 3\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(broken)
    assert str(broken) in str(err.value) and "line 2" in str(err.value)
    with pytest.raises(ScenarioError, match="no scenario preset 'smok'"):
        load_scenario("smok")
    with pytest.raises(ScenarioError, match="cannot read scenario file"):
        load_scenario(tmp_path / "missing.toml")


def test_parse_override_reads_toml_values():
    assert parse_override("workers=6") == ("workers", 6)
    assert parse_override("stall_prob = 0.25") == ("stall_prob", 0.25)
    assert parse_override("store=sqlite:") == ("store", "sqlite:")
    with pytest.raises(ScenarioError, match="key=value"):
        parse_override("workers")
