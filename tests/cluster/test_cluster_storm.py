"""Storms across simulated hosts (network namespaces, one `dask worker` each) against the real servers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from soak.check import check_run
from soak.errors import ScenarioError
from soak.cluster import run_cluster_storm
from soak.cluster.hosts import cluster_token, namespaces_unavailable
from soak.report import build_report
from soak.scenario import load_scenario
from soak.stores import resolve
from tests.stores.net import PG

_WHY = namespaces_unavailable()
needs_netns = pytest.mark.skipif(_WHY is not None, reason=f"simulated hosts need network namespaces: {_WHY}")


def _records(run_dir):
    for path in sorted((run_dir / "history").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            yield path.name, json.loads(line)


def _storm(tmp_path, spec, preset="smoke", **overrides):
    scenario = load_scenario(preset, {"workers": 6, **overrides})
    out = tmp_path / "run"
    info = run_cluster_storm(scenario, resolve(spec), out, hosts=3, progress=False, quiet=True)
    return info, out, check_run(out)


def _no_leftovers():
    """This process's cluster left no namespace or link behind (others' storms may be running beside it)."""
    token = cluster_token()
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [n for n in netns.split() if n.startswith(f"soak-{token}-")], netns
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"skb{token}" not in links and f"skv{token}h" not in links


@needs_netns
@pytest.mark.postgres
def test_reference_passes_on_three_hosts_through_host_kill_pause_and_partition(tmp_path):
    info, out, verdict = _storm(tmp_path, PG, time_bound_s=90.0, host_kill_interval_s=4.0,
                                host_pause_interval_s=3.0, host_partition_interval_s=2.0, host_partition_ms=600,
                                host_partition_from=["store", "orchestrator"])
    assert info.status == "quorum", info.error
    assert verdict.result == "pass", verdict.summary()
    hosts = {}
    kinds = []
    for name, rec in _records(out):
        if name == "final-state.jsonl":
            continue
        if name.startswith("w"):
            assert rec.get("h") in ("h0", "h1", "h2"), rec  # every worker record names its host
            hosts.setdefault(rec["h"], set()).add(rec["p"])
        if rec.get("p") == "nemesis":
            kinds.append((rec.get("kind"), rec.get("v", {})))
    assert set(hosts) == {"h0", "h1", "h2"}
    cluster = [v for k, v in kinds if k == "cluster"][0]
    assert all(h["netns"] for h in cluster["hosts"])
    killed = [v for k, v in kinds if k == "host-kill"]
    assert killed, "no host was killed"
    assert any(k == "host-partition" for k, _ in kinds) and any(k == "host-heal" for k, _ in kinds)
    assert any(k == "host-pause" for k, _ in kinds)
    # the killed host's workers ended by the kill: each a kill (or, never started, a forced exit) event
    ended = {v["target"] for k, v in kinds if k in ("kill", "exit") and v.get("host_kill")}
    assert set(killed[0]["workers"]) <= ended
    clocks = json.loads((out / "clocks.json").read_text())
    assert set(clocks["hosts"]) == {"h0", "h1", "h2"}
    assert 0 < clocks["max_error_ms"] == json.loads((out / "run.json").read_text())["clock_error_ms"]
    html = build_report(out).read_text()
    assert "<h2>Hosts</h2>" in html and (out / "hosts.png").stat().st_size > 0
    assert all(f"<td>{h}</td>" in html for h in ("h0", "h1", "h2"))
    _no_leftovers()


@needs_netns
@pytest.mark.postgres
def test_a_host_cut_off_the_orchestrator_goes_on_with_the_store_and_its_history_arrives(tmp_path):
    """For 2.5 s at a time a host's namespace drops every packet to the bridge address (the scheduler, the
    orchestrator's connections): no drain reaches its agent, while its workers go on with the store. Nothing of its
    history is lost (the drain names the offsets shipped), it is not lost as a host, and the reference passes."""
    info, out, verdict = _storm(tmp_path, PG, time_bound_s=90.0, host_partition_interval_s=2.0,
                                host_partition_ms=2500, host_partition_from=["orchestrator"])
    assert info.status == "quorum", info.error
    assert verdict.result == "pass", verdict.summary()
    events = [(r["kind"], r["ts"], r["v"]) for name, r in _records(out) if name == "nemesis.jsonl"]
    cuts = [(ts, v) for k, ts, v in events if k == "host-partition"]
    heals = [(ts, v) for k, ts, v in events if k == "host-heal"]
    assert cuts and all(v["from"] == "orchestrator" for _, v in cuts + heals), cuts
    assert not [v for k, _, v in events if k == "host-lost"]
    storm = json.loads((out / "storm.json").read_text())
    table = storm["cluster"]
    cut_hosts = {v["host"] for _, v in cuts}
    # the partition really cut its agent off: at each heal of a full-length partition (not one the storm's end cut
    # short) its drain had gone unanswered most of the 2.5 s
    full = [hv for ts, hv in heals
            if ts - max(t for t, v in cuts if v["host"] == hv["host"] and t < ts) >= 2_500_000_000]
    assert full and all(v["unanswered_ms"] > 1250 for v in full), heals
    assert max(table[h]["slowest_drain_ms"] for h in cut_hosts) > 1250, table
    # while cut off the orchestrator, its workers completed operations on the store: shipped after the heal
    start, v = cuts[0]
    end = next(ts for ts, hv in heals if hv["host"] == v["host"] and ts > start)
    done = [r for name, r in _records(out) if name.startswith("w") and r.get("h") == v["host"]
            and r["t"] in ("ok", "fail") and start < r["ts"] < end]
    assert done, f"{v['host']} completed nothing while cut off the orchestrator"
    html = build_report(out).read_text()
    assert "from the orchestrator" in html
    _no_leftovers()


@needs_netns
@pytest.mark.postgres
def test_a_host_cut_off_the_orchestrator_past_the_agent_timeout_is_lost_killed_and_read_from_its_disk(tmp_path):
    """A 15 s partition from the orchestrator outlasts the agent timeout (10 s): the host is lost and killed, what
    its disk holds is shipped, and each of its workers (a replacement spawned while it was cut off too) ends in a
    kill event: the history is complete, and the reference passes, neither a false alarm nor a lost tail."""
    # the storm must outlast the partition: smoke's quorum is met in 5-10 s now (forked workers, aimed strikes),
    # before the agent timeout could lose the host; 150 takeovers take 25-40 s
    info, out, verdict = _storm(tmp_path, PG, time_bound_s=90.0, host_partition_interval_s=3.0,
                                host_partition_ms=15000, host_partition_from=["orchestrator"],
                                **{"quorum.takeovers": 150})
    assert info.status == "quorum", info.error
    assert verdict.result == "pass", verdict.summary()
    events = [(r["kind"], r["v"]) for name, r in _records(out) if name == "nemesis.jsonl"]
    lost = {v["host"] for k, v in events if k == "host-lost" and "drain unanswered" in v["why"]}
    assert lost, events
    spawned = {v["target"] for name, r in _records(out) if name.startswith("nemesis-") and r.get("h") in lost
               for v in [r["v"]] if r.get("kind") == "spawn"}
    ended = {v["target"] for k, v in events if k in ("kill", "exit") and v.get("host_lost")}
    ended |= {r["v"]["target"] for name, r in _records(out) if name.startswith("nemesis-") and r.get("h") in lost
              and r.get("kind") in ("kill", "exit", "timeout-kill")}
    assert spawned and spawned <= ended, (spawned, ended)
    _no_leftovers()


@needs_netns
@pytest.mark.postgres
def test_the_networked_storm_runs_a_fault_proxy_on_every_host_and_the_reference_passes(tmp_path):
    """`--scenario networked` across hosts: each host's engine runs its own fault proxy between its workers and the
    store (cuts inside calls, stalls, latency), and clock skew; its cuts are logged in its own nemesis log, on the
    orchestrator's clock, and the checker excuses what they made unknown: the reference passes."""
    info, out, verdict = _storm(tmp_path, PG, preset="networked", time_bound_s=90.0)
    assert info.status == "quorum", info.error
    assert verdict.result == "pass", verdict.summary()
    cuts = {r["h"] for name, r in _records(out) if name.startswith("nemesis-") and r.get("kind") == "net-cut"}
    assert cuts == {"h0", "h1", "h2"}, cuts
    proxies = [r["v"] for name, r in _records(out) if name.startswith("nemesis-") and r.get("kind") == "net-proxy"]
    # each proxy relays to the store's forwarder on the bridge (.254), as the host's workers would reach it
    assert len(proxies) == 3 and all(p["upstream"].split(":")[0].endswith(".254") for p in proxies), proxies
    assert json.loads((out / "storm.json").read_text())["net_faults"]["faults"]
    # each host draws its own clock skews: the hosts' first workers are not all shifted by one offset (they agreed
    # with each other when every host drew the storm's draws, and a store judging expiry by its caller's clock got by)
    skews: dict[str, list[int]] = {}
    for name, r in _records(out):
        if name.startswith("nemesis-") and r.get("kind") == "clock-skew":
            skews.setdefault(r["h"], []).append(r["v"]["offset_ms"])
    assert "h0" in skews and len({tuple(v[:1]) for v in skews.values()}) == len(skews), skews
    # and its own pauses: with the storm's draws every host paused on one schedule, a few ms apart
    first_pause: dict[str, int] = {}
    for name, r in _records(out):
        if name.startswith("nemesis-") and r.get("kind") == "pause":
            first_pause[r["h"]] = min(first_pause.get(r["h"], r["ts"]), r["ts"])
    assert len(first_pause) >= 2 and max(first_pause.values()) - min(first_pause.values()) > 50_000_000, first_pause
    _no_leftovers()


