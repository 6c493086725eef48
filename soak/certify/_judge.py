"""What each suite exercised, clause by clause, and what a profile makes of it (no I/O, no suites run).

Every suite's output is read into *sources*: one `{"source", "result", "detail"}` per clause it has
something to say about, where `result` is one of

- `pass`: the suite exercised the clause and saw it hold;
- `fail` / `error`: it saw the clause broken (an `error` is a check that raised: also a failure);
- `choice`: for a clause the contract leaves to the store, the choice it saw (`choice` key);
- `not-exercised`: the suite runs such checks but exercised nothing of this clause (the detail
  says why: a capability absent, a storm cut short, a real-time run);
- `inconclusive`: the suite could not decide (busy on every attempt, a checker that crashed);
- `incomplete`: the suite stopped at a violation of another clause before it saw this one fail.

`ClauseResult.settle` turns a clause's sources into its result: `fail` when any source saw it fail;
for a choice clause `choice` (the store's choice) when a source saw one; `pass` only when at least
one suite exercised it (a `pass` source) and none saw it fail; otherwise `not-exercised`, with the
reason. A profile (`PROFILE_CLAUSES`) says which clauses it requires exercised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from soak.clauses import CLAUSES, CONTRACT_CHOICES, LIVENESS_CLAUSES

__all__ = [
    "CHOICES",
    "CHOICE_CLAUSES",
    "ClauseResult",
    "FENCING_SUBCHECKS",
    "PROFILE_CLAUSES",
    "Profile",
    "STORM_CLAUSES",
    "SUITES",
    "boot_sources",
    "combine_choices",
    "conformance_sources",
    "judge",
    "model_sources",
    "storm_sources",
]

# Clause results (a certificate's) and the extra results a source may have.
PASS, FAIL, NOT_EXERCISED, NA, CHOICE = "pass", "fail", "not-exercised", "not-applicable", "choice"
ERROR, INCONCLUSIVE, INCOMPLETE = "error", "inconclusive", "incomplete"
# What a profile asks of a clause.
REQUIRED, OPTIONAL, CHOICE_REQ, NOT_CLAIMED = "required", "optional", "choice", "not-claimed"

#: The suites a certification runs, in the order the clause x suite table shows them.
SUITES: tuple[str, ...] = ("conformance", "model", "boot-storm", "storm")

#: The choices the contract leaves to the store: choice name -> the clause it belongs to, and its values.
CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "expired-unsuperseded": ("expired-unsuperseded",
                             CONTRACT_CHOICES.get("expired-unsuperseded", ("accepts", "refuses", "mixed"))),
    "delete-ends-tenure": ("delete-semantics", CONTRACT_CHOICES.get("delete-ends-tenure", ("ends", "keeps"))),
}

#: Clauses the storm's checker judges from a recorded history and the final state; read only for a
#: verdict without `stats["exercised"]` (run directories from before the checker counted them).
STORM_CLAUSES = frozenset({
    "lease-exclusive", "stale-lease-ops", "stale-rejected", "run-match", "epoch-monotonic",
    "live-accepted", "ttl-honoured", "typed-refusal", "journal-a1", "journal-a2", "journal-a4",
    "journal-a5", "meta-last-write", "blob-semantics", "delete-semantics",
})

#: Conformance sub-checks that expect lease refusals although filed under a data clause.
FENCING_SUBCHECKS = frozenset({"fenced-transcripts"})


# -- profiles ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Profile:
    """What a store claims: the clauses it requires exercised and passed, the clauses judged where a
    suite exercised them (a violation still fails; not exercised is reported, not blocking), and
    the contract's choices it shows. Every other clause is not claimed (`not-applicable`)."""

    name: str
    summary: str
    required: tuple[str, ...]
    #: clause -> why it is not required exercised
    optional: Mapping[str, str] = field(default_factory=dict)
    choices: tuple[str, ...] = ()

    def requirement(self, clause: str) -> str:
        if clause in self.required:
            return REQUIRED
        if clause in self.optional:
            return OPTIONAL
        if clause in self.choices:
            return CHOICE_REQ
        return NOT_CLAIMED

    def claimed(self) -> list[str]:
        return [c for c in CLAUSES if self.requirement(c) != NOT_CLAIMED]


#: profile name -> Profile. The lists are written out so a reader sees exactly what each requires.
PROFILE_CLAUSES: dict[str, Profile] = {
    "fenced": Profile(
        "fenced",
        "a store declaring fenced_writes: every clause of CONTRACT section 1",
        required=(
            "lease-exclusive", "stale-lease-ops", "stale-rejected", "run-match", "atomic-fence",
            "epoch-monotonic", "live-accepted", "ttl-honoured", "unleased-passthrough", "typed-refusal",
            "concurrent-boot", "call-returns", "no-crash",
            "journal-a1", "journal-a2", "journal-a3", "journal-a4", "journal-a5",
            "meta-last-write", "blob-semantics", "delete-semantics",
        ),
        optional={
            "store-clock": "exercised only where the store declares injectable_clock = True (a suite then drives "
                           "its clock apart from wall time); without it nothing tells whose clock judged expiry, "
                           "until the clock-skew nemesis lands",
        },
        choices=("expired-unsuperseded",),
    ),
    "single-writer": Profile(
        "single-writer",
        "a store without fencing: data semantics, unleased writes, a safe bootstrap and liveness",
        required=(
            "journal-a1", "journal-a2", "journal-a3", "journal-a4", "journal-a5",
            "meta-last-write", "blob-semantics", "delete-semantics",
            "unleased-passthrough", "concurrent-boot", "call-returns", "no-crash",
        ),
    ),
}


