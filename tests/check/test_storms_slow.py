"""Whole storms against broken stores (slow tier): reads, boots and takeovers as evidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _storm(tmp_path: Path, store: str, *extra: str) -> dict:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the test stores live in this checkout's tests package
    done = subprocess.run([sys.executable, "-m", "soak.cli", "storm", "--store", store, "--quiet", "--out", str(out),
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return json.loads((out / "verdict.json").read_text())


def _clauses(verdict: dict) -> set[str]:
    return {v["clause"] for v in verdict["violations"]}


def test_late_stale_writes_are_seen_by_the_successors_reads(tmp_path):
    verdict = _storm(tmp_path, "tests.check.late_stores:open_late_split?p=0.05")
    assert verdict["result"] == "fail" and "stale-rejected" in _clauses(verdict)
    assert any(" read " in v["statement"] for v in verdict["violations"] if v["clause"] == "stale-rejected")


def test_boot_race_fails_concurrent_boot(tmp_path):
    verdict = _storm(tmp_path, "mutant:boot-race")
    assert verdict["result"] == "fail" and "concurrent-boot" in _clauses(verdict)


def test_long_ttl_fails_ttl_honoured_inside_the_history(tmp_path):
    verdict = _storm(tmp_path, "mutant:long-ttl", "--time-bound", "15")
    assert verdict["result"] == "fail" and "ttl-honoured" in _clauses(verdict)
    assert any("acquire of run" in v["statement"] for v in verdict["violations"])
