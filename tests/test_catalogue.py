"""CI's quick self-test: every mutant in the catalogue is caught, and the reference store passes.

The full measurement (`soak selftest --runs 20`, the README's table) is too long for CI; here
every mutant gets the conformance suite once and up to three stop-at-first-suspect smoke storms,
and must be caught by a storm in one of them.
"""

from soak.selftest import selftest
from soak.stores.mutants import MUTANTS

TRIES = 3


def test_every_mutant_is_caught_and_the_reference_passes(tmp_path):
    report = selftest(runs=1, out_root=tmp_path / "first", conformance=True)
    problems = []
    if report.false_positives or not all(s.verdict == "pass" for r in report.references for s in r.storms):
        problems.append(f"reference store did not pass: {[(r.spec, [s.verdict for s in r.storms]) for r in report.references]}")
    assert {m.name for m in report.mutants} == set(MUTANTS)
    for m in report.mutants:
        if m.clause not in m.conformance_clauses:
            problems.append(f"conformance missed {m.name} ({m.clause}); it failed {m.conformance_clauses}")
        verdicts = [s.verdict for s in m.storms]
        tries = 1
        while "fail" not in verdicts and tries < TRIES:
            tries += 1
            again = selftest(runs=1, mutants=[m.name], reference=(), out_root=tmp_path / f"{m.name}-{tries}",
                             conformance=False)
            verdicts += [s.verdict for s in again.mutants[0].storms]
        if "fail" not in verdicts:
            problems.append(f"the storm missed {m.name} in {tries} smoke storms: {verdicts}")
    assert not problems, "\n".join(problems) + "\n" + report.table()
