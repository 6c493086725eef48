"""What one check gets: a fresh location, store objects over it (each used only by the thread that opened
it), the store's time, sub-check bookkeeping, and the assertions the checks are written with."""

from __future__ import annotations

import contextlib
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from soak.clock import FakeClock
from soak.conformance._report import ERROR, FAIL, INCONCLUSIVE, NOT_EXERCISED, PASS, CheckResult
from soak.conformance._watch import Watch, WatchedStore
from soak.retry import BusyExhausted
from soak.spi import JournalEntry, Lease, LeaseHeldError, RunMeta, StoreError
from soak.stores import StoreTarget

__all__ = ["CheckFailed", "Ctx", "Inconclusive", "NotExercised", "Settings", "StoreThread", "Suite", "call",
           "classify", "expect", "fill", "mutations", "one_line", "payload", "refused", "shares_state", "snapshot",
           "unchanged"]

#: How long a store factory may take before `StoreTarget.open` gives up (the watchdog allows a little more).
OPEN_TIMEOUT_S = 60.0


class CheckFailed(AssertionError):
    """A contract obligation observed broken; the message is the one-line detail."""


class Inconclusive(Exception):
    """The check could not decide (the message says why)."""


class NotExercised(Exception):
    """The check needs a capability the store does not have (the message names it)."""


@dataclass
class Settings:
    """What the checks need to know, sent from the parent to the process that runs them."""

    ttl_ms: int
    root: str
    clock_ok: bool | None  # None: probe the store's declaration first
    boot_processes: int
    boot_rounds: int
    call_bound_s: float
    checks: list[str]


class Suite:
    """The runtime shared by the checks of one process: the target, the watch, where results go."""

    def __init__(self, target: StoreTarget, settings: Settings, watch: Watch, emit: Callable[[tuple], None]) -> None:
        self.target = target
        self.settings = settings
        self.watch = watch
        self.emit = emit
        self.clock_ok = bool(settings.clock_ok)

    @property
    def busy(self):
        return self.watch.busy


