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


@pytest.mark.slow
@pytest.mark.parametrize("reference, mutant", [
    pytest.param(PG, "mutant:pg-store-clock", marks=pytest.mark.postgres, id="postgres"),
    pytest.param(REDIS, "mutant:redis-store-clock", marks=pytest.mark.redis, id="redis"),
])
def test_a_reference_stays_green_under_clock_skew_and_its_store_clock_mutant_is_caught(reference, mutant, tmp_path):
    _faketime()
    result, run, events = _storm(reference, tmp_path / "ref", clock_skew_ms=400)
    assert result == "pass", run["verdict"].violations[:3]
    skews = [e["v"] for e in events if e.get("kind") == "clock-skew"]
    assert skews and all(abs(s["offset_ms"]) >= 400 for s in skews)
    result, run, _ = _storm(mutant, tmp_path / "mutant", clock_skew_ms=400, stop_on_violation=True)
    assert result == "fail"
    assert _clauses(run["verdict"]) & {"lease-exclusive", "ttl-honoured", "live-accepted"}

class _Proxy:
    """The fault proxy in its own process, one slot, in front of `upstream`."""

    def __init__(self, upstream, latency_ms=0.0, jitter_ms=0.0, half_open_ms=200):
        import multiprocess

        from soak.storm import netfault

        ctx = multiprocess.get_context("spawn")
        self.nf = netfault
        self.ctl = ctx.RawArray("q", netfault.CTL)
        self.ack = ctx.RawValue("q", 0)
        ports, ready, self.stop = ctx.RawArray("q", 1), ctx.RawValue("b", 0), ctx.RawValue("b", 0)
        self.events, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=netfault.proxy_main, daemon=True,
                                args=(upstream, 1, self.ctl, self.ack, ports, ready, send, self.stop, 7, latency_ms,
                                      jitter_ms, half_open_ms, os.getpid()))
        self.proc.start()
        deadline = time.monotonic() + 15
        while not ready.value and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.value, "the proxy did not start"
        self.port = int(ports[0])

    def arm(self, mode: str) -> None:
        self.ctl[self.nf.CUT_MODE] = self.nf.CUT_MODES.index(mode)
        self.ctl[self.nf.CUT_SEQ] += 1

    def cuts(self) -> list[dict]:
        out = []
        while self.events.poll(1.0):
            msg = self.events.recv()
            if msg["kind"] == "cut":
                self.ack.value = msg["id"]  # as the storm does once it has logged the cut
                out.append(msg)
                if not self.events.poll(0.05):
                    break
        return out

    def close(self) -> None:
        self.stop.value = 1
        self.proc.join(5)


@pytest.mark.postgres
def test_the_proxy_cuts_a_postgres_statement_before_it_ran_or_after_it_committed():
    import psycopg

    from soak.storm.netfault import upstream_of

    proxy = _Proxy(upstream_of(target(PG))[1], latency_ms=3.0, jitter_ms=1.0)
    dsn = f"host=127.0.0.1 port={proxy.port} dbname={psycopg.conninfo.conninfo_to_dict(PG)['dbname']}"
    try:
        with psycopg.connect(PG, autocommit=True) as admin:
            admin.execute("CREATE TABLE IF NOT EXISTS soak_proxy_test (k text PRIMARY KEY)")
            admin.execute("DELETE FROM soak_proxy_test")
            c = psycopg.connect(dsn, autocommit=True)
            started = time.monotonic()
            for _ in range(5):
                c.execute("SELECT 1")
            assert (time.monotonic() - started) / 5 >= 0.004  # 3 +- 1 ms each way
            for mode in ("cut-request", "cut-reply", "half-open"):
                proxy.arm(mode)
                time.sleep(0.02)
                with pytest.raises(psycopg.OperationalError):
                    c.execute("INSERT INTO soak_proxy_test VALUES (%s)", (mode,))
                cut = proxy.cuts()
                assert [m["fault"] for m in cut] == [mode]
                c = psycopg.connect(dsn, autocommit=True)
                for _ in range(3):  # past the connection's first chunks, which are never cut
                    c.execute("SELECT 1")
            rows = {r[0] for r in admin.execute("SELECT k FROM soak_proxy_test").fetchall()}
            # the reply was cut after the server committed; a cut request never ran
            assert "cut-reply" in rows and "cut-request" not in rows
            admin.execute("DROP TABLE soak_proxy_test")
    finally:
        proxy.close()


@pytest.mark.redis
def test_the_proxy_cuts_a_redis_command_after_it_ran():
    import redis

    from soak.storm.netfault import upstream_of

    proxy = _Proxy(upstream_of(target(REDIS))[1])
    try:
        r = redis.Redis(host="127.0.0.1", port=proxy.port, single_connection_client=True,
                        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
        for _ in range(4):
            r.ping()
        direct = redis.Redis.from_url(REDIS)
        direct.delete("soak:proxy-test")
        proxy.arm("cut-reply")
        with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
            r.set("soak:proxy-test", "1")
        assert [m["fault"] for m in proxy.cuts()] == ["cut-reply"]
        assert direct.get("soak:proxy-test") == b"1"
        direct.delete("soak:proxy-test")
    finally:
        proxy.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_stays_green_under_network_faults_and_the_lost_commit_mutant_is_caught(tmp_path):
    keys = dict(net_latency_ms=2.0, net_jitter_ms=2.0, net_cut_interval_s=0.3, net_stall_interval_s=1.5,
                net_stall_ms=300)
    result, run, events = _storm(PG, tmp_path / "ref", **keys)
    assert result == "pass", run["verdict"].violations[:3]
    kinds = {e["v"].get("fault") for e in events if e.get("kind") == "net-cut"}
    assert {"cut-request", "cut-reply"} <= kinds
    assert any(e.get("kind") == "net-stall" for e in events)
    result, run, _ = _storm("mutant:pg-lost-commit-busy", tmp_path / "mutant", **keys)
    assert result == "fail" and "typed-refusal" in _clauses(run["verdict"])


@pytest.mark.postgres
def test_a_cut_armed_for_a_replaced_worker_never_lands_in_its_successors_calls(tmp_path):
    import random

    import multiprocess
    import psycopg

    from soak.history import HistoryWriter
    from soak.scenario import Scenario
    from soak.storm.netfault import CUT_MODE, CUT_SEQ, NetFaults

    writer = HistoryWriter(tmp_path / "nemesis.jsonl", "nemesis")
    faults = NetFaults(Scenario(workers=1, net_cut_interval_s=1000.0), target(PG), multiprocess.get_context("spawn"),
                       writer, random.Random(1), lambda proc: proc.start())
    try:
        faults.target_for(0, "w0.1")
        faults.ctl[CUT_MODE] = 2  # a cut-reply armed for w0.1, which is killed before it lands
        faults.ctl[CUT_SEQ] += 1
        spec = faults.target_for(0, "w0.2")
        conn = psycopg.connect(spec.options["dsn"], autocommit=True)
        for _ in range(8):  # its boot and first calls
            conn.execute("SELECT 1")
        conn.close()
        faults.drain()
        assert faults.counts == {}
        # armed for the live incarnation, the cut lands
        conn = psycopg.connect(spec.options["dsn"], autocommit=True)
        for _ in range(4):
            conn.execute("SELECT 1")
        faults.ctl[CUT_MODE] = 2
        faults.ctl[CUT_SEQ] += 1
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        faults.drain()
        assert faults.counts == {"cut-reply": 1}
    finally:
        faults.stop()
        writer.close()
