"""`soak certify --workload claims`: claim stores certified over the claim clauses.

End to end (every suite runs, `--quick`): the reference claim store passes, a mutant fails naming its
clause, and `memory:` (one process, so never stormed) is inconclusive with the storm's clauses not
exercised rather than passed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soak.certify import CERTIFICATE_FILE, CERTIFICATE_HTML, clause_requirements, verify_certificate
from soak.certify._plan import CLAIMS_CLAUSES
from soak.cli import main
from soak.clauses import CLAIM_CLAUSES


def _certify(capsys, out: Path, *args: str) -> tuple[int, dict, str]:
    rc = main(["certify", "--workload", "claims", *args, "--quick", "--quiet", "--out", str(out)])
    printed = capsys.readouterr().out
    return rc, json.loads((out / CERTIFICATE_FILE).read_text()), printed


def test_quick_certificate_of_the_reference_claim_store_passes(tmp_path, capsys):
    rc, cert, printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 0, printed
    assert cert["result"] == "pass" and cert["workload"] == "claims" and cert["profile"] == "claims"
    assert list(cert["clauses"]) == list(CLAIMS_CLAUSES)
    assert all(c["result"] == "pass" for c in cert["clauses"].values())
    assert all(list(c["suites"]) == ["conformance", "model", "storm"] for c in cert["clauses"].values())
    # the storm alone holds the handoff policy; the model never sees two claims race
    assert cert["clauses"]["handoff-policy"]["exercised_by"] == ["storm"]
    assert cert["clauses"]["claim-atomic"]["suites"]["model"] == "not-exercised"
    assert cert["components"]["storm"]["scenario"] == "claims" and cert["components"]["storm"]["status"] == "quorum"
    assert "claims workload" in printed and "handoff-policy" in printed
    page = (tmp_path / "c" / CERTIFICATE_HTML).read_text()
    assert "<th>result</th><th>conformance</th><th>model</th><th>storm</th></tr>" in page
    assert "boot-storm" not in page
    assert verify_certificate(tmp_path / "c" / CERTIFICATE_FILE).ok


def test_a_claim_mutant_fails_naming_its_clause(tmp_path, capsys):
    rc, cert, printed = _certify(capsys, tmp_path / "m", "--store", "mutant:conflict-without-holder")
    assert rc == 1, printed
    assert cert["result"] == "fail" and "conflict-holder" in cert["violated"]
    assert cert["clauses"]["conflict-holder"]["suites"]["conformance"] == "fail"
    assert "FAIL conflict-holder" in printed


def test_memory_is_never_stormed_so_the_storm_clauses_are_not_exercised(tmp_path, capsys):
    rc, cert, printed = _certify(capsys, tmp_path / "mem", "--store", "memory:")
    assert rc == 3, printed
    assert cert["result"] == "inconclusive"
    assert cert["components"]["storm"]["result"] == "not-applicable" and cert["run_dir"] is None
    for clause in ("claim-atomic", "handoff-policy"):  # only a storm (or processes) reaches them
        assert cert["clauses"][clause]["result"] == "not-exercised"
        assert clause in cert["not_exercised"]
        assert "one process" in cert["clauses"][clause]["reason"]
    assert all(c["suites"]["storm"] in ("not-exercised", "-") for c in cert["clauses"].values())
    assert "pass" not in {cert["clauses"][c]["suites"]["storm"] for c in CLAIM_CLAUSES}


def test_the_claims_profile_requires_every_claim_clause():
    req = clause_requirements("claims", "claims")
    assert set(req) == set(CLAIM_CLAUSES) | {"concurrent-boot", "call-returns", "no-crash"}
    assert set(req.values()) == {"required"}


def test_usage_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["certify", "--workload", "nope", "--store", "sqlite:"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err and len(err.strip().splitlines()) == 1
    assert main(["certify", "--workload", "claims", "--profile", "fenced", "--store", "sqlite:",
                 "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "unknown profile 'fenced'; use one of claims" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p").exists()  # refused before anything ran
    assert main(["certify", "--workload", "claims", "--store", "sqlite:?path=/tmp/x", "--out",
                 str(tmp_path / "f")]) == 2
    assert "fixed" in capsys.readouterr().err
