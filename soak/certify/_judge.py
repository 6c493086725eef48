"""A clause's result from what every suite saw of it, and the certificate's result under a profile (no I/O).

`ClauseResult.settle` turns a clause's sources (`soak.certify._sources`) into its result: `fail`
when any source saw it fail; for a choice clause `choice` (the store's choice) when a source saw
one; `pass` only when at least one suite exercised it (a `pass` source) and none saw it fail;
otherwise `not-exercised`, with the reason. `judge` does that for every clause and sums the
certificate up: `fail` when a claimed clause failed, else `inconclusive` when a required clause
was not exercised, else `pass`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from soak.certify._plan import (
    CHOICE,
    CHOICE_REQ,
    CHOICES,
    ERROR,
    FAIL,
    INCONCLUSIVE,
    NA,
    NOT_CLAIMED,
    NOT_EXERCISED,
    PASS,
    SUITES,
    Profile,
)
from soak.certify._sources import Choices, Sources
from soak.clauses import CLAUSES, clause_title

__all__ = ["ClauseResult", "combine_choices", "judge"]


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
    #: the suites of the clause x suite table (the workload's)
    columns: tuple[str, ...] = SUITES

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
        out = {s: "-" for s in self.columns}
        for src in self.sources:
            if src["source"] in out:
                word = src["result"]
                out[src["source"]] = f"choice: {src['choice']}" if word == CHOICE and src.get("choice") else word
        return out

    def exercised_by(self) -> list[str]:
        return [s["source"] for s in self.sources if s["result"] in (PASS, FAIL, ERROR, CHOICE)]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"title": clause_title(self.clause), "requirement": self.requirement,
                               "result": self.result}
        if self.reason:
            out["reason"] = self.reason
        if self.choice is not None:
            out["choice"] = self.choice
        out["exercised_by"] = self.exercised_by()
        out["suites"] = self.suites()
        out["sources"] = self.sources
        return out


# -- the certificate's judgement ----------------------------------------------------------------

def judge(profile: Profile, sources: Mapping[str, Sources], choices: Mapping[str, Choices], *,
          clauses: Mapping[str, str] = CLAUSES, suites: tuple[str, ...] = SUITES) -> dict[str, Any]:
    """Every clause's result and the certificate's, from each suite's sources and choices; `clauses`
    and `suites` are the workload's (default the runs workload's).

    Returns `clauses` (clause -> ClauseResult), `choices` (name -> the combined choice and who saw
    it), `result` (`fail` when a claimed clause failed, else `inconclusive` when a required clause
    was not exercised, else `pass`), the lists behind it and a one-line `statement`."""
    results = {c: ClauseResult(c, profile.requirement(c), columns=suites) for c in clauses}
    for suite in suites:
        for clause, entries in (sources.get(suite) or {}).items():
            if clause in results and results[clause].requirement != NOT_CLAIMED:
                for result, detail, choice in entries:
                    results[clause].add(suite, result, detail, choice=choice)
    combined: dict[str, dict[str, Any]] = {}
    for name, (clause, values) in CHOICES.items():
        if profile.requirement(clause) == NOT_CLAIMED:
            continue
        seen = [{"source": suite, "choice": value, "detail": detail}
                for suite in suites for n, (value, detail) in (choices.get(suite) or {}).items() if n == name]
        value = combine_choices(s["choice"] for s in seen)
        combined[name] = {"clause": clause, "choice": value or "not-observed", "values": list(values),
                          "sources": seen}
    for clause, res in results.items():
        name = next((n for n, (cl, _v) in CHOICES.items() if cl == clause), None)
        value = combined.get(name, {}).get("choice") if name else None
        res.settle(None if value in (None, "not-observed") else value)
    claimed = profile.claimed(clauses)
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