# -- a clause's result --------------------------------------------------------------------------

def combine_choices(values: Iterable[str | None]) -> str | None:
    """One choice from several sources: the one they agree on, `mixed` when they differ, None if none."""
    seen = {v for v in values if v}
    if not seen:
        return None
    return seen.pop() if len(seen) == 1 else "mixed"


@dataclass
class ClauseResult:
    """One clause's result and what each suite saw of it."""

    clause: str
    requirement: str
    result: str = ""
    #: why a clause is not-exercised (or not-applicable)
    reason: str = ""
    #: the store's choice, where the clause carries one (expired-unsuperseded, delete-semantics)
    choice: str | None = None
    sources: list[dict[str, str]] = field(default_factory=list)

    def add(self, source: str, result: str, detail: str, *, choice: str | None = None) -> None:
        entry = {"source": source, "result": result, "detail": detail}
        if choice is not None:
            entry["choice"] = choice
        self.sources.append(entry)

    def settle(self, choice: str | None = None) -> None:
        """The clause's result from its sources (see the module docstring)."""
        results = [s["result"] for s in self.sources]
        self.choice = choice
        if self.requirement == NOT_CLAIMED:
            self.result, self.reason = NA, "not claimed by the profile"
        elif FAIL in results or ERROR in results:
            self.result, self.reason = FAIL, ""
        elif self.requirement == CHOICE_REQ and choice is not None:
            self.result, self.reason = CHOICE, ""
        elif self.requirement != CHOICE_REQ and PASS in results:
            self.result, self.reason = PASS, ""
        else:
            self.result = NOT_EXERCISED
            why = [f"{s['source']}: {s['detail']}" for s in self.sources if s["result"] != PASS]
            self.reason = "; ".join(why) or "no suite exercised it"

    @property
    def violated(self) -> bool:
        return self.result == FAIL

    def suites(self) -> dict[str, str]:
        """suite -> what it saw of this clause (`-` where it has nothing to say)."""
        out = {s: "-" for s in SUITES}
        for src in self.sources:
            if src["source"] in out:
                word = src["result"]
                out[src["source"]] = f"choice: {src['choice']}" if word == CHOICE and src.get("choice") else word
        return out

    def exercised_by(self) -> list[str]:
        return [s["source"] for s in self.sources if s["result"] in (PASS, FAIL, ERROR, CHOICE)]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"title": CLAUSES.get(self.clause, self.clause), "requirement": self.requirement,
                               "result": self.result}
        if self.reason:
            out["reason"] = self.reason
        if self.choice is not None:
            out["choice"] = self.choice
        out["exercised_by"] = self.exercised_by()
        out["suites"] = self.suites()
        out["sources"] = self.sources
        return out


# -- reading each suite -------------------------------------------------------------------------

Sources = dict[str, list[tuple[str, str, str | None]]]  # clause -> [(result, detail, choice)]
Choices = dict[str, tuple[str, str]]  # choice name -> (value, detail)


