"""The store's raw limit: a bare loop of fenced transactions from N processes, no nemesis.

With `record=True` the same loop writes history records around every call, so the ratio of
the two is the recording overhead. Each process holds its own run's lease (renewed every
ttl/3) and appends under it; every append is one fenced transaction.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import multiprocess as mp

from soak.history import HistoryWriter, payload_for
from soak.spi import JournalEntry, LeaseHeldError, StoreBusyError
from soak.stores import StoreTarget, resolve

__all__ = ["RawLimit", "raw_limit", "raw_limit_detail"]


@dataclass(frozen=True)
class RawLimit:
    """One raw run: summed rate, leases lost to starvation, and CPU seconds per append (mean over processes).

    CPU per append does not depend on which process SQLite's unfair busy handler lets through,
    so the recorded/bare ratio of it is a steadier measure of recording overhead than the rates.
    """

    rate: float
    lost: int
    cpu_per_op_s: float
    worst_call_s: float = 0.0  # the longest one append took (its wait for the write lock included)


def _loop(target: StoreTarget, location: str, slot: int, ttl_ms: int, seconds: float, record: bool,
          barrier, results) -> None:
    store = target.open(location, ttl_ms, timeout_s=None)
    run = f"raw{slot}"
    writer = HistoryWriter(os.path.join(location, f"h{slot}.jsonl"), f"p{slot}") if record else None
    barrier.wait()
    lease = store.acquire(run, f"p{slot}")
    seq = done = lost = 0
    worst = 0.0
    cpu0 = time.process_time()
    start = last_renew = time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        try:
            if now - last_renew > ttl_ms / 3000.0:
                lease = store.renew(lease)
                last_renew = now
        except (LeaseHeldError, StoreBusyError):  # starved past the ttl by the busy handler
            lease, last_renew = store.acquire(run, f"p{slot}"), time.monotonic()
            lost += 1
        seq += 1
        if writer is not None:
            tag = f"p{slot}#{writer.next_index()}"
            index = writer.invoke("append", run, lease, "live", {"seq": seq, "tag": tag, "c": seq})
            payload = payload_for(tag)
        else:
            payload = b"x" * 24
        called = time.monotonic()
        try:
            store.append(run, JournalEntry(seq, payload), lease)
            worst = max(worst, time.monotonic() - called)
        except LeaseHeldError:
            seq -= 1
            lease, last_renew = store.acquire(run, f"p{slot}"), time.monotonic()
            lost += 1
            continue
        except StoreBusyError:
            seq -= 1
            if writer is not None:
                writer.complete(index, "fail", error="StoreBusyError")
            continue
        if writer is not None:
            writer.complete(index, "ok")
        done += 1
    results.put((done / (time.monotonic() - start), lost, (time.process_time() - cpu0) / max(done, 1), worst))
    store.close()


def raw_limit(store: str = "sqlite:", *, processes: int = 4, seconds: float = 3.0, record: bool = False,
              lease_ttl_ms: int = 1000) -> float:
    """Fenced appends per second, summed over `processes` processes."""
    return raw_limit_detail(store, processes=processes, seconds=seconds, record=record,
                            lease_ttl_ms=lease_ttl_ms).rate


def raw_limit_detail(store: str = "sqlite:", *, processes: int = 4, seconds: float = 3.0, record: bool = False,
                     lease_ttl_ms: int = 1000) -> RawLimit:
    """`raw_limit` with the lost leases and the CPU cost per append."""
    target = resolve(store)
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="soak-raw-") as location:
        target.open(location, lease_ttl_ms).close()  # bootstrap once; boot is not what we measure
        barrier = ctx.Barrier(processes)
        results = ctx.Queue()
        procs = [ctx.Process(target=_loop, args=(target, location, i, lease_ttl_ms, seconds, record, barrier, results))
                 for i in range(processes)]
        for p in procs:
            p.start()
        try:
            rates = [results.get(timeout=seconds + 60) for _ in procs]
            for p in procs:
                p.join()
        finally:
            target.cleanup(location)  # a networked store's namespace
    return RawLimit(sum(r[0] for r in rates), sum(r[1] for r in rates), sum(r[2] for r in rates) / len(rates),
                    max(r[3] for r in rates))


def compare(stores: list[str], processes: list[int], seconds: float, rounds: int) -> None:
    """Each store's bare fenced-append rate at each process count, as a ratio to the first store's (one run)."""
    print(f"| store | processes | fenced appends/s (median of {rounds}) | vs {stores[0]} | CPU us/append | lost |")
    print("|---|---|---|---|---|---|")
    for n in processes:
        base = None
        for spec in stores:
            runs = sorted((raw_limit_detail(spec, processes=n, seconds=seconds) for _ in range(rounds)),
                          key=lambda r: r.rate)
            r = runs[len(runs) // 2]
            base = base or r.rate
            print(f"| {spec} | {n} | {r.rate:,.0f} | {r.rate / base:.2f} | {r.cpu_per_op_s * 1e6:.0f} | {r.lost} |",
                  flush=True)


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compare", nargs="+", metavar="SPEC",
                   help="stores to compare, the first the baseline (e.g. sqlite: postgresql://127.0.0.1:5432/test "
                        "redis://127.0.0.1:6379/0)")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 4])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if args.compare:
        compare(args.compare, args.processes, args.seconds, args.rounds)
    else:
        for rec in (False, True):
            r = raw_limit_detail(record=rec)
            print(f"record={rec}: {r.rate:,.0f} fenced appends/s, {r.cpu_per_op_s * 1e6:.0f} CPU us per append, "
                  f"longest append {r.worst_call_s * 1e3:.0f} ms, {r.lost} leases lost to starvation")
