"""`junit.xml`: one test case per contract clause and per quorum item, so CI shows what failed."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from soak.clauses import CLAUSES, clause_title
from soak.rundir import RunInfo

__all__ = ["junit_xml"]


def _statement(v: dict[str, Any]) -> str:
    lines = [v.get("statement", "")]
    for ev in v.get("evidence", [])[:20]:
        lines.append("  " + ", ".join(f"{k}={ev[k]}" for k in sorted(ev) if ev[k] is not None))
    return "\n".join(lines)


def _clauses(workload: str) -> tuple[str, ...]:
    """The clauses a workload's verdict judges (`Workload.clauses`; the run clauses for one that names none or
    that this soak cannot load)."""
    from soak.errors import ScenarioError
    from soak.workloads import get_workload

    try:
        return tuple(getattr(get_workload(workload), "clauses", CLAUSES))
    except ScenarioError:
        return tuple(CLAUSES)


def junit_xml(info: RunInfo, verdict: dict[str, Any] | None, *, suite: str = "soak") -> bytes:
    """The verdict as a JUnit document (testsuites > testsuite > testcase): a test case per clause the run's
    workload is judged by, per quorum item, and one erroring case for an inconclusive verdict."""
    verdict = verdict or {"result": "inconclusive", "violations": [], "reasons": ["no verdict was written"]}
    by_clause: dict[str, list[dict[str, Any]]] = {}
    for v in verdict.get("violations", []):
        by_clause.setdefault(v.get("clause", "unknown"), []).append(v)
    cases: list[ET.Element] = []
    failures = errors = 0
    for clause in sorted(set(_clauses(info.workload)) | set(by_clause)):
        case = ET.Element("testcase", name=clause, classname=f"{suite}.clauses", time="0")
        found = by_clause.get(clause)
        if found:
            failures += 1
            fail = ET.SubElement(case, "failure", message=f"{len(found)} violation(s) of {clause}: "
                                 f"{clause_title(clause)}", type=clause)
            fail.text = "\n\n".join(_statement(v) for v in found[:20])
        cases.append(case)
    for item in sorted(info.quorum_target):
        target, reached = info.quorum_target[item], info.quorum_reached.get(item, 0)
        case = ET.Element("testcase", name=item, classname=f"{suite}.quorum", time="0")
        if reached < target:
            failures += 1
            ET.SubElement(case, "failure", message=f"reached {reached} of {target}", type="quorum")
        cases.append(case)
    if verdict.get("result") == "inconclusive":
        case = ET.Element("testcase", name="verdict", classname=f"{suite}.verdict", time="0")
        errors += 1
        err = ET.SubElement(case, "error", message="inconclusive", type="inconclusive")
        err.text = "\n".join(verdict.get("reasons", []))
        cases.append(case)
    duration = max(info.ended_ns - info.started_ns, 0) / 1e9
    root = ET.Element("testsuites", name=suite, tests=str(len(cases)), failures=str(failures),
                      errors=str(errors), time=f"{duration:.3f}")
    ts = ET.SubElement(root, "testsuite", name=f"{suite}.{info.workload}", tests=str(len(cases)),
                       failures=str(failures), errors=str(errors), skipped="0", time=f"{duration:.3f}")
    props = ET.SubElement(ts, "properties")
    for key, value in (("store", info.store), ("seed", info.seed), ("lease_ttl_ms", info.lease_ttl_ms),
                       ("workers", info.workers), ("status", info.status)):
        ET.SubElement(props, "property", name=key, value=str(value))
    ts.extend(cases)
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")
