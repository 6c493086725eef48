"""The boot storm: many real processes open one fresh store location at once (`concurrent-boot`).

Each round gets a fresh empty location. N worker processes (spawn context, started once and
reused across rounds so a round costs a store boot, not an interpreter start) wait behind a
barrier, then each opens the store, does one tiny round trip (acquire, append, load, release on
its own run) and closes it. Every failure is recorded with its exception type and message; a
round that does not finish within the timeout has its stragglers killed and counted as hung.

`StoreBusyError` inside the round trip, after a successful open, is retried (`soak.retry`, bounded and
counted): the contract says nothing was written and the caller may retry, and a fail-fast store answers it
whenever another process holds its lock. A round trip busy on every attempt proves nothing about the boot:
it is undecided (`BootReport.undecided`), never a failure. Likewise a tenure may lapse while a contended call
waits for a lock, and a store may refuse it then (`expired-unsuperseded`): only a refusal that came back
within the ttl is a failure; otherwise the trip is made again with a fresh tenure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from soak.errors import HarnessError
from soak.retry import BusyCount
from soak.stores import StoreTarget, redact, resolve

__all__ = ["BootFailure", "BootReport", "boot_storm", "configure_parser", "run_cli"]


@dataclass(frozen=True, slots=True)
class BootFailure:
    """One process that did not come up (or did not finish its round trip) in one round."""

    round: int
    process: int
    kind: str  # exception type name, "hung", "died"; "BusyExhausted" or "TenureLapsed" (undecided, not failures)
    message: str


@dataclass(slots=True)
class BootReport:
    """What a boot storm saw: attempts, failures by type, boot times, busy answers retried.

    `undecided` holds the processes whose round trip answered `StoreBusyError` on every attempt after a
    successful open, or whose tenure lapsed before every trip was done: not failures, but nothing was learnt
    from them either."""

    store: str
    processes: int
    rounds: int
    attempts: int = 0
    failures_list: list[BootFailure] = field(default_factory=list)
    boot_times_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    undecided: list[BootFailure] = field(default_factory=list)
    busy: BusyCount = field(default_factory=BusyCount)
    lapsed: int = 0  # round trips made again because the tenure lapsed (and was refused) before they were done

    @property
    def failures(self) -> int:
        return len(self.failures_list)

    @property
    def ok(self) -> bool:
        """Every process came up and finished its round trip (a pass)."""
        return self.attempts > 0 and not self.failures_list and not self.undecided

    @property
    def verdict(self) -> str:
        """`fail` on any failed boot; `inconclusive` when none failed but some round trip stayed busy."""
        if self.failures_list:
            return "fail"
        return "pass" if self.ok else "inconclusive"

    @property
    def worst_boot_s(self) -> float:
        return max(self.boot_times_s, default=0.0)

    def by_type(self) -> dict[str, int]:
        return dict(Counter(f.kind for f in self.failures_list).most_common())

    def summary(self) -> str:
        if not self.failures_list:
            return "no failures"
        first = self.failures_list[0]
        kinds = ", ".join(f"{k} x{n}" for k, n in self.by_type().items())
        return f"{kinds}; first: round {first.round} process {first.process}: {first.kind}: {first.message}"


#: Round trips a process tries before giving up when its tenure lapses before it is done with it each time.
TRIPS = 5


class _Lapsed(Exception):
    """Every round trip's tenure lapsed before the process was done with it: nothing was learnt."""


def _round_trip(store: Any, index: int, lease_ttl_ms: int, busy: BusyCount) -> int:
    """acquire, append, load, release on the process's own run; returns how many trips lapsed first.

    A `LeaseHeldError` under the new tenure is a failure only when it came back within the ttl of the acquire's
    invocation (the tenure was surely live when the store judged it). Later the tenure may have lapsed while the
    call waited for a lock, and a store may refuse an expired tenure (`expired-unsuperseded`): the trip is then
    made again with a fresh tenure, up to `TRIPS` times."""
    from soak.retry import retry_busy
    from soak.spi import JournalEntry, LeaseHeldError

    run, entry, ttl_s = f"boot-{index}", JournalEntry(1, f"p{index}".encode()), lease_ttl_ms / 1000.0
    for trip in range(TRIPS):
        t0 = time.monotonic()
        lease = retry_busy(lambda: store.acquire(run, f"p{index}"), "acquire", count=busy)
        try:
            retry_busy(lambda: store.append(run, entry, lease), "append", count=busy)
        except LeaseHeldError:
            if time.monotonic() - t0 < ttl_s:
                raise
            continue
        loaded = retry_busy(lambda: store.load(run), "load", count=busy)
        if loaded != [entry]:
            raise AssertionError(f"round trip read back {loaded!r}")
        try:
            retry_busy(lambda: store.release(lease), "release", count=busy)
        except LeaseHeldError:
            if time.monotonic() - t0 < ttl_s:
                raise
        return trip
    raise _Lapsed(f"the {lease_ttl_ms} ms tenure lapsed before the append in all {TRIPS} round trips (the store "
                  "refused it, as it may once it expired): the ttl is too short for this contention")


