"""The report is built from a stored run alone, escapes store strings, and its JUnit parses."""

import json
import xml.etree.ElementTree as ET

from soak.history import HistoryWriter, payload_for
from soak.report import build_report
from soak.report.junit import junit_xml
from soak.rundir import RUN_INFO, VERDICT_FILE, RunInfo, info_to_json, write_json
from soak.spi import Lease


def _run_dir(tmp_path, verdict):
    (tmp_path / "history").mkdir()
    w = HistoryWriter(tmp_path / "history" / "w0.1.jsonl", "w0.1")
    i = w.invoke("acquire", "r0", None, "live", {"owner": "w0.1"})
    w.complete(i, "ok", {"epoch": 1})
    lease = Lease("r0", "w0.1", 1)
    tag = f"w0.1#{w.next_index()}"
    i = w.invoke("append", "r0", lease, "live", {"seq": 1, "tag": tag, "c": 1})
    w.complete(i, "ok")
    w.event("stall", {"ms": 300})
    i = w.invoke("append", "r0", lease, "stale", {"seq": 2, "tag": f"w0.1#{w.next_index()}", "c": 2})
    w.complete(i, "fail", error="LeaseHeldError", message="<script>alert(1)</script>")
    w2 = HistoryWriter(tmp_path / "history" / "w1.1.jsonl", "w1.1")
    i = w2.invoke("acquire", "r0", None, "live", {"owner": "w1.1"})
    w2.complete(i, "ok", {"epoch": 2})
    i = w2.invoke("put_meta", "r0", Lease("r0", "w1.1", 2), "live", {"tag": "w1.1#1", "c": 1})  # killed mid-call
    n = HistoryWriter(tmp_path / "history" / "nemesis.jsonl", "nemesis")
    n.event("pause", {"target": "w1.1", "in_call": True})
    n.event("resume", {"target": "w1.1"})
    n.event("kill", {"target": "w1.1", "in_call": True})
    info = RunInfo("0.1.0", "runs", "evil:<b>store</b>", 7, 250, 2, ["r0"], [], status="quorum",
                   started_ns=0, ended_ns=10**9, quorum_target={"takeovers": 1}, quorum_reached={"takeovers": 1})
    write_json(tmp_path / RUN_INFO, info_to_json(info))
    if verdict is not None:
        write_json(tmp_path / VERDICT_FILE, verdict)
    assert payload_for(tag)
    return info


def test_report_files_and_escaping(tmp_path):
    verdict = {"result": "fail", "reasons": [], "violations": [
        {"clause": "stale-rejected", "statement": "stale <append> accepted",
         "evidence": [{"process": "w0.1", "index": 2, "f": "append", "run": "r0", "epoch": 1,
                       "invoke_ns": 5, "outcome": "ok", "tag": "w0.1#2"}]}]}
    _run_dir(tmp_path, verdict)
    out = build_report(tmp_path)
    text = out.read_text()
    assert "FAIL" in text and "stale-rejected" in text
    assert "<b>store</b>" not in text and "&lt;b&gt;store&lt;/b&gt;" in text
    assert "stale &lt;append&gt; accepted" in text
    assert "http://" not in text and "https://" not in text  # self-contained
    for name in ("timeline", "activity", "latency", "workers"):
        png = (tmp_path / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 2000
    assert text.count("data:image/png;base64,") == 4


def test_junit_names_failed_clause_and_quorum(tmp_path):
    verdict = {"result": "fail", "violations": [{"clause": "run-match", "statement": "x", "evidence": []}]}
    info = _run_dir(tmp_path, None)
    info.quorum_target["stale_refusals"] = 5
    root = ET.fromstring(junit_xml(info, verdict))
    suite = root.find("testsuite")
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == {"run-match", "stale_refusals"}
    assert suite.get("failures") == "2"
    assert int(suite.get("tests")) == len(list(suite.iter("testcase")))


def test_report_without_verdict_is_inconclusive(tmp_path):
    _run_dir(tmp_path, None)
    text = build_report(tmp_path).read_text()
    assert "INCONCLUSIVE" in text
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert root.get("errors") == "1"
    json.loads((tmp_path / RUN_INFO).read_text())


def test_trend_collects_runs(tmp_path):
    from soak.report.trend import collect, trend_png

    for i, result in enumerate(("pass", "fail")):
        d = tmp_path / f"run{i}"
        d.mkdir()
        _run_dir(d, {"result": result, "violations": [{"clause": "run-match"}] * i})
    points = collect(tmp_path)
    assert [p.result for p in points] == ["pass", "fail"]
    assert points[1].violations == 1 and points[0].ops_per_s > 0
    assert trend_png(points).startswith(b"\x89PNG")
