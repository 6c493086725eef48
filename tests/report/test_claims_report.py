"""A claims run's report: claim tenures per task, recoveries and aborts marked and tabled, node strips, counts,
and a JUnit document with a test case per claim clause; and the claims tenure builder on hand-made histories."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from soak.check import check_run
from soak.clauses import CLAIM_CLAUSES, LIVENESS_CLAUSES, clause_title
from soak.history import Operation
from soak.report import build_report
from soak.report.data import load_run_data
from soak.report.junit import junit_xml
from soak.scenario import load_scenario
from soak.stores import resolve
from soak.storm import run_storm
from soak.workloads.claims import ClaimLease, counts_of
from soak.workloads.claims.report import report_tenures

JUNIT_XSD = Path(__file__).parents[1] / "data" / "junit.xsd"


@pytest.fixture(scope="module")
def claims_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("claims") / "run"
    scenario = load_scenario("claims", {"time_bound_s": 20.0, "quorum.claims_won": 20, "quorum.conflicts": 10,
                                        "quorum.progress": 40, "quorum.recoveries": 2, "quorum.aborts": 2,
                                        "quorum.splits_repaired": 0, "quorum.pauses": 3, "quorum.kills": 1})
    run_storm(scenario, resolve("tests.claim_stores:open_locked", kind="claims"), run_dir, progress=False)
    check_run(run_dir)  # writes verdict.json
    build_report(run_dir)
    return run_dir


def test_the_timeline_has_claim_tenures_per_task_and_node_strips(claims_run: Path):
    data = load_run_data(claims_run)
    tl = data.timeline
    assert tl is not None and tl.lanes == tuple(f"p{p}/t{t}" for p in range(2) for t in range(3))
    assert len({t.run for t in data.tenures}) >= 3
    assert all(re.fullmatch(r"n\d+/a\d+", t.process) and t.process.startswith(t.group + "/") for t in data.tenures)
    assert {t.ended for t in data.tenures} <= {"released", "recovered", "superseded", "open"}
    assert "released" in {t.ended for t in data.tenures}
    for task in {t.run for t in data.tenures}:  # one bar per epoch, epochs in time order
        mine = sorted((t for t in data.tenures if t.run == task), key=lambda t: t.start_ns)
        assert [t.epoch for t in mine] == sorted(t.epoch for t in mine)
    assert tl.strips == ("n0", "n1", "n2")  # the nodes, not the final-state reader
    assert {s.kind for s in tl.spans} & {"paused", "offline"}
    kills = [e for e in data.events if e.kind == "kill" and e.process == "nemesis"]
    assert len([m for m in tl.marks if m.kind == "kill"]) >= len(kills) >= 1
    png = (claims_run / "timeline.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_recoveries_and_aborts_of_the_history_are_in_the_report(claims_run: Path):
    data = load_run_data(claims_run)
    text = (claims_run / "report.html").read_text()
    recovered = [op for op in data.ops if op.f == "recover" and op.outcome == "ok"]
    aborted = [op for op in data.ops
               if any(n == "aborts" for n, _ in counts_of(op.f, op.intent, op.outcome, op.error, op.args, op.result))]
    assert recovered and aborted, "the storm should recover and abort (quorum recoveries 2, aborts 2)"
    rows = _table_rows(text, "Recoveries")
    for op in recovered:
        assert [op.run, str(op.lease.epoch), f"{op.lease.node}/{op.lease.agent}", op.args["by"]] in \
            [r[:4] for r in rows]
    assert {r[-1] for r in _table_rows(text, "Returning-owner aborts")} >= {op.tag for op in aborted}
    # a tenure ends at the first call that ended it: its recovery, unless its own release was accepted before
    ended = {(t.run, t.epoch): t.ended for t in data.tenures}
    released_at = {}
    for op in data.ops:
        if op.f == "release" and op.outcome == "ok" and op.lease is not None:
            key = (op.run, op.lease.epoch)
            released_at[key] = min(released_at.get(key, op.complete_ns), op.complete_ns)
    for op in recovered:
        key = (op.run, op.lease.epoch)
        want = "released" if released_at.get(key, op.complete_ns + 1) < op.complete_ns else "recovered"
        assert ended.get(key) == want, (key, ended.get(key), want)
    assert "recovered" in ended.values()
    counts = {r[0]: r[1] for r in _table_rows(text, "Counts")}
    storm = data.storm["counts"]
    for key in ("claims_won", "conflicts", "recoveries", "aborts", "splits_repaired"):
        assert counts[key] == str(storm.get(key, 0))
    for generic in ("Activity", "Latency", "Quorum", "Workers", "Environment"):
        assert f"<h2>{generic}</h2>" in text
    assert text.count("data:image/png;base64,") == 4


def _table_rows(text: str, title: str) -> list[list[str]]:
    section = text.split(f"<h3>{title}</h3>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", section)[1:]
    return [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r)] for r in rows]


def test_junit_has_a_case_per_claim_clause_and_validates(claims_run: Path):
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(claims_run / "junit.xml"))
    suite = ET.parse(claims_run / "junit.xml").getroot().find("testsuite")
    clauses = {c.get("name") for c in suite.iter("testcase") if c.get("classname") == "soak.clauses"}
    assert clauses == set(CLAIM_CLAUSES) | set(LIVENESS_CLAUSES)
    assert "stale-rejected" not in clauses  # a run clause: not what a claims store is judged by


def test_junit_failure_names_the_claim_clause_and_statement(claims_run: Path):
    info = load_run_data(claims_run).info
    verdict = {"result": "fail", "violations": [
        {"clause": "heartbeat-fenced", "statement": "p0/t1: heartbeat <w1.1#9> accepted after its tenure ended",
         "evidence": [{"process": "w1.1", "index": 9, "f": "heartbeat", "run": "p0/t1"}]}]}
    doc = junit_xml(info, verdict)
    schema = xmlschema.XMLSchema(str(JUNIT_XSD))
    assert schema.is_valid(doc.decode())
    suite = ET.fromstring(doc).find("testsuite")
    failed = [c for c in suite.iter("testcase")
              if c.find("failure") is not None and c.get("classname") == "soak.clauses"]
    assert [c.get("name") for c in failed] == ["heartbeat-fenced"]
    failure = failed[0].find("failure")
    assert failure.get("type") == "heartbeat-fenced" and clause_title("heartbeat-fenced") in failure.get("message")
    assert "heartbeat <w1.1#9> accepted" in failure.text and "process=w1.1" in failure.text


# -- the tenure builder on hand-made histories ---------------------------------------------------------------


def _op(process, index, f, key, lease, outcome, result=None, *, at, intent="live", args=None, error=None):
    return Operation(process, index, f, key, None if lease is None else ClaimLease(*lease), intent, args or {},
                     outcome, result or {}, error, None, at - 1, at)


def _claimed(owner, epoch):
    return {"claim": {"owner": [owner[0], owner[1], "run"], "epoch": epoch, "renewed_at": 0.0}}


def test_claims_tenures_end_released_recovered_superseded_or_open():
    k = "p0/t0"
    ops = [
        _op("w0.1", 1, "claim", k, None, "ok", _claimed(("n0", "a0"), 1), at=10, intent="claim"),
        _op("w0.1", 2, "heartbeat", k, (k, "n0", "a0", 1), "ok", _claimed(("n0", "a0"), 1), at=20),
        _op("w0.1", 3, "release", k, (k, "n0", "a0", 1), "ok", at=30),
        _op("w1.1", 1, "claim", k, None, "ok", _claimed(("n1", "a1"), 2), at=40, intent="claim"),
        _op("w1.1", 2, "record_progress", k, (k, "n1", "a1", 2), "ok", at=45, args={"step": 1}),
        _op("w2.1", 1, "recover", k, (k, "n1", "a1", 2), "ok", at=60, intent="recover", args={"by": "n2"}),
        _op("w1.1", 3, "heartbeat", k, (k, "n1", "a1", 2), "fail", at=65, error="CheckoutConflictError"),
        _op("w2.1", 2, "claim", k, None, "ok", _claimed(("n2", "a0"), 3), at=70, intent="claim"),
        _op("w2.1", 3, "claim", k, (k, "n2", "a0", 3), "ok", _claimed(("n2", "a0"), 3), at=75, intent="renew",
            args={"renew": 3}),
        _op("w0.2", 1, "claim", k, None, "ok", _claimed(("n0", "a1"), 4), at=90, intent="claim"),
        _op("w0.2", 2, "release", k, (k, "n0", "a1", 4), "info", at=95),  # unknown: the tenure stays open
    ]
    got = [(t.run, t.epoch, t.process, t.group, t.start_ns, t.end_ns, t.ended) for t in report_tenures(ops, 100)]
    assert got == [
        (k, 1, "n0/a0", "n0", 10, 30, "released"),
        (k, 2, "n1/a1", "n1", 40, 60, "recovered"),  # the refused heartbeat after it does not extend it
        (k, 3, "n2/a0", "n2", 70, 90, "superseded"),  # a renewal is no new tenure
        (k, 4, "n0/a1", "n0", 90, 100, "open"),
    ]


def test_a_superseded_tenure_used_after_its_successor_runs_on_to_its_last_use():
    k = "p1/t2"
    ops = [
        _op("w0.1", 1, "claim", k, None, "ok", _claimed(("n0", "a0"), 5), at=10, intent="claim"),
        _op("w1.1", 1, "claim", k, None, "ok", _claimed(("n1", "a0"), 6), at=20, intent="claim"),
        _op("w0.1", 2, "record_progress", k, (k, "n0", "a0", 5), "ok", at=30, args={"step": 2}),  # accepted late
    ]
    got = [(t.epoch, t.start_ns, t.end_ns, t.ended) for t in report_tenures(ops, 50)]
    assert got == [(5, 10, 30, "superseded"), (6, 20, 50, "open")]


def test_a_claim_answered_after_the_next_epochs_grant_starts_before_it():
    """A claim whose caller was held stopped between the store's grant and its answer completes after the next
    epoch's claim: its tenure took effect first, so its bar starts before the next one's (epochs in time order)."""
    k = "p0/t1"
    ops = [
        _op("w1.1", 1, "claim", k, None, "ok", _claimed(("n1", "a0"), 8), at=20, intent="claim"),
        _op("w0.1", 1, "claim", k, None, "ok", _claimed(("n0", "a0"), 7), at=25, intent="claim"),  # held, answered late
    ]
    got = [(t.epoch, t.start_ns, t.end_ns, t.ended) for t in report_tenures(ops, 50)]
    assert got == [(7, 19, 20, "superseded"), (8, 20, 50, "open")]
