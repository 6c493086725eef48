"""Verdict records: what the checker concludes and the operations that prove it.

A `Verdict` is `pass`, `fail` or `inconclusive`; verdicts merge fail > inconclusive > pass
(Jepsen's false > unknown > true). Every `Violation` names a clause id from `soak.clauses`
and carries the recorded operations (`Evidence`) that prove it. All three round-trip
through JSON so `verdict.json` can be re-read by reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from soak.clauses import CLAIM_CLAUSES, CLAUSES

__all__ = ["Evidence", "RESULTS", "Verdict", "Violation", "merge_results"]

#: Verdict results, weakest first: merging keeps the strongest.
RESULTS: tuple[str, ...] = ("pass", "inconclusive", "fail")
_RANK = {r: i for i, r in enumerate(RESULTS)}


def merge_results(*results: str) -> str:
    """fail > inconclusive > pass; no results at all is a pass."""
    best = "pass"
    for r in results:
        if r not in _RANK:
            raise ValueError(f"verdict result must be one of {RESULTS}, got {r!r}")
        if _RANK[r] > _RANK[best]:
            best = r
    return best


@dataclass(frozen=True, slots=True)
class Evidence:
    """One recorded operation cited by a violation (worker, surface, epoch, counter, times)."""

    process: str
    index: int
    f: str
    run: str
    epoch: int | None
    counter: int | None
    outcome: str
    invoke_ns: int
    complete_ns: int | None
    tag: str
    error: str | None = None

    def describe(self) -> str:
        """One line: `w3.1#17 append r1 e5 c3 ok [invoke..complete]`."""
        epoch = "-" if self.epoch is None else self.epoch
        counter = "" if self.counter is None else f" c{self.counter}"
        done = "?" if self.complete_ns is None else str(self.complete_ns)
        err = f" {self.error}" if self.error else ""
        return f"{self.tag} {self.f} {self.run} e{epoch}{counter} {self.outcome}{err} [{self.invoke_ns}..{done}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "process": self.process, "index": self.index, "f": self.f, "run": self.run,
            "epoch": self.epoch, "counter": self.counter, "outcome": self.outcome,
            "invoke_ns": self.invoke_ns, "complete_ns": self.complete_ns, "tag": self.tag,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Evidence:
        return cls(
            process=str(obj["process"]), index=int(obj["index"]), f=str(obj["f"]), run=str(obj["run"]),
            epoch=None if obj.get("epoch") is None else int(obj["epoch"]),
            counter=None if obj.get("counter") is None else int(obj["counter"]),
            outcome=str(obj["outcome"]), invoke_ns=int(obj["invoke_ns"]),
            complete_ns=None if obj.get("complete_ns") is None else int(obj["complete_ns"]),
            tag=str(obj["tag"]), error=obj.get("error"),
        )


@dataclass(frozen=True, slots=True)
class Violation:
    """A broken contract clause, a one-line statement, and the operations that prove it."""

    clause: str
    statement: str
    evidence: tuple[Evidence, ...] = ()

    def __post_init__(self) -> None:
        if self.clause not in CLAUSES and self.clause not in CLAIM_CLAUSES:
            raise ValueError(f"unknown clause id {self.clause!r}; use one of soak.clauses.CLAUSES or CLAIM_CLAUSES")

    def to_json(self) -> dict[str, Any]:
        return {"clause": self.clause, "statement": self.statement, "evidence": [e.to_json() for e in self.evidence]}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Violation:
        return cls(str(obj["clause"]), str(obj["statement"]), tuple(Evidence.from_json(e) for e in obj.get("evidence", ())))


@dataclass(frozen=True, slots=True)
class Verdict:
    """The checker's conclusion: result, the violations behind a fail, reasons behind an inconclusive."""

    result: str
    violations: tuple[Violation, ...] = ()
    reasons: tuple[str, ...] = ()
    stats: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.result not in _RANK:
            raise ValueError(f"verdict result must be one of {RESULTS}, got {self.result!r}")

    @classmethod
    def build(
        cls, violations: Iterable[Violation] = (), reasons: Iterable[str] = (), stats: Mapping[str, Any] | None = None
    ) -> Verdict:
        """The verdict these findings imply: any violation fails, else any reason is inconclusive."""
        vs, rs = tuple(violations), tuple(reasons)
        result = "fail" if vs else "inconclusive" if rs else "pass"
        return cls(result, vs, rs, dict(stats or {}))

    def merge(self, *others: Verdict) -> Verdict:
        """Combine verdicts: fail > inconclusive > pass; violations, reasons and stats add up."""
        allv = [self, *others]
        stats: dict[str, Any] = {}
        for v in allv:
            stats.update(v.stats)
        return Verdict(
            merge_results(*(v.result for v in allv)),
            tuple(x for v in allv for x in v.violations),
            tuple(x for v in allv for x in v.reasons),
            stats,
        )

    @property
    def clauses(self) -> list[str]:
        """The distinct clause ids violated, sorted."""
        return sorted({v.clause for v in self.violations})

    def summary(self) -> str:
        """One line: the result, violated clauses or reasons."""
        if self.result == "fail":
            return f"fail: {len(self.violations)} violation(s) of {', '.join(self.clauses)}"
        if self.result == "inconclusive":
            return "inconclusive: " + "; ".join(self.reasons)
        return "pass"

    def to_json(self) -> dict[str, Any]:
        return {
            "result": self.result,
            "violations": [v.to_json() for v in self.violations],
            "reasons": list(self.reasons),
            "stats": self.stats,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Verdict:
        return cls(
            str(obj["result"]),
            tuple(Violation.from_json(v) for v in obj.get("violations", ())),
            tuple(str(r) for r in obj.get("reasons", ())),
            dict(obj.get("stats", {})),
        )
