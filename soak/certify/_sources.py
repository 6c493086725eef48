"""What each suite's output says of each clause it speaks of (no I/O, no suites run).

Every suite's output is read into *sources*: one `(result, detail, choice)` per clause it has
something to say about, where `result` is one of

- `pass`: the suite exercised the clause and saw it hold;
- `fail` / `error`: it saw the clause broken (an `error` is a check that raised: also a failure);
- `choice`: for a clause the contract leaves to the store, the choice it saw (the `choice` item);
- `not-exercised`: the suite runs such checks but exercised nothing of this clause (the detail
  says why: a capability absent, a storm cut short, a real-time run);
- `inconclusive`: the suite could not decide (busy on every attempt, a checker that crashed);
- `incomplete`: the suite stopped at a violation of another clause before it saw this one fail.

The suites run in `soak.certify._suites`; `soak.certify._judge` settles a clause from its sources.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from soak.certify._plan import CHOICE, CHOICES, ERROR, FAIL, INCOMPLETE, INCONCLUSIVE, NOT_EXERCISED, PASS
from soak.clauses import CLAUSES, CONTRACT_CHOICES, LIVENESS_CLAUSES

__all__ = ["CHOICE_CLAUSES", "Choices", "FENCING_SUBCHECKS", "STORM_CLAUSES", "Sources", "boot_sources",
           "conformance_sources", "model_sources", "one_line", "storm_sources"]

Sources = dict[str, list[tuple[str, str, str | None]]]  # clause -> [(result, detail, choice)]
Choices = dict[str, tuple[str, str]]  # choice name -> (value, detail)


def one_line(text: Any, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: Clauses the storm's checker judges from a recorded history and the final state; read only for a
#: verdict without `stats["exercised"]` (run directories from before the checker counted them).
STORM_CLAUSES = frozenset({
    "lease-exclusive", "stale-lease-ops", "stale-rejected", "run-match", "epoch-monotonic",
    "live-accepted", "ttl-honoured", "typed-refusal", "journal-a1", "journal-a2", "journal-a4",
    "journal-a5", "meta-last-write", "blob-semantics", "delete-semantics",
})

#: Conformance sub-checks that expect lease refusals although filed under a data clause.
FENCING_SUBCHECKS = frozenset({"fenced-transcripts"})

#: Clauses whose result is the store's choice (the choice is named like the clause). The delete
#: choice belongs to delete-semantics, which has other obligations: it is shown beside its result.
CHOICE_CLAUSES = frozenset(c for c in CONTRACT_CHOICES if c in CLAUSES)


def conformance_sources(report: Any, *, profile: str, clauses: Iterable[str],
                        injectable_clock: bool | None) -> tuple[Sources, Choices]:
    """What `soak.conformance.run_conformance`'s report says of each clause, and the choices it reports.

    Statuses `pass`, `fail`, `error`, `inconclusive`, `not-exercised`; any other counts as not passed.
    Without an injectable clock a passing store-clock check saw only expiry happen in wall time,
    which a store judging a caller's clock passes too: not exercised."""
    judged = [r for r in report.results if profile == "fenced" or r.check not in FENCING_SUBCHECKS]
    reported: Mapping[str, str] = getattr(report, "choices", None) or {}
    out: Sources = {}
    for c in clauses:
        checks = [r for r in judged if r.clause == c]
        bad = [r for r in checks if r.status in (FAIL, ERROR)]
        passed = [r for r in checks if r.status == PASS]
        undecided = [r for r in checks if r.status not in (PASS, FAIL, ERROR)]
        words = "; ".join(one_line(f"{r.check}: {r.detail}" if r.status in (INCONCLUSIVE, NOT_EXERCISED)
                                    else f"{r.check} (status {r.status!r}): {r.detail}", 300) for r in undecided[:3])
        if not checks:
            out[c] = [(NOT_EXERCISED, "no conformance check recorded a result for it", None)]
        elif bad:
            kind = FAIL if any(r.status == FAIL for r in bad) else ERROR
            out[c] = [(kind, "; ".join(one_line(f"{r.check}: {r.detail}", 300) for r in bad[:3]), None)]
        elif c == "store-clock" and not injectable_clock and passed:
            out[c] = [(NOT_EXERCISED, "the store declares no injectable clock, so conformance only saw expiry "
                                      "happen in wall time, which a store judging a caller's clock passes too", None)]
        elif c in CHOICE_CLAUSES:
            value = reported.get(c)
            if value:
                out[c] = [(CHOICE, f"{len(passed)} check(s) saw the store {value} (both conformant)", value)]
            else:
                out[c] = [(NOT_EXERCISED, "either outcome is conformant and conformance reported no choice", None)]
        elif passed:
            detail = f"{len(passed)} check(s) passed ({report.timing})"
            out[c] = [(PASS, detail + (f"; not decided: {words}" if undecided else ""), None)]
        else:
            kind = INCONCLUSIVE if any(r.status == INCONCLUSIVE for r in undecided) else NOT_EXERCISED
            out[c] = [(kind, words, None)]
    choices: Choices = {name: (value, "reported by the conformance checks") for name, value in reported.items()
                        if name in CHOICES and value}
    return out, choices


