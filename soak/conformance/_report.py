"""What a conformance run returns: one `CheckResult` per (sub-)check and the `ConformanceReport` around them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from soak.retry import BusyCount

__all__ = ["CHOICE_KEYS", "CheckResult", "ConformanceReport", "ERROR", "FAIL", "INCONCLUSIVE", "NOT_EXERCISED",
           "PASS", "STATUSES", "render"]

PASS, FAIL, ERROR, INCONCLUSIVE, NOT_EXERCISED = "pass", "fail", "error", "inconclusive", "not-exercised"

#: Every status a check can end in. `inconclusive`: the suite could not decide (a call busy on every attempt, a
#: takeover it could not position, a check cut short by another clause's failure). `not-exercised`: the capability
#: the check needs is absent (the detail says which).
STATUSES: tuple[str, ...] = (PASS, FAIL, ERROR, INCONCLUSIVE, NOT_EXERCISED)

#: A clause's status is its worst check's, in this order (a clause only some of whose checks could run is judged
#: by the ones that ran: `not-exercised` ranks below `pass`).
_RANK = {NOT_EXERCISED: 0, PASS: 1, INCONCLUSIVE: 2, FAIL: 3, ERROR: 4}

#: The choices the contract leaves to a store, as `ConformanceReport.choices` names them: key -> possible values.
#: `mixed` for delete-ends-tenure comes with a `fail` of delete-semantics (a store must make one choice).
CHOICE_KEYS: dict[str, tuple[str, ...]] = {
    "expired-unsuperseded": ("accepts", "refuses", "mixed"),
    "delete-ends-tenure": ("ends", "keeps", "mixed"),
}


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check (or sub-check) of one clause; `status` is one of `STATUSES`."""

    clause: str
    check: str
    status: str
    detail: str
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == PASS


@dataclass(slots=True)
class ConformanceReport:
    """Per-check results of one conformance run.

    `passed` only when at least one check passed and none failed, erred or was inconclusive (`not-exercised`
    checks are allowed: their detail says what was missing). `choices` names what the store chose where the
    contract leaves it a choice (keys and values in `CHOICE_KEYS`); `busy` counts the `StoreBusyError` answers
    that were retried."""

    store: str
    lease_ttl_ms: int
    timing: str  # "injected clock" or "real time"
    results: list[CheckResult] = field(default_factory=list)
    elapsed_s: float = 0.0
    call_bound_s: float = 0.0
    isolation: str = "child process"
    choices: dict[str, str] = field(default_factory=dict)
    busy: BusyCount = field(default_factory=BusyCount)

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def verdict(self) -> str:
        """`fail` on any fail or error; otherwise `inconclusive` unless some check passed and none was undecided."""
        statuses = {r.status for r in self.results}
        if statuses & {FAIL, ERROR}:
            return FAIL
        if INCONCLUSIVE in statuses or PASS not in statuses:
            return INCONCLUSIVE
        return PASS

    @property
    def failed(self) -> list[CheckResult]:
        """Every result that is not a pass or a not-exercised (fail, error, inconclusive)."""
        return [r for r in self.results if r.status in (FAIL, ERROR, INCONCLUSIVE)]

    def clause_status(self) -> dict[str, str]:
        """clause id -> worst status of its checks (error > fail > inconclusive > pass > not-exercised)."""
        out: dict[str, str] = {}
        for r in self.results:
            if r.clause not in out or _RANK[r.status] > _RANK[out[r.clause]]:
                out[r.clause] = r.status
        return out

    def failed_clauses(self) -> set[str]:
        """Clauses with a check that failed or erred."""
        return {r.clause for r in self.results if r.status in (FAIL, ERROR)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "lease_ttl_ms": self.lease_ttl_ms,
            "timing": self.timing,
            "call_bound_s": self.call_bound_s,
            "isolation": self.isolation,
            "verdict": self.verdict,
            "passed": self.passed,
            "elapsed_s": round(self.elapsed_s, 3),
            "choices": dict(self.choices),
            "busy": {"retries": self.busy.retries, "exhausted": self.busy.exhausted},
            "clauses": self.clause_status(),
            "results": [asdict(r) for r in self.results],
        }


def render(report: ConformanceReport) -> str:
    """The report as the console shows it: one line per check, the store's choices, busy retries, a verdict."""
    lines = [f"soak conformance: {report.store}  ttl {report.lease_ttl_ms} ms  timing: {report.timing}  "
             f"call bound {report.call_bound_s:g} s  ({report.isolation})"]
    width = max((len(r.clause) for r in report.results), default=10)
    cwidth = max((len(r.check) for r in report.results), default=10)
    swidth = max((len(r.status) for r in report.results), default=4)
    for r in report.results:
        lines.append(f"  {r.status.upper():{swidth}}  {r.clause:<{width}}  {r.check:<{cwidth}}  {r.detail}")
    if report.choices:
        lines.append("store choices (where the contract allows either): "
                     + "; ".join(f"{k} {v}" for k, v in sorted(report.choices.items())))
    lines.append(f"busy: {report.busy.summary()}")
    status = report.clause_status()
    counts = {s: sum(r.status == s for r in report.results) for s in STATUSES}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    verdict = report.verdict
    if verdict == PASS:
        tail = "PASS"
    else:
        worst = FAIL if verdict == FAIL else INCONCLUSIVE
        named = [c for c, s in status.items() if (s in (FAIL, ERROR) if worst == FAIL else s == INCONCLUSIVE)]
        tail = f"{worst.upper()} ({', '.join(named) or 'no check passed'})"
    lines.append(f"{len(status)} clauses, {len(report.results)} checks ({tally}) in {report.elapsed_s:.1f} s: {tail}")
    return "\n".join(lines)
