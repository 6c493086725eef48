"""CI's self-test gate: every mutant in the catalogue is caught by every storm CI runs for it, and the reference
store passes.

A detector that works one storm in three would pass a gate that accepts one catch in three tries 70% of the time,
so the quick tier gives each mutant the conformance suite once and two stop-at-first-violation smoke storms, and
both storms must fail it. The slow tier (`make test-slow`) is the full measurement: `soak selftest --runs 20`,
20/20 per mutant and 20/20 passes of the reference store.
"""

import pytest

from soak.selftest import selftest
from soak.stores.mutants import MUTANTS

QUICK_RUNS = 2
FULL_RUNS = 20


def _problems(report, runs: int) -> list[str]:
    problems = []
    for r in report.references:
        verdicts = [s.verdict for s in r.storms]
        if verdicts != ["pass"] * runs:
            problems.append(f"reference store {r.spec} did not pass {runs}/{runs}: {verdicts}")
    assert {m.name for m in report.mutants} == set(MUTANTS)
    for m in report.mutants:
        if m.conformance_caught is not None and m.clause not in m.conformance_clauses:
            problems.append(f"conformance missed {m.name} ({m.clause}); it failed {m.conformance_clauses}")
        verdicts = [s.verdict for s in m.storms]
        if verdicts != ["fail"] * runs:
            problems.append(f"the storm caught {m.name} in {verdicts.count('fail')} of {runs} smoke storms: {verdicts}")
    return problems


def test_every_mutant_is_caught_by_every_storm_and_the_reference_passes(tmp_path):
    report = selftest(runs=QUICK_RUNS, out_root=tmp_path, conformance=True)
    problems = _problems(report, QUICK_RUNS)
    assert not problems, "\n".join(problems) + "\n" + report.table()


@pytest.mark.slow
def test_selftest_twenty_runs_catches_every_mutant_every_time(tmp_path):
    report = selftest(runs=FULL_RUNS, out_root=tmp_path, conformance=False)
    problems = _problems(report, FULL_RUNS)
    assert not problems, "\n".join(problems) + "\n" + report.table()
