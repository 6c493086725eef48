"""What a storm worker hands a workload's loop, and what the loop asks of the worker: the storm/workload interface.

`WorkerContext` holds the store, the history writer, the seeded random source and the stop flag, and records
store calls (`op`, `mutation`, `retrying`): an invoke line, the call, one completion line, while the worker
publishes "inside a store call" to the orchestrator. A strike (`Strike`, planned here by `strike_next_call`) is
carried out by the worker's timer (`soak.storm.strike`): the plan belongs here, with the loop that asks for it, so
that workloads never import the storm.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from soak.history import HistoryWriter, encode_lease, payload_for
from soak.spi import StoreBusyError, StoreError

if TYPE_CHECKING:
    import random

    from soak.scenario import Scenario

__all__ = ["MODES", "Outcome", "StoreEndedProcess", "Strike", "WorkerContext"]

#: How a strike stops the worker: `kernel` (a POSIX timer at a random instant), `step` (a profile hook at a random
#: step boundary of the store's code); see `soak.storm.strike`.
MODES = ("kernel", "step")


class Strike(NamedTuple):
    """One planned strike of a call of `surface`; `u` in [0, 1) seeds the shuffle of a step-mode sweep's cycle."""

    surface: str
    mode: str
    lead_ns: int
    delay_ns: int
    u: float


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