@needs_netns
@pytest.mark.slow
@pytest.mark.postgres
def test_the_lost_commit_mutant_fails_on_three_hosts_with_the_fault_proxies_on(tmp_path):
    # caught 2 of 2 across 3 hosts with every host fault on (23.6 s, 60.9 s), but a storm that stops at the quorum
    # once missed it here: run until proven, up to 400 takeovers
    info, out, verdict = _storm(tmp_path, "mutant:pg-lost-commit-busy", preset="networked", time_bound_s=240.0,
                                stop_on_violation=True, **{"quorum.takeovers": 400})
    assert verdict.result == "fail", verdict.summary()
    assert "typed-refusal" in {v.clause for v in verdict.violations}
    _no_leftovers()


@needs_netns
@pytest.mark.redis
def test_the_unfenced_lock_mutant_fails_on_three_hosts(tmp_path):
    info, out, verdict = _storm(tmp_path, "mutant:redis-setnx-lock", time_bound_s=90.0, stop_on_violation=True)
    assert verdict.result == "fail", verdict.summary()
    assert "stale-rejected" in {v.clause for v in verdict.violations}
    # the early judge read the hosts' history as it was shipped (`shipped.json`) and stopped the storm at a violation
    # the full check confirms
    early = json.loads((out / "storm.json").read_text())["early_judge"]
    assert info.status == "violation" and early.get("confirmed") and "error" not in early, early
    _no_leftovers()


