"""`soak certify`: certificates say what was tested.

The end-to-end tests run every suite (the reference store certifies, a mutant fails naming its
clause, `--verify` catches an edited file, the worked example and a single-writer store certify).
The others replace the suites with fakes of their output (a conformance report, a model outcome,
a boot report, a storm verdict) to pin what certify makes of each: a required clause nothing
exercised is not a pass, store-clock without the declaration is not exercised, a choice is shown
as the store's choice, busy counts are shown, a crashing suite concludes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import xmlschema

from soak.certify import (
    CERTIFICATE_FILE,
    CERTIFICATE_HTML,
    PROFILE_CLAUSES,
    clause_requirements,
    render_table,
    suite_digest,
    verify_certificate,
)
from soak.certify._judge import judge
from soak.certify._sources import (
    STORM_CLAUSES,
    boot_sources,
    conformance_sources,
    model_sources,
    storm_sources,
)
from soak.clauses import CLAUSES, LIVENESS_CLAUSES
from soak.cli import main
from soak.conformance import CheckResult
from soak.model import MODEL_NEVER_EXERCISES, ModelOutcome
from soak.retry import BusyCount
from soak.storm.boot import BootFailure, BootReport

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "kvfence"
JUNIT_XSD = Path(__file__).parent / "data" / "junit.xsd"
FENCED = PROFILE_CLAUSES["fenced"]


def _certify(capsys, out: Path, *args: str) -> tuple[int, dict, str]:
    rc = main(["certify", *args, "--quick", "--quiet", "--out", str(out)])
    printed = capsys.readouterr().out
    cert = json.loads((out / CERTIFICATE_FILE).read_text())
    return rc, cert, printed


# -- end to end: every suite runs ---------------------------------------------------------------

def test_sqlite_certifies_verifies_and_its_junit_validates(tmp_path, capsys):
    # One certification (the expensive part) serves every check of the passing path.
    out = tmp_path / "sqlite"
    rc, cert, printed = _certify(capsys, out, "--store", "sqlite:")
    assert rc == 0, printed
    assert cert["result"] == "pass" and cert["required_failed"] == [] and cert["not_exercised"] == []
    assert cert["profile"] == "fenced" and cert["mode"] == "quick" and cert["store"] == "sqlite:"
    assert cert["format"] == "soak-certificate/2" and cert["injectable_clock"]["declared"] is True
    assert set(cert["clauses"]) == set(CLAUSES)
    for clause, c in cert["clauses"].items():
        if clause == "expired-unsuperseded":  # a choice, never a pass
            assert c["requirement"] == "choice" and c["result"] == "choice" and c["choice"] == "refuses"
            assert "pass" not in c["suites"].values()
            continue
        assert c["requirement"] in ("required", "optional") and c["result"] == "pass", clause
        passed_by = [s["source"] for s in c["sources"] if s["result"] == "pass"]
        assert passed_by and set(passed_by) <= set(c["exercised_by"]), clause
        assert c["suites"].keys() == {"conformance", "model", "boot-storm", "storm"}
    assert cert["clauses"]["atomic-fence"]["suites"]["model"] == "not-exercised"  # one process: never
    assert cert["clauses"]["concurrent-boot"]["suites"]["boot-storm"] == "pass"
    assert cert["clauses"]["no-crash"]["suites"]["boot-storm"] == "pass"
    assert cert["clauses"]["call-returns"]["suites"]["model"] == "pass"
    assert cert["clauses"]["stale-rejected"]["suites"]["storm"] == "pass"
    assert cert["clauses"]["delete-semantics"]["choice"] == "keeps"
    assert cert["choices"]["delete-ends-tenure"]["choice"] == "keeps"
    assert cert["choices"]["expired-unsuperseded"]["choice"] == "refuses"
    assert cert["suite_sha256"] == suite_digest()[0]
    assert isinstance(cert["seeds"]["storm"]["storm"], int) and cert["seeds"]["storm"]["workers"]
    env = cert["environment"]
    assert env["python"] and env["sqlite"] and env["cpu_count"] and "hypothesis" in env["packages"]
    for name in ("storm/run.json", "storm/verdict.json", "storm/junit.xml", "storm/report.html"):
        assert len(cert["digests"][name]) == 64, name
    assert cert["components"]["model"]["clock"] == "fake" and cert["components"]["model"]["busy"]
    # The CLI lists which suite exercised which clause, and shows the choices as choices.
    assert "which suite exercised which clause:" in printed
    assert "choice expired-unsuperseded: refuses" in printed and "choice delete-ends-tenure: keeps" in printed
    table = printed.split("which suite exercised which clause:\n")[1]
    header = table.splitlines()[0].split()
    assert header == ["clause", "requirement", "result", "conformance", "model", "boot-storm", "storm"]
    row = next(line.split() for line in table.splitlines() if line.split()[:1] == ["concurrent-boot"])
    # the storm's workers boot together too: its verdict counts them (stats.exercised)
    assert row == ["concurrent-boot", "required", "pass", "pass", "not-exercised", "pass", "pass"]
    assert "busy: " in printed
    page = (out / CERTIFICATE_HTML).read_text()
    assert "no violations observed" in page and 'href="storm/report.html"' in page
    assert "which suite exercised each" in page and "choice: refuses" in page
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


@pytest.mark.parametrize("spec, choices, not_exercised", [
    # fails fast with StoreBusyError: busy is retried everywhere, never a failure
    ("sqlite:?busy_timeout_ms=0", {"delete-ends-tenure": "keeps"}, []),
    # a fenced delete ends the caller's tenure: the contract's other choice
    ("tests.contract_stores:open_delete_ends_tenure", {"delete-ends-tenure": "ends"}, []),
    # written from the contract over plain sqlite3 by an outsider: **options, no clock declared, one thread per object
    ("tests.contract_stores:open_store", {}, ["store-clock"]),
])
def test_correct_stores_that_choose_otherwise_certify(tmp_path, capsys, spec, choices, not_exercised):
    """Correct stores unlike the reference (fail-fast busy, a delete that ends the tenure, an outsider's store
    without an injectable clock) certify: every suite passes them, and their choices are named as choices."""
    rc, cert, printed = _certify(capsys, tmp_path / "cert", "--store", spec)
    assert rc == 0 and cert["result"] == "pass", printed
    assert cert["required_failed"] == [] and cert["violated"] == []
    assert sorted(c for c, r in cert["clauses"].items() if r["result"] == "not-exercised") == not_exercised
    for name, value in choices.items():
        assert f"choice {name}: {value}" in printed, printed
    assert cert["components"]["storm"]["result"] == "pass"


def test_verify_refuses_a_file_that_is_not_a_certificate(tmp_path, capsys):
    bogus = tmp_path / "x.json"
    bogus.write_text("{}")
    assert main(["certify", "--verify", str(bogus)]) == 2
    assert "not a soak certificate" in capsys.readouterr().err


def test_mutant_fails_naming_the_clause(tmp_path, capsys):
    # The mutant never refuses a stale put_meta, so its storm cannot reach quorum: bound it.
    rc, cert, printed = _certify(capsys, tmp_path / "mutant", "--store", "mutant:unfenced-meta", "--time-bound", "4")
    assert rc == 1
    assert cert["result"] == "fail" and "stale-rejected" in cert["violated"]
    assert "stale-rejected" in cert["required_failed"] and "violations observed of" in cert["statement"]
    sources = {s["source"]: s for s in cert["clauses"]["stale-rejected"]["sources"]}
    assert sources["conformance"]["result"] == "fail" and "put_meta" in sources["conformance"]["detail"]
    assert "FAIL stale-rejected: conformance fail" in printed
    # A storm cut short of its quorum passes nothing; a clause other suites exercised still passes.
    assert cert["components"]["storm"]["status"] == "timeout"
    lease = cert["clauses"]["lease-exclusive"]
    assert lease["suites"]["storm"] == "not-exercised" and "before its quorum" in str(lease["sources"])
    assert lease["suites"]["conformance"] == "pass" and lease["result"] == "pass"
    assert (tmp_path / "mutant" / CERTIFICATE_HTML).is_file()
    # The storm, cut short, still saw stale put_metas accepted; its JUnit validates and names them.
    assert "stale-rejected" in cert["components"]["storm"]["violated_clauses"]
    assert cert["clauses"]["stale-rejected"]["suites"]["storm"] == "fail"
    junit = tmp_path / "mutant" / "storm" / "junit.xml"
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(junit))
    assert 'type="stale-rejected"' in junit.read_text()


def test_the_example_store_certifies(tmp_path, capsys, monkeypatch):
    # The example is not installed: put it on the path here and for the spawned workers.
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(EXAMPLE), os.environ.get("PYTHONPATH")])))
    rc, cert, printed = _certify(capsys, tmp_path / "kv", "--store", "kvfence.store:open_store")
    assert rc == 0, printed
    assert cert["result"] == "pass"
    assert all(c["result"] in ("pass", "choice") for c in cert["clauses"].values())
    assert cert["components"]["storm"]["status"] == "quorum"
    assert cert["environment"]["store_module"] == "kvfence.store"


def test_single_writer_store_certifies_under_its_profile_only(tmp_path, capsys):
    spec = "tests.certify_stores:open_single_writer"
    rc, cert, printed = _certify(capsys, tmp_path / "sw", "--store", spec, "--profile", "single-writer")
    assert rc == 0, printed
    assert cert["result"] == "pass" and cert["profile"] == "single-writer"
    for clause, c in cert["clauses"].items():
        if c["requirement"] == "required":
            assert c["result"] == "pass" and c["exercised_by"], clause
        else:
            assert c["result"] == "not-applicable" and c["requirement"] == "not-claimed", clause
            assert c["sources"] == [] and c["reason"] == "not claimed by the profile", clause
    assert cert["clauses"]["stale-rejected"]["result"] == "not-applicable"
    # liveness: the model times every call, the boot storm's processes ran store calls and lived
    assert cert["clauses"]["call-returns"]["suites"]["model"] == "pass"
    assert cert["clauses"]["no-crash"]["suites"]["boot-storm"] == "pass"
    assert cert["components"]["storm"]["result"] == "not-applicable" and cert["digests"] == {}
    assert cert["components"]["conformance"]["not_judged"] == ["fenced-transcripts"]
    assert "expired-unsuperseded" not in cert["choices"]  # a clause the profile does not claim
    assert main(["certify", "--verify", str(tmp_path / "sw" / CERTIFICATE_FILE)]) == 0


def test_usage_errors_are_one_line_exit_2(tmp_path, capsys):
    assert main(["certify", "--quick"]) == 2
    assert "needs --store" in capsys.readouterr().err
    assert main(["certify", "--store", "memory:", "--out", str(tmp_path / "m")]) == 2
    assert "one process" in capsys.readouterr().err
    assert main(["certify", "--store", "nosuchpkg.mod:factory", "--out", str(tmp_path / "n")]) == 2
    assert "cannot import" in capsys.readouterr().err


# -- profiles ------------------------------------------------------------------------------------

def test_profiles_list_the_clauses_they_require():
    fenced = PROFILE_CLAUSES["fenced"]
    # every clause once: required, optional (store-clock) or a choice (expired-unsuperseded)
    assert sorted([*fenced.required, *fenced.optional, *fenced.choices]) == sorted(CLAUSES)
    assert set(fenced.optional) == {"store-clock"} and fenced.choices == ("expired-unsuperseded",)
    assert set(LIVENESS_CLAUSES) <= set(fenced.required)
    single = PROFILE_CLAUSES["single-writer"]
    assert set(single.required) == {
        "journal-a1", "journal-a2", "journal-a3", "journal-a4", "journal-a5", "meta-last-write", "blob-semantics",
        "delete-semantics", "unleased-passthrough", "concurrent-boot", "call-returns", "no-crash"}
    req = clause_requirements("single-writer")
    assert req["stale-rejected"] == req["atomic-fence"] == req["store-clock"] == "not-claimed"
    assert req["journal-a1"] == req["unleased-passthrough"] == req["no-crash"] == "required"
    assert set(clause_requirements("fenced").values()) == {"required", "optional", "choice"}
    assert clause_requirements("fenced")["store-clock"] == "optional"
    # docs/certify.md shows the same lists
    doc = (ROOT / "docs" / "certify.md").read_text()
    for name, profile in PROFILE_CLAUSES.items():
        section = doc.split(f"### `{name}`")[1].split("###")[0].split("## ")[0]
        listed = section.split("**Required exercised:**")[1].split("\n- ")[0]
        assert set(re.findall(r"`([a-z0-9-]+)`", listed)) == set(profile.required), name
        for clause in profile.optional:
            assert f"`{clause}`" in section.split("**Judged where exercised, not required:**")[1], clause


# -- reading each suite's output ------------------------------------------------------------------

@dataclass
class FakeConformance:
    """What `soak.conformance.run_conformance` returns, as far as certify reads it."""

    results: list[CheckResult]
    timing: str = "injected clock"
    lease_ttl_ms: int = 200
    choices: dict[str, str] = field(default_factory=dict)
    busy: BusyCount = field(default_factory=BusyCount)


def _conformance(status: dict[str, str] | None = None, detail: dict[str, str] | None = None,
                 skip: tuple[str, ...] = (), **kw) -> FakeConformance:
    """One check per clause, `pass` unless `status` says otherwise; none at all for `skip`."""
    status, detail = status or {}, detail or {}
    results = [CheckResult(c, c, status.get(c, "pass"), detail.get(c, "ok")) for c in CLAUSES if c not in skip]
    return FakeConformance(results, **kw)


def _model(**kw) -> ModelOutcome:
    exercised = {c: 5 for c in CLAUSES if c not in MODEL_NEVER_EXERCISES}
    fields = dict(passed=True, clock="fake", clock_reason="fake clock: the store declares injectable_clock = True",
                  exercised=exercised, choices={"expired-unsuperseded": "refuses", "delete-ends-tenure": "keeps"})
    fields.update(kw)
    return ModelOutcome(**fields)


def _boot(died: int = 0) -> BootReport:
    boot = BootReport("s", 2, 1, attempts=2, boot_times_s=[0.01, 0.02])
    boot.failures_list += [BootFailure(1, i, "died", "exit code -11") for i in range(died)]
    return boot


def _verdict(result: str = "pass", exercised: dict[str, int] | None = None, violations=(), reasons=(),
             choices=None) -> dict:
    stats: dict = {}
    if exercised is not None:
        stats["exercised"] = exercised
    if choices:
        stats["choices"] = choices
    return {"result": result, "violations": list(violations), "reasons": list(reasons), "stats": stats}


def test_conformance_statuses_are_read_honestly():
    report = _conformance(
        status={"atomic-fence": "not-exercised", "lease-exclusive": "inconclusive", "run-match": "skipped-somehow",
                "typed-refusal": "error", "stale-rejected": "fail"},
        detail={"atomic-fence": "needs two store objects over one location"},
        choices={"expired-unsuperseded": "accepts", "delete-ends-tenure": "ends"})
    report.results.append(CheckResult("journal-a1", "a1-extra", "not-exercised", "no big payloads"))
    got, choices = conformance_sources(report, profile="fenced", clauses=list(CLAUSES), injectable_clock=True)
    first = {c: entries[0][0] for c, entries in got.items()}
    assert first["atomic-fence"] == "not-exercised" and "two store objects" in got["atomic-fence"][0][1]
    assert first["lease-exclusive"] == "inconclusive" and first["run-match"] == "not-exercised"  # unknown status
    assert first["typed-refusal"] == "error" and first["stale-rejected"] == "fail"
    assert first["journal-a1"] == "pass" and "not decided: a1-extra" in got["journal-a1"][0][1]
    # the choice clause is a choice, never a pass
    assert got["expired-unsuperseded"][0] == ("choice", got["expired-unsuperseded"][0][1], "accepts")
    assert choices == {"expired-unsuperseded": ("accepts", "reported by the conformance checks"),
                       "delete-ends-tenure": ("ends", "reported by the conformance checks")}
    # a conformance without `choices` (before it reported them): the choice clause is not exercised
    older = SimpleNamespace(results=_conformance().results, timing="injected clock")
    got, choices = conformance_sources(older, profile="fenced", clauses=["expired-unsuperseded"], injectable_clock=True)
    assert got["expired-unsuperseded"][0][0] == "not-exercised" and choices == {}
    # no check recorded for a clause asked for
    got, _ = conformance_sources(_conformance(skip=("no-crash",)), profile="fenced", clauses=["no-crash"],
                                 injectable_clock=True)
    assert got["no-crash"][0][0] == "not-exercised"


def test_store_clock_passes_only_where_the_store_declares_the_clock():
    report = _conformance(timing="real sleeps")
    with_clock, _ = conformance_sources(report, profile="fenced", clauses=["store-clock"], injectable_clock=True)
    without, _ = conformance_sources(report, profile="fenced", clauses=["store-clock"], injectable_clock=False)
    assert with_clock["store-clock"][0][0] == "pass"
    assert without["store-clock"][0][0] == "not-exercised" and "declares no injectable clock" in without["store-clock"][0][1]
    real = _model(clock="real", clock_reason="real time: the store does not declare injectable_clock = True",
                  exercised={"store-clock": 9, "ttl-honoured": 3})
    got, _ = model_sources(real, clauses=["store-clock", "ttl-honoured"], never=MODEL_NEVER_EXERCISES)
    assert got["store-clock"][0][0] == "not-exercised" and "does not declare" in got["store-clock"][0][1]
    assert got["ttl-honoured"][0][0] == "pass"


def test_the_model_passes_only_what_its_programs_judged():
    outcome = _model(exercised={"lease-exclusive": 4, "expired-unsuperseded": 99})
    got, choices = model_sources(outcome, clauses=list(CLAUSES), never=MODEL_NEVER_EXERCISES)
    assert got["lease-exclusive"][0][0] == "pass"
    assert got["stale-rejected"][0] == ("not-exercised", "no program made a judgement of it", None)
    for clause in ("atomic-fence", "concurrent-boot", "no-crash"):
        assert got[clause][0] == ("not-exercised", MODEL_NEVER_EXERCISES[clause], None)
    assert got["expired-unsuperseded"][0][0] == "choice" and got["expired-unsuperseded"][0][2] == "refuses"
    assert choices["delete-ends-tenure"][0] == "keeps"
    busy = _model(passed=False, inconclusive=True, reason="inconclusive: acquire answered StoreBusyError 60 times")
    got, _ = model_sources(busy, clauses=["lease-exclusive"], never=MODEL_NEVER_EXERCISES)
    assert got["lease-exclusive"][0][0] == "inconclusive" and "StoreBusyError" in got["lease-exclusive"][0][1]
    failed = _model(passed=False, clause="run-match", error="ContractViolation: [run-match] ...",
                    program=("state = FencedStoreMachine()", "state.teardown()"))
    got, _ = model_sources(failed, clauses=["run-match", "lease-exclusive"], never=MODEL_NEVER_EXERCISES)
    assert got["run-match"][0][0] == "fail" and got["lease-exclusive"][0][0] == "incomplete"


def test_the_storm_passes_what_it_recorded_and_falls_back_for_older_verdicts():
    verdict = _verdict(exercised={"lease-exclusive": 120, "no-crash": 40, "call-returns": 0},
                       choices={"delete-ends-tenure": "ends"})
    got, choices = storm_sources(verdict, status="quorum", seed=7, clauses=list(CLAUSES))
    assert got["lease-exclusive"][0][0] == "pass" and "120 recorded operation(s)" in got["lease-exclusive"][0][1]
    assert got["no-crash"][0][0] == "pass"
    assert got["call-returns"][0][0] == "not-exercised" and got["stale-rejected"][0][0] == "not-exercised"
    assert "store-clock" not in got and "expired-unsuperseded" not in got  # the storm says nothing of them
    assert choices == {"delete-ends-tenure": ("ends", "seen in the storm's history")}
    older, _ = storm_sources(_verdict(), status="quorum", seed=7, clauses=list(CLAUSES))
    assert set(older) == STORM_CLAUSES and {e[0][0] for e in older.values()} == {"pass"}
    cut, _ = storm_sources(_verdict(), status="timeout", seed=7, clauses=["lease-exclusive"])
    assert cut["lease-exclusive"][0][0] == "not-exercised" and "before its quorum" in cut["lease-exclusive"][0][1]
    unknown, _ = storm_sources(_verdict("inconclusive", reasons=["quorum not met"]), status="quorum", seed=7,
                               clauses=["lease-exclusive"])
    assert unknown["lease-exclusive"][0][0] == "inconclusive"
    fail = _verdict("fail", exercised={"lease-exclusive": 3, "no-crash": 3},
                    violations=[{"clause": "no-crash", "statement": "worker 2 died by SIGSEGV inside put_meta"}])
    got, _ = storm_sources(fail, status="quorum", seed=7, clauses=["no-crash", "lease-exclusive"])
    assert got["no-crash"][0][0] == "fail" and "SIGSEGV" in got["no-crash"][0][1]
    assert got["lease-exclusive"][0][0] == "pass"


def test_the_boot_storm_speaks_of_concurrent_boot_and_no_crash():
    assert {c: e[0][0] for c, e in boot_sources(_boot()).items()} == {"concurrent-boot": "pass", "no-crash": "pass"}
    died = boot_sources(_boot(died=1))
    assert died["concurrent-boot"][0][0] == "fail" and died["no-crash"][0][0] == "fail"
    assert "exit code -11" in died["no-crash"][0][1]


def test_judge_passes_a_clause_only_when_some_suite_exercised_it_and_none_failed():
    sources = {
        "conformance": {"lease-exclusive": [("pass", "ok", None)], "run-match": [("not-exercised", "no", None)],
                        "stale-rejected": [("pass", "ok", None)]},
        "model": {"lease-exclusive": [("incomplete", "stopped", None)], "run-match": [("inconclusive", "busy", None)],
                  "stale-rejected": [("fail", "accepted a stale put_meta", None)]},
    }
    verdict = judge(FENCED, sources, {})
    clauses = verdict["clauses"]
    assert clauses["lease-exclusive"].result == "pass"
    assert clauses["run-match"].result == "not-exercised"
    assert "conformance: no" in clauses["run-match"].reason and "model: busy" in clauses["run-match"].reason
    assert clauses["stale-rejected"].result == "fail"
    assert clauses["atomic-fence"].result == "not-exercised" and clauses["atomic-fence"].reason == "no suite exercised it"
    assert verdict["result"] == "fail" and verdict["violated"] == ["stale-rejected"]
    # without the violation: not a pass while a required clause was not exercised
    sources["model"]["stale-rejected"] = [("pass", "ok", None)]
    verdict = judge(FENCED, sources, {})
    assert verdict["result"] == "inconclusive" and "run-match" in verdict["not_exercised"]
    assert "not a pass" in verdict["statement"] and "run-match" in verdict["statement"]


# -- the whole certification with fakes of the suites ------------------------------------------------

def _full_storm() -> dict:
    return _verdict(exercised={c: 10 for c in [*STORM_CLAUSES, *LIVENESS_CLAUSES]})


@pytest.fixture
def fake_suites(monkeypatch):
    """Replace every suite with a fake of its output; returns the dict a test edits before certifying."""
    fakes = {"conformance": _conformance(), "model": _model(), "boot": _boot(), "verdict": _full_storm(),
             "status": "quorum"}

    def conformance(target, **kw):
        if isinstance(fakes["conformance"], Exception):
            raise fakes["conformance"]
        return fakes["conformance"]

    def model(target, **kw):
        if isinstance(fakes["model"], Exception):
            raise fakes["model"]
        return fakes["model"]

    def storm(target, plan, storm_dir, seed, time_bound_s, claimed, say, progress):
        sources, choices = storm_sources(fakes["verdict"], status=fakes["status"], seed=1, clauses=claimed)
        component = {"result": fakes["verdict"]["result"], "status": fakes["status"], "scenario": "smoke",
                     "workers": 3, "lease_ttl_ms": 250, "quorum_target": {}, "quorum_reached": {}, "violations": 0,
                     "violated_clauses": [], "report_error": ""}
        return component, sources, choices, {"storm": 1, "workers": {}}

    monkeypatch.setattr("soak.conformance.run_conformance", conformance)
    monkeypatch.setattr("soak.model.check_model", model)
    monkeypatch.setattr("soak.storm.boot.boot_storm", lambda target, **kw: fakes["boot"])
    monkeypatch.setattr("soak.certify._suites.storm", storm)
    return fakes


def test_fakes_of_every_suite_certify(tmp_path, capsys, fake_suites):
    rc, cert, printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 0 and cert["result"] == "pass", printed
    assert all(c["result"] == "pass" for n, c in cert["clauses"].items() if n != "expired-unsuperseded")


def test_a_required_clause_not_exercised_is_not_a_pass(tmp_path, capsys, fake_suites):
    fake_suites["conformance"] = _conformance(status={"atomic-fence": "not-exercised"},
                                              detail={"atomic-fence": "a capability the check needs is absent"})
    rc, cert, printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 3 and cert["result"] == "inconclusive", printed
    assert cert["not_exercised"] == ["atomic-fence"] and cert["violated"] == []
    assert cert["required_failed"] == ["atomic-fence"]
    af = cert["clauses"]["atomic-fence"]
    assert af["result"] == "not-exercised" and "a capability the check needs is absent" in af["reason"]
    assert af["exercised_by"] == []
    assert "certify: INCONCLUSIVE" in printed
    assert "NOT EXERCISED atomic-fence (required): conformance: atomic-fence: a capability the check needs is absent" in printed
    assert "INCONCLUSIVE: not a pass" in (tmp_path / "c" / CERTIFICATE_HTML).read_text()


def test_a_violation_fails_the_certificate_even_with_clauses_not_exercised(tmp_path, capsys, fake_suites):
    fake_suites["conformance"] = _conformance(status={"stale-rejected": "fail", "atomic-fence": "not-exercised"},
                                              detail={"stale-rejected": "stale put_meta accepted"})
    rc, cert, printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 1 and cert["result"] == "fail"
    assert cert["violated"] == ["stale-rejected"] and cert["not_exercised"] == ["atomic-fence"]
    assert "FAIL stale-rejected: conformance fail: stale-rejected: stale put_meta accepted" in printed


def test_store_clock_is_not_exercised_for_a_store_without_the_declaration(tmp_path, capsys, fake_suites):
    # The conformance of today passes store-clock in wall time; the model ran in real time.
    fake_suites["conformance"] = _conformance(timing="real sleeps")
    fake_suites["model"] = _model(clock="real", clock_reason="real time: the store does not declare "
                                  "injectable_clock = True", exercised={c: 5 for c in CLAUSES if c != "store-clock"})
    rc, cert, printed = _certify(capsys, tmp_path / "c", "--store", "tests.certify_stores:open_no_clock")
    assert cert["injectable_clock"]["declared"] is False
    sc = cert["clauses"]["store-clock"]
    assert sc["requirement"] == "optional" and sc["result"] == "not-exercised"
    assert sc["suites"]["conformance"] == "not-exercised" and sc["suites"]["model"] == "not-exercised"
    assert "declares no injectable clock" in sc["reason"]
    # not required by the fenced profile: reported, not blocking
    assert rc == 0 and cert["result"] == "pass" and cert["optional_not_exercised"] == ["store-clock"]
    assert "not exercised (not required): store-clock" in cert["statement"]
    assert "not exercised store-clock (not required)" in printed
    assert "injectable clock: not declared" in printed


def test_a_store_clock_violation_fails_though_the_clause_is_not_required(tmp_path, capsys, fake_suites):
    fake_suites["conformance"] = _conformance(status={"store-clock": "fail"},
                                              detail={"store-clock": "expiry followed wall time"})
    rc, cert, _printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 1 and cert["violated"] == ["store-clock"]


def test_expired_unsuperseded_is_shown_as_a_choice(tmp_path, capsys, fake_suites):
    fake_suites["conformance"] = _conformance(choices={"expired-unsuperseded": "accepts", "delete-ends-tenure": "ends"})
    fake_suites["model"] = _model(choices={"expired-unsuperseded": "accepts", "delete-ends-tenure": "ends"})
    rc, cert, printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 0, printed
    eu = cert["clauses"]["expired-unsuperseded"]
    assert eu["result"] == "choice" and eu["choice"] == "accepts" and eu["requirement"] == "choice"
    assert eu["suites"]["conformance"] == eu["suites"]["model"] == "choice: accepts"
    assert cert["choices"]["expired-unsuperseded"]["choice"] == "accepts"
    assert cert["choices"]["delete-ends-tenure"] == {
        "clause": "delete-semantics", "choice": "ends", "values": ["ends", "keeps"],
        "sources": [{"source": "conformance", "choice": "ends", "detail": "reported by the conformance checks"},
                    {"source": "model", "choice": "ends", "detail": ""}]}
    assert cert["clauses"]["delete-semantics"]["result"] == "pass" and cert["clauses"]["delete-semantics"]["choice"] == "ends"
    assert "choice expired-unsuperseded: accepts (conformance accepts, model accepts)" in printed
    assert "choice delete-ends-tenure: ends" in printed
    page = (tmp_path / "c" / CERTIFICATE_HTML).read_text()
    assert "The store's choices" in page and "choice: accepts" in page
    row = next(line for line in render_table(cert).splitlines() if line.startswith("expired-unsuperseded"))
    assert row.split()[:4] == ["expired-unsuperseded", "choice", "choice:", "accepts"]


def test_suites_that_disagree_on_a_choice_show_mixed(tmp_path, capsys, fake_suites):
    fake_suites["conformance"] = _conformance(choices={"expired-unsuperseded": "accepts"})
    rc, cert, _printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")  # the model saw it refuse
    assert rc == 0 and cert["clauses"]["expired-unsuperseded"]["choice"] == "mixed"


def test_no_suite_seeing_the_choice_is_not_exercised_and_not_blocking(tmp_path, capsys, fake_suites):
    fake_suites["model"] = _model(choices={})
    rc, cert, _printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 0 and cert["clauses"]["expired-unsuperseded"]["result"] == "not-exercised"
    assert cert["choices"]["expired-unsuperseded"]["choice"] == "not-observed"


def test_busy_counts_are_shown(tmp_path, capsys, fake_suites):
    fake_suites["conformance"] = _conformance(busy=BusyCount(retries=7))
    fake_suites["model"] = _model(busy_retries=4)
    rc, cert, printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 0
    assert cert["components"]["conformance"]["busy"] == "7 StoreBusyError answer(s) retried"
    assert cert["components"]["model"]["busy"] == "4 StoreBusyError answer(s) retried"
    assert cert["injectable_clock"]["busy"] == "0 StoreBusyError answer(s) retried"
    assert "busy: conformance 7 StoreBusyError answer(s) retried; model 4 StoreBusyError" in printed


def test_a_model_run_left_inconclusive_by_busy_answers_passes_nothing(tmp_path, capsys, fake_suites):
    fake_suites["conformance"] = _conformance(skip=("call-returns",))
    fake_suites["model"] = _model(passed=False, inconclusive=True, reason="inconclusive: acquire answered "
                                  "StoreBusyError 60 times in a row", busy_retries=60)
    fake_suites["verdict"] = _verdict(exercised={c: 3 for c in STORM_CLAUSES})  # the storm saw no liveness
    rc, cert, _printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 3 and cert["not_exercised"] == ["call-returns"]
    assert cert["clauses"]["call-returns"]["suites"]["model"] == "inconclusive"
    assert cert["components"]["model"]["result"] == "inconclusive"


def test_a_suite_that_crashes_concludes_nothing(tmp_path, capsys, fake_suites):
    fake_suites["conformance"] = _conformance(skip=("call-returns",))
    fake_suites["model"] = RuntimeError("the model fell over")
    fake_suites["verdict"] = _verdict(exercised={c: 3 for c in STORM_CLAUSES})
    rc, cert, _printed = _certify(capsys, tmp_path / "c", "--store", "sqlite:")
    assert rc == 3 and cert["not_exercised"] == ["call-returns"]
    model = cert["components"]["model"]
    assert model["result"] == "inconclusive" and "model crashed: RuntimeError: the model fell over" in model["crash"]
    assert "soak-traceback.txt" in model["crash"] and (tmp_path / "c" / "soak-traceback.txt").is_file()
    assert cert["clauses"]["lease-exclusive"]["suites"]["model"] == "inconclusive"
    assert cert["clauses"]["lease-exclusive"]["result"] == "pass"  # conformance and the storm exercised it