def one_line(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split())
    return (text[:240] + "...") if len(text) > 240 else (text or "(no message)")


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, detail) for an exception that ended a check or sub-check."""
    if isinstance(exc, CheckFailed):
        return FAIL, str(exc)
    if isinstance(exc, (BusyExhausted, Inconclusive)):
        return INCONCLUSIVE, one_line(exc)
    if isinstance(exc, NotExercised):
        return NOT_EXERCISED, str(exc)
    return ERROR, f"unexpected {type(exc).__name__}: {one_line(exc)}"


_DEFAULT: Any = object()


class Ctx:
    """One check: a fresh location, its clock, the store objects it opened, and its results."""

    def __init__(self, suite: Suite, clause: str, check: str) -> None:
        self.suite = suite
        self.clause = clause
        self.check = check
        self.ttl_ms = suite.settings.ttl_ms
        self.ttl = self.ttl_ms / 1000.0
        self.location = tempfile.mkdtemp(prefix=f"{check}-", dir=suite.settings.root)
        self.clock: FakeClock | None = FakeClock() if suite.clock_ok else None
        self.stores: list[WatchedStore] = []
        self.threads: list[StoreThread] = []
        self.notes: list[str] = []
        self.current = ""
        self.statuses: dict[str, str] = {}
        suite.watch.where = check

    # -- stores -----------------------------------------------------------------------------

    def open(self, *, ttl_ms: int | None = None, clock: Any = _DEFAULT) -> WatchedStore:
        """A new store object over this check's location, for the calling thread only; driven by the check's
        clock (or `clock`, e.g. an offset view of it) when the store declares an injectable clock."""
        store = self._open_here(ttl_ms, clock)
        self.stores.append(store)
        return store

    def _open_here(self, ttl_ms: int | None, clock: Any) -> WatchedStore:
        if clock is _DEFAULT:
            clock = self.clock
        ttl = ttl_ms or self.ttl_ms
        extra: dict[str, Any] = {"clock": clock} if (clock is not None and self.suite.clock_ok) else {}
        target, location = self.suite.target, self.location
        store = self.suite.watch.open(lambda: target.open(location, ttl, timeout_s=OPEN_TIMEOUT_S, **extra),
                                      f"open (the store factory, ttl {ttl} ms)")
        return WatchedStore(store, self.suite.watch)

    def thread(self, *, ttl_ms: int | None = None, clock: Any = _DEFAULT, name: str = "") -> StoreThread:
        """A thread that opens its own store object over this location and runs what it is given on it."""
        t = StoreThread(self, ttl_ms, clock, name or f"{self.check}-{len(self.threads)}")
        self.threads.append(t)
        return t

    def close(self) -> None:
        for t in self.threads:
            t.stop()
        for t in self.threads:
            t.join(5.0)
        self.threads.clear()
        for store in self.stores:
            with contextlib.suppress(Exception):
                store.close()
        self.stores.clear()

    # -- time -------------------------------------------------------------------------------

    @property
    def timing(self) -> str:
        return "injected clock" if self.clock is not None else "real time"

    def advance(self, seconds: float) -> None:
        """Move the store's time forward: the injected clock, or a real sleep."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(max(0.0, seconds))

    # -- results ----------------------------------------------------------------------------

    def record(self, clause: str, name: str, status: str, detail: str, elapsed_s: float = 0.0) -> None:
        result = CheckResult(clause, name, status, f"{detail} [{self.timing}]", elapsed_s)
        self.suite.emit(("result", result.clause, result.check, result.status, result.detail, result.elapsed_s))
        self.flush_late()

    def flush_late(self) -> None:
        watch = self.suite.watch
        while watch.late:
            where, label, seconds = watch.late.pop(0)
            self.suite.emit(("late", where, label, seconds))

    @contextlib.contextmanager
    def sub(self, name: str, clause: str | None = None) -> Iterator[Ctx]:
        """Record one sub-check: pass unless it raises (see `classify` for what each exception means)."""
        clause = clause or self.clause
        self.suite.emit(("sub", clause, name))
        self.suite.watch.where = f"{self.check}/{name}"
        self.current = name
        t0 = time.monotonic()
        self.notes = []
        status, detail = PASS, ""
        try:
            yield self
        except Exception as exc:  # noqa: BLE001 - every exception is a finding of some kind
            status, detail = classify(exc)
        if status == PASS:
            detail = "; ".join(self.notes) or "ok"
        self.statuses[name] = status
        self.record(clause, name, status, detail, time.monotonic() - t0)
        self.suite.watch.where = self.check

    def needs(self, value: Any, name: str) -> Any:
        """Inside a sub-check that builds on what sub-check `name` made (`value`): undecided when that one ended
        before making it."""
        if value is None:
            raise Inconclusive(f"not decided: it builds on {name}, which ended {self.statuses.get(name, 'unrun')} "
                               "before it had what this needs")
        return value

    def not_exercised(self, name: str, reason: str, clause: str | None = None) -> None:
        self.record(clause or self.clause, name, NOT_EXERCISED, reason)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def observe(self, key: str, value: str, how: str) -> None:
        """Report what the store chose where the contract leaves it a choice (the parent judges consistency)."""
        self.suite.emit(("choice", key, value, f"{self.check}/{self.current}: {how}"))


class StoreThread:
    """A thread that opens its own store object (inside itself) and is its only user: the functions it is
    given run there, one at a time, on that object; `submit` returns their `Future`."""

    def __init__(self, ctx: Ctx, ttl_ms: int | None, clock: Any, name: str) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._opened: Future = Future()
        self.pending: Future | None = None
        self.thread = threading.Thread(target=self._main, args=(ctx, ttl_ms, clock), daemon=True, name=name)
        self.thread.start()

    def _main(self, ctx: Ctx, ttl_ms: int | None, clock: Any) -> None:
        try:
            store = ctx._open_here(ttl_ms, clock)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the open
            self._opened.set_exception(exc)
            return
        self._opened.set_result(None)
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                fn, fut = job
                if not fut.set_running_or_notify_cancel():
                    continue
                try:
                    fut.set_result(fn(store))
                except BaseException as exc:  # noqa: BLE001 - the caller's to judge
                    fut.set_exception(exc)
        finally:
            with contextlib.suppress(Exception):
                store.close()

    def ready(self) -> None:
        """Wait until the store object is open (re-raising what the factory raised)."""
        self._opened.result()

    def submit(self, fn: Callable[[WatchedStore], Any]) -> Future:
        fut: Future = Future()
        self.pending = fut
        self._jobs.put((fn, fut))
        return fut

    def run(self, fn: Callable[[WatchedStore], Any]) -> Any:
        """`fn(store)` in this thread, waited for (the watchdog bounds a store call that never returns)."""
        return self.submit(fn).result()

    def idle(self) -> bool:
        return self.pending is None or self.pending.done()

    def stop(self) -> None:
        self._jobs.put(None)

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)


