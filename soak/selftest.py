"""`soak selftest`: prove the harness catches every mutant and never fails a reference store.

For every mutant of the catalogue (`soak.stores.mutants`) the conformance suite runs once and
`runs` smoke storms run one at a time, each stopping at its first suspect operation; the
checker alone decides each storm (black box: it is never told which mutant it judges). Each
reference store then gets `runs` storms of the same scenario, which must pass: a `fail` there
is a false positive. The result is a `SelftestReport` and, on the command line, a table.

`claims_selftest` does the same for the claims workload (`--workload claims`): every claim store mutant
(`soak.claims.mutants`) must be caught by the claims storm and by claims conformance, each naming the
mutant's own clause, in every one of `runs` tries; the reference claim store must pass both.

Time to the first violation is measured on the history clock from the storm's start to the
moment the earliest violation was fully evidenced (the last completion among its cited
operations); without evidence times, the storm's whole length stands in. The wall time to the
verdict runs from the storm's start until the checker has judged it: storms that stop at their
first suspect also stop at the first violation the early judge proves (`stop_on_suspect` implies
`stop_on_violation`), so a broken store waits little longer than its first evidence.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from soak.errors import HarnessError, StoreSpecError

__all__ = [
    "ClaimMutantResult",
    "ClaimReferenceResult",
    "ClaimsSelftestReport",
    "MutantResult",
    "ReferenceResult",
    "SelftestReport",
    "SelftestUsageError",
    "StormOutcome",
    "claims_selftest",
    "configure_parser",
    "run_cli",
    "selftest",
    "storm_once",
]

EXIT_PASS, EXIT_FAIL, EXIT_INCONCLUSIVE = 0, 1, 3


class SelftestUsageError(HarnessError, ValueError):
    """A self-test option that runs nothing useful (names the fix)."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class StormOutcome:
    """One storm of the self-test: how it ended and what the checker concluded."""

    run_dir: str
    status: str  # the storm's ending: quorum, timeout, suspect, error, interrupted
    verdict: str  # pass, fail or inconclusive
    clauses: tuple[str, ...] = ()
    seconds: float = 0.0  # storm length (start to stop)
    first_violation_s: float | None = None  # None unless the verdict is fail
    note: str = ""  # the first inconclusive reason or the storm error
    verdict_s: float | None = None  # wall seconds from the storm's start to its verdict (storm, snapshot, check)
    strikes: dict[str, int] = field(default_factory=dict)  # `soak.check.strikes.strike_windows` of the run
    boot_s: float | None = None  # seconds from the storm's start to its boot barrier (the workers spawned and ready)


@dataclass(slots=True)
class MutantResult:
    """One mutant: conformance findings and its storms."""

    name: str
    clause: str
    summary: str
    conformance_caught: bool | None = None  # None: conformance not run
    conformance_clauses: tuple[str, ...] = ()
    conformance_s: float = 0.0
    storms: list[StormOutcome] = field(default_factory=list)

    @property
    def caught(self) -> int:
        """Storms whose verdict is fail."""
        return sum(s.verdict == "fail" for s in self.storms)

    @property
    def escaped(self) -> bool:
        """True when any storm did not fail the mutant."""
        return self.caught < len(self.storms)

    @property
    def storm_clauses(self) -> tuple[str, ...]:
        return tuple(sorted({c for s in self.storms for c in s.clauses}))

    @property
    def median_first_violation_s(self) -> float | None:
        times = [s.first_violation_s for s in self.storms if s.first_violation_s is not None]
        return statistics.median(times) if times else None

    @property
    def median_first_after_boot_s(self) -> float | None:
        """Median seconds from the boot barrier (every worker spawned and ready) to the first violation's evidence:
        the first evidence less the spawning, which a loaded machine stretches to seconds."""
        times = [s.first_violation_s - s.boot_s for s in self.storms
                 if s.first_violation_s is not None and s.boot_s is not None]
        return statistics.median(times) if times else None

    @property
    def median_verdict_s(self) -> float | None:
        """Median wall seconds from a catching storm's start to its fail verdict."""
        times = [s.verdict_s for s in self.storms if s.verdict == "fail" and s.verdict_s is not None]
        return statistics.median(times) if times else None

    @property
    def strikes(self) -> dict[str, int]:
        """Its storms' strike counts summed (`soak.check.strikes.KEYS`)."""
        return _summed_strikes(self.storms)