@needs_netns
@pytest.mark.slow
@pytest.mark.postgres
def test_the_split_fence_mutant_fails_on_three_hosts(tmp_path):
    # Its window is one statement wide: unloaded, 5 of 5 smoke storms across 3 hosts proved it (13-27 s), but on a
    # loaded machine one reached 80 takeovers without (20 strikes held). Run until proven, up to 400 takeovers.
    info, out, verdict = _storm(tmp_path, "mutant:pg-split-fence", time_bound_s=240.0, stop_on_violation=True,
                                **{"quorum.takeovers": 400})
    assert verdict.result == "fail", verdict.summary()
    assert "stale-rejected" in {v.clause for v in verdict.violations}
    _no_leftovers()


@needs_netns
@pytest.mark.postgres
def test_a_host_clock_far_off_the_measured_bound_is_corrected_not_a_false_alarm(tmp_path):
    """h1's history clock runs 37 s ahead (a time namespace): thousands of times the bound measured. Uncorrected
    its operations would land 37 s after their takeovers (stale writes accepted, leases overlapping); the
    orchestrator measures the offset within its bound and the verdict is the reference's: pass."""
    scenario = load_scenario("smoke", {"workers": 6, "time_bound_s": 90.0})
    out = tmp_path / "run"
    info = run_cluster_storm(scenario, resolve(PG), out, hosts=3, progress=False, quiet=True,
                             clock_offsets_s={"h1": 37.0})
    assert info.status == "quorum", info.error
    clocks = json.loads((out / "clocks.json").read_text())
    h1 = clocks["hosts"]["h1"]
    assert abs(h1["offset_ms"] - 37_000) <= h1["error_ms"] < 100  # the measured bound holds the true offset
    assert abs(clocks["hosts"]["h0"]["offset_ms"]) <= clocks["hosts"]["h0"]["error_ms"]
    assert check_run(out).result == "pass"
    _no_leftovers()


@pytest.mark.postgres
def test_without_namespaces_plain_local_dask_workers_still_storm_and_say_so(tmp_path, capsys):
    scenario = load_scenario("smoke", {"workers": 4, "time_bound_s": 90.0, "host_kill_interval_s": 4.0,
                                       "host_pause_interval_s": 3.0})
    out = tmp_path / "run"
    info = run_cluster_storm(scenario, resolve(PG), out, hosts=2, progress=False, namespaces=False)
    note = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cluster:")]
    assert len(note) == 1 and "falling back to 2 plain local Dask workers" in note[0]
    assert info.status == "quorum", info.error
    assert check_run(out).result == "pass"
    cluster = [r["v"] for _, r in _records(out) if r.get("kind") == "cluster"][0]
    assert [h["netns"] for h in cluster["hosts"]] == [None, None]
    with pytest.raises(ScenarioError, match="host_partition_interval_s"):
        run_cluster_storm(load_scenario("smoke", {"host_partition_interval_s": 1.0, "host_partition_ms": 100}),
                          resolve(PG), tmp_path / "again", hosts=1, progress=False, quiet=True, namespaces=False)


@pytest.mark.parametrize("args, words", [
    (["--hosts", "0", "--store", "postgresql://127.0.0.1:5432/test"], "at least one host"),
    (["--hosts", "2"], "needs a networked store"),
    (["--cluster", "scheduler:8786", "--store", "redis://127.0.0.1:6379/0"], "tcp://HOST:PORT"),
    (["--hosts", "2", "--store", "redis://127.0.0.1:6379/0", "--set", "host_partition_from=orchestrator"],
     'e.g. ["store", "orchestrator"]'),
])
def test_bad_cluster_arguments_are_one_line_errors(args, words, tmp_path):
    out = subprocess.run([str(Path(sys.executable).parent / "soak"), "storm", *args, "--quiet", "--out", str(tmp_path / "run")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2, out
    assert words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
