"""Verdict records: merge order, validation, JSON round trip."""

from __future__ import annotations

import json

import pytest

from soak.check.verdict import Evidence, Verdict, Violation, merge_results

EV = Evidence("w1.1", 3, "append", "r1", 2, 1, "ok", 10, 20, "w1.1#3")


def test_merge_order_is_fail_then_inconclusive_then_pass():
    assert merge_results() == "pass"
    assert merge_results("pass", "inconclusive") == "inconclusive"
    assert merge_results("inconclusive", "fail", "pass") == "fail"
    with pytest.raises(ValueError):
        merge_results("maybe")


def test_verdicts_merge_findings():
    bad = Verdict.build([Violation("stale-rejected", "x", (EV,))])
    unsure = Verdict.build(reasons=["timeout"])
    merged = Verdict.build(stats={"ops": 1}).merge(unsure, bad)
    assert merged.result == "fail" and merged.reasons == ("timeout",) and merged.stats == {"ops": 1}
    assert unsure.merge(Verdict.build()).result == "inconclusive"


def test_unknown_clause_is_refused():
    with pytest.raises(ValueError, match="clause"):
        Violation("no-such-clause", "x")


def test_json_round_trip():
    v = Verdict.build([Violation("journal-a1", "lost", (EV, Evidence("w2.1", 0, "acquire", "r1", 3, None, "info", 5,
                                                                         None, "w2.1#0", "Incomplete")))],
                      ["quorum not met"], {"operations": 2})
    back = Verdict.from_json(json.loads(json.dumps(v.to_json())))
    assert back == v
    assert "fail: 1 violation(s) of journal-a1" == back.summary()
    assert EV.describe() == "w1.1#3 append r1 e2 c1 ok [10..20]"


def test_cli_text_caps_violations_per_clause():
    from soak.check.cli import format_verdict

    v = Verdict.build([Violation("stale-rejected", f"v{i}", (EV,)) for i in range(25)])
    text = format_verdict(v, per_clause=20)
    assert "v19" in text and "v20" not in text and "... and 5 more" in text
    assert "v24" in format_verdict(v, per_clause=None)
