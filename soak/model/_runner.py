"""Binding the machine to one store and running it: `machine_for`, `machine_test_case`, `run_model`,
`check_model`, and the `ModelOutcome` read off a run (the failing program, the clauses exercised, the
store's choices)."""

from __future__ import annotations

import unittest
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings as Settings
from hypothesis.stateful import run_state_machine_as_test

from soak.clauses import expired_choice
from soak.errors import HarnessError, ScenarioError
from soak.model._driver import ContractViolation, ModelInconclusive, RunStats
from soak.model._machine import FencedStoreMachine
from soak.model._profiles import model_settings
from soak.stores import StoreTarget, resolve

__all__ = ["ModelOutcome", "check_model", "machine_for", "machine_test_case", "run_model"]


def machine_for(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
    call_bound_s: float | None = None,
) -> type[FencedStoreMachine]:
    """A `FencedStoreMachine` subclass bound to one store (spec string, target or factory).

    `clock` is `auto` (a fake clock where the store object declares `injectable_clock = True`,
    else real time), `fake` (a usage error for a store that does not declare it) or `real`. The
    declaration is read by `prepare()`, before the first program. `call_bound_s` overrides the
    `call-returns` bound (default `soak.clauses.default_call_bound_s(ttl)`).
    """
    target = spec if isinstance(spec, StoreTarget) else resolve(spec)
    if clock not in ("auto", "fake", "real"):
        raise ScenarioError(f"clock must be auto, fake or real, got {clock!r}")
    if call_bound_s is not None and call_bound_s <= 0:
        raise ScenarioError(f"call_bound_s must be positive, got {call_bound_s}")
    return type(
        "FencedStoreMachine",
        (FencedStoreMachine,),
        {
            "target": target,
            "clock_mode": clock,
            "requested_ttl_ms": lease_ttl_ms,
            "requested_call_bound_s": call_bound_s,
            "stats": RunStats(),
            # Hypothesis finds the class's source by module and name and keys the machine on it, as before the split.
            "__module__": FencedStoreMachine.__module__,
            # Hypothesis keys its example database (and derandomized seed) on this: one per store.
            "_hypothesis_internal_add_digest": f"{target.spec}|{clock}|{lease_ttl_ms}".encode(),
        },
    )


def machine_test_case(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    settings: Settings | None = None,
    profile: str | None = None,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
) -> type[unittest.TestCase]:
    """A unittest/pytest test case running the machine on one store; assign it in a test module.

    The store is first opened when the test runs, not when the module is imported. A run that a
    store's busy answers leave inconclusive is a skip, never a pass."""
    machine = machine_for(spec, lease_ttl_ms=lease_ttl_ms, clock=clock)
    case = machine.TestCase
    case.settings = settings or model_settings(profile)
    case.__name__ = case.__qualname__ = "FencedStoreModelTest"
    return case


def _settings(settings: Settings | None, profile: str | None, max_examples: int | None) -> Settings:
    chosen = settings or model_settings(profile)
    if max_examples is not None:
        chosen = Settings(chosen, max_examples=max_examples)
    return chosen


def run_model(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    max_examples: int | None = None,
    profile: str | None = None,
    settings: Settings | None = None,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
    call_bound_s: float | None = None,
) -> None:
    """Run the machine on one store; raises Hypothesis' shrunk failure (a `ContractViolation`), or
    `ModelInconclusive` (a skip under pytest) when a call answered busy on every attempt."""
    machine = machine_for(spec, lease_ttl_ms=lease_ttl_ms, clock=clock, call_bound_s=call_bound_s)
    machine.prepare()
    run_state_machine_as_test(machine, settings=_settings(settings, profile, max_examples))


@dataclass(frozen=True)
class ModelOutcome:
    """The result of `check_model`: on failure the minimal failing program and the clause; on an
    inconclusive run the reason; always the clock used, busy retries, the clauses the programs
    exercised and the choices the store made."""

    passed: bool
    program: tuple[str, ...] = ()
    clause: str | None = None
    error: str = ""
    #: a store call answered busy on every attempt: nothing was concluded (neither pass nor fail)
    inconclusive: bool = False
    reason: str = ""
    #: StoreBusyError answers retried, over every program
    busy_retries: int = 0
    #: "fake" or "real" ("unknown" if the run ended before the store's declaration was read), and why
    clock: str = ""
    clock_reason: str = ""
    lease_ttl_ms: int = 0
    call_bound_s: float = 0.0
    slowest_call_s: float = 0.0
    slowest_call: str = ""
    #: clause -> judgements made that could have failed it (a clause absent was not exercised)
    exercised: dict[str, int] = field(default_factory=dict)
    #: the store's choices as seen: "expired-unsuperseded" -> accepts | refuses | mixed,
    #: "delete-ends-tenure" -> ends | keeps | mixed (mixed: both, in different programs)
    choices: dict[str, str] = field(default_factory=dict)
    #: choice -> what was seen, in a line
    choice_detail: dict[str, str] = field(default_factory=dict)

    @property
    def result(self) -> str:
        """`pass`, `fail` or `inconclusive`."""
        return "pass" if self.passed else "inconclusive" if self.inconclusive else "fail"

    @property
    def steps(self) -> int:
        """Rule calls in the failing program (not set-up, invariant checks or teardown)."""
        return sum(1 for line in self.program if _is_step(line))


