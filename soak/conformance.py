"""Single-process contract checks a store vendor calls from its own tests.

`run_conformance(store)` runs one or more checks per clause id of `soak.clauses` against fresh
store objects over a fresh location each (a temp directory the suite owns and removes), and
returns a `ConformanceReport`. Where the store factory accepts `clock=`, time is driven by an
injected clock (deterministic and fast); otherwise checks sleep past the ttl in real time, and
each report line says which. A check that raises unexpectedly is an `error` of its clause,
never a pass. `soak conformance --store SPEC` is the command-line face of the same function.

`atomic-fence` is checked black-box with two or more store objects over one location: the
victim's fenced call is paused at each point its thread returns from a function after its
fence check began (the first read of the injected clock, or with no clock, just before its
tenure lapses in real time), while a thief on another store object takes the run over and
records what it sees. A store whose check and mutation commit as one unit keeps the thief out
until the mutation has landed; a store with a gap lets the takeover in, and the victim's write
then lands after the successor's grant, which the successor's own observation proves.

The `concurrent-boot` check spawns processes: a script calling `run_conformance` must do so
under `if __name__ == "__main__":`, as with any spawn-based multiprocessing.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from soak.clauses import CLAUSES
from soak.errors import HarnessError, StoreBootError, StoreSpecError
from soak.spi import (
    FencedRunStore,
    JournalEntry,
    JournalOrderError,
    Lease,
    LeaseHeldError,
    RunMeta,
    StoreBusyError,
    StoreError,
)
from soak.stores import StoreTarget, redact, resolve

__all__ = [
    "CheckResult",
    "ConformanceReport",
    "configure_parser",
    "list_checks",
    "run_cli",
    "run_conformance",
]

PASS, FAIL, ERROR = "pass", "fail", "error"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check (or sub-check) of one clause."""

    clause: str
    check: str
    status: str  # pass | fail | error
    detail: str
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == PASS


@dataclass(slots=True)
class ConformanceReport:
    """Per-check results of one conformance run; `passed` only when every check passed."""

    store: str
    lease_ttl_ms: int
    timing: str
    results: list[CheckResult] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    def clause_status(self) -> dict[str, str]:
        """clause id -> worst status of its checks (error > fail > pass)."""
        rank = {PASS: 0, FAIL: 1, ERROR: 2}
        out: dict[str, str] = {}
        for r in self.results:
            if rank[r.status] >= rank[out.get(r.clause, PASS)]:
                out[r.clause] = r.status
        return out

    def failed_clauses(self) -> set[str]:
        return {r.clause for r in self.failed}

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "lease_ttl_ms": self.lease_ttl_ms,
            "timing": self.timing,
            "passed": self.passed,
            "elapsed_s": round(self.elapsed_s, 3),
            "results": [asdict(r) for r in self.results],
        }


class CheckFailed(AssertionError):
    """A contract obligation observed broken; the message is the one-line detail."""


# -- clocks -------------------------------------------------------------------------------

