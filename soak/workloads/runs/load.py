"""The runs workload's load workers: writers and readers pressing the store beside the tenure workers.

The load workers (the scenario's `load_workers`) come in groups of four: the first of a group is a writer, the
others readers of the writer's run. A writer holds a tenure of its own run (`ld0`, `ld4`, ...), renewed every ttl/3,
and writes it as fast as the store takes writes: appends at the tail + 1 mostly, meta and blob puts, and read-backs
of meta and blobs. A reader (`ld1`-`ld3` read `ld0`) reads that run's meta and blobs, untenured, while it is being
written, as fast as the store answers; it runs at a low CPU priority (`nice` 10), so it takes the CPU the
writers and the tenure workers leave idle (waiting for the write lock, recording, sleeping) and not theirs. One
writer is as many as the write lock of an embedded store takes: on 2 cores, four writers wasted their CPU polling the
lock and wrote no more than one (docs/performance.md, "One writer, three readers"). Every call is recorded and checked
like any other (the checker never consults the intent, `load`), so the load is verified, not noise. The tenure
workers' takeovers, strikes and probes then happen while the store runs near its limit: busy answers, lock waits,
starvation and reads beside writes are where a store breaks.

SQLite's busy handler is not fair: writers back to back can starve a waiting caller for seconds, past the
`call-returns` bound, which would be the harness's doing, not the store's. So before every call a load worker looks
at the calls in flight of every other worker (the storm's call board) and waits while one of them has run longer than
half the ttl: the store stays loaded, and no caller waits much past half a ttl because of the load.
A load worker that loses its tenure (starved or stopped past the ttl) takes a new one of the same run; such regrants
are not takeovers (`is_load_run`). The nemesis never acts on a load worker.
"""

from __future__ import annotations

import itertools
import os
import time

from soak.spi import JournalOrderError, LeaseHeldError, StoreBusyError
from soak.workloads.context import WorkerContext
from soak.workloads.runs.worker import _Worker

__all__ = ["LOAD_PREFIX", "GROUP", "is_load_run", "load_runs", "run_load_worker"]

#: The prefix of the load workers' runs (`ld0`, `ld1`, ...).
LOAD_PREFIX = "ld"
#: Load workers per writer: the first of each group of `GROUP` writes, the others read its run.
GROUP = 4
#: What a writer does, by weight: mostly fenced appends (the raw limit's own call), then the other writes and
#: the reads that hold the store to them.
_MIX = {"append": 6.0, "put_meta": 1.0, "blob_put": 1.0, "get_meta": 1.0, "blob_get": 1.0}
#: A reader's CPU priority (`os.nice`): it yields the CPU to every other worker (weight 110 against their 1024), yet is
#: not starved for long when the machine is saturated (at 19, a reader's call waited 0.7 s under four CPU hogs).
_NICE = 10
#: What a reader does, by weight.
_READS = {"get_meta": 1.0, "blob_get": 1.0}


def load_runs(count: int) -> list[str]:
    """The runs of `count` load workers."""
    return [f"{LOAD_PREFIX}{i}" for i in range(count)]


def is_load_run(run: str) -> bool:
    """Whether `run` is a load worker's (its regrants are not takeovers)."""
    return run.startswith(LOAD_PREFIX)


def run_load_worker(ctx: WorkerContext) -> None:
    """The loop of one load worker."""
    _LoadWorker(ctx).loop()


class _LoadWorker(_Worker):
    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        self.run = load_runs(ctx.load_index + 1)[-1]
        #: the writer's run this load worker reads, or None: it is the writer
        self.reads = load_runs(ctx.load_index - ctx.load_index % GROUP + 1)[-1] if ctx.load_index % GROUP else None
        mix = _READS if self.reads else _MIX
        self.kinds = list(mix)
        self.cum_weights = list(itertools.accumulate(mix[k] for k in self.kinds))
        self.starved_ns = self.sc.lease_ttl_ms * 500_000  # half the ttl

    def yield_to_starved(self) -> None:
        """Wait while a store call of another worker has run longer than half the ttl."""
        while not self.ctx.should_stop():
            began = self.ctx.oldest_call_ns()
            if not began or time.monotonic_ns() - began < self.starved_ns:
                return
            time.sleep(0.001)

    def loop(self) -> None:
        if self.reads is not None:
            self.read()
            return
        while not self.ctx.should_stop():
            self.yield_to_starved()
            asked = time.monotonic()
            out = self.acquire(self.run, "load")
            if out.ok:
                self.press(out.result, asked)
            else:
                self.sleep(0.001)

    def read(self) -> None:
        """Read the writer's run, untenured, until the storm stops, at a low CPU priority."""
        os.nice(_NICE)
        run = self.reads
        while not self.ctx.should_stop():
            self.yield_to_starved()
            if self.rng.choices(self.kinds, cum_weights=self.cum_weights)[0] == "get_meta":
                self.get_meta(run, "load", None)
            else:
                self.blob_get(self.blob_ref(run), "load", None)

    def press(self, lease, since: float) -> None:
        """Write the run under `lease` until the tenure is lost or the storm stops; `since` bounds its last grant or
        renewal from below."""
        run = lease.run_id
        renew_s = self.sc.lease_ttl_ms / 3000.0
        tail = self.load_tail(run, "load", lease)
        while not self.ctx.should_stop():
            self.yield_to_starved()
            if time.monotonic() - since > renew_s:
                started = time.monotonic()
                out = self.renew(lease, "load")
                if out.ok:
                    since = started
                elif out.refused(LeaseHeldError):
                    return  # starved or stopped past the ttl: a new tenure
                continue
            kind = self.rng.choices(self.kinds, cum_weights=self.cum_weights)[0]
            if kind == "append":
                if tail is None:
                    tail = self.load_tail(run, "load", lease)
                    continue
                out = self.append(run, lease, "load", tail + 1)
                if out.ok:
                    tail += 1
                elif not out.refused(StoreBusyError):
                    tail = None  # unknown, or the order guard's: read the tail again
                    if out.refused(JournalOrderError):
                        continue
            elif kind == "put_meta":
                out = self.put_meta(run, lease, "load")
            elif kind == "blob_put":
                out = self.blob_put(self.blob_ref(run), lease, "load")
            elif kind == "get_meta":
                out = self.get_meta(run, "load", lease)
            else:
                out = self.blob_get(self.blob_ref(run), "load", lease)
            if out.refused(LeaseHeldError):
                return
