"""`soak certify`: the reference store certifies, a mutant fails naming its clause, `--verify`
catches an edited file, the worked example store certifies, and the storm's JUnit validates."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import xmlschema

from soak.certify import CERTIFICATE_FILE, CERTIFICATE_HTML, clause_requirements, suite_digest, verify_certificate
from soak.clauses import CLAUSES
from soak.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "kvfence"
JUNIT_XSD = Path(__file__).parent / "data" / "junit.xsd"


def _certify(capsys, out: Path, *args: str) -> tuple[int, dict, str]:
    rc = main(["certify", *args, "--quick", "--quiet", "--out", str(out)])
    printed = capsys.readouterr().out
    cert = json.loads((out / CERTIFICATE_FILE).read_text())
    return rc, cert, printed


def test_sqlite_certifies_verifies_and_its_junit_validates(tmp_path, capsys):
    # One certification (the expensive part) serves every check of the passing path.
    out = tmp_path / "sqlite"
    rc, cert, printed = _certify(capsys, out, "--store", "sqlite:")
    assert rc == 0, printed
    assert cert["result"] == "pass" and cert["required_failed"] == []
    assert cert["profile"] == "fenced" and cert["mode"] == "quick" and cert["store"] == "sqlite:"
    assert set(cert["clauses"]) == set(CLAUSES)
    for clause, c in cert["clauses"].items():
        assert c["requirement"] == "required" and c["result"] == "pass", clause
        assert any(s["source"] == "conformance" and s["result"] == "pass" for s in c["sources"]), clause
    assert any(s["source"] == "boot-storm" for s in cert["clauses"]["concurrent-boot"]["sources"])
    assert any(s["source"] == "storm" for s in cert["clauses"]["stale-rejected"]["sources"])
    assert cert["suite_sha256"] == suite_digest()[0]
    assert isinstance(cert["seeds"]["storm"]["storm"], int) and cert["seeds"]["storm"]["workers"]
    env = cert["environment"]
    assert env["python"] and env["sqlite"] and env["cpu_count"] and "hypothesis" in env["packages"]
    for name in ("storm/run.json", "storm/verdict.json", "storm/junit.xml", "storm/report.html"):
        assert len(cert["digests"][name]) == 64, name
    page = (out / CERTIFICATE_HTML).read_text()
    assert "no violations observed" in page and 'href="storm/report.html"' in page
    for text in (page, json.dumps(cert)):
        assert "proven" not in text.lower()

    # The storm's JUnit validates; the schema is not a rubber stamp (a non-numeric count fails).
    schema = xmlschema.XMLSchema(str(JUNIT_XSD))
    schema.validate(str(out / "storm" / "junit.xml"))
    assert not schema.is_valid('<testsuites><testsuite name="s" tests="many"/></testsuites>')

    # --verify: a fresh certificate matches; an edited digest-covered file is named.
    assert main(["certify", "--verify", str(out / CERTIFICATE_FILE)]) == 0
    assert "certificate verified" in capsys.readouterr().out
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    verdict = copy / "storm" / "verdict.json"
    verdict.write_text(verdict.read_text() + " ")
    assert main(["certify", "--verify", str(copy / CERTIFICATE_FILE)]) == 1
    printed = capsys.readouterr().out
    assert "differs: storm/verdict.json: changed" in printed and "NOT verified" in printed

    # An edited certificate body and a removed file are caught too.
    cert_path = copy / CERTIFICATE_FILE
    edited = json.loads(cert_path.read_text())
    edited["clauses"]["atomic-fence"]["result"] = "pass (edited)"
    cert_path.write_text(json.dumps(edited))
    (copy / "storm" / "junit.xml").unlink()
    res = verify_certificate(cert_path)
    assert any("edited after it was written" in d for d in res.differences)
    assert "storm/junit.xml: missing" in res.differences


def test_verify_refuses_a_file_that_is_not_a_certificate(tmp_path, capsys):
    bogus = tmp_path / "x.json"
    bogus.write_text("{}")
    assert main(["certify", "--verify", str(bogus)]) == 2
    assert "not a soak certificate" in capsys.readouterr().err


def test_mutant_fails_naming_the_clause(tmp_path, capsys):
    # The mutant never refuses a stale put_meta, so its storm cannot reach quorum: bound it.
    rc, cert, printed = _certify(capsys, tmp_path / "mutant", "--store", "mutant:unfenced-meta", "--time-bound", "4")
    assert rc == 1
    assert cert["result"] == "fail" and "stale-rejected" in cert["required_failed"]
    sources = {s["source"]: s for s in cert["clauses"]["stale-rejected"]["sources"]}
    assert sources["conformance"]["result"] == "fail" and "put_meta" in sources["conformance"]["detail"]
    assert "FAIL stale-rejected: conformance fail" in printed
    assert "stale-rejected" in cert["violated"] and "violations observed of" in cert["statement"]
    # A storm cut short of its quorum exercised no clause fully: a clause it saw no violation of
    # is "not exercised", a fail, never a silent pass.
    assert cert["components"]["storm"]["status"] == "timeout"
    assert "lease-exclusive" in cert["not_exercised"]
    lease_sources = {s["source"]: s["result"] for s in cert["clauses"]["lease-exclusive"]["sources"]}
    assert lease_sources["conformance"] == "pass" and lease_sources["storm"] == "not-exercised"
    assert (tmp_path / "mutant" / CERTIFICATE_HTML).is_file()
    # The storm, cut short, still saw stale put_metas accepted; its JUnit validates and names them.
    assert "stale-rejected" in cert["components"]["storm"]["violated_clauses"]
    junit = tmp_path / "mutant" / "storm" / "junit.xml"
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(junit))
    assert 'type="stale-rejected"' in junit.read_text()


def test_the_example_store_certifies(tmp_path, capsys, monkeypatch):
    # The example is not installed: put it on the path here and for the spawned workers.
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(EXAMPLE), os.environ.get("PYTHONPATH")])))
    rc, cert, printed = _certify(capsys, tmp_path / "kv", "--store", "kvfence.store:open_store")
    assert rc == 0, printed
    assert cert["result"] == "pass" and all(c["result"] == "pass" for c in cert["clauses"].values())
    assert cert["components"]["storm"]["status"] == "quorum"
    assert cert["environment"]["store_module"] == "kvfence.store"


def test_single_writer_profile_marks_fencing_not_applicable():
    req = clause_requirements("single-writer")
    assert req["stale-rejected"] == "optional" and req["atomic-fence"] == "optional"
    assert req["journal-a1"] == req["unleased-passthrough"] == req["concurrent-boot"] == "required"
    assert set(clause_requirements("fenced").values()) == {"required"}


def test_usage_errors_are_one_line_exit_2(tmp_path, capsys):
    assert main(["certify", "--quick"]) == 2
    assert "needs --store" in capsys.readouterr().err
    assert main(["certify", "--store", "memory:", "--out", str(tmp_path / "m")]) == 2
    assert "one process" in capsys.readouterr().err
    assert main(["certify", "--store", "nosuchpkg.mod:factory", "--out", str(tmp_path / "n")]) == 2
    assert "cannot import" in capsys.readouterr().err


def test_single_writer_store_certifies_under_its_profile_only(tmp_path, capsys):
    spec = "tests.certify_stores:open_single_writer"
    rc, cert, printed = _certify(capsys, tmp_path / "sw", "--store", spec, "--profile", "single-writer")
    assert rc == 0, printed
    assert cert["result"] == "pass" and cert["profile"] == "single-writer"
    for clause, c in cert["clauses"].items():
        if c["requirement"] == "required":
            assert c["result"] == "pass", clause
        else:
            assert c["result"] == "not-applicable" and c["sources"][0]["source"] == "profile", clause
    assert cert["clauses"]["stale-rejected"]["result"] == "not-applicable"
    assert cert["components"]["storm"]["result"] == "not-applicable" and cert["digests"] == {}
    assert cert["components"]["conformance"]["not_judged"] == ["fenced-transcripts"]
    assert main(["certify", "--verify", str(tmp_path / "sw" / CERTIFICATE_FILE)]) == 0
