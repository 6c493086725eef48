"""`check_run` and `soak check` over run directories: on disk, damaged, and recorded from a real store."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from soak.check import Verdict, check_run
from soak.cli import main
from soak.errors import RunDirError
from soak.history import HistoryWriter, payload_for
from soak.rundir import RunInfo, info_to_json, write_json
from soak.workloads.runs.state import read_snapshot, save_snapshot
from soak.spi import JournalEntry, Lease, RunMeta, StoreError
from soak.stores.memory import MemoryStore

from .histories import RUNS, clean_history, write_run_dir


@pytest.fixture
def clean_dir(tmp_path: Path) -> Path:
    h = clean_history()
    return write_run_dir(tmp_path / "run", h, h.state(RUNS))


def test_clean_run_dir_passes_and_writes_its_verdict(clean_dir: Path):
    v = check_run(clean_dir)
    assert v.result == "pass", v.violations
    stored = json.loads((clean_dir / "verdict.json").read_text())
    assert Verdict.from_json(stored) == v
    # the storm's own records: a spawn and a start event per worker, and the nemesis file's stall
    workers = len(list((clean_dir / "history").glob("w*.jsonl")))
    assert v.stats["events"] == 2 * workers + 1


def test_verdict_json_round_trip_keeps_evidence(tmp_path: Path):
    h = clean_history()
    snap = h.state(RUNS)
    snap.probe["r1"] = {"epoch": 1}
    v = check_run(write_run_dir(tmp_path / "run", h, snap))
    assert v.result == "fail"
    back = Verdict.from_json(json.loads(json.dumps(v.to_json())))
    assert back == v and back.violations[0].evidence[0].tag == v.violations[0].evidence[0].tag


def test_truncated_last_line_is_an_unknown_operation(clean_dir: Path):
    path = clean_dir / "history" / "w2.1.jsonl"
    with open(path, "a") as fh:  # an invoke that reached the disk, then half a completion line
        fh.write(json.dumps({"t": "invoke", "p": "w2.1", "i": 9, "ts": 400_000_000, "f": "load", "run": "r1",
                             "lease": None, "intent": "live", "v": {}}) + "\n")
        fh.write('{"t":"ok","p":"w2.1","i":9,"ts":4010')
    v = check_run(clean_dir)
    assert v.result == "pass" and v.stats["info"] == 2


def test_corrupt_middle_line_is_inconclusive_naming_the_file(clean_dir: Path):
    path = clean_dir / "history" / "w1.1.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = '{"t":"ok","p":\n'
    path.write_text("".join(lines))
    v = check_run(clean_dir)
    assert v.result == "inconclusive"
    assert "w1.1.jsonl" in v.reasons[0]


def test_completion_without_invoke_is_inconclusive_naming_the_file(clean_dir: Path):
    path = clean_dir / "history" / "w1.1.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    del lines[0]
    path.write_text("".join(lines))
    v = check_run(clean_dir)
    assert v.result == "inconclusive" and "w1.1.jsonl" in v.reasons[0]


def test_missing_final_state_is_inconclusive(clean_dir: Path):
    (clean_dir / "final_state.json").unlink()
    assert check_run(clean_dir).result == "inconclusive"


def test_missing_history_is_inconclusive(clean_dir: Path):
    for path in (clean_dir / "history").iterdir():
        path.unlink()
    v = check_run(clean_dir)
    assert v.result == "inconclusive" and "history" in v.reasons[0]


def test_not_a_run_dir(tmp_path: Path):
    with pytest.raises(RunDirError):
        check_run(tmp_path)


def test_cli_exit_codes(tmp_path: Path, clean_dir: Path, capsys):
    assert main(["check", str(clean_dir)]) == 0
    assert "verdict: pass" in capsys.readouterr().out

    h = clean_history()
    snap = h.state(RUNS)
    snap.journals["r1"].pop(0)
    bad = write_run_dir(tmp_path / "bad", h, snap)
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "[journal-a1]" in out and "w1.1#1 append r1 e1 c1 ok" in out

    slow = write_run_dir(tmp_path / "slow", h, h.state(RUNS), status="timeout")
    assert main(["check", str(slow), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["result"] == "inconclusive"

    assert main(["check", str(tmp_path / "nowhere")]) == 2
    assert "not a soak run directory" in capsys.readouterr().err


# -- recorded from a real store -----------------------------------------------------------------

TTL = 40


class _Worker:
    """Records calls on the memory store the way a storm worker does."""

    def __init__(self, hist: Path, name: str, store):
        self.w = HistoryWriter(hist / f"{name}.jsonl", name)
        self.w.event("start", {})
        nemesis = HistoryWriter(hist / "nemesis.jsonl", "nemesis")
        nemesis.event("spawn", {"target": name, "pid": 0})
        nemesis.close()
        self.name = name
        self.store = store
        self.c = 0

    def acquire(self, run: str) -> Lease | None:
        i = self.w.invoke("acquire", run, None, "live", {"owner": self.name})
        try:
            lease = self.store.acquire(run, self.name)
        except StoreError as exc:
            self.w.complete(i, "fail", {"holder": None}, error=type(exc).__name__)
            return None
        self.w.complete(i, "ok", {"epoch": lease.epoch})
        self.c = 0
        return lease

    def _call(self, f: str, run: str, lease: Lease, value: dict, fn) -> None:
        self.c += 1
        i = self.w.invoke(f, run, lease, "live", {**value, "c": self.c} if f not in ("renew", "release") else {"c": self.c})
        tag = f"{self.name}#{i}"
        try:
            fn(tag)
        except StoreError as exc:
            self.w.complete(i, "fail", {}, error=type(exc).__name__)
        else:
            self.w.complete(i, "ok", {})

    def append(self, lease: Lease, seq: int) -> None:
        self._call("append", lease.run_id, lease, {"seq": seq, "tag": f"{self.name}#{self.w.next_index()}"},
                   lambda tag: self.store.append(lease.run_id, JournalEntry(seq, payload_for(tag)), lease))

    def put_meta(self, lease: Lease) -> None:
        self._call("put_meta", lease.run_id, lease,
                   {"tag": f"{self.name}#{self.w.next_index()}", "status": "running", "segments": 1},
                   lambda tag: self.store.put_meta(RunMeta(lease.run_id, "running", 1, payload_for(tag)), lease))

    def release(self, lease: Lease) -> None:
        self._call("release", lease.run_id, lease, {}, lambda tag: self.store.release(lease))


class _UnfencedAppends(MemoryStore):
    """A broken store: appends skip the fence."""

    def append(self, run_id, entry, lease=None):
        super().append(run_id, entry, None)


@pytest.mark.parametrize("broken", [False, True])
def test_recorded_storm_on_the_memory_store(tmp_path: Path, broken: bool):
    store = (_UnfencedAppends if broken else MemoryStore)(TTL)
    run_dir = tmp_path / "run"
    (run_dir / "history").mkdir(parents=True)
    w1, w2 = _Worker(run_dir / "history", "w1.1", store), _Worker(run_dir / "history", "w2.1", store)
    a = w1.acquire("r1")
    w1.append(a, 1)
    w1.put_meta(a)
    time.sleep(TTL * 1.5 / 1000)
    b = w2.acquire("r1")
    assert b is not None and b.epoch == 2
    w1.append(a, 2)  # stale: must be refused; the broken store accepts it
    w2.append(b, 3)
    w2.put_meta(b)
    w2.release(b)
    info = RunInfo(soak_version="0.1.0", workload="runs", store="memory:", seed=0, lease_ttl_ms=TTL, workers=2,
                   runs=["r1"], side_runs=[], status="quorum")
    write_json(run_dir / "run.json", info_to_json(info))
    save_snapshot(run_dir, read_snapshot(store, ["r1", "xr"]))
    v = check_run(run_dir)
    if broken:
        assert v.result == "fail" and "stale-rejected" in v.clauses
    else:
        assert v.result == "pass", v.violations
