"""The full smoke preset through the command line (slow tier): the issue's done-when numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_soak_storm_smoke_reaches_quorum_and_a_pass_verdict(tmp_path):
    # no arguments at all, like a user's first run: the run lands under ./reports/
    done = subprocess.run([sys.executable, "-m", "soak.cli", "storm"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = (tmp_path / "reports" / "latest").resolve()
    assert run_dir.parent == (tmp_path / "reports").resolve() and run_dir.name.endswith("-smoke")
    run_dir = Path("reports") / run_dir.name
    assert f"run directory: {run_dir}" in done.stdout
    run_dir = tmp_path / run_dir
    assert "verdict: pass" in done.stdout
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "quorum"
    reached = info["quorum_reached"]
    assert reached["takeovers"] >= 40 and reached["stale_refusals"] >= 100
    for surface in ("append", "put_meta", "blob_put", "blob_delete", "delete", "renew", "release", "cross"):
        assert reached[f"stale_{surface}"] >= 10
    events = [json.loads(x) for x in (run_dir / "history" / "nemesis.jsonl").read_text().splitlines()]
    kinds = {e["kind"] for e in events}
    assert {"pause", "resume", "kill", "spawn"} <= kinds
    assert any(e["kind"] == "pause" and e["v"]["in_call"] for e in events)
    stalls = sum(x.count('"kind":"stall"') for x in
                 (p.read_text() for p in (run_dir / "history").glob("w*.jsonl")))
    assert stalls >= 10
    assert json.loads((run_dir / "verdict.json").read_text())["result"] == "pass"