class _FakeClock:
    """A settable clock (seconds). A thread registered as a thief sees its own time."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self._lock = threading.Lock()
        self._thread_times: dict[int, float] = {}
        # An optional hook called (in the caller's thread) on every read; used by atomic-fence.
        self.hook: Callable[[], None] | None = None

    def __call__(self) -> float:
        ident = threading.get_ident()
        if ident in self._thread_times:
            return self._thread_times[ident]
        hook = self.hook
        if hook is not None:
            hook()
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def set_thread_time(self, value: float | None) -> None:
        ident = threading.get_ident()
        if value is None:
            self._thread_times.pop(ident, None)
        else:
            self._thread_times[ident] = value


def _accepts_clock(factory: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "clock" or p.kind is p.VAR_KEYWORD for p in params)


# -- the per-check context ------------------------------------------------------------------

class _Ctx:
    """What one check gets: a fresh location, store objects over it, time, and assertions."""

    def __init__(self, suite: _Suite, clause: str, check: str) -> None:
        self.suite = suite
        self.clause = clause
        self.check = check
        self.ttl_ms = suite.ttl_ms
        self.ttl = suite.ttl_ms / 1000.0
        self.location = tempfile.mkdtemp(prefix=f"{check}-", dir=suite.root)
        self.clock: _FakeClock | None = _FakeClock() if suite.clock_ok else None
        self.stores: list[Any] = []
        self.results: list[CheckResult] = []
        self.notes: list[str] = []

    # stores
    def open(self, *, location: str | None = None, ttl_ms: int | None = None) -> FencedRunStore:
        """A new store object over this check's location, driven by its clock when possible."""
        extra: dict[str, Any] = {"clock": self.clock} if self.clock is not None else {}
        store = self.suite.target.open(location or self.location, ttl_ms or self.ttl_ms, timeout_s=60.0, **extra)
        self.stores.append(store)
        return store

    def close(self) -> None:
        for store in self.stores:
            with contextlib.suppress(Exception):
                store.close()
        self.stores.clear()

    @property
    def timing(self) -> str:
        return "injected clock" if self.clock is not None else "real sleeps"

    def advance(self, seconds: float) -> None:
        """Move the store's time forward: the injected clock, or a real sleep."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(max(0.0, seconds))

    # sub-checks
    @contextlib.contextmanager
    def sub(self, name: str, clause: str | None = None) -> Iterator[_Ctx]:
        """Record one sub-check: pass unless it raises (CheckFailed -> fail, other -> error)."""
        t0 = time.monotonic()
        self.notes = []
        status, detail = PASS, ""
        try:
            yield self
        except CheckFailed as exc:
            status, detail = FAIL, str(exc)
        except Exception as exc:  # noqa: BLE001 - an unexpected exception is a finding
            status, detail = ERROR, f"unexpected {type(exc).__name__}: {_one_line(exc)}"
        if status == PASS:
            detail = "; ".join(self.notes) or "ok"
        self.results.append(
            CheckResult(clause or self.clause, name, status, f"{detail} [{self.timing}]", time.monotonic() - t0)
        )

    def note(self, text: str) -> None:
        self.notes.append(text)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:240] + "...") if len(text) > 240 else (text or "(no message)")


def _expect(cond: bool, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def _call(fn: Callable[[], Any], what: str, *, retries: int = 50) -> Any:
    """Call a store operation that must be accepted (retrying only StoreBusyError)."""
    for attempt in range(retries):
        try:
            return fn()
        except StoreBusyError:
            time.sleep(0.005 * (attempt + 1))
        except StoreError as exc:
            raise CheckFailed(f"{what} was refused with {type(exc).__name__}: {_one_line(exc)}") from exc
        except Exception as exc:
            raise CheckFailed(f"{what} raised {type(exc).__name__}: {_one_line(exc)}") from exc
    raise CheckFailed(f"{what} stayed StoreBusyError for {retries} attempts")


def _refused(fn: Callable[[], Any], what: str, error: type[StoreError] | tuple = LeaseHeldError) -> StoreError:
    """Call a store operation that must be refused with `error` (busy is retried)."""
    for attempt in range(50):
        try:
            fn()
        except StoreBusyError:
            time.sleep(0.005 * (attempt + 1))
            continue
        except error as exc:  # type: ignore[misc]
            return exc
        except Exception as exc:
            names = error.__name__ if isinstance(error, type) else " or ".join(e.__name__ for e in error)
            raise CheckFailed(f"{what} raised {type(exc).__name__} ({_one_line(exc)}), expected {names}") from exc
        names = error.__name__ if isinstance(error, type) else " or ".join(e.__name__ for e in error)
        raise CheckFailed(f"{what} was accepted, expected {names}")
    raise CheckFailed(f"{what} stayed StoreBusyError")


def _snapshot(store: FencedRunStore, runs: list[str]) -> dict[str, Any]:
    """Everything observable about `runs` (journal, meta, blobs) plus the run list."""
    snap: dict[str, Any] = {"list_runs": store.list_runs()}
    for run in runs:
        refs = store.transcripts.list(run)
        snap[run] = (store.load(run), store.get_meta(run), {ref: store.transcripts.get(ref) for ref in refs})
    return snap


def _diff(before: dict[str, Any], after: dict[str, Any]) -> str:
    changed = [k for k in before if before[k] != after.get(k)]
    return ", ".join(changed)


def _unchanged(store: FencedRunStore, runs: list[str], before: dict[str, Any], what: str) -> None:
    after = _snapshot(store, runs)
    if after != before:
        raise CheckFailed(f"{what} was refused but mutated state ({_diff(before, after)} changed)")


def _payload(i: int) -> bytes:
    return f"entry-{i}".encode()


def _fill(store: FencedRunStore, run: str, lease: Lease | None, n: int = 2) -> None:
    """Give a run a journal, a meta row and a blob (under `lease`)."""
    for i in range(1, n + 1):
        _call(lambda i=i: store.append(run, JournalEntry(i, _payload(i)), lease), f"append seq {i} to {run}")
    _call(lambda: store.put_meta(RunMeta(run, "running", n, b"m"), lease), f"put_meta on {run}")
    _call(lambda: store.transcripts.put(f"{run}/t1", b"blob-1", lease), f"blob put {run}/t1")


# The five fenced mutation surfaces: name -> fn(store, run, lease) making a change to `run`.
def _mutations(store: FencedRunStore) -> dict[str, Callable[[str, Lease | None], None]]:
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


# -- the checks -----------------------------------------------------------------------------
# Each check is fn(ctx) and records one or more sub-checks through ctx.sub(...).

def check_lease_exclusive(ctx: _Ctx) -> None:
    s = ctx.open()
    with ctx.sub("exclusive-acquire"):
        a = _call(lambda: s.acquire("r", "a"), "acquire r by a")
        _expect(a.epoch == 1, f"first acquire of a run got epoch {a.epoch}, expected 1")
        err = _refused(lambda: s.acquire("r", "b"), "acquire r by b while a holds a live lease")
        holder = getattr(err, "holder", None)
        _expect(holder in (None, a), f"LeaseHeldError.holder is {holder}, expected {a} or None")
        _refused(lambda: s.acquire("r", "a"), "acquire r again by its own live holder")
        other = _call(lambda: s.acquire("r2", "b"), "acquire of another run r2")
        _expect(other.epoch == 1, f"acquire of fresh run r2 got epoch {other.epoch}, expected 1")
        ctx.note("a live tenure refuses every other acquire of its run, its own holder's too")
    with ctx.sub("exclusive-after-renew"):
        ctx.advance(ctx.ttl * 0.5)
        _call(lambda: s.renew(a), "renew by the live holder")
        ctx.advance(ctx.ttl * 0.6)  # past the original expiry, inside the renewed one
        _refused(lambda: s.acquire("r", "b"), "acquire r by b after a renewed")
        ctx.note("a second acquire is refused while a tenure is live, before and after renew")


def check_stale_lease_ops(ctx: _Ctx) -> None:
    s = ctx.open()
    for op in ("renew", "release"):
        with ctx.sub(f"stale-{op}"):
            run = f"r-{op}"
            a = _call(lambda: s.acquire(run, "a"), "acquire by a")
            ctx.advance(ctx.ttl * 1.2)
            b = _call(lambda: s.acquire(run, "b"), "acquire by b after a expired")
            _expect(b.epoch > a.epoch, f"successor epoch {b.epoch} is not above {a.epoch}")
            _refused(lambda: getattr(s, op)(a), f"{op} under superseded epoch {a.epoch}")
            # The successor's tenure is untouched: still live, still b's, expiry not moved.
            _refused(lambda: s.acquire(run, "c"), f"acquire by c right after the stale {op}")
            _call(lambda: s.append(run, JournalEntry(1, b"b"), b), "append by the successor")
            if ctx.clock is not None:
                ctx.advance(ctx.ttl * 1.05)  # past b's expiry unless the stale renew extended it
                c = _call(lambda: s.acquire(run, "c"), f"acquire by c after b expired (stale {op} moved b's expiry?)")
                _expect(c.epoch == b.epoch + 1, f"epoch after b is {c.epoch}, expected {b.epoch + 1}")
            ctx.note(f"stale {op} refused; successor kept owner, epoch and expiry")
    with ctx.sub("release-fences"):
        a = _call(lambda: s.acquire("rf", "a"), "acquire rf by a")
        _call(lambda: s.release(a), "release by a")
        _refused(lambda: s.renew(a), "renew after release")
        _refused(lambda: s.release(a), "second release of the same tenure")
        _refused(lambda: s.append("rf", JournalEntry(1, b"x"), a), "append under a released lease")
        b = _call(lambda: s.acquire("rf", "b"), "acquire after release")
        _refused(lambda: s.release(a), "release of a's old tenure after b acquired")
        _call(lambda: s.renew(b), "renew by b (a's stale release must not end b's tenure)")
        ctx.note("a released tenure can no longer renew, release or write")


def check_stale_rejected(ctx: _Ctx) -> None:
    s = ctx.open()
    for surface in _mutations(s):
        with ctx.sub(f"stale-{surface}"):
            for how in ("superseded", "released"):
                run = f"r-{surface}-{how}"
                a = _call(lambda: s.acquire(run, "a"), "acquire by a")
                _fill(s, run, a)
                if how == "superseded":
                    ctx.advance(ctx.ttl * 1.2)
                    b = _call(lambda: s.acquire(run, "b"), "acquire by b after a expired")
                    holder_lease = b
                else:
                    _call(lambda: s.release(a), "release by a")
                    holder_lease = None
                before = _snapshot(s, [run])
                _refused(lambda: _mutations(s)[surface](run, a), f"{surface} under a {how} lease")
                _unchanged(s, [run], before, f"{surface} under a {how} lease")
                if holder_lease is not None:
                    _call(lambda: s.release(holder_lease), "release by the successor")
            ctx.note(f"{surface} under a superseded or released lease refused, nothing mutated")


def check_run_match(ctx: _Ctx) -> None:
    s = ctx.open()
    groups = {
        "journal": ["append"],
        "meta": ["put_meta"],
        "delete": ["delete"],
        "blobs": ["blob-put", "blob-delete"],
    }
    for group, surfaces in groups.items():
        with ctx.sub(f"run-match-{group}"):
            own, other = f"own-{group}", f"other-{group}"
            a = _call(lambda: s.acquire(own, "a"), "acquire own run")
            _fill(s, other, None)
            for surface in surfaces:
                for held in (False, True):
                    if held:
                        b = _call(lambda: s.acquire(other, "b"), "acquire other run by b")
                    before = _snapshot(s, [own, other])
                    _refused(lambda: _mutations(s)[surface](other, a),
                             f"{surface} on run {other!r} under a live lease for {own!r}"
                             + (" (other run held by b)" if held else ""))
                    _unchanged(s, [own, other], before, f"cross-run {surface}")
                    if held:
                        _call(lambda: s.release(b), "release other run by b")
            _call(lambda: s.release(a), "release own run")
            # A dead lease for another run is refused the same way.
            for surface in surfaces:
                before = _snapshot(s, [own, other])
                _refused(lambda: _mutations(s)[surface](other, a), f"{surface} on {other!r} under a released lease for {own!r}")
                _unchanged(s, [own, other], before, f"cross-run {surface} under a released lease")
            ctx.note(f"a lease for one run cannot {'/'.join(surfaces)} another run, live or released")


def check_epoch_monotonic(ctx: _Ctx) -> None:
    s = ctx.open()
    with ctx.sub("epoch-after-release"):
        epochs = []
        for i in range(4):
            lease = _call(lambda i=i: s.acquire("r", f"o{i}"), "acquire")
            epochs.append(lease.epoch)
            if i % 2:
                _call(lambda: s.release(lease), "release")
            else:
                ctx.advance(ctx.ttl * 1.2)  # let it expire instead
        _expect(epochs == sorted(set(epochs)), f"epochs across release/expiry are {epochs}, not strictly increasing")
        ctx.note(f"epochs {epochs}")
    with ctx.sub("epoch-tombstone"):
        a = _call(lambda: s.acquire("t", "a"), "acquire")
        _fill(s, "t", a)
        _call(lambda: s.delete("t", a), "delete under the live lease")
        _call(lambda: s.release(a), "release after delete")
        b = _call(lambda: s.acquire("t", "b"), "acquire after delete")
        _expect(b.epoch > a.epoch, f"epoch after delete is {b.epoch}, not above {a.epoch} (no tombstone)")
        _call(lambda: s.delete("t", None), "unleased delete")
        ctx.advance(ctx.ttl * 1.2)
        c = _call(lambda: s.acquire("t", "c"), "acquire after unleased delete and expiry")
        _expect(c.epoch > b.epoch, f"epoch after a second delete is {c.epoch}, not above {b.epoch}")
        ctx.note(f"epochs {a.epoch} -> {b.epoch} -> {c.epoch} across delete")
    with ctx.sub("zombie-after-tombstone"):
        z = _call(lambda: s.acquire("z", "zombie"), "acquire by the zombie")
        _fill(s, "z", z)
        _call(lambda: s.delete("z", z), "delete by the zombie")
        ctx.advance(ctx.ttl * 1.2)
        n = _call(lambda: s.acquire("z", "new"), "acquire of the recreated run")
        _expect(n.epoch > z.epoch, f"recreated run got epoch {n.epoch}, not above the zombie's {z.epoch}")
        _call(lambda: s.append("z", JournalEntry(1, b"new"), n), "append by the new holder")
        before = _snapshot(s, ["z"])
        for surface, fn in _mutations(s).items():
            _refused(lambda fn=fn: fn("z", z), f"zombie {surface} after the run was deleted and recreated")
        _unchanged(s, ["z"], before, "zombie mutations")
        ctx.note("a lease from before a delete cannot touch the recreated run")


def check_store_clock(ctx: _Ctx) -> None:
    s = ctx.open()
    with ctx.sub("store-clock"):
        a = _call(lambda: s.acquire("r", "a"), "acquire")
        if ctx.clock is not None:
            time.sleep(ctx.ttl * 1.1)  # wall time passes the ttl; the store's clock does not
            _refused(lambda: s.acquire("r", "b"), "acquire while the injected clock is still inside the ttl "
                     "(the store judged expiry by wall time, not its clock)")
            ctx.clock.advance(ctx.ttl * 1.2)
            b = _call(lambda: s.acquire("r", "b"), "acquire once the injected clock passed the ttl")
            _expect(b.epoch == a.epoch + 1, f"takeover epoch {b.epoch}, expected {a.epoch + 1}")
            ctx.note("expiry follows the store's injected clock, not wall time")
        else:
            time.sleep(ctx.ttl * 1.2)
            _call(lambda: s.acquire("r", "b"), "acquire after the ttl passed in wall time")
            ctx.note("factory takes no clock=: only checked that expiry happens in wall time")


def check_live_accepted(ctx: _Ctx) -> None:
    s = ctx.open()
    near = 0.5 if ctx.clock is None else 0.95  # how deep into the ttl each call lands
    with ctx.sub("live-accepted"):
        a = _call(lambda: s.acquire("r", "a"), "acquire")
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("append", lambda: s.append("r", JournalEntry(1, b"1"), a)),
            ("put_meta", lambda: s.put_meta(RunMeta("r", "running", 1), a)),
            ("blob put", lambda: s.transcripts.put("r/b", b"b", a)),
            ("blob delete", lambda: s.transcripts.delete("r/b", a)),
            ("delete", lambda: s.delete("r", a)),
        ]
        for what, fn in steps:
            ctx.advance(ctx.ttl * near)
            _call(fn, f"{what} {near:.2f} ttl after the last grant")
            _call(lambda: s.renew(a), f"renew {near:.2f} ttl after the last grant")
        ctx.advance(ctx.ttl * near)
        _call(lambda: s.release(a), f"release {near:.2f} ttl after the last renew")
        ctx.note(f"every mutation, renew and release accepted {near:.2f} ttl after the last grant")


def check_ttl_honoured(ctx: _Ctx) -> None:
    s = ctx.open()
    live_at = 0.99 if ctx.clock is not None else 0.5
    with ctx.sub("ttl-live"):
        _call(lambda: s.acquire("r", "a"), "acquire")
        ctx.advance(ctx.ttl * live_at)
        _refused(lambda: s.acquire("r", "b"), f"acquire by b {live_at:.2f} ttl after a's grant")
        ctx.note(f"tenure still live {live_at:.2f} ttl after the grant")
    with ctx.sub("renew-cadence"):
        a = _call(lambda: s.acquire("c", "a"), "acquire")
        renews = 12  # four ttls at ttl/3
        for i in range(renews):
            ctx.advance(ctx.ttl / 3)
            _call(lambda: s.renew(a), f"renew #{i + 1} at ttl/3 cadence")
            _refused(lambda: s.acquire("c", "b"), f"acquire by b after renew #{i + 1}")
        _call(lambda: s.append("c", JournalEntry(1, b"x"), a), "append after four ttls of renewals")
        ctx.note(f"{renews} renewals at ttl/3 kept the tenure for {renews // 3} ttls")
    with ctx.sub("takeover-bound"):
        bound = 1.2 * ctx.ttl
        if ctx.clock is not None:
            ctx.advance(bound)
            b = _call(lambda: s.acquire("c", "b"), "acquire by b 1.2 ttl after the last renew")
            _expect(b.epoch == a.epoch + 1, f"takeover epoch {b.epoch}, expected {a.epoch + 1}")
            ctx.note("another owner acquired 1.2 ttl after the last renew")
        else:
            t0 = time.monotonic()
            _call(lambda: s.renew(a), "renew")
            time.sleep(ctx.ttl)
            while True:
                try:
                    s.acquire("c", "b")
                    break
                except (LeaseHeldError, StoreBusyError):
                    if time.monotonic() - t0 > bound:
                        raise CheckFailed(f"no takeover within 1.2 ttl ({bound * 1000:.0f} ms) of the last renew")
                    time.sleep(0.002)
            ctx.note(f"takeover {1000 * (time.monotonic() - t0):.0f} ms after the last renew")


def check_unleased_passthrough(ctx: _Ctx) -> None:
    s = ctx.open()
    for held in (False, True):
        name = "unleased-while-held" if held else "unleased"
        with ctx.sub(name):
            run = f"u-{held}"
            if held:
                _call(lambda: s.acquire(run, "a"), "acquire by a")
            _fill(s, run, None)
            _call(lambda: s.transcripts.delete(f"{run}/t1", None), "unleased blob delete")
            _expect(s.transcripts.get(f"{run}/t1") is None, "unleased blob delete did not remove the blob")
            _call(lambda: s.delete(run, None), "unleased delete")
            _expect(s.load(run) == [] and s.get_meta(run) is None, "unleased delete left journal or meta")
            ctx.note("mutations with lease=None accepted" + (" while another owner holds the run" if held else ""))


def check_typed_refusal(ctx: _Ctx) -> None:
    s = ctx.open()
    a = _call(lambda: s.acquire("r", "a"), "acquire")
    _fill(s, "r", a)

    def refusal(name: str, fn: Callable[[], Any], error: type[StoreError], runs: list[str]) -> None:
        with ctx.sub(name):
            before = _snapshot(s, runs)
            exc = _refused(fn, name, error)
            _expect(isinstance(exc, StoreError), f"{name}: {type(exc).__name__} is not a StoreError")
            if isinstance(exc, LeaseHeldError):
                _expect(getattr(exc, "run_id", None) == fn_run[name],
                       f"{name}: LeaseHeldError.run_id is {getattr(exc, 'run_id', None)!r}, expected {fn_run[name]!r}")
            _unchanged(s, runs, before, name)
            ctx.note(f"{type(exc).__name__}, nothing mutated")

    fn_run = {"refuse-acquire": "r", "refuse-order": "r"}
    refusal("refuse-acquire", lambda: s.acquire("r", "b"), LeaseHeldError, ["r"])
    refusal("refuse-order", lambda: s.append("r", JournalEntry(2, b"dup"), a), JournalOrderError, ["r"])
    ctx.advance(ctx.ttl * 1.2)
    b = _call(lambda: s.acquire("r", "b"), "takeover by b")
    for surface in ("append", "put_meta", "delete", "blob-put", "blob-delete"):
        fn_run[f"refuse-stale-{surface}"] = "r"
        refusal(f"refuse-stale-{surface}", lambda surface=surface: _mutations(s)[surface]("r", a), LeaseHeldError, ["r"])
    fn_run["refuse-stale-renew"] = "r"
    refusal("refuse-stale-renew", lambda: s.renew(a), LeaseHeldError, ["r"])
    fn_run["refuse-foreign"] = "x"
    refusal("refuse-foreign", lambda: s.put_meta(RunMeta("x", "running", 0), b), LeaseHeldError, ["r", "x"])


def check_expired_unsuperseded(ctx: _Ctx) -> None:
    s = ctx.open()
    with ctx.sub("expired-unsuperseded"):
        outcomes = []
        for surface in ("append", "put_meta", "blob-put"):
            run = f"e-{surface}"
            a = _call(lambda: s.acquire(run, "a"), "acquire")
            _fill(s, run, a)
            ctx.advance(ctx.ttl * 1.2)
            before = _snapshot(s, [run])
            try:
                _mutations(s)[surface](run, a)
                outcomes.append(f"{surface} accepted")
            except LeaseHeldError:
                _unchanged(s, [run], before, f"{surface} under an expired lease")
                outcomes.append(f"{surface} refused")
            except StoreError as exc:
                raise CheckFailed(f"{surface} under an expired lease raised {type(exc).__name__}, "
                            "expected acceptance or LeaseHeldError") from exc
        ctx.note(", ".join(outcomes) + " (both conformant)")


def check_journal(ctx: _Ctx) -> None:
    s = ctx.open()
    with ctx.sub("a1-atomic-append", clause="journal-a1"):
        big = bytes(range(256)) * 4096  # 1 MiB
        _call(lambda: s.append("j1", JournalEntry(1, big), None), "append of a 1 MiB entry")
        got = s.load("j1")
        _expect(len(got) == 1 and got[0].payload == big, f"1 MiB append loaded as {len(got)} entries, not whole")
        with contextlib.suppress(JournalOrderError):
            s.append("j1", JournalEntry(1, b"dup" * 1000), None)
        _expect(s.load("j1") == got, "a refused append left a partial write")
        # Under contention (several writers at once) every accepted append must land.
        peers = [s] + [ctx.open() for _ in range(3)]
        if not _shares_state(s, peers[1]):
            peers = [s] * 4
        lost: list[str] = []

        def writer(i: int, store: FencedRunStore) -> None:
            run = f"j1-w{i}"
            for q in range(1, 101):
                try:
                    store.append(run, JournalEntry(q, _payload(q)), None)
                except StoreBusyError:
                    continue  # refused, nothing written: fine
                except Exception as exc:  # noqa: BLE001
                    lost.append(f"writer {i} append {q} raised {type(exc).__name__}: {_one_line(exc)}")
                    return
                accepted[i].append(q)

        accepted: list[list[int]] = [[] for _ in peers]
        threads = [threading.Thread(target=writer, args=(i, st)) for i, st in enumerate(peers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        _expect(not lost, "; ".join(lost[:2]))
        for i in range(len(peers)):
            got_seqs = [e.seq for e in s.load(f"j1-w{i}")]
            _expect(got_seqs == accepted[i],
                   f"writer {i}: {len(accepted[i])} accepted appends under contention, {len(got_seqs)} loaded"
                   f" (missing {sorted(set(accepted[i]) - set(got_seqs))[:5]})")
        ctx.note(f"an append lands whole or not at all; {sum(map(len, accepted))} contended appends from "
                 f"{len(peers)} writers all landed")
    with ctx.sub("a2-append-order", clause="journal-a2"):
        seqs = [1, 2, 5, 9, 10, 100]
        for q in seqs:
            _call(lambda q=q: s.append("j2", JournalEntry(q, _payload(q)), None), f"append seq {q}")
        got = [e.seq for e in s.load("j2")]
        _expect(got == seqs, f"entries loaded as {got}, appended as {seqs}")
        ctx.note("entries load in append order, gaps kept")
    with ctx.sub("a3-read-your-writes", clause="journal-a3"):
        a = _call(lambda: s.acquire("j3", "a"), "acquire")
        for q in range(1, 6):
            _call(lambda q=q: s.append("j3", JournalEntry(q, _payload(q)), a), f"append seq {q}")
            got = s.load("j3")
            _expect(got and got[-1] == JournalEntry(q, _payload(q)), f"load right after appending seq {q} returned {got[-1:] }")
        ctx.note("each append visible to the next load")
    with ctx.sub("a4-payload-bytes", clause="journal-a4"):
        payloads = [b"", b"\x00", b"a\x00b", b"trailing\x00\x00", b"\xff\xfe\x80not-utf8", b" padded ",
                    b"\r\n", bytes(range(256)), os.urandom(65536)]
        for q, p in enumerate(payloads, start=1):
            _call(lambda q=q, p=p: s.append("j4", JournalEntry(q, p), None), f"append payload #{q}")
        got = s.load("j4")
        for q, p in enumerate(payloads, start=1):
            stored = got[q - 1].payload if len(got) >= q else None
            _expect(stored == p and type(stored) is bytes,
                   f"payload #{q} ({len(p)} bytes, {p[:12]!r}) came back as {stored[:12] if stored is not None else None!r}"
                   f" ({len(stored) if stored is not None else 0} bytes, {type(stored).__name__})")
        for q, p in enumerate(payloads, start=1):
            _call(lambda q=q, p=p: s.transcripts.put(f"j4/b{q}", p, None), f"blob put #{q}")
            stored = s.transcripts.get(f"j4/b{q}")
            _expect(stored == p, f"blob #{q} ({len(p)} bytes, {p[:12]!r}) came back as "
                   f"{stored[:12] if stored is not None else None!r} ({len(stored) if stored is not None else 0} bytes)")
        for p in payloads[:-1]:
            _call(lambda p=p: s.put_meta(RunMeta("j4", "running", 1, p), None), "put_meta")
            got_meta = s.get_meta("j4")
            _expect(got_meta is not None and got_meta.payload == p,
                   f"meta payload {p[:12]!r} came back as {got_meta.payload[:12] if got_meta else None!r}")
        ctx.note(f"{len(payloads)} payloads (empty, NULs, non-UTF-8, 64 KiB random) byte for byte "
                 "in journal, blobs and meta")
    with ctx.sub("a5-order-guard", clause="journal-a5"):
        _call(lambda: s.append("j5", JournalEntry(3, b"3"), None), "append seq 3")
        for q in (3, 2, 0, -1):
            before = s.load("j5")
            _refused(lambda q=q: s.append("j5", JournalEntry(q, b"bad"), None), f"append seq {q} after tail 3", JournalOrderError)
            _expect(s.load("j5") == before, f"refused append seq {q} changed the journal")
        a = _call(lambda: s.acquire("j5", "a"), "acquire")
        _refused(lambda: s.append("j5", JournalEntry(3, b"bad"), a), "leased append at the tail", JournalOrderError)
        _call(lambda: s.append("j5", JournalEntry(4, b"4"), a), "leased append above the tail")
        ctx.note("seq at or below the tail raises JournalOrderError, nothing written")


def check_meta(ctx: _Ctx) -> None:
    s = ctx.open()
    with ctx.sub("meta-last-write"):
        _expect(s.get_meta("m") is None, "get_meta of an unknown run is not None")
        for i, status in enumerate(("running", "suspended", "completed"), start=1):
            _call(lambda i=i, status=status: s.put_meta(RunMeta("m", status, i, bytes([i]) * i), None), "put_meta")
        _expect(s.get_meta("m") == RunMeta("m", "completed", 3, b"\x03\x03\x03"), f"get_meta returned {s.get_meta('m')}")
        _call(lambda: s.put_meta(RunMeta("n", "failed", 0, b"\x00"), None), "put_meta n")
        runs = s.list_runs()
        _expect(sorted(m.run_id for m in runs) == ["m", "n"], f"list_runs gave {[m.run_id for m in runs]}, expected m and n once each")
        _expect(RunMeta("m", "completed", 3, b"\x03\x03\x03") in runs, "list_runs does not show the last write")
        ctx.note("one meta row per run, last write wins")
    with ctx.sub("fenced-meta"):
        a = _call(lambda: s.acquire("f", "a"), "acquire")
        _call(lambda: s.put_meta(RunMeta("f", "running", 1), a), "put_meta under the live lease")
        _call(lambda: s.put_meta(RunMeta("f", "cancelled", 2), a), "second put_meta under the live lease")
        _expect(s.get_meta("f") == RunMeta("f", "cancelled", 2), f"fenced meta reads back {s.get_meta('f')}")
        ctx.note("fenced put_meta accepted and last write wins")


def check_blobs(ctx: _Ctx) -> None:
    s = ctx.open()
    b = s.transcripts
    with ctx.sub("blob-basics"):
        _expect(b.get("r1/x") is None, "get of a missing blob is not None")
        _call(lambda: b.put("r1/x", b"one", None), "put r1/x")
        _call(lambda: b.put("r1/x", b"two", None), "overwrite r1/x")
        _call(lambda: b.put("r1/y", b"\x00\xff\xfe", None), "put r1/y")
        _call(lambda: b.put("r10/x", b"ten", None), "put r10/x")
        _expect(b.get("r1/x") == b"two", f"overwritten blob reads {b.get('r1/x')!r}")
        _expect(b.get("r1/y") == b"\x00\xff\xfe", f"binary blob reads {b.get('r1/y')!r}")
        listed = sorted(b.list("r1"))
        _expect(listed == ["r1/x", "r1/y"], f"list('r1') gave {listed}, expected r1/x and r1/y only")
        _call(lambda: b.delete("r1/x", None), "delete r1/x")
        _call(lambda: b.delete("r1/missing", None), "delete of a missing ref (a no-op)")
        _expect(b.get("r1/x") is None and sorted(b.list("r1")) == ["r1/y"], "delete by ref did not remove exactly that blob")
        _expect(b.get("r10/x") == b"ten", "another run's blob changed")
        ctx.note("put/overwrite/get/list per run/delete by ref; missing delete is a no-op")
    with ctx.sub("fenced-transcripts"):
        a = _call(lambda: s.acquire("t", "a"), "acquire t")
        _call(lambda: b.put("t/1", b"x", a), "fenced blob put")
        _call(lambda: b.delete("t/1", a), "fenced blob delete")
        _call(lambda: b.delete("t/never", a), "fenced delete of a missing ref")
        _call(lambda: b.put("t/2", b"y", a), "fenced blob put")
        ctx.advance(ctx.ttl * 1.2)
        _call(lambda: s.acquire("t", "b"), "takeover by b")
        _refused(lambda: b.put("t/2", b"stale", a), "stale blob put")
        _refused(lambda: b.delete("t/2", a), "stale blob delete")
        _refused(lambda: b.put("u/1", b"cross", a), "blob put on another run's ref")
        _expect(b.get("t/2") == b"y" and b.get("u/1") is None, "refused blob writes changed blobs")
        ctx.note("blob writes fenced by the run their ref names")


def check_delete(ctx: _Ctx) -> None:
    s = ctx.open()
    with ctx.sub("delete-semantics"):
        _fill(s, "d", None, n=3)
        _fill(s, "keep", None, n=2)
        _call(lambda: s.delete("d", None), "delete d")
        _expect(s.load("d") == [], f"journal of a deleted run still loads {len(s.load('d'))} entries")
        _expect(s.get_meta("d") is None, "meta of a deleted run still present")
        _expect([m.run_id for m in s.list_runs()] == ["keep"], f"list_runs after delete: {[m.run_id for m in s.list_runs()]}")
        _expect(len(s.load("keep")) == 2 and s.get_meta("keep") is not None, "delete touched another run")
        _call(lambda: s.delete("never-existed", None), "delete of an unknown run")
        _call(lambda: s.append("d", JournalEntry(1, b"again"), None), "append seq 1 to a deleted run")
        ctx.note("delete removes journal and meta of that run only")
    with ctx.sub("fenced-delete"):
        a = _call(lambda: s.acquire("fd", "a"), "acquire")
        _fill(s, "fd", a)
        _call(lambda: s.delete("fd", a), "delete under the live lease")
        _expect(s.load("fd") == [] and s.get_meta("fd") is None, "fenced delete left journal or meta")
        _call(lambda: s.append("fd", JournalEntry(1, b"x"), a), "append after delete under the same live lease")
        ctx.note("fenced delete accepted under the live lease")


def check_concurrent_boot(ctx: _Ctx) -> None:
    from soak.storm.boot import boot_storm

    n, rounds = ctx.suite.boot_processes, ctx.suite.boot_rounds
    with ctx.sub(f"concurrent-boot-{n}x{rounds}"):
        if ctx.suite.target.single_process:
            ctx.note("single-process store: each process boots its own instance")
        report = boot_storm(ctx.suite.target, processes=n, rounds=rounds, lease_ttl_ms=ctx.ttl_ms,
                            timeout_s=60, root=ctx.location)
        _expect(report.ok, f"{report.failures} of {report.attempts} process boots failed: {report.summary()}")
        ctx.note(f"{n} processes x {rounds} rounds all came up, worst boot {report.worst_boot_s * 1000:.0f} ms")


# -- atomic-fence ---------------------------------------------------------------------------

_RACE_SURFACES = ("append", "put_meta", "delete", "blob-put", "blob-delete", "renew", "release")


# Modules whose C methods are not store work: returning from them is no place to pause.
_NOT_STORE_C = frozenset({"builtins", "_thread", "time", "threading", "_io", "io"})


def _thief_action(thief: FencedRunStore, surface: str, run: str, ref: str, succ: Lease, box: dict) -> None:
    """What the successor observes or writes right after its grant: the witness for the race."""
    if surface == "append":
        box["seen"] = thief.load(run)
    elif surface == "put_meta":
        thief.put_meta(RunMeta(run, "running", 7, b"thief"), succ)
    elif surface == "delete":
        thief.append(run, JournalEntry(50, b"thief"), succ)
    elif surface == "blob-put":
        box["seen"] = thief.transcripts.get(ref)
    elif surface == "blob-delete":
        thief.transcripts.put(ref, b"thief", succ)


def _victim_op(victim: FencedRunStore, surface: str, run: str, ref: str, lease: Lease) -> Callable[[], Any]:
    return {
        "append": lambda: victim.append(run, JournalEntry(2, b"victim"), lease),
        "put_meta": lambda: victim.put_meta(RunMeta(run, "failed", 1, b"victim"), lease),
        "delete": lambda: victim.delete(run, lease),
        "blob-put": lambda: victim.transcripts.put(ref, b"victim", lease),
        "blob-delete": lambda: victim.transcripts.delete(ref, lease),
        "renew": lambda: victim.renew(lease),
        "release": lambda: victim.release(lease),
    }[surface]


def _race_once(
    ctx: _Ctx, victim: FencedRunStore, thieves: list[FencedRunStore], surface: str, pause_s: float, start_at: int,
    lapsing: bool = False,
) -> tuple[str, int | None, int]:
    """Try to land a takeover inside the victim's fenced `surface` call.

    Points: every place where the victim's thread returns from a function (Python, or a C
    method of a non-builtin object such as a database connection) is numbered. With an
    injected clock, the victim's first clock read inside the call marks its fence check and is
    point 0, and the thieves' clock is set past the victim's expiry. Without one, the victim's
    call starts just before its (short) tenure expires in real time, and the victim first
    sleeps past the expiry at point `start_at`. From point `start_at` on, the victim pauses at
    each point for up to `pause_s` while a fresh thief attempt (its own store object) tries to
    acquire the run and record what it sees, until one gets through. An atomic store holds its
    lock across check and mutation, so no thief gets in before the mutation commits; a store
    with a gap lets one in, and the victim's write then lands after the successor's grant,
    which the successor's own observation proves. Returns (why it is unsafe or '', the point
    the thief got through at, how many points the call had).
    """
    clock = ctx.clock
    run = f"af-{surface}-{start_at}"
    ref = f"{run}/t1"
    t_acquire = time.monotonic()
    lease = _call(lambda: victim.acquire(run, "victim"), "victim acquire")
    expiry = t_acquire + victim.lease_ttl_ms / 1000.0  # real-time mode only: no later than this
    if surface == "delete":
        _call(lambda: victim.append(run, JournalEntry(1, b"v"), lease), "victim append")
    if surface == "blob-delete":
        _call(lambda: victim.transcripts.put(ref, b"v", lease), "victim blob put")
    victim_thread = threading.get_ident()
    thief_time = clock.now + 2 * ctx.ttl if clock is not None else None
    done = threading.Event()
    box: dict[str, Any] = {}
    box_lock = threading.Lock()
    attempts: list[threading.Thread] = []
    state: dict[str, Any] = {"armed": True, "point": -1, "through_at": None}

    def as_thief(flag: bool) -> None:
        if clock is not None:
            clock.set_thread_time(thief_time if flag else None)

    def attempt(thief: FencedRunStore) -> None:
        as_thief(True)
        try:
            t0 = time.monotonic()
            while True:
                try:
                    succ = thief.acquire(run, "thief")
                    break
                except (StoreBusyError, LeaseHeldError) as exc:
                    if "lease" in box and isinstance(exc, LeaseHeldError):
                        return  # another attempt won
                    # Busy may last while the victim holds its lock; a live victim tenure past
                    # its ttl is a ttl-honoured problem, not worth waiting long for here.
                    if time.monotonic() - t0 > (10 if isinstance(exc, StoreBusyError) else 1):
                        raise
                    time.sleep(0.001)
            with box_lock:
                if "lease" in box:
                    if not lapsing:  # the first grant cannot have lapsed: a second breaks lease-exclusive
                        box["double"] = (box["lease"], succ)
                    return
                box["lease"] = succ
            _thief_action(thief, surface, run, ref, succ, box)
            done.set()
        except Exception as exc:  # noqa: BLE001 - reported below
            with box_lock:
                box.setdefault("error", exc)
            done.set()
        finally:
            as_thief(False)

    def point() -> None:
        sys.setprofile(None)
        state["point"] += 1
        if state["point"] >= start_at and not done.is_set() and len(attempts) < len(thieves):
            if clock is None and time.monotonic() < expiry + 0.005:
                time.sleep(expiry + 0.005 - time.monotonic())  # let the tenure lapse right here
            t = threading.Thread(target=attempt, args=(thieves[len(attempts)],), daemon=True)
            attempts.append(t)
            t.start()
            if done.wait(pause_s):
                state["through_at"] = state["point"]
        sys.setprofile(profiler)

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "c_return":
            owner = getattr(arg, "__self__", None)
            if owner is None or type(owner).__module__ in _NOT_STORE_C:
                return
        elif event != "return":
            return
        if threading.get_ident() == victim_thread and state["armed"]:
            point()

    def hook() -> None:
        if threading.get_ident() == victim_thread and state["armed"] and state["point"] < 0:
            point()  # the clock read is point 0; the profiler numbers the rest

    op = _victim_op(victim, surface, run, ref, lease)
    if clock is None:
        time.sleep(max(0.0, expiry - 0.015 - time.monotonic()))  # call in just before expiry
    try:
        if clock is not None:
            clock.hook = hook
        else:
            sys.setprofile(profiler)
        try:
            op()
            accepted = True
        except LeaseHeldError:
            accepted = False
    finally:
        sys.setprofile(None)
        if clock is not None:
            clock.hook = None
        state["armed"] = False
    for t in attempts:
        t.join(15)
    points = state["point"] + 1
    through_at = state["through_at"]
    if points == 0:
        return "SKIP: the store never read its clock inside the victim's call", None, 0
    if any(t.is_alive() for t in attempts):
        return "a thief's acquire never returned (hung store?)", through_at, points
    if not attempts:  # start_at lay beyond the call's last point: take over afterwards
        if clock is None:
            time.sleep(max(0.0, expiry + 0.005 - time.monotonic()))
        as_thief(True)
        try:
            box["lease"] = _call(lambda: _acquire_after_expiry(thieves[0], run, victim.lease_ttl_ms, clock is None),
                                 "takeover after the victim's call")
            _thief_action(thieves[0], surface, run, ref, box["lease"], box)
        finally:
            as_thief(False)
    if "error" in box:
        exc = box["error"]
        raise CheckFailed(f"{surface}: the thief's takeover raised {type(exc).__name__}: {_one_line(exc)}")
    if "double" in box:
        return f"two thieves were both granted the run: {box['double'][0]} and {box['double'][1]}", through_at, points
    if "lease" not in box:
        raise CheckFailed(f"{surface}: no thief could acquire the run after the victim's tenure expired")
    succ: Lease = box["lease"]
    if succ.epoch <= lease.epoch:
        raise CheckFailed(f"{surface}: the takeover got epoch {succ.epoch}, not above the victim's {lease.epoch}")
    if not accepted:
        return "", through_at, points  # the store re-checked and refused: safe
    if lapsing and surface in ("renew", "release"):
        return "", through_at, points  # the successor's own tenure may have lapsed: no witness
    as_thief(True)
    try:
        why = _race_witness(thieves[0], surface, run, ref, succ, box)
    finally:
        as_thief(False)
    if why and through_at is not None:
        why += f" (takeover at return point {through_at} of {points} in the call)"
    return why, through_at, points


def _acquire_after_expiry(thief: FencedRunStore, run: str, victim_ttl_ms: int, realtime: bool) -> Lease:
    """Acquire once the victim's tenure has lapsed; in real time a renew inside the call may have
    moved its expiry up to one more ttl, so a refusal is retried until then."""
    deadline = time.monotonic() + 2 * victim_ttl_ms / 1000.0
    while True:
        try:
            return thief.acquire(run, "thief")
        except LeaseHeldError:
            if not realtime or time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def _race_witness(thief: FencedRunStore, surface: str, run: str, ref: str, succ: Lease, box: dict) -> str:
    """The successor's view after the race: '' if the victim's write is ordered before the grant."""
    if surface == "append":
        if JournalEntry(2, b"victim") in thief.load(run) and JournalEntry(2, b"victim") not in box.get("seen", []):
            return "the victim's append landed after the successor's grant (the successor's load did not see it)"
    elif surface == "put_meta":
        if thief.get_meta(run) == RunMeta(run, "failed", 1, b"victim"):
            return "the victim's put_meta overwrote the successor's later meta"
    elif surface == "delete":
        if JournalEntry(50, b"thief") not in thief.load(run):
            return "the victim's delete removed the successor's later append"
    elif surface == "blob-put":
        if thief.transcripts.get(ref) == b"victim" and box.get("seen") != b"victim":
            return "the victim's blob put landed after the successor's grant (the successor's get did not see it)"
    elif surface == "blob-delete":
        if thief.transcripts.get(ref) != b"thief":
            return "the victim's blob delete removed the successor's later blob"
    elif surface in ("renew", "release"):
        try:
            thief.renew(succ)
        except LeaseHeldError:
            return f"the victim's {surface} ended the successor's tenure"
    return ""


def _shares_state(a: FencedRunStore, b: FencedRunStore) -> bool:
    _call(lambda: a.put_meta(RunMeta("probe-shared", "running", 1), None), "probe put_meta")
    return b.get_meta("probe-shared") is not None


def check_atomic_fence(ctx: _Ctx) -> None:
    realtime = ctx.clock is None
    # Without an injected clock, the victim's tenures lapse in real time: keep them short so
    # trials are quick, and the thieves' long, so a successor's tenure outlives the trial.
    victim_ttl_ms, thief_ttl_ms = (60, 10_000) if realtime else (None, None)
    victim = ctx.open(ttl_ms=victim_ttl_ms)
    peer = ctx.open(ttl_ms=thief_ttl_ms)
    shared = _shares_state(victim, peer)
    how = "store objects over one location" if shared else "one store object, many threads"
    how += ", real-time expiry of a 60 ms tenure" if realtime else ", injected clock"
    pause_s = 0.02
    max_points = 48
    if shared:
        thieves = [peer] + [ctx.open(ttl_ms=thief_ttl_ms) for _ in range(max_points - 1)]
    else:
        thieves = [victim] * max_points  # one object, one ttl: successors lapse like the victim
    lapsing = realtime and not shared
    for surface in _RACE_SURFACES:
        with ctx.sub(f"atomic-{surface}"):
            # Sweep: each trial lets the takeover through at the first point it can from
            # `start` on; the next trial starts just past that point, until the call is covered.
            start, trials, points = 0, 0, 0
            while trials < 64:
                trials += 1
                why, through_at, points = _race_once(ctx, victim, thieves, surface, pause_s, start, lapsing)
                if why.startswith("SKIP"):
                    raise CheckFailed(f"{surface}: {why[6:]}; cannot position a takeover (store-clock suspect)")
                if why:
                    raise CheckFailed(f"{surface}: {why}")
                if through_at is None or through_at + 1 >= points:
                    break
                start = through_at + 1
            ctx.note(f"takeover tried at each of {points} return points of the fenced {surface} "
                     f"({trials} trials, {how}); none landed")


# -- the suite ------------------------------------------------------------------------------

#: (clause, check name, function). A function may record sub-checks under other clause ids.
_CHECKS: list[tuple[str, str, Callable[[_Ctx], None]]] = [
    ("lease-exclusive", "lease-exclusive", check_lease_exclusive),
    ("stale-lease-ops", "stale-lease-ops", check_stale_lease_ops),
    ("stale-rejected", "stale-rejected", check_stale_rejected),
    ("run-match", "run-match", check_run_match),
    ("atomic-fence", "atomic-fence", check_atomic_fence),
    ("epoch-monotonic", "epoch-monotonic", check_epoch_monotonic),
    ("store-clock", "store-clock", check_store_clock),
    ("live-accepted", "live-accepted", check_live_accepted),
    ("ttl-honoured", "ttl-honoured", check_ttl_honoured),
    ("expired-unsuperseded", "expired-unsuperseded", check_expired_unsuperseded),
    ("unleased-passthrough", "unleased-passthrough", check_unleased_passthrough),
    ("typed-refusal", "typed-refusal", check_typed_refusal),
    ("concurrent-boot", "concurrent-boot", check_concurrent_boot),
    ("journal-a1", "journal", check_journal),
    ("meta-last-write", "meta", check_meta),
    ("blob-semantics", "blobs", check_blobs),
    ("delete-semantics", "delete", check_delete),
]

# The journal check records a1..a5 itself; it runs when any of them is asked for.
_ALSO_COVERS = {"journal": {"journal-a1", "journal-a2", "journal-a3", "journal-a4", "journal-a5"}}


def list_checks() -> list[tuple[str, str]]:
    """(clause id, check name) of every check, in run order."""
    return [(clause, name) for clause, name, _ in _CHECKS]


@dataclass
class _Suite:
    target: StoreTarget
    ttl_ms: int
    root: str
    clock_ok: bool
    boot_processes: int = 8
    boot_rounds: int = 2


def _as_target(store: str | StoreTarget | Callable[..., Any]) -> StoreTarget:
    if isinstance(store, StoreTarget):
        return store
    return resolve(store)


def run_conformance(
    store: str | StoreTarget | Callable[..., FencedRunStore],
    *,
    lease_ttl_ms: int = 200,
    clauses: list[str] | None = None,
    location: str | None = None,
    boot_processes: int = 8,
    boot_rounds: int = 2,
) -> ConformanceReport:
    """Run the conformance checks against `store` and return per-check results.

    `store` is a spec string, a `StoreTarget` or a factory `(location, *, lease_ttl_ms, **opts)`.
    `clauses` limits the run to those clause ids. `location` is a parent directory for the
    fresh per-check locations (default: a temp directory); the suite removes what it creates.
    """
    target = _as_target(store)
    if "path" in target.options:
        raise StoreSpecError(
            f"conformance needs a fresh location per check, but {redact(target.spec)} names one fixed file; "
            "use the plain scheme (e.g. sqlite:)"
        )
    if lease_ttl_ms < 20:
        raise HarnessError(f"--ttl-ms {lease_ttl_ms} is too short to time reliably; use 20 or more")
    wanted = set(clauses or CLAUSES)
    unknown = sorted(wanted - set(CLAUSES))
    if unknown:
        raise StoreSpecError(f"unknown clause id {unknown[0]!r}; use one of {', '.join(CLAUSES)}")
    clock_ok = _accepts_clock(target.factory)
    if location is not None:
        os.makedirs(location, exist_ok=True)
    root = tempfile.mkdtemp(prefix="soak-conformance-", dir=location)
    suite = _Suite(target, int(lease_ttl_ms), root, clock_ok, boot_processes, boot_rounds)
    # Probe once: a store that cannot boot (or rejects clock=) is a boot error, not 17 failures.
    try:
        probe = _Ctx(suite, "concurrent-boot", "probe")
        try:
            probe.open()
        except StoreBootError as exc:
            if not clock_ok or "clock" not in str(exc):
                raise
            suite.clock_ok = False
        finally:
            probe.close()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    report = ConformanceReport(redact(target.spec), int(lease_ttl_ms),
                               "injected clock" if suite.clock_ok else "real sleeps")
    t0 = time.monotonic()
    try:
        for clause, name, fn in _CHECKS:
            covers = _ALSO_COVERS.get(name, {clause})
            if not covers & wanted:
                continue
            ctx = _Ctx(suite, clause, name)
            try:
                fn(ctx)
            except Exception as exc:  # noqa: BLE001 - outside any sub-check: the whole check errs
                ctx.results.append(CheckResult(clause, name, ERROR, f"unexpected {type(exc).__name__}: {_one_line(exc)}"))
            finally:
                ctx.close()
            report.results.extend(r for r in ctx.results if r.clause in wanted)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.elapsed_s = time.monotonic() - t0
    return report


# -- command line ---------------------------------------------------------------------------

def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, metavar="SPEC", help="store spec: memory:, sqlite:, package.module:callable, ...")
    p.add_argument("--ttl-ms", type=int, default=200, help="lease ttl the stores are opened with (default 200)")
    p.add_argument("--clause", action="append", metavar="ID", help=f"run only this clause (repeatable): {', '.join(CLAUSES)}")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _render(report: ConformanceReport) -> str:
    lines = [f"soak conformance: {report.store}  ttl {report.lease_ttl_ms} ms  timing: {report.timing}"]
    width = max((len(r.clause) for r in report.results), default=10)
    cwidth = max((len(r.check) for r in report.results), default=10)
    for r in report.results:
        lines.append(f"  {r.status.upper():5}  {r.clause:<{width}}  {r.check:<{cwidth}}  {r.detail}")
    status = report.clause_status()
    bad = [c for c, s in status.items() if s != PASS]
    lines.append(
        f"{len(status)} clauses, {len(report.results)} checks, {len(report.failed)} not passed "
        f"in {report.elapsed_s:.1f} s: " + ("PASS" if report.passed else "FAIL (" + ", ".join(bad) + ")")
    )
    return "\n".join(lines)


def run_cli(args: argparse.Namespace) -> int:
    report = run_conformance(args.store, lease_ttl_ms=args.ttl_ms, clauses=args.clause)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(_render(report))
    sys.stdout.flush()
    return 0 if report.passed else 1
