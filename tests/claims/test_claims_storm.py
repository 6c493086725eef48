"""Claims storms: the correct stores pass, and each broken claim store fails naming its clause, with node pauses,
recoveries, returning-owner aborts and probes in the history."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from soak.check import check_run
from soak.scenario import Scenario, load_scenario
from soak.stores import resolve
from soak.storm import run_storm
from tests.claim_stores import BROKEN

QUICK = {"claims_won": 20, "conflicts": 10, "progress": 40, "recoveries": 3, "aborts": 3, "probes": 5, "pauses": 3,
         "stale_sweeps": 15, "kills": 1}


def storm(tmp_path: Path, spec: str, *, seed: int = 7, quorum=None, **changes):
    changes.setdefault("time_bound_s", 40.0)
    sc = load_scenario("claims").replace(seed=seed, quorum=quorum or QUICK, **changes)
    run_dir = tmp_path / "run"
    info = run_storm(sc, resolve(spec, kind="claims"), run_dir, progress=False)
    return info, check_run(run_dir), run_dir


def events(run_dir: Path) -> Counter:
    n = Counter()
    for path in (run_dir / "history").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("t") == "event":
                n[rec["kind"]] += 1
    return n


def test_the_claims_preset_is_the_workload_default():
    sc = load_scenario("claims")
    assert sc.workload == "claims" and sc.options == Scenario(workload="claims").options
    assert sc.quorum == Scenario(workload="claims").quorum


def test_a_correct_claim_store_passes_and_the_storm_shows_the_nemesis_at_work(tmp_path: Path):
    info, verdict, run_dir = storm(tmp_path, "tests.claim_stores:open_locked")
    assert info.status == "quorum", info.quorum_reached
    assert verdict.result == "pass", (verdict.reasons, [v.statement for v in verdict.violations[:3]])
    q = info.quorum_reached
    assert q["recoveries"] >= 3 and q["aborts"] >= 3 and q["conflicts"] >= 10 and q["probes"] >= 5
    seen = events(run_dir)
    assert seen["pause"] >= 3 and seen["kill"] >= 1 and seen["health"] >= 1, seen
    state = json.loads((run_dir / "final_state.json").read_text())
    assert set(state) == {"p0", "p1"} and all(s["audit"] is not None for s in state.values())


@pytest.mark.parametrize("bug", sorted(BROKEN))
def test_a_broken_claim_store_fails_naming_its_clause(tmp_path: Path, bug: str):
    info, verdict, _ = storm(tmp_path, f"tests.claim_stores:open_broken?bug={bug}")
    clause = BROKEN[bug][1]
    assert verdict.result == "fail", (info.status, verdict.reasons)
    assert clause in verdict.clauses, (clause, Counter(v.clause for v in verdict.violations))


def test_the_reference_claim_store_passes_with_split_writes_repaired(tmp_path: Path):
    info, verdict, run_dir = storm(tmp_path, "sqlite:", quorum={**QUICK, "splits_repaired": 1, "kills": 3})
    assert info.status == "quorum", info.quorum_reached
    assert verdict.result == "pass", (verdict.reasons, [v.statement for v in verdict.violations[:3]])
    assert info.quorum_reached["splits_repaired"] >= 1
    exercised = verdict.stats["exercised"]
    for clause in ("claim-epoch-once", "conflict-holder", "heartbeat-fenced", "progress-fenced",
                   "claim-lease-protected", "recovery-audited", "progress-preserved", "rows-reconciled"):
        assert exercised.get(clause, 0) > 0, (clause, exercised)


def _mutants() -> list[str]:
    from soak.claims.mutants import CLAIM_MUTANTS

    return sorted(CLAIM_MUTANTS)


@pytest.mark.parametrize("mutant", _mutants())
def test_every_claim_store_mutant_fails_its_storm_naming_its_clause(tmp_path: Path, mutant: str):
    from soak.claims.mutants import CLAIM_MUTANTS

    info, verdict, _ = storm(tmp_path, f"mutant:{mutant}", seed=11, time_bound_s=45.0,
                             quorum={**QUICK, "splits_repaired": 1})
    clause = CLAIM_MUTANTS[mutant].clause
    assert verdict.result == "fail", (info.status, verdict.reasons)
    assert clause in verdict.clauses, (clause, Counter(v.clause for v in verdict.violations))