# -- assertions -------------------------------------------------------------------------------

def expect(cond: bool, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def call(fn: Callable[[], Any], what: str) -> Any:
    """A store operation that must be accepted (the watch has retried busy answers already)."""
    try:
        return fn()
    except (BusyExhausted, CheckFailed, Inconclusive, NotExercised):
        raise
    except StoreError as exc:
        raise CheckFailed(f"{what} was refused with {type(exc).__name__}: {one_line(exc)}") from exc
    except Exception as exc:
        raise CheckFailed(f"{what} raised {type(exc).__name__}: {one_line(exc)}") from exc


def refused(fn: Callable[[], Any], what: str, error: type[StoreError] | tuple = LeaseHeldError) -> StoreError:
    """A store operation that must be refused with `error`."""
    names = error.__name__ if isinstance(error, type) else " or ".join(e.__name__ for e in error)
    try:
        fn()
    except (BusyExhausted, CheckFailed, Inconclusive, NotExercised):
        raise
    except error as exc:  # type: ignore[misc]
        return exc
    except Exception as exc:
        raise CheckFailed(f"{what} raised {type(exc).__name__} ({one_line(exc)}), expected {names}") from exc
    raise CheckFailed(f"{what} was accepted, expected {names}")


def snapshot(store: Any, runs: list[str]) -> dict[str, Any]:
    """Everything observable about `runs` (journal, meta, blobs) plus the run list."""
    snap: dict[str, Any] = {"list_runs": store.list_runs()}
    for run in runs:
        refs = store.transcripts.list(run)
        snap[run] = (store.load(run), store.get_meta(run), {ref: store.transcripts.get(ref) for ref in refs})
    return snap


def unchanged(store: Any, runs: list[str], before: dict[str, Any], what: str) -> None:
    after = snapshot(store, runs)
    if after != before:
        changed = ", ".join(k for k in before if before[k] != after.get(k))
        raise CheckFailed(f"{what} was refused but mutated state ({changed} changed)")


def payload(i: int) -> bytes:
    return f"entry-{i}".encode()


def fill(store: Any, run: str, lease: Lease | None, n: int = 2) -> None:
    """Give a run a journal, a meta row and a blob (under `lease`)."""
    for i in range(1, n + 1):
        call(lambda i=i: store.append(run, JournalEntry(i, payload(i)), lease), f"append seq {i} to {run}")
    call(lambda: store.put_meta(RunMeta(run, "running", n, b"m"), lease), f"put_meta on {run}")
    call(lambda: store.transcripts.put(f"{run}/t1", b"blob-1", lease), f"blob put {run}/t1")


def mutations(store: Any) -> dict[str, Callable[[str, Lease | None], None]]:
    """The five fenced mutation surfaces: name -> fn(run, lease) making a change to `run`."""
    def tail(run: str) -> int:
        entries = store.load(run)
        return entries[-1].seq if entries else 0

    return {
        "append": lambda run, lease: store.append(run, JournalEntry(tail(run) + 1, b"stale"), lease),
        "put_meta": lambda run, lease: store.put_meta(RunMeta(run, "failed", 99, b"stale"), lease),
        "delete": lambda run, lease: store.delete(run, lease),
        "blob-put": lambda run, lease: store.transcripts.put(f"{run}/t1", b"stale", lease),
        "blob-delete": lambda run, lease: store.transcripts.delete(f"{run}/t1", lease),
    }


def shares_state(a: Any, b: Any) -> bool:
    """Whether two store objects over one location (both this thread's) see each other's writes."""
    call(lambda: a.put_meta(RunMeta("probe-shared", "running", 1), None), "probe put_meta")
    return b.get_meta("probe-shared") is not None