def model_sources(outcome: Any, *, clauses: Iterable[str], never: Mapping[str, str]) -> tuple[Sources, Choices]:
    """What a `soak.model.ModelOutcome` says of each clause: `pass` only for clauses its programs made
    a judgement of (`outcome.exercised`); the model never passes a choice; `never` says why it
    exercises some clauses not at all."""
    out: Sources = {}
    exercised: Mapping[str, int] = getattr(outcome, "exercised", {}) or {}
    choices_seen: Mapping[str, str] = getattr(outcome, "choices", {}) or {}
    detail_of: Mapping[str, str] = getattr(outcome, "choice_detail", {}) or {}
    culprit = outcome.clause
    program = " | ".join(line.strip() for line in outcome.program if line.strip())
    for c in clauses:
        n = exercised.get(c, 0)
        if c in CHOICE_CLAUSES:
            value = choices_seen.get(c)
            if value:
                out[c] = [(CHOICE, detail_of.get(c, "seen in the programs"), value)]
            else:
                out[c] = [(NOT_EXERCISED, "no program met the case (either outcome is conformant)", None)]
            continue
        if outcome.inconclusive:
            out[c] = [(INCONCLUSIVE, one_line(outcome.reason), None)]
        elif not outcome.passed and culprit is None:
            out[c] = [(INCONCLUSIVE, f"the model ended with an error: {one_line(outcome.error)}", None)]
        elif culprit == c:
            out[c] = [(FAIL, one_line(f"{outcome.error} minimal program: {program}", 1200), None)]
        elif c in never:
            out[c] = [(NOT_EXERCISED, never[c], None)]
        elif c == "store-clock" and getattr(outcome, "clock", "") != "fake":
            out[c] = [(NOT_EXERCISED, f"the model ran in {getattr(outcome, 'clock_reason', 'real time')}", None)]
        elif not n:
            out[c] = [(NOT_EXERCISED, "no program made a judgement of it", None)]
        elif culprit is not None:
            out[c] = [(INCOMPLETE, f"the model stopped at a violation of {culprit}; none of {c} seen in {n} "
                                   "judgement(s) before it", None)]
        else:
            out[c] = [(PASS, f"no violations observed in {n} judgement(s)", None)]
    choices: Choices = {name: (value, detail_of.get(name, "")) for name, value in choices_seen.items()
                        if name in CHOICES}
    return out, choices


def boot_sources(boot: Any) -> Sources:
    """The boot storm exercises concurrent-boot, and no-crash for the calls its processes make."""
    if not boot.attempts:
        return {c: [(NOT_EXERCISED, "the boot storm made no attempt", None)] for c in ("concurrent-boot", "no-crash")}
    out: Sources = {}
    if boot.ok:
        out["concurrent-boot"] = [(PASS, f"{boot.attempts} boots, none failed; worst boot "
                                         f"{boot.worst_boot_s * 1000:.0f} ms", None)]
    else:
        out["concurrent-boot"] = [(FAIL, one_line(f"{boot.attempts} boots, {boot.failures} failed: "
                                                   f"{boot.summary()}"), None)]
    died = [f for f in boot.failures_list if f.kind == "died"]
    if died:
        first = died[0]
        out["no-crash"] = [(FAIL, one_line(f"{len(died)} boot process(es) died inside the store (first: round "
                                            f"{first.round} process {first.process}, {first.message})"), None)]
    else:
        out["no-crash"] = [(PASS, f"{boot.attempts} processes opened the store, acquired, appended, released and "
                                  "closed; none died", None)]
    return out


def storm_sources(verdict: Mapping[str, Any], *, status: str, seed: Any, clauses: Iterable[str],
                  expected: Iterable[str] | None = None) -> tuple[Sources, Choices]:
    """What a storm's `verdict.json` says of each clause. `stats["exercised"]` (clause -> recorded
    operations that exercised it) says which clauses it exercised; without it (older run
    directories) the clauses the checker has always judged (`STORM_CLAUSES`) count, and only when
    the storm reached its quorum. `expected`: the clauses the workload's storm sets out to exercise
    (default the runs workload's), shown not-exercised when no operation did. The storm never
    passes a choice."""
    aimed = STORM_CLAUSES | set(LIVENESS_CLAUSES) if expected is None else frozenset(expected)
    stats = verdict.get("stats") or {}
    exercised: Mapping[str, int] | None = stats.get("exercised")
    result = verdict.get("result", INCONCLUSIVE)
    reasons = "; ".join(str(r) for r in verdict.get("reasons", [])) or f"the storm ended {status}"
    by_clause: dict[str, list[Mapping[str, Any]]] = {}
    for v in verdict.get("violations", []):
        by_clause.setdefault(v.get("clause", "?"), []).append(v)
    conclusive = status == "quorum" and (result == PASS or (result == FAIL and not verdict.get("reasons")))
    out: Sources = {}
    for c in clauses:
        found = by_clause.get(c)
        n = None if exercised is None else int(exercised.get(c, 0) or 0)
        expected = c in aimed
        if found:
            out[c] = [(FAIL, one_line(f"{len(found)} violation(s); first: {found[0].get('statement', '')}", 600),
                       None)]
        elif c in CHOICE_CLAUSES:
            continue  # shown as a choice where the storm reports one
        elif exercised is None and c not in STORM_CLAUSES:
            continue  # an older checker says nothing of it
        elif n == 0:
            if expected:
                out[c] = [(NOT_EXERCISED, f"no recorded operation exercised it (seed {seed})", None)]
        elif result == INCONCLUSIVE:
            out[c] = [(INCONCLUSIVE, one_line(f"the storm was inconclusive: {reasons}", 600), None)]
        elif not conclusive:
            why = (f"the storm ended {status} before its quorum" if status != "quorum"
                   else f"the storm failed with unknowns: {reasons}")
            out[c] = [(NOT_EXERCISED, one_line(f"no violation seen, but {why} (seed {seed})", 600), None)]
        else:
            ops = f" in {n} recorded operation(s)" if n else ""
            out[c] = [(PASS, f"no violations observed{ops} (quorum met, seed {seed})", None)]
    choices: Choices = {name: (str(value), "seen in the storm's history")
                        for name, value in (stats.get("choices") or {}).items() if name in CHOICES and value}
    return out, choices

