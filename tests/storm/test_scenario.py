"""Scenario loading: presets, overrides, and errors that name the key."""

from __future__ import annotations

import dataclasses
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from soak.errors import ScenarioError
from soak.scenario import Scenario, dump_scenario, load_scenario, parse_override, preset_names, quorum_keys
from soak.workloads.runs import RunsWorkload
from soak.workloads.runs.options import MIX_KEYS

QUORUM_KEYS = quorum_keys("runs")
ROOT_PRESET = RunsWorkload.root_preset


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
    assert again.seed == 7 and again.workers == 6 and again.quorum["takeovers"] == 3 and again.options.mix["cross"] == 0


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


# -- defaults: a file that omits a knob gets its base preset's value ----------------------------

def test_scenario_defaults_are_the_smoke_preset():
    smoke = load_scenario("smoke")
    assert Scenario() == dataclasses.replace(smoke, name=Scenario().name)
    assert Scenario().options.strike_prob > 0 and Scenario().quorum == smoke.quorum != {}


def test_the_root_preset_names_every_key():
    data = tomllib.loads(resources.files("soak").joinpath("scenarios", f"{ROOT_PRESET}.toml").read_text())
    fields = ({f.name for f in dataclasses.fields(Scenario)} - {"name", "quorum", "options"}
              | {f.name for f in dataclasses.fields(Scenario().options)} - {"mix"})
    assert fields <= set(data), sorted(fields - set(data))
    assert set(data["mix"]) == set(MIX_KEYS)
    assert set(data["quorum"]) <= set(QUORUM_KEYS) and data["quorum"]


def test_presets_in_the_package_and_at_the_repo_root_are_the_same():
    root = Path(__file__).resolve().parents[2] / "scenarios"
    for name in preset_names():
        assert (root / f"{name}.toml").read_text() == resources.files("soak").joinpath(
            "scenarios", f"{name}.toml").read_text(), name


def test_an_omitted_knob_is_the_preset_value_not_one_that_turns_a_nemesis_off(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("workers = 2\n")
    mine, smoke = load_scenario(path), load_scenario("smoke")
    assert mine.name == "mine" and mine.workers == 2
    assert mine.options.strike_prob == smoke.options.strike_prob == 0.55
    assert mine.options.stall_prob == smoke.options.stall_prob and mine.time_bound_s == smoke.time_bound_s
    assert mine.quorum == smoke.quorum and mine.options.mix == smoke.options.mix
    assert mine == dataclasses.replace(smoke, name="mine", workers=2)


def test_base_nightly(tmp_path):
    path = tmp_path / "long.toml"
    path.write_text('base = "nightly"\nworkers = 3\n[quorum]\ntakeovers = 7\n')
    long, nightly = load_scenario(path), load_scenario("nightly")
    assert long.name == "long" and long.workers == 3 and long.quorum["takeovers"] == 7
    assert long.time_bound_s == nightly.time_bound_s == 3600.0 and long.kill_interval_s == nightly.kill_interval_s
    assert {k: v for k, v in long.quorum.items() if k != "takeovers"} == {
        k: v for k, v in nightly.quorum.items() if k != "takeovers"}
    assert long == dataclasses.replace(nightly, name="long", workers=3, quorum={**nightly.quorum, "takeovers": 7})


def test_quorum_and_mix_keys_merge_with_the_base(tmp_path):
    path = tmp_path / "merge.toml"
    path.write_text("[quorum]\ntakeovers = 5\nstale_append = 0\n[mix]\ncross = 0\n")
    sc, smoke = load_scenario(path), load_scenario("smoke")
    assert sc.quorum["takeovers"] == 5 and sc.quorum["stale_refusals"] == smoke.quorum["stale_refusals"]
    assert "stale_append" not in sc.quorum  # 0: no threshold
    assert set(sc.quorum) == set(smoke.quorum) - {"stale_append"}
    assert sc.options.mix["cross"] == 0 and sc.options.mix["append"] == smoke.options.mix["append"] and set(sc.options.mix) == set(MIX_KEYS)
    # overrides merge the same way, and win over the file
    again = load_scenario(path, {"quorum.takeovers": 9, "quorum.kills": 1})
    assert again.quorum["takeovers"] == 9 and again.quorum["kills"] == 1 and again.quorum["pauses"] == 5


def test_an_empty_file_is_the_smoke_storm(tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text("")
    assert load_scenario(path) == dataclasses.replace(load_scenario("smoke"), name="empty")


def test_a_run_directorys_dump_reloads_to_an_equal_scenario(tmp_path):
    for sc in (load_scenario("nightly", {"seed": 3, "quorum.kills": 0}),
               load_scenario("certify"),
               # built in code, with a partial mix and a one-key quorum (as benchmarks/storm_rate.py builds one)
               Scenario().replace(name="bench", strike_prob=0.0, mix={"append": 1.0}, quorum={"grants": 10**12})):
        path = tmp_path / f"{sc.name}.toml"
        path.write_text(dump_scenario(sc))
        again = load_scenario(path)
        assert again == sc, sc.name
    bench = load_scenario(tmp_path / "bench.toml")
    assert bench.quorum == {"grants": 10**12} and bench.options.mix["put_meta"] == 0 and bench.options.strike_prob == 0.0


def test_an_unknown_base_names_the_presets(tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text('base = "nigthly"\n')
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    msg = str(err.value)
    assert "'base'" in msg and "'nigthly'" in msg and ", ".join(preset_names()) in msg and str(path) in msg
    path.write_text("base = 3\n")
    with pytest.raises(ScenarioError, match="key 'base' must name the preset"):
        load_scenario(path)
    path.write_text('base = "../elsewhere.toml"\n')
    with pytest.raises(ScenarioError, match="key 'base' must name the preset"):
        load_scenario(path)


def test_base_is_not_an_override():
    with pytest.raises(ScenarioError, match="--scenario nightly"):
        load_scenario("smoke", {"base": "nightly"})


def test_presets_that_build_on_each_other_in_a_circle_are_refused(monkeypatch):
    import soak.scenario as scenario_module

    texts = {"smoke": 'base = "loop-a"\n', "loop-a": 'base = "loop-b"\n', "loop-b": 'base = "loop-a"\n'}
    monkeypatch.setattr(scenario_module, "preset_names", lambda: sorted(texts))
    monkeypatch.setattr(scenario_module, "_preset_text", texts.__getitem__)
    with pytest.raises(ScenarioError, match="in a circle: loop-a -> loop-b -> loop-a"):
        load_scenario("loop-a")
    with pytest.raises(ScenarioError, match="in a circle: smoke -> loop-a -> loop-b -> loop-a"):
        load_scenario("smoke")


def test_unknown_key_lists_base_among_the_known_keys(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("bass = 1\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "unknown key 'bass'" in str(err.value) and "base, blob_names" in str(err.value)
