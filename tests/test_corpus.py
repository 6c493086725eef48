"""The regression corpus: stored storms whose verdicts must not change by accident (tests/corpus/).

Two passing storms on `sqlite:` and one storm per catalogue mutant, each packed with the verdict the checker gave
when it was stored. Today's checker must give that verdict byte for byte: a change of what soak concludes is made
on purpose, and then the stored verdicts are re-judged (`tests/corpus/make_corpus.py --verdicts`) in the same
commit, with the reason in its message.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parent / "corpus"
sys.path.insert(0, str(CORPUS))
from make_corpus import unpack, verdict_bytes  # noqa: E402

ARCHIVES = sorted(CORPUS.glob("*.tar.xz"))


def test_the_corpus_has_every_mutant_and_the_reference():
    from soak.stores.mutants import MUTANTS

    names = {a.name[: -len(".tar.xz")] for a in ARCHIVES}
    assert {f"mutant-{m}" for m in MUTANTS} <= names
    assert sum(n.startswith("pass-") for n in names) >= 2


@pytest.mark.parametrize("archive", ARCHIVES, ids=lambda a: a.name[: -len(".tar.xz")])
def test_the_verdict_is_the_stored_one_byte_for_byte(archive: Path, tmp_path: Path):
    run_dir = unpack(archive, tmp_path)
    stored = (run_dir / "verdict.json").read_bytes()
    assert verdict_bytes(run_dir) == stored
    result = __import__("json").loads(stored)["result"]
    assert result == ("pass" if run_dir.name.startswith("pass-") else "fail")
