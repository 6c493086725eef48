"""`soak storm --workload claims`: the preset, the store kind, and one-line errors for what cannot storm."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def soak(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "soak.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_a_claims_storm_from_the_command_line(tmp_path: Path):
    out = soak("storm", "--workload", "claims", "--quiet", "--no-report", "--out", str(tmp_path / "run"),
               "--set", "quorum.claims_won=10", "--set", "quorum.conflicts=5", "--set", "quorum.progress=10",
               "--set", "quorum.recoveries=1", "--set", "quorum.aborts=1", "--set", "quorum.probes=2",
               "--set", "quorum.splits_repaired=0", "--set", "quorum.pauses=1", "--set", "quorum.kills=1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "store sqlite:" in out.stdout and "verdict: pass" in out.stdout
    assert (tmp_path / "run" / "nodes").is_dir()


def test_what_cannot_storm_claims_is_one_line():
    cases = [
        (["--store", "memory:"], "lives inside one process"),
        (["--store", "mutant:nope"], "no claim store mutant named 'nope'"),
        (["--store", "sqlite:?bad=1"], "has no option 'bad'"),
        (["--store", "nope:"], "unknown claim store scheme"),
        (["--scenario", "smoke"], "is a runs storm, not claims"),
    ]
    for args, message in cases:
        out = soak("storm", "--workload", "claims", *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
    out = soak("storm", "--workload", "nope")
    assert out.returncode == 2 and "unknown workload 'nope'" in out.stderr
