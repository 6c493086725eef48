"""From facts to a verdict: checkers composed, each made safe, their findings merged false > unknown > true.

A workload says how its histories are checked with a `CheckPlan`: how to fold its operations into facts (and,
for bounded memory, how to merge and settle them), its clause checkers, and what in its final state keeps the
check from deciding. `judge` runs the plan's checkers and the generic ones every workload gets (`call-returns`
and `no-crash`, `soak.check.liveness`), each under check-safe: a checker that raises makes the verdict
inconclusive naming it, never `pass`, and the others still run (Jepsen's `compose` and `check-safe`). A proven
violation fails the run even when other parts are unknown; otherwise any unknown is inconclusive; `pass` only
when nothing is (`soak.check.verdict`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak.check.liveness import check_liveness, exercised, history_gaps, lost_workers
from soak.check.verdict import Verdict, Violation
from soak.history import HistoryCorruptError

__all__ = ["CheckPlan", "Checker", "GENERIC_CHECKERS", "Runner", "judge", "run_checkers"]

#: A clause checker: facts in, violations out (pure).
Checker = Callable[[Any], list[Violation]]
#: Runs checkers over facts: per checker, in order, its violations or why it raised (`run_checkers`).
Runner = Callable[[Any, Sequence[tuple[str, Checker]]], list[tuple[list[Violation], str | None]]]

#: The checkers every workload's history gets, after its own.
GENERIC_CHECKERS: tuple[tuple[str, Checker], ...] = (("liveness", check_liveness),)


class _Never(Exception):
    """Raised by no fold: the exception of a plan that has no out-of-order or overlap case."""


@dataclass(frozen=True)
class CheckPlan:
    """How one workload's histories are checked (what `soak.check.check_run` and `soak.check.parallel` run).

    - `new_facts(state, info, **settings)`: empty facts for a history, with the final state read back (None
      when it could not be: `settings["state_error"]` says why), the run's `RunInfo` (or None) and the generic
      settings (`lease_ttl_ms`, `status`, `quorum`, `call_bound_s`, `quorum_target`, `workload`, `from_storm`,
      `state_error`);
    - `fold(facts, ops, until)`: fold operation tuples and events (`soak.history.operation_tuples`) in, stopping
      before the first operation invoked at `until` or later and returning it (None when `ops` ran out);
    - `finish(facts)`: complete the facts once everything is folded;
    - `checkers`: the workload's clause checkers, by name;
    - `undecidable(facts)`: what in its final state keeps the check from deciding;
    - `whole_history`: the checkers whose findings are proofs only over a whole history (set aside when a
      worker's history is missing);
    - `load_state(run_dir)`: the final state saved in a run directory (raises `RunDirError` when it is not);
    - bounded memory (all four, or none: the history is then folded whole): `new_part(facts)` for a part to fold
      elsewhere, `merge(facts, part)`, `settle(facts, until)` after each time slice, `ship(part)` for the part
      as a child process sends it, `proven(facts)` for the violations proven so far (no later operation can undo
      them); `unordered` and `overlap` are the exceptions `fold` and `merge` raise when a file is out of
      invocation order or a process's records are in two parts.
    """

    new_facts: Callable[..., Any]
    fold: Callable[..., Any]
    finish: Callable[[Any], Any]
    checkers: tuple[tuple[str, Checker], ...]
    load_state: Callable[[Path], Any]
    undecidable: Callable[[Any], list[str]] = lambda facts: []
    whole_history: frozenset[str] = frozenset()
    new_part: Callable[[Any], Any] | None = None
    merge: Callable[[Any, Any], None] | None = None
    settle: Callable[[Any, float], None] | None = None
    #: the workload's lease decoder for the history reader (`soak.history.operation_tuples`; None: a run lease)
    make_lease: Callable[..., Any] | None = None
    ship: Callable[[Any], Any] = lambda part: part
    #: bounded memory: the violations proven so far, while the history is still folded a slice at a time (what
    #: settling judged; the early judge stops a storm at the first, `soak.check.early`)
    proven: Callable[[Any], list[Violation]] = lambda facts: [v for vs in facts.early.values() for v in vs]
    unordered: type[Exception] = _Never
    overlap: type[Exception] = _Never

    @property
    def bounded(self) -> bool:
        """Whether the history can be folded a time slice at a time, settling as it goes (and on two cores)."""
        return None not in (self.new_part, self.merge, self.settle)

    def all_checkers(self) -> tuple[tuple[str, Checker], ...]:
        """The workload's checkers, then the generic ones."""
        return (*self.checkers, *GENERIC_CHECKERS)


def run_checkers(facts: Any, checkers: Sequence[tuple[str, Checker]]) -> list[tuple[list[Violation], str | None]]:
    """Per checker, in order: its violations (with what settling judged early under its name), or no violations
    and the reason it raised."""
    out: list[tuple[list[Violation], str | None]] = []
    early, early_errors = getattr(facts, "early", {}), getattr(facts, "early_errors", {})
    for name, fn in checkers:
        found, failed = early.get(name, []), early_errors.get(name)
        try:
            out.append(([*found, *fn(facts)], failed))
        except Exception as exc:
            out.append((list(found), failed or f"checker {name} raised {type(exc).__name__}: {exc}"))
    return out


def judge(build: Callable[[], Any], plan: CheckPlan, checkers: Sequence[tuple[str, Checker]] | None = None,
          runner: Runner = run_checkers) -> Verdict:
    """Build the facts (a fold of the history) and run the checkers over them: the verdict.

    `checkers` default to the plan's and the generic ones. A corrupt history or a fold that raises is
    inconclusive with the reason named, as is a checker that raises (the others still run).
    """
    # The fold allocates millions of short-lived, acyclic objects (operations, tuples) while its
    # summaries grow: the cyclic collector would re-traverse them for nothing (18% of the time at
    # 1M operations). Reference counting still frees everything; the caller's setting is restored.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _judge(build, plan, plan.all_checkers() if checkers is None else tuple(checkers), runner)
    finally:
        if gc_was_enabled:
            gc.enable()


def _judge(build: Callable[[], Any], plan: CheckPlan, checkers: Sequence[tuple[str, Checker]],
           runner: Runner) -> Verdict:
    """`judge` with the cyclic collector already paused."""
    try:
        facts = build()
    except HistoryCorruptError as exc:
        return Verdict.build(reasons=[f"corrupt history: {exc}"])
    except Exception as exc:
        return Verdict.build(reasons=[f"the history scan raised {type(exc).__name__}: {exc}"])
    violations: list[Violation] = []
    reasons: list[str] = []
    partial = bool(lost_workers(facts))  # a worker's history is missing: only proofs from recorded operations
    for (name, _), (found, reason) in zip(checkers, runner(facts, checkers)):
        if partial and name in plan.whole_history:
            continue  # history_gaps names why
        violations.extend(found)
        if reason is not None:
            reasons.append(reason)
    try:
        reasons.extend(history_gaps(facts, plan.whole_history))
        reasons.extend(plan.undecidable(facts))
    except Exception as exc:
        reasons.append(f"reading the final state raised {type(exc).__name__}: {exc}")
    if facts.status != "quorum":
        reasons.append(f"run ended with status {facts.status!r}, quorum not met"
                       f"{': ' + facts.quorum if facts.quorum else ''}")
    violations = _dedupe(violations)
    facts.stats["violations"] = len(violations)
    try:
        facts.stats["exercised"] = exercised(facts)
    except Exception as exc:
        reasons.append(f"counting what the history exercised raised {type(exc).__name__}: {exc}")
    return Verdict.build(violations, reasons, facts.stats)


def _dedupe(violations: Iterable[Violation]) -> list[Violation]:
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    out = []
    for v in violations:
        k = (v.clause, v.statement, tuple(e.tag for e in v.evidence))
        if k not in seen:
            seen.add(k)
            out.append(v)
    return out
