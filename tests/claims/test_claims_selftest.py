"""`soak selftest --workload claims`: a claim mutant is caught by the storm and by conformance, naming its clause."""

from __future__ import annotations

import pytest

from soak.cli import main
from soak.selftest import claims_selftest


def test_a_claim_mutant_is_caught_by_the_storm_and_by_conformance(tmp_path):
    report = claims_selftest(runs=1, mutants=["conflict-without-holder"], reference=(), out_root=tmp_path)
    (m,) = report.mutants
    assert m.clause == "conflict-holder"
    assert m.storm_caught == [True] and m.conformance_caught == [True], report.table()
    assert m.storms[0].verdict == "fail" and "conflict-holder" in m.storms[0].clauses
    assert report.exit_code == 0 and not report.escaped
    row = report.rows()[0]
    assert (row["mutant"], row["clause"], row["storm"], row["conformance"]) == (
        "conflict-without-holder", "conflict-holder", "1/1", "1/1")
    assert "selftest: PASS" in report.table()


def test_unknown_claim_mutants_and_single_process_references_are_refused(tmp_path, capsys):
    assert main(["selftest", "--workload", "claims", "--mutant", "nope", "--out", str(tmp_path)]) == 2
    assert "no claim store mutant 'nope'" in capsys.readouterr().err
    assert main(["selftest", "--workload", "claims", "--reference", "memory:", "--out", str(tmp_path)]) == 2
    assert "one process" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["selftest", "--workload", "nope"])
