"""Regenerate the regression corpus: small stored storms whose verdicts must never change by accident.

    .venv/bin/python tests/corpus/make_corpus.py            # storms + verdicts (minutes)
    .venv/bin/python tests/corpus/make_corpus.py --verdicts # only re-judge the stored runs (after a deliberate
                                                            # change of what the checker concludes)

Each run directory (two passing storms on `sqlite:`, one storm per catalogue mutant, stopped at its first
suspect) is packed as `tests/corpus/<name>.tar.xz` with what the checker needs (run.json, scenario.toml,
final_state.json, history/) and the verdict it gave then (`verdict.json`). `tests/test_corpus.py` unpacks each
and requires today's checker to give that verdict byte for byte.
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEEP = ("run.json", "scenario.toml", "final_state.json", "history", "verdict.json")


def _pack(run_dir: Path, name: str) -> None:
    with tarfile.open(HERE / f"{name}.tar.xz", "w:xz") as tar:
        for item in KEEP:
            path = run_dir / item
            if path.exists():
                tar.add(path, arcname=f"{name}/{item}")


def unpack(archive: Path, into: Path) -> Path:
    """Unpack one corpus archive under `into`; returns its run directory."""
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(into, filter="data")
    return into / archive.name[: -len(".tar.xz")]


def verdict_bytes(run_dir: Path) -> bytes:
    """The verdict's JSON exactly as `check_run` writes it."""
    from soak.check import check_run

    return (json.dumps(check_run(run_dir, write=False).to_json(), indent=1, sort_keys=True) + "\n").encode()


def storms(names: list[str] | None) -> None:
    from soak.scenario import load_scenario
    from soak.stores import resolve
    from soak.stores.mutants import MUTANTS
    from soak.storm import run_storm

    plan = [("pass-sqlite-1", "sqlite:", 101, False), ("pass-sqlite-2", "sqlite:", 202, False)]
    plan += [(f"mutant-{m}", f"mutant:{m}", 7, True) for m in sorted(MUTANTS)]
    for name, spec, seed, stop in plan:
        if names and name not in names:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / name
            sc = load_scenario(HERE / "corpus.toml", {"seed": seed, "stop_on_suspect": stop})
            info = run_storm(sc, resolve(spec), run_dir, progress=False)
            (run_dir / "verdict.json").write_bytes(verdict_bytes(run_dir))
            _pack(run_dir, name)
            print(f"{name}: {info.status}, {json.loads((run_dir / 'verdict.json').read_text())['result']}")


def verdicts() -> None:
    for archive in sorted(HERE.glob("*.tar.xz")):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = unpack(archive, Path(tmp))
            (run_dir / "verdict.json").write_bytes(verdict_bytes(run_dir))
            name = run_dir.name
            _pack(run_dir, name)
            print(f"{name}: {json.loads((run_dir / 'verdict.json').read_text())['result']}")


if __name__ == "__main__":
    if "--verdicts" in sys.argv:
        verdicts()
    else:
        storms([a for a in sys.argv[1:] if not a.startswith("--")] or None)