def _summed_strikes(storms: Iterable[StormOutcome]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in storms:
        for k, v in s.strikes.items():
            out[k] = out.get(k, 0) + v
    return out


def strike_text(strikes: dict[str, int]) -> str:
    """`held: mid-call share, evidence share` of summed strike counts (`-`: none held)."""
    held = strikes.get("held", 0)
    if not held:
        return "-"
    return f"{held}: {strikes.get('witnessed', 0) / held:.2f}, {strikes.get('landed', 0) / held:.2f}"


@dataclass(slots=True)
class ReferenceResult:
    """One reference store: its storms, which must all pass."""

    spec: str
    storms: list[StormOutcome] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        return sum(s.verdict == verdict for s in self.storms)

    @property
    def false_alarm(self) -> bool:
        return bool(self.count("fail"))

    @property
    def inconclusive(self) -> bool:
        return bool(self.count("inconclusive"))


class _Outcome:
    """What a self-test's mutants and references imply, whichever workload: escapes, false alarms, the exit code."""

    __slots__ = ()

    @property
    def escaped(self) -> list[str]:
        """Mutants some run did not catch."""
        return [m.name for m in self.mutants if m.escaped]

    @property
    def false_positives(self) -> list[str]:
        """Reference stores some run failed."""
        return [r.spec for r in self.references if r.false_alarm]

    @property
    def exit_code(self) -> int:
        """1 on an escape or a reference fail; 3 when a reference run was inconclusive; else 0."""
        if self.escaped or self.false_positives:
            return EXIT_FAIL
        if any(r.inconclusive for r in self.references):
            return EXIT_INCONCLUSIVE
        return EXIT_PASS


@dataclass(slots=True)
class SelftestReport(_Outcome):
    """Every mutant's and reference store's results, and the exit code they imply."""

    runs: int
    scenario: str
    out_root: str
    mutants: list[MutantResult] = field(default_factory=list)
    references: list[ReferenceResult] = field(default_factory=list)
    elapsed_s: float = 0.0

    def rows(self) -> list[dict[str, str]]:
        """The table, one dict per mutant (column -> text)."""
        out = []
        for m in self.mutants:
            if m.conformance_caught is None:
                conf = "-"
            elif not m.conformance_caught:
                conf = "no"
            else:  # the full clause list is in the JSON report
                own = m.clause in m.conformance_clauses
                n = len(m.conformance_clauses)
                conf = f"yes ({n} clause{'s' if n != 1 else ''}, {'incl. its own' if own else 'not its own'})"
            med, wall = m.median_first_violation_s, m.median_verdict_s
            out.append({
                "mutant": m.name,
                "breaks": m.clause,
                "conformance": conf,
                "storm": f"{m.caught}/{len(m.storms)}",
                "median_s": "-" if med is None else f"{med:.1f}",
                "after_boot": "-" if m.median_first_after_boot_s is None else f"{m.median_first_after_boot_s:.1f}",
                "verdict_s": "-" if wall is None else f"{wall:.1f}",
                "strikes": strike_text(m.strikes),
                "storm clauses": ", ".join(m.storm_clauses) or "-",
            })
        return out

    def table(self) -> str:
        """The self-test table as text, reference stores and totals below it."""
        rows = self.rows()
        cols = ["mutant", "breaks", "conformance", "storm", "median_s", "after_boot", "verdict_s", "strikes",
                "storm clauses"]
        heads = {"median_s": "median s to 1st evidence", "after_boot": "after boot", "verdict_s": "median s to fail",
                 "storm": "storm caught",
                 "strikes": "strikes held: mid-call, evidence"}
        widths = {c: max([len(heads.get(c, c))] + [len(r[c]) for r in rows]) for c in cols}
        lines = ["  ".join(heads.get(c, c).ljust(widths[c]) for c in cols).rstrip()]
        lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in rows]
        for r in self.references:
            n = len(r.storms)
            notes = sorted({s.note for s in r.storms if s.verdict != "pass" and s.note})
            lines.append(f"reference {r.spec}  pass {r.count('pass')}/{n}, fail {r.count('fail')}, "
                         f"inconclusive {r.count('inconclusive')}; strikes held: mid-call, evidence "
                         f"{strike_text(_summed_strikes(r.storms))}" + (f" ({notes[0]})" if notes else ""))
        verdict = {EXIT_PASS: "PASS", EXIT_FAIL: "FAIL", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}[self.exit_code]
        parts = []
        if self.escaped:
            parts.append("escaped: " + ", ".join(self.escaped))
        if self.false_positives:
            parts.append("false positives on: " + ", ".join(self.false_positives))
        lines.append(f"selftest: {verdict} in {self.elapsed_s:.0f} s ({self.runs} storm(s) each, scenario "
                     f"{self.scenario})" + (f"; {'; '.join(parts)}" if parts else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def mutant(m: MutantResult) -> dict[str, Any]:
            d = asdict(m)
            d.update(caught=m.caught, escaped=m.escaped, median_first_violation_s=m.median_first_violation_s,
                     median_verdict_s=m.median_verdict_s, strikes=m.strikes,
                     median_first_after_boot_s=m.median_first_after_boot_s)
            return d

        return {
            "runs": self.runs, "scenario": self.scenario, "out_root": self.out_root,
            "elapsed_s": round(self.elapsed_s, 3), "exit_code": self.exit_code,
            "escaped": self.escaped, "false_positives": self.false_positives,
            "mutants": [mutant(m) for m in self.mutants],
            "references": [asdict(r) for r in self.references],
        }


def _first_violation_s(verdict: Any, started_ns: int, fallback_s: float) -> float:
    """Seconds from the storm start until the earliest violation was fully evidenced."""
    best: int | None = None
    for v in verdict.violations:
        times = [e.complete_ns if e.complete_ns is not None else e.invoke_ns for e in v.evidence]
        times = [t for t in times if t >= started_ns > 0]
        if times and (best is None or max(times) < best):
            best = max(times)
    return fallback_s if best is None else round((best - started_ns) / 1e9, 3)


def storm_once(scenario: Any, spec: Any, run_dir: Path) -> StormOutcome:
    """Run one storm of `scenario` against `spec` (a spec or a resolved `StoreTarget`) in `run_dir` and
    let the checker judge it."""
    from soak.check import check_run
    from soak.check.strikes import strike_windows
    from soak.check.verdict import Verdict
    from soak.storm.orchestrator import run_storm

    t0 = time.monotonic()
    info = run_storm(scenario, spec, run_dir, progress=False)
    seconds = time.monotonic() - t0
    try:
        seconds = float(json.loads((run_dir / "storm.json").read_text())["elapsed_s"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        verdict = check_run(run_dir)
    except Exception as exc:  # a checker that crashes is inconclusive, never pass
        verdict = Verdict.build(reasons=[f"the checker raised {type(exc).__name__}: {exc}"])
    verdict_s = time.monotonic() - t0
    first = _first_violation_s(verdict, info.started_ns, seconds) if verdict.result == "fail" else None
    note = info.error or (verdict.reasons[0] if verdict.reasons else "")
    try:
        strikes = strike_windows(run_dir)
    except (OSError, ValueError):
        strikes = {}
    return StormOutcome(str(run_dir), info.status, verdict.result, tuple(verdict.clauses), round(seconds, 3),
                        first, note[:300], round(verdict_s, 3), strikes, _boot_s(run_dir, info.started_ns))


def _boot_s(run_dir: Path, started_ns: int) -> float | None:
    """Seconds from the storm's start to its boot barrier (the nemesis's `boot` event), None where not recorded."""
    from soak.history import Record, operations
    from soak.rundir import EVENTS_FILE

    path = run_dir / EVENTS_FILE
    if not started_ns or not path.is_file():
        return None
    for ev in operations([path]):
        if isinstance(ev, Record) and ev.kind == "boot":
            return round((ev.time - started_ns) / 1e9, 3)
    return None


def _default_root() -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = Path("reports") / f"{stamp}-selftest"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _slug(spec: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in spec).strip("_") or "store"


def _check_references(specs: Iterable[str]) -> list[str]:
    from soak.stores import resolve

    out = []
    for spec in specs:
        target = resolve(spec)
        if target.single_process:
            raise StoreSpecError(f"reference store {spec} lives inside one process and cannot be stormed; "
                                 "use sqlite: or a networked store")
        out.append(spec)
    return out


def selftest(
    runs: int = 1,
    mutants: Sequence[str] | None = None,
    reference: Sequence[str] = ("sqlite:",),
    scenario: str = "smoke",
    out_root: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    conformance: bool = True,
    stop_on_suspect: bool = True,
    overrides: dict[str, Any] | None = None,
) -> SelftestReport:
    """Run the conformance suite and `runs` storms per mutant, and `runs` storms per reference store.

    Storms run one at a time, each bounded by the scenario's time bound; with `stop_on_suspect`
    (the default, for mutants and references alike) a storm ends at its first suspect operation.
    Run directories land under `out_root` (default `reports/<UTC timestamp>-selftest/`).
    """
    from soak.conformance import run_conformance
    from soak.scenario import load_scenario
    from soak.stores.mutants import MUTANTS
    from soak.stores.net_mutants import NET_MUTANTS

    if runs < 1:
        raise SelftestUsageError(f"--runs {runs} runs no storm; use 1 or more")
    names = list(MUTANTS) if mutants is None else list(mutants)
    catalogue = {**MUTANTS, **NET_MUTANTS}  # the networked ones by name only: they need their servers
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        raise StoreSpecError(f"no mutant {unknown[0]!r}; use one of {', '.join(catalogue)}")
    refs = _check_references(reference)
    sc = load_scenario(scenario, {**(overrides or {}), "stop_on_suspect": stop_on_suspect})
    root = Path(out_root) if out_root is not None else _default_root()
    root.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _msg: None)
    report = SelftestReport(runs, sc.name, str(root))
    t0 = time.monotonic()
    for name in names:
        m = catalogue[name]
        result = MutantResult(name, m.clause, m.summary)
        if conformance:
            c0 = time.monotonic()
            conf = run_conformance(f"mutant:{name}")
            result.conformance_s = round(time.monotonic() - c0, 3)
            result.conformance_clauses = tuple(sorted(conf.failed_clauses()))
            result.conformance_caught = bool(result.conformance_clauses)
            say(f"{name}: conformance {'caught' if result.conformance_caught else 'passed'}"
                f"{' (' + ', '.join(result.conformance_clauses) + ')' if result.conformance_clauses else ''}"
                f" in {result.conformance_s:.1f} s")
        for k in range(runs):
            outcome = storm_once(sc, f"mutant:{name}", root / name / f"run{k + 1}")
            result.storms.append(outcome)
            say(f"{name}: storm {k + 1}/{runs} {outcome.status} -> {outcome.verdict}"
                f"{' (' + ', '.join(outcome.clauses) + ')' if outcome.clauses else ''} in {outcome.seconds:.1f} s")
        report.mutants.append(result)
    for spec in refs:
        ref = ReferenceResult(spec)
        for k in range(runs):
            outcome = storm_once(sc, spec, root / f"reference-{_slug(spec)}" / f"run{k + 1}")
            ref.storms.append(outcome)
            say(f"reference {spec} storm {k + 1}/{runs} {outcome.status} -> {outcome.verdict}"
                f"{' (' + ', '.join(outcome.clauses) + ')' if outcome.clauses else ''} in {outcome.seconds:.1f} s")
        report.references.append(ref)
    report.elapsed_s = time.monotonic() - t0
    return report


# -- the claims workload ----------------------------------------------------------------------

#: The claims self-test's storms: the claims preset, bounded so a mutant that blocks a quorum item ends (its
#: verdict must still be fail).
CLAIMS_OVERRIDES: dict[str, Any] = {"time_bound_s": 45.0}


def _ratio(hits: Sequence[bool]) -> str:
    return f"{sum(hits)}/{len(hits)}" if hits else "-"


@dataclass(slots=True)
class ClaimMutantResult:
    """One claim store mutant: each storm and each conformance run, and whether it named the mutant's clause."""

    name: str
    clause: str
    summary: str
    storms: list[StormOutcome] = field(default_factory=list)
    #: per conformance run: the clauses it failed
    conformance: list[tuple[str, ...]] = field(default_factory=list)
    conformance_s: list[float] = field(default_factory=list)

    @property
    def storm_caught(self) -> list[bool]:
        """Per storm: verdict fail naming the mutant's own clause."""
        return [s.verdict == "fail" and self.clause in s.clauses for s in self.storms]

    @property
    def conformance_caught(self) -> list[bool]:
        """Per conformance run: its own clause among the failed ones."""
        return [self.clause in failed for failed in self.conformance]

    @property
    def escaped(self) -> bool:
        """True when a storm or a conformance run did not name the mutant's clause."""
        return not all(self.storm_caught) or not all(self.conformance_caught)

    @property
    def median_s(self) -> float | None:
        """Median seconds from a catching storm's start to its first violation."""
        times = [s.first_violation_s for s, hit in zip(self.storms, self.storm_caught, strict=True)
                 if hit and s.first_violation_s is not None]
        return statistics.median(times) if times else None


@dataclass(slots=True)
class ClaimReferenceResult:
    """The reference claim store: its storms and conformance runs, which must all pass."""

    spec: str
    storms: list[StormOutcome] = field(default_factory=list)
    conformance: list[str] = field(default_factory=list)  # per run: its verdict

    @property
    def false_alarm(self) -> bool:
        return any(s.verdict == "fail" for s in self.storms) or "fail" in self.conformance

    @property
    def inconclusive(self) -> bool:
        return any(s.verdict == "inconclusive" for s in self.storms) or "inconclusive" in self.conformance


@dataclass(slots=True)
class ClaimsSelftestReport(_Outcome):
    """The claims self-test: every claim mutant's and reference store's results, and the exit code they imply."""

    runs: int
    scenario: str
    out_root: str
    mutants: list[ClaimMutantResult] = field(default_factory=list)
    references: list[ClaimReferenceResult] = field(default_factory=list)
    elapsed_s: float = 0.0

    def rows(self) -> list[dict[str, str]]:
        out = []
        for m in self.mutants:
            med = m.median_s
            seen = sorted({c for s in m.storms for c in s.clauses} | {c for f in m.conformance for c in f})
            out.append({"mutant": m.name, "clause": m.clause, "storm": _ratio(m.storm_caught),
                        "conformance": _ratio(m.conformance_caught),
                        "median_s": "-" if med is None else f"{med:.1f}", "seen": ", ".join(seen) or "-"})
        return out

    def table(self) -> str:
        rows = self.rows()
        cols = ["mutant", "clause", "storm", "conformance", "median_s", "seen"]
        heads = {"storm": "storm caught", "conformance": "conformance caught",
                 "median_s": "median s to 1st violation", "seen": "clauses seen failing"}
        widths = {c: max([len(heads.get(c, c))] + [len(r[c]) for r in rows]) for c in cols}
        lines = ["  ".join(heads.get(c, c).ljust(widths[c]) for c in cols).rstrip()]
        lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in rows]
        for r in self.references:
            n = len(r.storms)
            passed = sum(s.verdict == "pass" for s in r.storms)
            notes = sorted({s.note for s in r.storms if s.verdict != "pass" and s.note})
            conf = ", ".join(r.conformance) or "not run"
            lines.append(f"reference {r.spec}  storm pass {passed}/{n}, conformance {conf}"
                         + (f" ({notes[0]})" if notes else ""))
        verdict = {EXIT_PASS: "PASS", EXIT_FAIL: "FAIL", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}[self.exit_code]
        parts = []
        if self.escaped:
            parts.append("escaped: " + ", ".join(self.escaped))
        if self.false_positives:
            parts.append("false alarms on: " + ", ".join(self.false_positives))
        lines.append(f"selftest: {verdict} in {self.elapsed_s:.0f} s (claims workload, {self.runs} run(s) each, "
                     f"scenario {self.scenario})" + (f"; {'; '.join(parts)}" if parts else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def mutant(m: ClaimMutantResult) -> dict[str, Any]:
            d = asdict(m)
            d.update(storm_caught=m.storm_caught, conformance_caught=m.conformance_caught, escaped=m.escaped,
                     median_first_violation_s=m.median_s)
            return d

        return {"workload": "claims", "runs": self.runs, "scenario": self.scenario, "out_root": self.out_root,
                "elapsed_s": round(self.elapsed_s, 3), "exit_code": self.exit_code, "escaped": self.escaped,
                "false_positives": self.false_positives, "mutants": [mutant(m) for m in self.mutants],
                "references": [asdict(r) for r in self.references]}


def claims_selftest(
    runs: int = 1,
    mutants: Sequence[str] | None = None,
    reference: Sequence[str] = ("sqlite:",),
    scenario: str = "claims",
    out_root: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    *,
    conformance: bool = True,
    overrides: dict[str, Any] | None = None,
) -> ClaimsSelftestReport:
    """`runs` claims storms and `runs` claims conformance runs per claim mutant, each of which must name the
    mutant's own clause; the same per reference claim store, which must pass. Storms run one at a time under
    `CLAIMS_OVERRIDES` (then `overrides`); run directories land under `out_root`."""
    from soak.claims.conformance import run_claims_conformance
    from soak.claims.mutants import CLAIM_MUTANTS
    from soak.scenario import load_scenario
    from soak.stores import resolve

    if runs < 1:
        raise SelftestUsageError(f"--runs {runs} runs no storm; use 1 or more")
    names = list(CLAIM_MUTANTS) if mutants is None else list(mutants)
    unknown = [n for n in names if n not in CLAIM_MUTANTS]
    if unknown:
        raise StoreSpecError(f"no claim store mutant {unknown[0]!r}; use one of {', '.join(CLAIM_MUTANTS)}")
    refs = []
    for spec in reference:
        target = resolve(spec, kind="claims")
        if target.single_process:
            raise StoreSpecError(f"reference claim store {spec} lives inside one process and cannot be stormed; "
                                 "use sqlite: or a networked claim store")
        refs.append((spec, target))
    sc = load_scenario(scenario, {**CLAIMS_OVERRIDES, **(overrides or {})})
    if sc.workload != "claims":
        raise SelftestUsageError(f"scenario {scenario} is a {sc.workload} scenario; the claims self-test needs a "
                                 "claims one (default: claims)")
    root = Path(out_root) if out_root is not None else _default_root()
    root.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _msg: None)
    report = ClaimsSelftestReport(runs, sc.name, str(root))
    t0 = time.monotonic()

    def clauses(found: Iterable[str]) -> str:
        found = list(found)
        return f" ({', '.join(found)})" if found else ""

    for name in names:
        m = CLAIM_MUTANTS[name]
        spec = f"mutant:{name}"
        result = ClaimMutantResult(name, m.clause, m.summary)
        for k in range(runs):
            outcome = storm_once(sc, resolve(spec, kind="claims"), root / name / f"run{k + 1}")
            result.storms.append(outcome)
            say(f"{name}: storm {k + 1}/{runs} {outcome.status} -> {outcome.verdict}{clauses(outcome.clauses)} "
                f"in {outcome.seconds:.1f} s")
            if conformance:
                c0 = time.monotonic()
                failed = tuple(sorted(run_claims_conformance(spec).failed_clauses()))
                result.conformance.append(failed)
                result.conformance_s.append(round(time.monotonic() - c0, 3))
                say(f"{name}: conformance {k + 1}/{runs} {'caught' if failed else 'passed'}{clauses(failed)} "
                    f"in {result.conformance_s[-1]:.1f} s")
        report.mutants.append(result)
    for spec, target in refs:
        ref = ClaimReferenceResult(spec)
        for k in range(runs):
            outcome = storm_once(sc, target, root / f"reference-{_slug(spec)}" / f"run{k + 1}")
            ref.storms.append(outcome)
            say(f"reference {spec} storm {k + 1}/{runs} {outcome.status} -> {outcome.verdict}"
                f"{clauses(outcome.clauses)} in {outcome.seconds:.1f} s")
            if conformance:
                ref.conformance.append(run_claims_conformance(spec).verdict)
                say(f"reference {spec} conformance {k + 1}/{runs} -> {ref.conformance[-1]}")
        report.references.append(ref)
    report.elapsed_s = time.monotonic() - t0
    return report


# -- command line ---------------------------------------------------------------------------

def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", choices=("runs", "claims"), default="runs",
                        help="which mutant catalogue (default runs; claims: the claim store mutants, each caught "
                             "by the claims storm and claims conformance naming its own clause)")
    parser.add_argument("--runs", type=int, default=1, metavar="R", help="storms per mutant and per reference (default 1)")
    parser.add_argument("--mutant", action="append", metavar="NAME", dest="mutants",
                        help="only this mutant (repeatable; default: every mutant)")
    parser.add_argument("--reference", action="append", metavar="SPEC",
                        help="reference store that must pass (repeatable; default: sqlite:)")
    parser.add_argument("--scenario", default=None, metavar="NAME|PATH",
                        help="storm scenario (default: smoke; claims: the claims preset, time bound 45 s)")
    parser.add_argument("--no-conformance", action="store_true", help="skip the conformance suite")
    parser.add_argument("--out", metavar="DIR", help="where run directories go (default: reports/<stamp>-selftest/)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    parser.add_argument("--quiet", action="store_true", help="no per-storm progress lines")


def run_cli(args: argparse.Namespace) -> int:
    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.json and not Path(args.json).parent.is_dir():  # refuse before the storms, not after them
        raise SelftestUsageError(f"--json {args.json}: no directory {Path(args.json).parent}; pass a FILE in an "
                                 "existing directory")
    run = claims_selftest if args.workload == "claims" else selftest
    report = run(
        runs=args.runs,
        mutants=args.mutants,
        reference=tuple(args.reference or ("sqlite:",)),
        scenario=args.scenario or ("claims" if args.workload == "claims" else "smoke"),
        out_root=args.out,
        progress=None if args.quiet else say,
        conformance=not args.no_conformance,
    )
    print(report.table())
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=1) + "\n")
        except OSError as exc:
            raise SelftestUsageError(f"cannot write {args.json}: {exc.strerror or exc}; "
                                     "pass a writable --json FILE") from exc
    print(f"run directories: {report.out_root}")
    return report.exit_code
