"""Probe coverage: every cell of the table is a quorum item of the smoke preset, operations file into the right
cell, the docs list every cell, and a smoke storm on `sqlite:` exercises every one and passes."""

from __future__ import annotations

import json
from pathlib import Path

from soak.scenario import load_scenario
from soak.storm import run_storm
from soak.stores import resolve
from soak.workloads.runs.coverage import CELLS, COVER_KEYS, UNREACHABLE, cell_of, table
from soak.workloads.runs.options import QUORUM_KEYS
from soak.workloads.runs.quorum import RunsCounter

DOCS = Path(__file__).resolve().parents[2] / "docs" / "coverage.md"


def test_every_cell_is_a_quorum_item_of_the_smoke_preset():
    smoke = load_scenario("smoke")
    assert len(set(COVER_KEYS)) == len(CELLS) >= 70
    assert set(COVER_KEYS) <= set(QUORUM_KEYS)
    assert all(smoke.quorum.get(k, 0) >= 1 for k in COVER_KEYS)
    assert smoke.quorum["takeovers"] == 40  # the quorum's own counters stay


def test_operations_file_into_their_cells():
    def name(key):
        c = cell_of(key)
        return None if c is None else c.name

    assert name(("append", "impostor", "fail", "LeaseHeldError", False)) == "append.impostor"
    assert name(("blob_delete", "cross", "ok", None, True)) == "blob_delete.cross"
    assert name(("blob_delete", "stale", "fail", "LeaseHeldError", True)) == "blob_delete.cross_dead"
    assert name(("renew", "stale", "fail", "LeaseHeldError", False)) == "renew.dead"
    assert name(("delete", "side", "ok", None, False)) == "delete.live"
    assert name(("delete", "live", "ok", None, False)) is None  # main runs are never deleted live
    assert name(("append", "order", "fail", "JournalOrderError", False)) == "append.order"
    assert name(("acquire", "live", "ok", None, False)) == "acquire.free"
    assert name(("acquire", "live", "fail", "LeaseHeldError", False)) == "acquire.held"
    assert name(("acquire", "reacquire", "fail", "LeaseHeldError", False)) is None  # another took it first
    assert name(("put_meta", "future", "info", "RuntimeError", False)) is None  # unknown: exercised nothing
    assert name(("load", "live", "ok", None, False)) is None


def test_the_counter_counts_cells_and_the_derived_ones():
    counter = RunsCounter()
    counter.add(("append", "impostor", "fail", "LeaseHeldError", False), 3)
    counter.granted["r0"] = {1, 2}
    counter.granted["r1"] = {1}
    counts = counter.counts()
    assert counts["cover_append_impostor"] == 3 and counts["cover_acquire_fresh"] == 2
    assert counts["cover_acquire_after_expiry"] == counts["takeovers"] == 1
    rows = table(counts)
    assert [r["cell"] for r in rows[:len(CELLS)]] == [c.name for c in CELLS]
    assert all(r["exercised"] is None and r["why"] for r in rows[len(CELLS):])


def test_the_docs_list_every_cell_with_its_clause():
    text = DOCS.read_text()
    for c in CELLS:
        assert f"| `{c.name}` | {c.clause} |" in text, c.name
    for surface, relation, clause, _, _ in UNREACHABLE:
        assert f"| `{surface}.{relation}` | {clause} |" in text


def test_a_smoke_storm_on_sqlite_exercises_every_cell_and_passes(tmp_path):
    from soak.check import check_run

    run_dir = tmp_path / "smoke"
    info = run_storm(load_scenario("smoke"), resolve("sqlite:"), run_dir, progress=False)
    assert info.status == "quorum"
    coverage = json.loads((run_dir / "storm.json").read_text())["coverage"]
    missed = [r["cell"] for r in coverage if r["exercised"] is not None and r["exercised"] < 1]
    assert not missed and len(coverage) == len(CELLS) + len(UNREACHABLE)
    verdict = check_run(run_dir)
    assert verdict.result == "pass", verdict.violations[:3]


def test_the_table_renders_for_the_report_and_certify():
    from soak.report import coverage_html, coverage_lines

    counts = {c.key: 2 for c in CELLS}
    counts[CELLS[5].key] = 0
    rows = table(counts)
    lines = coverage_lines(rows)
    assert lines[0] == f"probe coverage: {len(CELLS) - 1} of {len(CELLS)} cells exercised (1 never, marked !)"
    assert any(line.split()[0] == "acquire" for line in lines[1:])
    assert f"{CELLS[5].relation} 0!" in " ".join(lines)
    assert sum(line.strip().startswith("unreachable ") for line in lines) == len(UNREACHABLE)
    html = coverage_html(rows)
    assert "Probe coverage" in html and f"Not exercised: {CELLS[5].name}." in html and "unreachable" in html
    assert coverage_html(None) == "" and coverage_html([]) == ""
