"""The benchmark helpers and the history writer's fast path (benchmarks/, soak.history.HistoryWriter)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from soak.history import HistoryWriter, operations, read_records
from soak.spi import Lease

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from storm_rate import count_history, quiet_scenario  # noqa: E402


def test_writer_lines_match_the_standard_library_encoding(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    w = HistoryWriter(path, "w0.1")
    i = w.invoke("append", "r1", Lease("r1", "w0.1", 5), "live", {"seq": 4, "tag": "w0.1#0", "c": 3})
    w.complete(i, "fail", {"holder": ["r1", "w2.1", 6]}, error="LeaseHeldError", message="refused")
    w.event("stall", {"ms": 350})
    for line in path.read_bytes().splitlines():
        obj = json.loads(line)
        assert line == json.dumps(obj, separators=(",", ":")).encode()  # byte for byte on ASCII content


def test_writer_falls_back_for_values_orjson_refuses(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    w = HistoryWriter(path, "w0.1")
    i = w.invoke("load", "r1", None, "live", {"big": 10**30, "text": "é"})
    w.complete(i, "info", error="OSError", message="bad \ud800 name")
    [op] = list(operations([path]))
    assert op.args["text"] == "é" and op.message == "bad ? name" and op.outcome == "info"
    assert [r.type for r in read_records(path)] == ["invoke", "info"]


def test_count_history_counts_accepted_mutations_in_the_running_window(tmp_path: Path) -> None:
    hist = tmp_path / "history"
    hist.mkdir()
    w = HistoryWriter(hist / "w0.1.jsonl", "w0.1")
    w.complete(w.invoke("open", "", None, "boot", {}), "ok")
    lease = Lease("r0", "w0.1", 1)
    w.complete(w.invoke("acquire", "r0", None, "live", {"owner": "w0.1"}), "ok", {"epoch": 1})
    w.complete(w.invoke("append", "r0", lease, "live", {"seq": 1, "tag": "w0.1#2", "c": 1}), "ok")
    w.complete(w.invoke("put_meta", "r0", lease, "live", {"tag": "w0.1#3", "c": 2}), "fail", error="LeaseHeldError")
    w.complete(w.invoke("blob_put", "r0", lease, "live", {"ref": "r0/b0", "tag": "w0.1#4", "c": 3}), "ok")
    accepted, calls, window = count_history(tmp_path)
    assert (accepted, calls) == (2, 4) and window > 0


def test_quiet_scenario_turns_the_nemesis_off() -> None:
    sc = quiet_scenario(workers=4, seconds=2.0)
    assert (sc.pause_interval_s, sc.kill_interval_s, sc.options.stall_prob, sc.options.strike_prob) == (0.0, 0.0, 0.0, 0.0)
    assert sc.time_bound_s == 2.0 and sc.workers == 4 and sc.quorum["grants"] > 10**9


@pytest.mark.slow
def test_quiet_storm_and_raw_loop_measure_accepted_mutations() -> None:
    from raw_limit import raw_limit_detail
    from storm_rate import storm_rate

    s = storm_rate("sqlite:", workers=2, seconds=2.0)
    assert s.status == "timeout" and s.accepted > 0 and s.calls >= s.accepted and s.window_s > 0.5
    r = raw_limit_detail("sqlite:", processes=2, seconds=1.0, record=True)
    assert r.rate > 0 and r.cpu_per_op_s > 0


@pytest.mark.parametrize("shape, per_tenure, reads", [("storm", (27, 35), (0.12, 0.18)), ("dense", (11, 17), (0.12, 0.22))])
def test_checker_bench_histories_have_the_shape_they_claim_and_pass(tmp_path: Path, shape: str,
                                                                    per_tenure: tuple[int, int],
                                                                    reads: tuple[float, float]) -> None:
    from bench_checker import generate

    from soak.check import check_run

    count = generate(tmp_path / "run", 20_000, shape=shape)
    ops = [op for op in operations(sorted((tmp_path / "run" / "history").glob("*.jsonl"))) if hasattr(op, "outcome")]
    assert len(ops) == count
    grants = sum(op.f == "acquire" and op.outcome == "ok" for op in ops)
    tenured_reads = sum(op.f in ("load", "get_meta", "blob_get") and bool(op.args.get("tenure")) for op in ops)
    assert per_tenure[0] <= count / grants <= per_tenure[1]
    assert reads[0] <= tenured_reads / count <= reads[1]
    verdict = check_run(tmp_path / "run", write=False)
    assert verdict.result == "pass", verdict.violations[:3]
    assert verdict.stats["reads_judged"] > 0.9 * tenured_reads  # the reads are judged, not skipped


def test_strike_windows_counts_held_strikes_the_verdict_cites(tmp_path: Path) -> None:
    from strike_windows import strike_windows

    from soak.check.strikes import KEYS

    hist = tmp_path / "history"
    hist.mkdir()
    w = HistoryWriter(hist / "w0.1.jsonl", "w0.1")
    lease = Lease("r0", "w0.1", 3)
    struck = []
    for c in range(3):
        struck.append(w.invoke("put_meta", "r0", lease, "live", {"tag": f"w0.1#{c}", "c": c}))
        w.complete(struck[-1], "ok")
    w.close()
    nem = HistoryWriter(hist / "nemesis.jsonl", "nemesis")
    nem.event("pause", {"target": "w0.1", "strike": True, "strike_mode": "step", "step": 4, "steps": 9,
                        "op": struck[0], "again": True})
    nem.event("resume", {"target": "w0.1", "successor": "w1.1", "why": "successor"})  # a takeover got in mid-call
    nem.event("pause", {"target": "w0.1", "strike": True, "strike_mode": "kernel", "op": struck[1]})
    nem.event("resume", {"target": "w0.1", "successor": None, "why": "blocked"})
    nem.event("pause", {"target": "w0.1", "op": struck[2]})  # a pause, not a strike
    nem.close()
    base = dict.fromkeys(KEYS, 0)
    assert strike_windows(tmp_path) == {**base, "held": 2, "witnessed": 1, "held_step": 1, "held_again": 1,
                                        "witnessed_again": 1}
    (tmp_path / "verdict.json").write_text(json.dumps({"violations": [
        {"clause": "stale-rejected", "evidence": [{"process": "w0.1", "index": struck[0]}]}]}))
    assert strike_windows(tmp_path) == {**base, "held": 2, "witnessed": 1, "landed": 1, "held_step": 1,
                                        "landed_step": 1, "held_again": 1, "witnessed_again": 1, "landed_again": 1}


@pytest.mark.postgres
@pytest.mark.redis
def test_the_bench_measures_each_networked_store_against_its_own_raw_limit(capsys, monkeypatch) -> None:
    import bench

    bench._networked(rounds=1, workers=2, raw_s=0.5, storm_s=1.0)
    out = capsys.readouterr().out
    for spec in bench.NETWORKED:
        section = out.split(spec, 1)[1].split("| **", 1)[0]
        rows = {ln.split("|")[1].strip(): ln.split("|")[2].strip() for ln in section.splitlines() if ln.count("|") >= 3}
        raw = float(rows["raw limit, fenced appends/s"].replace(",", ""))
        calls = float(rows["storm, all recorded store calls/s"].replace(",", ""))
        assert raw > 0 and calls > 0, section
        assert float(rows["storm calls/raw"]) == pytest.approx(calls / raw, abs=0.01)


def test_the_bench_says_which_networked_server_did_not_answer(capsys, monkeypatch) -> None:
    import bench

    monkeypatch.setattr(bench, "NETWORKED", ("postgresql://127.0.0.1:1/test?connect_timeout_s=1",))
    bench._networked(rounds=1, workers=2, raw_s=0.5, storm_s=1.0)
    out = capsys.readouterr().out
    assert "not measured" in out and "did not answer" in out and "SOAK_POSTGRES_URL" in out
    assert "Traceback" not in out
