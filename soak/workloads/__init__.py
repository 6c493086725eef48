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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from soak.errors import ScenarioError
from soak.history import HistoryWriter, payload_for
from soak.spi import LeaseHeldError, StoreBusyError, StoreError

if TYPE_CHECKING:
    import random

    from soak.scenario import Scenario

__all__ = ["Outcome", "QuorumCounter", "StoreEndedProcess", "WORKLOADS", "WorkerContext", "Workload", "count_event",
           "get_workload"]


class StoreEndedProcess(BaseException):
    """A store call raised `SystemExit`, `KeyboardInterrupt` or another exception outside `Exception`: the store
    tried to end the process (`no-crash`). Recorded as a `store-exit` event; the worker then ends inside the call."""


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
    enter_call: Callable[..., None] = lambda index, f, strike=None: None
    leave_call: Callable[[], None] = lambda: None
    #: publish the tenure this worker holds: (run id or None, epoch, latest monotonic ns it can expire)
    publish_tenure: Callable[..., None] = lambda key, epoch=0, expires_ns=0: None
    #: the run the nemesis asks this worker to take over next (read once), or None
    wanted: Callable[[], str | None] = lambda: None
    #: True where the worker can stop itself inside a call (`strike_next_call`)
    can_strike: bool = False
    counters: dict[Any, int] = field(default_factory=dict)
    _strike: bool = False
    _durations: dict[str, deque[int]] = field(default_factory=dict)

    def next_tag(self) -> str:
        """The tag the next invoke will carry (`process#index`)."""
        return f"{self.process}#{self.writer.next_index()}"

    def strike_next_call(self) -> None:
        """Have the next store call struck: the worker stops itself at a random point inside it.

        The point is a random boundary between two steps of the store's code, or a random
        instant (see `soak.storm.strike`); one after the call returned is a miss the nemesis
        lets go at once. The nemesis holds a stop that landed inside the call past the lease
        (see `soak.storm.nemesis`). Nothing where strikes are unavailable.
        """
        self._strike = self.can_strike

    def _strike_plan(self, f: str) -> Any:
        """One strike of a call of surface `f` (see `soak.storm.strike`): mode step five times in six.

        Step mode's boundary is drawn triangular over the call's boundaries: a fence check must
        come before the write it guards, so a window between them lies inside the call, never at
        its first or last step. Kernel mode's lead is uniform over 1.5 x the median of this
        worker's recent calls of the surface (waits included), its delay over 1.5 x their lower
        quartile (about the work of a call that did not wait).
        """
        from soak.storm.strike import Strike

        recent = sorted(self._durations.get(f, ())) or [100_000]
        median, low = recent[len(recent) // 2], recent[len(recent) // 4]
        rnd = self.rng.random
        mode = "kernel" if rnd() < 1 / 6 else "step"
        return Strike(f, mode, 1 + int(rnd() * 1.5 * median), 1 + int(rnd() * 1.5 * low), (rnd() + rnd()) / 2)

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
        strike = None
        if self._strike:
            self._strike = False
            strike = self._strike_plan(f)
        started = time.perf_counter_ns()
        self.enter_call(index, f, strike)
        try:
            result = call()
        except StoreError as exc:
            self._left(f, started, strike)
            self.writer.complete(index, "fail", _holder_value(exc), error=type(exc).__name__, message=str(exc))
            return Outcome("fail", None, exc)
        except Exception as exc:  # indeterminate: never guessed into ok or fail
            self._left(f, started, strike)
            self.writer.complete(index, "info", error=type(exc).__name__, message=str(exc) or repr(exc))
            return Outcome("info", None, exc)
        except BaseException as exc:  # the store tried to end the process: no completion, the call never returned
            self.writer.event("store-exit", {"i": index, "f": f, "error": type(exc).__name__,
                                             "message": (str(exc) or repr(exc))[:300]})
            raise StoreEndedProcess() from exc
        self._left(f, started, strike)
        try:
            value = ok_value(result) if ok_value else {}
        except Exception as exc:  # the store returned something that is not what its surface returns
            self.writer.complete(index, "info", error=type(exc).__name__,
                                 message=f"the store's {f} returned {type(result).__name__} {result!r:.200}, "
                                         f"which the workload could not read: {exc}")
            return Outcome("info", None, exc)
        self.writer.complete(index, "ok", value)
        return Outcome("ok", result)

    def _left(self, f: str, started: int, struck: Any) -> None:
        self.leave_call()
        # kernel-mode strikes time themselves by these (a struck call's duration includes the hold)
        if self.can_strike and not struck:
            recent = self._durations.get(f)
            if recent is None:
                recent = self._durations[f] = deque(maxlen=15)
            recent.append(time.perf_counter_ns() - started)

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


def count_event(counts: dict[str, int], process: str, kind: str, value: dict[str, Any]) -> None:
    """Add one history event to the nemesis's quorum counters (stalls, pauses, pauses inside a call, kills): the
    one reading the storm's tailer and the checker's recount share."""
    if process == "nemesis":
        if kind == "pause":
            counts["pauses"] = counts.get("pauses", 0) + 1
            if value.get("in_call"):
                counts["pauses_in_call"] = counts.get("pauses_in_call", 0) + 1
        elif kind == "kill":
            counts["kills"] = counts.get("kills", 0) + 1
        elif kind == "timeout-kill":
            counts["timeout_kills"] = counts.get("timeout_kills", 0) + 1
    elif kind == "stall":
        counts["stalls"] = counts.get("stalls", 0) + 1


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