def _one_line(text: Any, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
        words = "; ".join(_one_line(f"{r.check}: {r.detail}" if r.status in (INCONCLUSIVE, NOT_EXERCISED)
                                    else f"{r.check} (status {r.status!r}): {r.detail}", 300) for r in undecided[:3])
        if not checks:
            out[c] = [(NOT_EXERCISED, "no conformance check recorded a result for it", None)]
        elif bad:
            kind = FAIL if any(r.status == FAIL for r in bad) else ERROR
            out[c] = [(kind, "; ".join(_one_line(f"{r.check}: {r.detail}", 300) for r in bad[:3]), None)]
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
            out[c] = [(INCONCLUSIVE, _one_line(outcome.reason), None)]
        elif not outcome.passed and culprit is None:
            out[c] = [(INCONCLUSIVE, f"the model ended with an error: {_one_line(outcome.error)}", None)]
        elif culprit == c:
            out[c] = [(FAIL, _one_line(f"{outcome.error} minimal program: {program}", 1200), None)]
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
        out["concurrent-boot"] = [(FAIL, _one_line(f"{boot.attempts} boots, {boot.failures} failed: "
                                                   f"{boot.summary()}"), None)]
    died = [f for f in boot.failures_list if f.kind == "died"]
    if died:
        first = died[0]
        out["no-crash"] = [(FAIL, _one_line(f"{len(died)} boot process(es) died inside the store (first: round "
                                            f"{first.round} process {first.process}, {first.message})"), None)]
    else:
        out["no-crash"] = [(PASS, f"{boot.attempts} processes opened the store, acquired, appended, released and "
                                  "closed; none died", None)]
    return out


def storm_sources(verdict: Mapping[str, Any], *, status: str, seed: Any,
                  clauses: Iterable[str]) -> tuple[Sources, Choices]:
    """What a storm's `verdict.json` says of each clause. `stats["exercised"]` (clause -> recorded
    operations that exercised it) says which clauses it exercised; without it (older run
    directories) the clauses the checker has always judged (`STORM_CLAUSES`) count, and only when
    the storm reached its quorum. The storm never passes a choice."""
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
        expected = c in STORM_CLAUSES or c in LIVENESS_CLAUSES
        if found:
            out[c] = [(FAIL, _one_line(f"{len(found)} violation(s); first: {found[0].get('statement', '')}", 600),
                       None)]
        elif c in CHOICE_CLAUSES:
            continue  # shown as a choice where the storm reports one
        elif exercised is None and c not in STORM_CLAUSES:
            continue  # an older checker says nothing of it
        elif n == 0:
            if expected:
                out[c] = [(NOT_EXERCISED, f"no recorded operation exercised it (seed {seed})", None)]
        elif result == INCONCLUSIVE:
            out[c] = [(INCONCLUSIVE, _one_line(f"the storm was inconclusive: {reasons}", 600), None)]
        elif not conclusive:
            why = (f"the storm ended {status} before its quorum" if status != "quorum"
                   else f"the storm failed with unknowns: {reasons}")
            out[c] = [(NOT_EXERCISED, _one_line(f"no violation seen, but {why} (seed {seed})", 600), None)]
        else:
            ops = f" in {n} recorded operation(s)" if n else ""
            out[c] = [(PASS, f"no violations observed{ops} (quorum met, seed {seed})", None)]
    choices: Choices = {name: (str(value), "seen in the storm's history")
                        for name, value in (stats.get("choices") or {}).items() if name in CHOICES and value}
    return out, choices


# -- the certificate's judgement ----------------------------------------------------------------

def judge(profile: Profile, sources: Mapping[str, Sources], choices: Mapping[str, Choices]) -> dict[str, Any]:
    """Every clause's result and the certificate's, from each suite's sources and choices.

    Returns `clauses` (clause -> ClauseResult), `choices` (name -> the combined choice and who saw
    it), `result` (`fail` when a claimed clause failed, else `inconclusive` when a required clause
    was not exercised, else `pass`), the lists behind it and a one-line `statement`."""
    results = {c: ClauseResult(c, profile.requirement(c)) for c in CLAUSES}
    for suite in SUITES:
        for clause, entries in (sources.get(suite) or {}).items():
            if clause in results and results[clause].requirement != NOT_CLAIMED:
                for result, detail, choice in entries:
                    results[clause].add(suite, result, detail, choice=choice)
    combined: dict[str, dict[str, Any]] = {}
    for name, (clause, values) in CHOICES.items():
        if profile.requirement(clause) == NOT_CLAIMED:
            continue
        seen = [{"source": suite, "choice": value, "detail": detail}
                for suite in SUITES for n, (value, detail) in (choices.get(suite) or {}).items() if n == name]
        value = combine_choices(s["choice"] for s in seen)
        combined[name] = {"clause": clause, "choice": value or "not-observed", "values": list(values),
                          "sources": seen}
    for clause, res in results.items():
        name = next((n for n, (cl, _v) in CHOICES.items() if cl == clause), None)
        value = combined.get(name, {}).get("choice") if name else None
        res.settle(None if value in (None, "not-observed") else value)
    claimed = profile.claimed()
    violated = [c for c in claimed if results[c].result == FAIL]
    not_exercised = [c for c in profile.required if results[c].result != PASS and c not in violated]
    optional_not_exercised = [c for c in profile.optional if results[c].result == NOT_EXERCISED]
    result = FAIL if violated else INCONCLUSIVE if not_exercised else PASS
    shown = ", ".join(f"{n} {c['choice']}" for n, c in combined.items())
    if result == PASS:
        statement = (f"no violations observed: all {len(profile.required)} clauses the {profile.name} profile "
                     "requires were exercised, and passed in every suite that exercised them")
    elif result == FAIL:
        statement = f"violations observed of {', '.join(violated)}"
        if not_exercised:
            statement += f"; required but not exercised: {', '.join(not_exercised)}"
    else:
        statement = (f"no violations observed, but not a pass: required clause(s) not exercised by any suite: "
                     f"{', '.join(not_exercised)}")
    if optional_not_exercised:
        statement += f"; not exercised (not required): {', '.join(optional_not_exercised)}"
    if shown:
        statement += f"; the store's choices: {shown}"
    return {
        "clauses": results, "choices": combined, "result": result, "statement": statement,
        "violated": violated, "not_exercised": not_exercised, "optional_not_exercised": optional_not_exercised,
    }