def _worker(index: int, target: StoreTarget, lease_ttl_ms: int, tasks: Any, results: Any, barrier: Any) -> None:
    """One boot process: for each round's location, wait at the barrier, open, round-trip, close."""
    # Imports happen here too: under spawn this body runs in a fresh interpreter.
    from soak.retry import BusyExhausted

    results.put((0, index, "ready", "", None, 0))  # start-up is not boot time: the parent waits for this
    while True:
        task = tasks.get()
        if task is None:
            return
        rnd, location = task
        try:
            barrier.wait(timeout=60)
        except Exception as exc:  # a broken barrier: report and go on to the next round
            results.put((rnd, index, "BrokenBarrierError", f"barrier broke: {exc!r}", None, 0))
            continue
        t0 = time.monotonic()
        boot_s = None
        busy = BusyCount()
        try:
            store = target.open_retrying(location, lease_ttl_ms, timeout_s=None, count=busy)
            boot_s = time.monotonic() - t0
            try:
                lapsed = _round_trip(store, index, lease_ttl_ms, busy)
            finally:
                store.close()
            results.put((rnd, index, None, f"lapsed {lapsed}" if lapsed else "", boot_s, busy.retries))
        except (BusyExhausted, _Lapsed) as exc:
            kind = "BusyExhausted" if isinstance(exc, BusyExhausted) else "TenureLapsed"
            results.put((rnd, index, kind, " ".join(str(exc).split())[:300], boot_s, busy.retries))
        except BaseException as exc:  # noqa: BLE001 - every failure is data
            cause = exc.__cause__ if type(exc).__name__ == "StoreBootError" and exc.__cause__ else exc
            msg = " ".join(str(cause).split())[:300] or "".join(traceback.format_exception_only(cause)).strip()
            results.put((rnd, index, type(cause).__name__, msg, boot_s, busy.retries))


class _Pool:
    """N spawned boot workers plus the barrier that releases them together."""

    def __init__(self, ctx: Any, n: int, target: StoreTarget, lease_ttl_ms: int) -> None:
        self.results = ctx.Queue()
        self.barrier = ctx.Barrier(n)
        self.tasks = [ctx.Queue() for _ in range(n)]
        self.procs = [
            ctx.Process(target=_worker, args=(i, target, lease_ttl_ms, self.tasks[i], self.results, self.barrier),
                        daemon=True, name=f"soak-boot-{i}")
            for i in range(n)
        ]
        for p in self.procs:
            p.start()
        # Wait until every worker has started its interpreter, so round timeouts measure boots.
        ready: set[int] = set()
        deadline = time.monotonic() + 120
        while len(ready) < n and time.monotonic() < deadline:
            try:
                rnd, index, kind, _, _, _ = self.results.get(timeout=1.0)
            except Exception:  # queue.Empty
                if not any(p.is_alive() for p in self.procs):
                    break
                continue
            if rnd == 0 and kind == "ready":
                ready.add(index)

    def stop(self, *, kill: bool = False) -> None:
        for q in self.tasks:
            try:
                q.put(None)
            except Exception:  # noqa: BLE001
                pass
        for p in self.procs:
            if kill:
                p.kill()
            p.join(2 if not kill else 1)
            if p.is_alive():
                p.kill()
                p.join(1)