def _no_value(exc: BaseException) -> dict[str, Any]:
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
    enter_call: Callable[..., None] = lambda index, f, strike=None, kill=False: None
    leave_call: Callable[..., None] = lambda ok=True: None
    #: publish the tenure this worker holds: (run id or None, epoch, latest monotonic ns it can expire)
    publish_tenure: Callable[..., None] = lambda key, epoch=0, expires_ns=0: None
    #: the run the nemesis asks this worker to take over next (read once), or None
    wanted: Callable[[], str | None] = lambda: None
    #: the run board every worker of the storm shares: `note_expiry(key, ns)` records the latest monotonic ns the
    #: tenure just granted or renewed on `key` can expire (0: released), `expiry(key)` reads it (0: free or unknown)
    note_expiry: Callable[[str, int], None] = lambda key, expires_ns: None
    expiry: Callable[[str], int] = lambda key: 0
    #: True where the worker can stop itself inside a call (`strike_next_call`)
    can_strike: bool = False
    #: whether the storm's aimed sweep of a surface's calls still has a gap no held strike has tried
    #: (`soak.storm.strike.untried`): a workload choosing which call to strike prefers such a surface
    unswept: Callable[[str], bool] = lambda surface: False
    #: the run whose call the nemesis holds struck right now (None: none): a worker granted it is the taker
    held_run: Callable[[], str | None] = lambda: None
    #: True in a load worker (the scenario's `load_workers`): it presses the store beside the tenure workers;
    #: `load_index` numbers the load workers from 0
    load: bool = False
    load_index: int = 0
    #: when the oldest store call in flight of another worker of the storm began (monotonic ns; 0: none)
    oldest_call_ns: Callable[[], int] = lambda: 0
    #: the workload's record codec (`Workload.context_hooks`): the list a record holds for a lease, and what the
    #: completion of a typed refusal records (e.g. the holder the store named)
    encode_lease: Callable[[Any], Any] = encode_lease
    refusal_value: Callable[[BaseException], dict[str, Any]] = _no_value
    counters: dict[Any, int] = field(default_factory=dict)
    #: a directory the harness owns for this storm (the run directory), shared by every worker: a workload keeps
    #: its own shared records there (the claims workload's node health registry)
    workdir: str = ""
    #: the workload's read-back after a mutation answered `StoreBusyError` (surface, run, lease, intent, the invoke
    #: value): busy says
    #: nothing was written, so a read right after must not show the write (a store that answers busy to a write that
    #: landed, a lost COMMIT, is caught by the read instead of the retry overwriting the evidence)
    after_busy: Callable[..., None] = lambda f, run, lease, intent, value: None
    _strike: bool = False
    _strike_kill: bool = False
    _durations: dict[str, deque[int]] = field(default_factory=dict)

    def next_tag(self) -> str:
        """The tag the next invoke will carry (`process#index`)."""
        return f"{self.process}#{self.writer.next_index()}"

    def strike_next_call(self, kill: bool = False) -> None:
        """Have the next store call struck: the worker stops itself at a random point inside it.

        The point is a random boundary between two steps of the store's code, or a random
        instant (see `soak.storm.strike`); one after the call returned is a miss the nemesis
        lets go at once. The nemesis holds a stop that landed inside the call past the lease
        (see `soak.storm.nemesis`), or, with `kill`, kills the worker there (a crash between two
        steps of the call: between two commits, a split write). Nothing where strikes are unavailable.
        """
        self._strike = self.can_strike
        self._strike_kill = kill and self.can_strike

    def _strike_plan(self, f: str) -> Any:
        """One strike of a call of surface `f` (see `soak.storm.strike`): mode step five times in six.

        Step mode sweeps the call's boundaries (`soak.storm.strike`); `u` shuffles each new cycle
        of the sweep. Kernel mode's lead is uniform over 1.5 x the median of this
        worker's recent calls of the surface (waits included), its delay over 1.5 x their lower
        quartile (about the work of a call that did not wait).
        """
        recent = sorted(self._durations.get(f, ())) or [100_000]
        median, low = recent[len(recent) // 2], recent[len(recent) // 4]
        rnd = self.rng.random
        mode = "kernel" if rnd() < 1 / 6 else "step"
        return Strike(f, mode, 1 + int(rnd() * 1.5 * median), 1 + int(rnd() * 1.5 * low), rnd())

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
        index = self.writer.invoke(f, run, self.encode_lease(lease), intent, value)
        strike, kill = None, False
        if self._strike:
            self._strike = False
            strike = self._strike_plan(f)
            kill, self._strike_kill = self._strike_kill, False
            if kill:  # a random instant of the call (a step count learnt from calls that return is never learnt
                strike = strike._replace(mode="kernel")  # from calls that are killed)
        started = time.perf_counter_ns()
        self.enter_call(index, f, strike, kill)
        try:
            result = call()
        except StoreError as exc:
            self._left(f, started, strike, ok=False)
            self.writer.complete(index, "fail", self.refusal_value(exc), error=type(exc).__name__, message=str(exc))
            return Outcome("fail", None, exc)
        except Exception as exc:  # indeterminate: never guessed into ok or fail
            self._left(f, started, strike, ok=False)
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

    def _left(self, f: str, started: int, struck: Any, ok: bool = True) -> None:
        self.leave_call(ok)  # `ok`: the call returned (its path is the one a strike is aimed at)
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
        sent: dict[str, Any] = {}

        def attempt() -> Outcome:
            key = (lease.run_id, lease.owner, lease.epoch) if lease is not None else None
            c = self.counters.get(key, 0) + 1
            self.counters[key] = c
            tag = self.next_tag()
            value, call = build(tag, payload_for(tag), c)
            sent["value"] = value
            return self.op(f, run, lease, intent, value, call)

        return self._busy_retried(attempt, lambda: self.after_busy(f, run, lease, intent, sent.get("value", {})))

    def retrying(self, f: str, run: str, lease: Any, intent: str, value: dict[str, Any],
                 call: Callable[[], Any], ok_value: Callable[[Any], dict[str, Any]] | None = None) -> Outcome:
        """`op` with the bounded StoreBusyError retry (for calls that carry no payload)."""
        return self._busy_retried(lambda: self.op(f, run, lease, intent, value, call, ok_value))

    def _busy_retried(self, attempt: Callable[[], Outcome], on_busy: Callable[[], None] | None = None) -> Outcome:
        """`attempt()` (one recorded call), again while it answers `StoreBusyError` (nothing was written), at most
        `busy_retries` more times, backing off 2 ms more each time; `on_busy()` after each busy answer."""
        attempts = 0
        while True:
            outcome = attempt()
            if outcome.refused(StoreBusyError):
                if on_busy is not None and not self.should_stop():
                    on_busy()
                attempts += 1
                if attempts <= self.scenario.busy_retries and not self.should_stop():
                    time.sleep(0.002 * attempts)
                    continue
            return outcome
