"""Workloads: what a storm worker does to a store, and what the quorum counts.

A workload provides three things (see `Workload`): the worker loop run inside each storm
process, the run ids the storm snapshots at the end, and a quorum counter fed with history
lines. The storm knows only this interface, so a second workload (task claims) plugs in by
registering here.

`WorkerContext` is what the storm hands the loop: the store, the history writer, the seeded
random source, the stop flag and `op()`, which records one store call as invoke + completion and
publishes "inside a store call" to the orchestrator while the call runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from soak.errors import ScenarioError
from soak.history import HistoryWriter, payload_for
from soak.spi import LeaseHeldError, StoreBusyError, StoreError

if TYPE_CHECKING:
    import random

    from soak.scenario import Scenario

__all__ = ["Outcome", "QuorumCounter", "WORKLOADS", "WorkerContext", "Workload", "get_workload"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one recorded store call ended: `ok`, `fail` (typed refusal) or `info` (unknown)."""

    type: str
    result: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.type == "ok"

    def refused(self, cls: type[BaseException] = StoreError) -> bool:
        return self.type == "fail" and isinstance(self.error, cls)


def _holder_value(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, LeaseHeldError):
        h = exc.holder
        return {"holder": None if h is None else [h.run_id, h.owner, h.epoch]}
    return {}


@dataclass
class WorkerContext:
    """Everything a workload loop needs inside one storm worker process."""

    store: Any
    writer: HistoryWriter
    rng: random.Random
    scenario: Scenario
    process: str
    should_stop: Callable[[], bool]
    enter_call: Callable[[int, str], None] = lambda index, f: None
    leave_call: Callable[[], None] = lambda: None
    counters: dict[Any, int] = field(default_factory=dict)

    def next_tag(self) -> str:
        """The tag the next invoke will carry (`process#index`)."""
        return f"{self.process}#{self.writer.next_index()}"

    def op(
        self,
        f: str,
        run: str,
        lease: Any,
        intent: str,
        value: dict[str, Any],
        call: Callable[[], Any],
        ok_value: Callable[[Any], dict[str, Any]] | None = None,
    ) -> Outcome:
        """Record one store call: invoke line, the call, one completion line.

        A `StoreError` is a typed refusal (`fail`, error = class name); anything else is
        indeterminate (`info`, with the message): it may or may not have applied.
        """
        index = self.writer.invoke(f, run, lease, intent, value)
        self.enter_call(index, f)
        try:
            result = call()
        except StoreError as exc:
            self.leave_call()
            self.writer.complete(index, "fail", _holder_value(exc), error=type(exc).__name__, message=str(exc))
            return Outcome("fail", None, exc)
        except Exception as exc:  # indeterminate: never guessed into ok or fail
            self.leave_call()
            self.writer.complete(index, "info", error=type(exc).__name__, message=str(exc) or repr(exc))
            return Outcome("info", None, exc)
        self.leave_call()
        self.writer.complete(index, "ok", ok_value(result) if ok_value else {})
        return Outcome("ok", result)

    def mutation(
        self,
        f: str,
        run: str,
        lease: Any,
        intent: str,
        build: Callable[[str, bytes, int], tuple[dict[str, Any], Callable[[], Any]]],
    ) -> Outcome:
        """One fenced mutation with a fresh tag, payload and per-lease counter `c`.

        `build(tag, payload, c)` returns the invoke value and the call. A `StoreBusyError`
        (nothing written) is retried `busy_retries` times, each a fresh invoke.
        """
        attempts = 0
        while True:
            key = (lease.run_id, lease.owner, lease.epoch) if lease is not None else None
            c = self.counters.get(key, 0) + 1
            self.counters[key] = c
            tag = self.next_tag()
            value, call = build(tag, payload_for(tag), c)
            outcome = self.op(f, run, lease, intent, value, call)
            if outcome.refused(StoreBusyError):
                attempts += 1
                if attempts <= self.scenario.busy_retries and not self.should_stop():
                    time.sleep(0.002 * attempts)
                    continue
            return outcome

    def retrying(self, f: str, run: str, lease: Any, intent: str, value: dict[str, Any],
                 call: Callable[[], Any], ok_value: Callable[[Any], dict[str, Any]] | None = None) -> Outcome:
        """`op` with the bounded StoreBusyError retry (for calls that carry no payload)."""
        attempts = 0
        while True:
            outcome = self.op(f, run, lease, intent, value, call, ok_value)
            if outcome.refused(StoreBusyError):
                attempts += 1
                if attempts <= self.scenario.busy_retries and not self.should_stop():
                    time.sleep(0.002 * attempts)
                    continue
            return outcome


class QuorumCounter(Protocol):
    """Counts quorum activity from paired history operations (a workload's view)."""

    def feed(self, inv: dict[str, Any], done: dict[str, Any] | None) -> None:
        """One operation: the raw invoke line and its completion line (None: never completed)."""

    def counts(self) -> dict[str, int]:
        """Every counter this workload contributes to the quorum."""


class Workload(Protocol):
    """What a storm worker does and what the quorum counts."""

    name: str

    def run_ids(self, scenario: Scenario) -> list[str]:
        """Every run the final snapshot reads (main, side and never-written runs)."""

    def worker_loop(self, ctx: WorkerContext) -> None:
        """Storm the store until `ctx.should_stop()`."""

    def new_counter(self) -> QuorumCounter:
        """A fresh quorum counter for one storm."""


def _runs_workload() -> Workload:
    from soak.workloads.runs import RunsWorkload

    return RunsWorkload()


#: workload name -> constructor
WORKLOADS: dict[str, Callable[[], Workload]] = {"runs": _runs_workload}


def get_workload(name: str) -> Workload:
    """The registered workload called `name`, or a `ScenarioError` naming the choices."""
    try:
        return WORKLOADS[name]()
    except KeyError:
        raise ScenarioError(
            f"unknown workload {name!r}; set 'workload' to one of {', '.join(sorted(WORKLOADS))}"
        ) from None