def boot_storm(
    target: StoreTarget | str,
    *,
    processes: int = 16,
    rounds: int = 20,
    lease_ttl_ms: int = 250,
    timeout_s: float = 60.0,
    root: str | None = None,
) -> BootReport:
    """Open one fresh location from `processes` real processes at once, `rounds` times.

    `root` is a directory for the per-round locations (default: a temp directory); each round's
    location is removed after the round.
    """
    import multiprocess

    if processes < 1 or rounds < 1:
        raise HarnessError(f"boot storm needs at least 1 process and 1 round, got -n {processes} --rounds {rounds}")
    name = redact(target.strip()) if isinstance(target, str) else redact(target.spec)  # with its ?options
    if not isinstance(target, StoreTarget):
        target = resolve(target)
    report = BootReport(name, processes, rounds)
    ctx = multiprocess.get_context("spawn")
    base = tempfile.mkdtemp(prefix="soak-boot-", dir=root)
    t_start = time.monotonic()
    pool = _Pool(ctx, processes, target, lease_ttl_ms)
    try:
        for rnd in range(1, rounds + 1):
            location = os.path.join(base, f"round-{rnd}")
            os.mkdir(location)
            for q in pool.tasks:
                q.put((rnd, location))
            seen: set[int] = set()
            deadline = time.monotonic() + timeout_s
            while len(seen) < processes:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    r_round, index, kind, msg, boot_s, retries = pool.results.get(timeout=min(remaining, 1.0))
                except Exception:  # queue.Empty
                    if not any(p.is_alive() for i, p in enumerate(pool.procs) if i not in seen):
                        break
                    continue
                if r_round != rnd or index in seen:
                    continue
                seen.add(index)
                report.attempts += 1
                if boot_s is not None:
                    report.boot_times_s.append(boot_s)
                report.busy.retries += retries
                if msg.startswith("lapsed ") and kind is None:
                    report.lapsed += int(msg.split()[1])
                if kind in ("BusyExhausted", "TenureLapsed"):
                    report.busy.exhausted += kind == "BusyExhausted"
                    report.undecided.append(BootFailure(rnd, index, kind, msg))
                elif kind is not None:
                    report.failures_list.append(BootFailure(rnd, index, kind, msg))
            missing = [i for i in range(processes) if i not in seen]
            if missing:
                for i in missing:
                    report.attempts += 1
                    dead = not pool.procs[i].is_alive()
                    report.failures_list.append(BootFailure(
                        rnd, i, "died" if dead else "hung",
                        f"exit code {pool.procs[i].exitcode}" if dead else f"no result within {timeout_s:.0f} s; killed",
                    ))
                # A hung or dead worker leaves the barrier unusable: start a fresh pool.
                pool.barrier.abort()
                pool.stop(kill=True)
                if rnd < rounds:
                    pool = _Pool(ctx, processes, target, lease_ttl_ms)
            shutil.rmtree(location, ignore_errors=True)
    finally:
        pool.stop()
        target.cleanup(base)
        shutil.rmtree(base, ignore_errors=True)
    report.elapsed_s = time.monotonic() - t_start
    return report


# -- command line ---------------------------------------------------------------------------

def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default="sqlite:", metavar="SPEC", help="store spec (default sqlite:)")
    p.add_argument("-n", "--processes", type=int, default=16, help="processes opening the location at once (default 16)")
    p.add_argument("--rounds", type=int, default=20, help="rounds, each on a fresh location (default 20)")
    p.add_argument("--ttl-ms", type=int, default=250, help="lease ttl for the round trip (default 250)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a round's stragglers are killed")


def run_cli(args: argparse.Namespace) -> int:
    """Exit 0 when every process came up, 1 when any failed, 3 when none failed but a round trip stayed busy."""
    report = boot_storm(args.store, processes=args.processes, rounds=args.rounds,
                        lease_ttl_ms=args.ttl_ms, timeout_s=args.timeout)
    print(f"soak boot: {report.store}  {report.processes} processes x {report.rounds} rounds "
          f"in {report.elapsed_s:.1f} s")
    print(f"  attempts {report.attempts}, failures {report.failures}, "
          f"worst boot {report.worst_boot_s * 1000:.0f} ms; busy: {report.busy.summary()}"
          + (f"; {report.lapsed} round trip(s) made again after their tenure lapsed" if report.lapsed else ""))
    for kind, n in report.by_type().items():
        first = next(f for f in report.failures_list if f.kind == kind)
        print(f"  {kind}: {n} (first: round {first.round} process {first.process}: {first.message})")
    if report.undecided:
        first = report.undecided[0]
        print(f"  undecided: {len(report.undecided)} round trip(s) that could not be finished after a successful "
              f"open (first: round {first.round} process {first.process}: {first.kind}: {first.message})")
    print(report.verdict.upper())
    sys.stdout.flush()
    return {"pass": 0, "fail": 1, "inconclusive": 3}[report.verdict]