def _is_step(line: str) -> bool:
    line = line.strip()
    if line.startswith("state = ") or line in ("state.teardown()", "state.observable_state_matches_model()"):
        return False
    return "state." in line


def _program_from(exc: BaseException) -> tuple[str, ...]:
    """Hypothesis' printed program, from `state = ...` to `state.teardown()`."""
    lines: list[str] = []
    for note in getattr(exc, "__notes__", ()):
        for line in str(note).splitlines():
            if line.startswith("state = "):
                lines = []
            lines.append(line)
            if line == "state.teardown()":
                return tuple(lines)
    return ()


def _choices(stats: RunStats) -> tuple[dict[str, str], dict[str, str]]:
    """The store's choices from what the programs saw (see `ModelOutcome.choices`)."""
    choices: dict[str, str] = {}
    detail: dict[str, str] = {}
    expired = expired_choice({surface: (a, r) for surface, (a, r) in stats.expired.items()})
    if expired is not None:  # the release is shown beside it, in the detail
        choices["expired-unsuperseded"] = expired
    if stats.expired:
        detail["expired-unsuperseded"] = "under a lease expired and not superseded: " + ", ".join(
            f"{surface} accepted {a}, refused {r}" for surface, (a, r) in sorted(stats.expired.items()))
    ends, keeps = stats.delete_choice[True], stats.delete_choice[False]
    if ends or keeps:
        choices["delete-ends-tenure"] = "ends" if not keeps else "keeps" if not ends else "mixed"
        seen = [f"the tenure was {word} ({n} time(s) shown; first: {stats.delete_evidence[flag]})"
                for flag, n, word in ((True, ends, "ended"), (False, keeps, "kept")) if n]
        detail["delete-ends-tenure"] = "after a fenced delete under the live lease: " + "; ".join(seen)
    return choices, detail


def _outcome(machine: type[FencedStoreMachine], passed: bool, **fields: Any) -> ModelOutcome:
    stats = machine.stats
    choices, detail = _choices(stats)
    return ModelOutcome(
        passed,
        busy_retries=stats.busy.retries,
        clock={True: "fake", False: "real"}.get(machine.fake_clock, "unknown"),
        clock_reason=machine.clock_reason or "not settled: the run ended before the store's declaration was read",
        lease_ttl_ms=machine.lease_ttl_ms,
        call_bound_s=machine.call_bound_s,
        slowest_call_s=round(stats.slowest_call_s, 4),
        slowest_call=stats.slowest_call,
        exercised=dict(sorted(stats.exercised.items())),
        choices=choices,
        choice_detail=detail,
        **fields,
    )


def check_model(
    spec: str | StoreTarget | Callable[..., Any],
    *,
    max_examples: int | None = None,
    profile: str | None = None,
    settings: Settings | None = None,
    lease_ttl_ms: int | None = None,
    clock: str = "auto",
    call_bound_s: float | None = None,
) -> ModelOutcome:
    """Like `run_model`, but returns the outcome; store set-up errors still raise `HarnessError`."""
    machine = machine_for(spec, lease_ttl_ms=lease_ttl_ms, clock=clock, call_bound_s=call_bound_s)
    try:
        machine.prepare()
        run_state_machine_as_test(machine, settings=_settings(settings, profile, max_examples))
    except ModelInconclusive as exc:
        seen = machine.stats.first_violation
        if seen is not None:  # a proven violation outranks a later replay that stayed busy
            clause, message = seen
            return _outcome(machine, False, clause=clause, error=" ".join(f"ContractViolation: [{clause}] {message}; "
                            f"its replay then ended inconclusive ({exc})".split()))
        return _outcome(machine, False, inconclusive=True, reason=" ".join(str(exc).split()))
    except HarnessError:
        raise
    except Exception as exc:
        harness = _find(exc, HarnessError)
        if harness is not None:  # a set-up problem surfacing through a flaky replay
            raise harness from exc
        violation = _find(exc, ContractViolation)
        clause = violation.clause if violation is not None else None
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        return _outcome(machine, False, program=_program_from(exc), clause=clause, error=error)
    return _outcome(machine, True)


def _find(exc: BaseException, kind: type[BaseException]) -> Any:
    """The first `kind` inside a failure (a flaky replay wraps failures in an exception group)."""
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _find(inner, kind)
        if found is not None:
            return found
    return None

