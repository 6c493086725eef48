"""The `runs` workload: tenures on a few main runs, deletion cycles on side runs, stale sweeps.

One tenure: acquire a random main run, `load` its tail, 3-8 random fenced operations (append at
the fresh tail + 1, meta, blob put and delete, renew, a full deletion cycle on a side run under
its own lease, a probe of the live lease on a foreign run, now and then an append at or below
the tail that the order guard must refuse, a read-back), then release, or stall past the ttl
without renewing. A worker without a tenure waits at the next expiry the run board shows (every
worker publishes the expiry of its tenure there) instead of backing off; a stalled or struck
tenure's dead lease is swept once its stall is over and a successor holds the run, while the
worker takes another run meanwhile. Every tenure starts with a read-back (journal tail, meta, one or two blobs) and
the mix repeats it at random points: each read records the tenure it was made under
(`{"tenure": [run, owner, epoch]}`) and what it saw (`tail_tag` / `tag`), so the checker can hold
reads to the epoch-ordered serial history (a late stale write shows up there). After a stall or a refusal of the live lease, the dead lease is swept over
every surface (append, meta, blob put, blob delete, run delete, renew, cross-run use, release):
each must be refused typed. The coverage probes (`soak.workloads.runs.coverage`) present the other leases the
contract tells apart on every surface: the worker's own earlier tenure of the run it holds again (`superseded`,
`released_superseded`), a lease it released a moment ago (`released`), the live tenure's epoch under another
owner (`impostor`), an epoch never issued (`future`), writes without a lease to a run nobody leases (`unleased`),
an acquire of the run it holds (`reentrant`), the run acquired again at once after a release (`reacquire`) and a
side run acquired again after its deletion (`after_delete`). Invoke values follow the storm/checker interface in
`soak.history`.
"""

from __future__ import annotations

import random
import time
from typing import Any

from soak.history import meta_fields_for, payload_for, tag_of
from soak.spi import JournalEntry, Lease, LeaseHeldError, RunMeta
from soak.workloads.context import Outcome, WorkerContext
from soak.workloads.runs.options import STRUCK_SURFACES

__all__ = ["CROSS_RUN", "UNLEASED_RUN", "run_worker"]


def run_worker(ctx: WorkerContext) -> None:
    """The runs workload's loop in one storm worker."""
    _Worker(ctx).loop()


#: A run no tenure ever acquires: every write to it came through a cross-run probe.
CROSS_RUN = "xr"
#: A run nobody leases: the unleased probes write to it without a lease (`unleased-passthrough`).
UNLEASED_RUN = "ul"
#: The mutations a cross-run probe turns through, and the unleased probe makes in this order.
_MUTATION_KINDS = ("append", "put_meta", "blob_put", "blob_delete", "delete")
#: The coverage probes a live tenure's `probe` mix key turns through.
_PROBES = ("impostor", "future", "unleased", "reentrant", "renewed")


def _first_probe(process: str, seed: int | None, rng: random.Random) -> int:
    """The index in `_PROBES` of a worker's first probe: the storm's workers start on consecutive probes from an
    offset the storm's seed draws, so the first probe of every worker is a different one (4 workers try 4 of the 5
    in their first round, where independent draws would leave one or more untried 60% of the time). A worker the
    storm replaced (`wS.I`, I > 1), or one not named by a slot, draws its own."""
    slot, dot, inc = process.lstrip("w").partition(".")
    if not (slot.isdigit() and dot and inc == "1"):
        return rng.randrange(len(_PROBES))
    return (random.Random(seed or 0).randrange(len(_PROBES)) + int(slot)) % len(_PROBES)
#: The surfaces the renewed probe presents the twice-renewed tenure on (renew last: it extends the tenure).
_RENEWED_KINDS = ("append", "put_meta", "blob_put", "blob_delete", "renew")
#: A blob name no worker ever writes: the unleased probe deletes it on the run it holds (a no-op it must accept).
NEVER_WRITTEN_BLOB = "ul-never"
#: The shapes of a side run's deletion cycle: what the run holds when it is deleted (every write surface, nothing
#: written, only its meta): a store may treat the delete of an empty run differently and drop its epoch mark.
_SIDE_SHAPES = ("full", "empty", "meta")


def _altered(payload: bytes, tag: str | None) -> bool:
    """Whether `payload` differs byte for byte from what the write tagged `tag` wrote (every soak write's payload is
    `payload_for` its tag, so a read proves an altered value by itself)."""
    return tag is None or bytes(payload) != payload_for(tag)


def _tail_value(entries: Any) -> dict[str, Any]:
    entries = list(entries)
    tag = tag_of(entries[-1].payload) if entries else None
    out = {"tail": entries[-1].seq if entries else 0, "count": len(entries), "tail_tag": tag}
    if entries and _altered(entries[-1].payload, tag):
        out["altered"] = True
    return out


def _tag_value(payload: bytes | None) -> dict[str, Any]:
    """What a read saw: the tag of the operation that wrote the value (None: absent or foreign), and `altered` when
    its bytes are not what that write wrote."""
    if payload is None:
        return {"tag": None}
    tag = tag_of(payload)
    return {"tag": tag, "altered": True} if _altered(payload, tag) else {"tag": tag}


def _meta_value(meta: RunMeta | None) -> dict[str, Any]:
    """What a meta read saw: its payload's tag (see `_tag_value`), and `mixed` when its status and segments are not
    the ones that tag's write wrote (`meta_fields_for`): the store kept parts of two writes."""
    if meta is None:
        return {"tag": None}
    out = _tag_value(meta.payload)
    tag = out["tag"]
    if tag is not None and (meta.status, meta.segments) != meta_fields_for(tag):
        out["mixed"] = True
    return out


def _tenure(lease: Lease | None) -> list[Any] | None:
    return None if lease is None else [lease.run_id, lease.owner, lease.epoch]


class _Worker:
    """One worker's tenure loop (state: the journal tail it believes in)."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        ctx.after_busy = self.after_busy
        self.store = ctx.store
        self.rng = ctx.rng
        self.sc = ctx.scenario
        self.opt = ctx.scenario.options  # the runs workload's knobs (`soak.workloads.runs.options.RunsOptions`)
        self.main = self.opt.main_runs()
        self.side = self.opt.side_run_ids()
        self.owner = ctx.process
        self.mix_keys = list(self.opt.mix)
        self.mix_weights = [self.opt.mix[k] for k in self.mix_keys]
        self.expires = 0  # the expiry this worker last noted on the board
        self.due: list[tuple[float, Lease, int]] = []  # sweeps due once a stall is over: (monotonic s, dead lease, its expiry on the board)
        self.asked: str | None = None  # a run the nemesis asked this worker to take over while it held another
        # coverage probes: per run, the worker's latest ended tenure and whether it released it; the side runs it
        # deleted; turns through the probes and the cross-run surfaces (every one reached in every storm)
        self.past: dict[str, tuple[Lease, bool]] = {}
        self.deleted: set[str] = set()
        self.renewed_left = list(_RENEWED_KINDS)  # the renewed probe's surfaces not yet answered ok (then all again)
        self.probed = False  # this incarnation has had its first tenure (which opens with a probe)
        self.turn = {"probe": _first_probe(ctx.process, ctx.scenario.seed, self.rng) - 1,
                     "cross": self.rng.randrange(len(_MUTATION_KINDS)), "side": self.rng.randrange(len(_SIDE_SHAPES))}

    # -- building blocks ------------------------------------------------------------------

    def acquire(self, run: str, intent: str) -> Outcome:
        return self.ctx.retrying(
            "acquire", run, None, intent, {"owner": self.owner},
            lambda: self.store.acquire(run, self.owner), ok_value=lambda lease: {"epoch": lease.epoch},
        )

    def load_tail(self, run: str, intent: str, tenure: Lease | None = None) -> int | None:
        """Read the journal of `run`; `tenure` is the live lease of that run the worker holds (or None)."""
        out = self.ctx.retrying("load", run, None, intent, {"tenure": _tenure(tenure)}, lambda: self.store.load(run),
                                ok_value=_tail_value)
        if not out.ok:
            return None
        entries = list(out.result)
        return entries[-1].seq if entries else 0

    def get_meta(self, run: str, intent: str, tenure: Lease | None) -> Outcome:
        return self.ctx.retrying("get_meta", run, None, intent, {"tenure": _tenure(tenure)},
                                 lambda: self.store.get_meta(run), ok_value=_meta_value)

    def blob_get(self, ref: str, intent: str, tenure: Lease | None) -> Outcome:
        run = ref.partition("/")[0]
        return self.ctx.retrying("blob_get", run, None, intent, {"ref": ref, "tenure": _tenure(tenure)},
                                 lambda: self.store.transcripts.get(ref), ok_value=_tag_value)

    def after_busy(self, f: str, run: str, lease: Lease | None, intent: str, value: dict[str, Any]) -> None:
        """Read, under the tenure, what its own write answered `StoreBusyError` would have changed (busy says nothing
        was written: the checker names a refused write a tenured read saw `typed-refusal`), before it is retried
        over it. Writes of other intents (probes, stale leases) have no tenure to read under."""
        if intent not in ("live", "renewed", "side") or lease is None or lease.run_id != run:
            return
        read = "side" if intent == "side" else "live"
        if f == "put_meta":
            self.get_meta(run, read, lease)
        elif f in ("blob_put", "blob_delete") and isinstance(value.get("ref"), str):
            self.blob_get(value["ref"], read, lease)
        elif f in ("append", "delete"):
            self.load_tail(run, read, lease)

    def read_back(self, lease: Lease, intent: str, refs: list[str] | None = None) -> int | None:
        """Read the tenure's journal tail, meta and one or two blobs: evidence of what the fence let in.

        Returns the journal tail (None when the load did not succeed).
        """
        run = lease.run_id
        tail = self.load_tail(run, intent, lease)
        if self.ctx.should_stop():
            return tail
        self.get_meta(run, intent, lease)
        for ref in refs or [self.blob_ref(run) for _ in range(self.rng.randint(1, 2))]:
            if self.ctx.should_stop():
                break
            self.blob_get(ref, intent, lease)
        return tail

    def append(self, run: str, lease: Lease | None, intent: str, seq: int) -> Outcome:
        def build(tag: str, payload: bytes, c: int):
            return {"seq": seq, "tag": tag, "c": c}, lambda: self.store.append(run, JournalEntry(seq, payload), lease)
        return self.ctx.mutation("append", run, lease, intent, build)

    def put_meta(self, run: str, lease: Lease | None, intent: str) -> Outcome:
        def build(tag: str, payload: bytes, c: int):
            status, segments = meta_fields_for(tag)
            meta = RunMeta(run, status, segments, payload)
            return ({"tag": tag, "c": c, "status": status, "segments": segments},
                    lambda: self.store.put_meta(meta, lease))
        return self.ctx.mutation("put_meta", run, lease, intent, build)

    def all_blobs(self, run: str) -> list[str]:
        return [f"{run}/b{i}" for i in range(self.opt.blob_names)]

    def blob_ref(self, run: str) -> str:
        return f"{run}/b{self.rng.randrange(self.opt.blob_names)}"

    def blob_put(self, ref: str, lease: Lease | None, intent: str) -> Outcome:
        run = ref.partition("/")[0]

        def build(tag: str, payload: bytes, c: int):
            return {"ref": ref, "tag": tag, "c": c}, lambda: self.store.transcripts.put(ref, payload, lease)
        return self.ctx.mutation("blob_put", run, lease, intent, build)

    def blob_delete(self, ref: str, lease: Lease | None, intent: str) -> Outcome:
        run = ref.partition("/")[0]

        def build(tag: str, payload: bytes, c: int):
            return {"ref": ref, "c": c}, lambda: self.store.transcripts.delete(ref, lease)
        return self.ctx.mutation("blob_delete", run, lease, intent, build)

    def delete(self, run: str, lease: Lease | None, intent: str) -> Outcome:
        def build(tag: str, payload: bytes, c: int):
            return {"c": c}, lambda: self.store.delete(run, lease)
        return self.ctx.mutation("delete", run, lease, intent, build)

    def renew(self, lease: Lease, intent: str) -> Outcome:
        return self.ctx.retrying("renew", lease.run_id, lease, intent, {}, lambda: self.store.renew(lease))

    def release(self, lease: Lease, intent: str) -> Outcome:
        out = self.ctx.retrying("release", lease.run_id, lease, intent, {}, lambda: self.store.release(lease))
        if out.ok and intent in ("live", "side", "reacquire"):
            self.remember(lease, released=True)
        return out

    def remember(self, lease: Lease, released: bool = False) -> None:
        """Note `lease` as the worker's latest ended tenure of its run (a superseded probe presents it later)."""
        prev = self.past.get(lease.run_id)
        if prev is None or prev[0].epoch < lease.epoch or (prev[0] == lease and released):
            self.past[lease.run_id] = (lease, released)

    def write_to(self, run: str, lease: Lease, intent: str) -> Outcome | None:
        """One mutation of `run` under `lease` (a lease of another run): append at the fresh tail + 1, meta, blob
        put, blob delete or run delete, turning through them so that each is presented in every storm."""
        i = self.turn["cross"] = (self.turn["cross"] + 1) % len(_MUTATION_KINDS)
        return self.mutate(_MUTATION_KINDS[i], run, lease, intent)

    def mutate(self, kind: str, run: str, lease: Lease | None, intent: str) -> Outcome | None:
        """One mutation of `kind` of `run` under `lease` (None: unleased); an append goes at the fresh tail + 1
        (None: the tail could not be read)."""
        if kind == "append":
            tail = self.load_tail(run, intent)
            return None if tail is None else self.append(run, lease, intent, tail + 1)
        if kind == "put_meta":
            return self.put_meta(run, lease, intent)
        if kind == "blob_put":
            return self.blob_put(self.blob_ref(run), lease, intent)
        if kind == "blob_delete":
            return self.blob_delete(self.blob_ref(run), lease, intent)
        return self.delete(run, lease, intent)

    def write(self, kind: str, run: str, lease: Lease, intent: str, tail: int | None,
              tenure: Lease | None = None, ref: str | None = None) -> tuple[Outcome | None, int | None]:
        """One write of `kind` to `run` under `lease`: an append at `tail` + 1 (the tail read first when unknown,
        under `tenure`), a meta or a blob put (of `ref`, else a random blob of the run). Its outcome (None: the tail
        could not be read) and the tail after it (None: unknown)."""
        if kind == "append":
            if tail is None:
                tail = self.load_tail(run, intent, tenure)
                if tail is None:
                    return None, None
            out = self.append(run, lease, intent, tail + 1)
            return out, (tail + 1 if out.ok else None)  # the tail is known again only after an accepted append
        if kind == "put_meta":
            return self.put_meta(run, lease, intent), tail
        return self.blob_put(ref or self.blob_ref(run), lease, intent), tail

    def read_own(self, kind: str, lease: Lease, ref: str | None) -> None:
        """Read back at once what an accepted meta put, blob put or blob delete of the tenure changed: a read must
        show the caller's own write (meta-last-write, blob-semantics), and one that lags it (a read cache blind to
        writes, a replica behind its primary) shows it here, the tenure's earlier reads of the same key just before."""
        if kind == "put_meta":
            self.get_meta(lease.run_id, "live", lease)
        elif ref is not None:
            self.blob_get(ref, "live", lease)

    def sleep(self, seconds: float) -> None:
        """Sleep cooperatively: wake early when the storm stops."""
        end = time.monotonic() + seconds
        while not self.ctx.should_stop():
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.01))

    # -- the loop ---------------------------------------------------------------------------

    def loop(self) -> None:
        while not self.ctx.should_stop():
            self.sweep_due()
            wanted, self.asked = self.asked or self.ctx.wanted(), None
            if wanted in self.main:
                self.take_over(wanted)
                continue
            run = self.next_run()
            if run is None:
                continue
            asked = time.monotonic()
            out = self.acquire(run, "live")
            if not out.ok:
                self.sleep(self.rng.uniform(0.0005, 0.002))  # held, busy or unknown: the board says what is next
                continue
            # granted the run of a call the nemesis holds struck (ahead of the worker it asked): be its taker
            self.held(out.result, asked, linger=self.ctx.held_run() == run)

    def held(self, lease: Lease, asked: float, linger: bool = False) -> None:
        self.publish(lease)
        try:
            self.tenure(lease, asked, linger=linger)
        finally:
            self.ctx.publish_tenure(None)
            self.remember(lease)

    def take_over(self, run: str) -> None:
        """The nemesis holds a struck call on `run`: be its taker. Wait at the lease's expiry (the board's), acquire
        the run (again at once while another worker has it first, for up to two ttls), then hold it as a tenure
        that reads the whole run before and after the held call returns."""
        ttl_ns = self.sc.lease_ttl_ms * 1_000_000
        give_up = time.monotonic_ns() + 2 * ttl_ns
        while not self.ctx.should_stop() and time.monotonic_ns() < give_up:
            wait = self.ctx.expiry(run) - time.monotonic_ns()
            if wait > 0:
                self.sleep(min(wait, ttl_ns) / 1e9)
            asked = time.monotonic()
            out = self.acquire(run, "live")
            if out.ok:
                self.held(out.result, asked, linger=True)
                return
            self.sleep(0.0005)

    def asked_away(self, run: str) -> bool:
        """Whether the nemesis asked this worker, in its tenure of `run`, to take another run over: a held strike's,
        whose successor no worker free of a tenure could be (across hosts, `soak.cluster`, a host of one or two
        workers rarely has one). The tenure then ends at once with its release, and the worker takes that run next."""
        if self.asked is None:
            want = self.ctx.wanted()
            if want in self.main and want != run:  # its own run: it is the successor already
                self.asked = want
        return self.asked is not None

    def next_run(self) -> str | None:
        """A main run the board shows free or expired, else None after waiting (at most 20 ms) for the next expiry.

        A successor waits at the expiry of the tenure it takes over instead of backing off: every worker without a
        tenure asks for the run as its tenure ends, so takeovers come at the rate expiry allows and contend there.
        """
        now = time.monotonic_ns()
        dead = {lease.run_id for _, lease, _ in self.due}  # a run this worker still has a dead lease of to sweep
        ends = {run: self.ctx.expiry(run) for run in self.main if run not in dead}
        free = [run for run, end in ends.items() if end <= now]
        if free:
            return self.rng.choice(free)
        wake = min([*ends.values(), *(int(due * 1e9) for due, _, _ in self.due if due * 1e9 > now), now + 20_000_000])
        self.sleep((wake - now) / 1e9)
        return None

    def sweep_due(self) -> None:
        """Sweep the dead leases whose stall (or wait after a strike) is over, once a successor holds the run.

        A lease is swept when the board shows a later tenure of its run, or two ttls after its stall is over: a
        sweep under a lease that expired with no successor proves nothing (`expired-unsuperseded`), and its
        release would end the run's tenure without a takeover.
        """
        now = time.monotonic()
        ttl = self.sc.lease_ttl_ms / 1000.0
        for item in [d for d in self.due if d[0] <= now]:
            due, lease, noted = item
            if self.ctx.expiry(lease.run_id) == noted and now < due + 2 * ttl:
                continue  # no successor yet
            self.due.remove(item)
            if not self.ctx.should_stop():
                self.sweep(lease)

    def publish(self, lease: Lease) -> None:
        """Tell the nemesis which tenure this worker holds and the latest it can expire, and the board when the run
        is free to take over."""
        expires = time.monotonic_ns() + self.sc.lease_ttl_ms * 1_000_000
        self.ctx.publish_tenure(lease.run_id, lease.epoch, expires)
        self.ctx.note_expiry(lease.run_id, expires)
        self.expires = expires

    def edge_write(self, lease: Lease, since: float, tail: int | None,
                   strike: bool = False) -> tuple[Outcome | None, int | None]:
        """Keep writing until the tenure is about to expire (by this worker's clock), then write.

        A holder writing at the very end of its tenure while others wait to take the run over
        is where a store whose fence check and write are not one unit lets a takeover in.
        `since` is a lower bound of the last grant or renewal (the call's invoke time), so the
        write is made while the lease is still live. With `strike`, the write is struck: the
        worker stops itself at a random point inside it and the nemesis holds it there past
        the lease while a successor takes the run over and reads it; a store that lets the
        write land after that shows it in the successor's reads.
        """
        ttl = self.sc.lease_ttl_ms / 1000.0
        # a struck write starts earlier (5-25% of the ttl before the edge): the hold takes it past the lease anyway,
        # and its fence check must come before the expiry, or it is no more than a stale call (over a network, 2 ms a
        # round trip, an edge write's check came 10-500 ms too late: 10 of 13 strikes aimed past a PostgreSQL split
        # fence's check were refused)
        lead = self.rng.uniform(0.05, 0.25) if strike else self.rng.uniform(0.0, 0.04)
        out, tail = self.busy_until(since + ttl * (1.0 - lead), lease, tail)
        if self.ctx.should_stop() or self.asked is not None or (out is not None and out.refused(LeaseHeldError)):
            return out, tail
        # a struck write favours the journal and meta, which every successor reads first, and a surface whose calls'
        # gaps the storm's held strikes have not all tried yet (`swept_<surface>` of the quorum)
        kinds = STRUCK_SURFACES if strike else ("append", "put_meta", "blob_put")
        weights = [(8 if self.ctx.unswept(k) else 1) * (2 if k == "put_meta" else 1) for k in kinds] if strike else None
        kind = self.rng.choices(kinds, weights)[0]
        if kind == "append" and tail is None:
            tail = self.load_tail(lease.run_id, "live", lease)
            if tail is None:
                return None, None
        if strike:
            self.ctx.strike_next_call()
        if kind == "put_meta":
            return self.put_meta(lease.run_id, lease, "live"), tail
        if kind == "blob_put":
            return self.blob_put(self.blob_ref(lease.run_id), lease, "live"), tail
        # a struck append skips seqs: if it lands late, after a successor's appends at the tail
        # + 1, + 2, ..., the order guard lets it in and the journal shows the epoch inversion
        seq = tail + (self.rng.randint(5, 12) if strike else 1)
        out = self.append(lease.run_id, lease, "live", seq)
        return out, (seq if out.ok else None)

    def busy_until(self, deadline: float, lease: Lease, tail: int | None) -> tuple[Outcome | None, int | None]:
        """Keep writing to the tenure's run, as fast as the store takes the writes, until `deadline` (monotonic).

        The wait for a tenure's edge is not idle: the store stays under load near its limit while
        others are held or take over (busy handling, lock waits and starvation are where a store
        misbehaves). Returns the first refusal by the fence (the tenure is lost) or None, and the tail.
        """
        run = lease.run_id
        while not self.ctx.should_stop() and not self.asked_away(run) and (started := time.monotonic()) < deadline:
            out, tail = self.write(self.rng.choice(("append", "put_meta", "blob_put")), run, lease, "live", tail, lease)
            # as long again as the write took, so the writers leave the store free half their time: a write that had
            # to wait for a lock backs off as long, and the waits of other callers stay bounded however many write
            time.sleep(min(time.monotonic() - started, max(0.0, deadline - time.monotonic())))
            if out is not None and out.refused(LeaseHeldError):
                return out, tail
        if self.asked is None:
            self.sleep(deadline - time.monotonic())
        return None, tail

    def tenure(self, lease: Lease, asked: float, linger: bool = False) -> None:
        """One live tenure; `asked` is when the acquire was invoked (a lower bound of the grant).

        With `linger` (this worker is the taker of a holder the nemesis holds stopped inside a
        write), the tenure reads the whole run, waits a moment and reads it all again: the
        nemesis lets the old holder go once the first reads have started, so a write of its that
        lands late lands between the two, where the second shows it whichever blob it wrote.
        """
        run = lease.run_id
        since = asked  # a lower bound of the latest grant or renewal of this tenure
        # how the tenure ends: a stall past the ttl, a struck edge write, or a release
        ending = self.rng.random()
        stall = ending < self.opt.stall_prob
        strike = not stall and self.ctx.can_strike and ending < self.opt.stall_prob + self.opt.strike_prob
        if linger:
            # the taker of a held strike reads the whole run, lets the nemesis let the holder go (it does once
            # these reads have started), and reads it all again once the held call has had time to return: a
            # late write lands between the two, whichever blob it wrote
            self.read_back(lease, "live", self.all_blobs(run))
            self.sleep(self.sc.lease_ttl_ms / 10000.0)
            tail = self.read_back(lease, "live", self.all_blobs(run))
        else:
            tail = self.read_back(lease, "live")
        self.after_grant(lease)
        lost = False
        granted_by = time.monotonic()  # the acquire has returned: the grant was made before this
        ttl_s = self.sc.lease_ttl_ms / 1000.0

        def live() -> str:
            """The intent of the tenure's own next call: `renewed` once it has been renewed and is surely past the
            grant's ttl (a store judging expiry by the grant, not the latest renew, refuses it), else `live`."""
            return "renewed" if since > asked and time.monotonic() > granted_by + ttl_s else "live"

        # a worker's first tenure opens with its first coverage probe (the storm's workers start on different ones,
        # `_first_probe`): a store that lets a forged lease in shows it in the first second, not when the mix draws it
        first = not self.probed and self.opt.mix.get("probe", 0) > 0
        self.probed = True
        for n in range(self.rng.randint(self.opt.ops_min, self.opt.ops_max)):
            if self.ctx.should_stop() or self.asked_away(run):
                break
            kind = "probe" if first and n == 0 else self.rng.choices(self.mix_keys, self.mix_weights)[0]
            out: Outcome | None = None
            ref = self.blob_ref(run) if kind in ("blob_put", "blob_delete") else None
            if kind in ("append", "put_meta", "blob_put"):
                out, tail = self.write(kind, run, lease, live(), tail, lease, ref)
            elif kind == "order_probe":
                if tail is None:
                    tail = self.load_tail(run, "live", lease)
                    if tail is None:
                        continue
                out = self.append(run, lease, "order", self.rng.randint(max(0, tail - 2), tail))
                if not out.refused():
                    tail = None  # an accepted (or unknown) append below the tail: reload before the next
            elif kind == "blob_delete":
                out = self.blob_delete(ref, lease, live())
            elif kind == "renew":
                started = time.monotonic()
                out = self.renew(lease, live())
                if out.ok:
                    since = started
                    self.publish(lease)
            elif kind == "edge":
                out, tail = self.edge_write(lease, since, tail, strike=self.rng.random() < self.opt.strike_prob)
            elif kind == "read":
                tail = self.read_back(lease, "live")
            elif kind == "side_cycle":
                self.side_cycle()
            elif kind == "cross":
                self.cross_probe(lease)
            elif kind == "probe":
                if self.probe(lease):
                    lost = True
                    break
                tail = None  # the probe may have appended: read the tail again before the next append
            if out is not None and out.refused(LeaseHeldError):
                lost = True  # superseded (a pause, or a slow tenure): sweep the dead lease
                break
            if out is not None and out.ok and kind in ("put_meta", "blob_put", "blob_delete"):
                self.read_own(kind, lease, ref)
        if lost:
            self.sweep(lease)
            return
        # asked to take a held strike's run over (`asked_away`): neither strike nor stall, the tenure ends with its release
        if strike and self.asked is None and not self.ctx.should_stop():
            # end the tenure with a struck edge write, then give a successor a moment (the lease
            # has expired by now) and sweep the dead lease, as after a stall
            out, tail = self.edge_write(lease, since, tail, strike=True)
            wait = 0.0 if out is not None and out.refused(LeaseHeldError) else self.sc.lease_ttl_ms / 4000.0
            self.due.append((time.monotonic() + wait, lease, self.expires))
            return
        elif stall and self.asked is None and not self.ctx.should_stop():
            # the tenure stalls past its ttl: it is never used again until the stall is over, then swept; the
            # worker takes another run meanwhile (a stalled holder does not keep a successor from being free)
            ms = self.opt.stall_ms(self.sc.lease_ttl_ms)
            self.ctx.writer.event("stall", {"ms": ms, "lease": [lease.run_id, lease.owner, lease.epoch]})
            self.due.append((time.monotonic() + ms / 1000.0, lease, self.expires))
            return
        out = self.release(lease, "live")
        if out.ok and self.ctx.expiry(run) == self.expires:
            self.ctx.note_expiry(run, 0)  # free at once (unless a successor has noted its own tenure since)
        if out.refused(LeaseHeldError) and not self.ctx.should_stop():
            self.sweep(lease)
        elif out.ok and self.asked is None:  # a run asked of it is taken over first
            self.after_release(lease)

    def side_cycle(self) -> None:
        """A fenced deletion cycle on a side run under its own lease, in one of three shapes (turning through them):
        every write surface then the delete; the delete of a run nothing was written to in this tenure (its journal
        and meta are gone since the previous cycle's delete); its meta alone, then the delete."""
        run = self.rng.choice(self.side)
        out = self.acquire(run, "after_delete" if run in self.deleted else "side")
        if not out.ok:
            return
        lease: Lease = out.result
        ref = f"{run}/b{self.rng.randrange(self.opt.blob_names)}"
        tail = self.read_back(lease, "side", [ref])
        if tail is None:
            return
        i = self.turn["side"] = (self.turn["side"] + 1) % len(_SIDE_SHAPES)
        shape = _SIDE_SHAPES[i] if run in self.deleted else "full"
        steps = {
            "full": [
                lambda: self.append(run, lease, "side", tail + 1),
                lambda: self.put_meta(run, lease, "side"),
                lambda: self.blob_put(ref, lease, "side"),
                lambda: self.blob_delete(ref, lease, "side"),
                lambda: self.delete(run, lease, "side"),
            ],
            "empty": [lambda: self.delete(run, lease, "side_empty" if tail == 0 else "side")],
            "meta": [lambda: self.put_meta(run, lease, "side"), lambda: self.delete(run, lease, "side")],
        }[shape]
        for step in steps:
            if not step().ok:
                return  # refused or unknown: the side lease is left to expire
        self.deleted.add(run)
        self.release(lease, "side")

    def cross_probe(self, lease: Lease) -> None:
        """The live lease used on another main run and on the never-written run: must be refused."""
        others = [r for r in self.main if r != lease.run_id]
        for target in (self.rng.choice(others), CROSS_RUN):
            if self.ctx.should_stop():
                return
            self.write_to(target, lease, "cross")

    def sweep(self, lease: Lease) -> None:
        """Every surface with the dead lease; each must be refused typed (`LeaseHeldError`)."""
        self.present(lease, "stale", cross=True)

    def present(self, lease: Lease, intent: str, cross: bool = False) -> None:
        """`lease` on every surface of its run: append at the fresh tail + 1 (the order guard cannot mask the
        fence), meta, blob put, blob delete, run delete, renew, with `cross` one mutation of another main run,
        then release. Under a lease that is not the run's current tenure each must be refused typed."""
        run = lease.run_id
        tail = self.load_tail(run, intent)
        steps = [
            (lambda: None if tail is None else self.append(run, lease, intent, tail + 1)),
            lambda: self.put_meta(run, lease, intent),
            lambda: self.blob_put(self.blob_ref(run), lease, intent),
            lambda: self.blob_delete(self.blob_ref(run), lease, intent),
            lambda: self.delete(run, lease, intent),
            lambda: self.renew(lease, intent),
        ]
        if cross:
            steps.append(lambda: self.write_to(self.rng.choice([r for r in self.main if r != run]), lease, intent))
        steps.append(lambda: self.release(lease, intent))
        for step in steps:
            if self.ctx.should_stop():
                return
            step()

    # -- coverage probes (soak.workloads.runs.coverage) -----------------------------------------

    def probe(self, lease: Lease) -> bool:
        """The next coverage probe beside the live `lease`: a forged lease on every surface of its run (another
        owner with its epoch; its owner with an epoch never issued), writes without a lease to the run nobody
        leases, or an acquire of the run it holds. Every fenced call must be refused, every unleased one accepted.
        The tenure is renewed first, so that the forged leases meet a tenure surely live (a store that lets them in
        only then shows it). True when the tenure is lost (the renew refused, or a store granted the held run
        again)."""
        i = (self.turn["probe"] + 1) % len(_PROBES)
        kind = _PROBES[i]
        if kind != "unleased":
            out = self.renew(lease, "live")
            if not out.ok:
                return out.refused(LeaseHeldError)  # the same probe comes next time
            self.publish(lease)
        self.turn["probe"] = i
        if kind == "renewed":
            return self.renewed_probe(lease)
        if kind == "impostor":
            self.present(Lease(lease.run_id, f"{self.owner}~impostor", lease.epoch), "impostor")
        elif kind == "future":
            ahead = self.rng.choice((1, 2, 1_000_000))
            self.present(Lease(lease.run_id, lease.owner, lease.epoch + ahead), "future")
        elif kind == "unleased":
            for k in _MUTATION_KINDS:
                if self.ctx.should_stop():
                    break
                self.mutate(k, UNLEASED_RUN, None, "unleased")
            # an unleased delete of a blob nobody ever wrote, on the run this worker holds: a no-op, never fenced
            if not self.ctx.should_stop():
                self.blob_delete(f"{lease.run_id}/{NEVER_WRITTEN_BLOB}", None, "unleased_held")
        else:
            out = self.acquire(lease.run_id, "reentrant")
            if out.ok:  # a second tenure granted to a live holder: give it back; the first one is superseded
                self.release(out.result, "reentrant")
                return True
        return False

    def renewed_probe(self, lease: Lease) -> bool:
        """The live tenure renewed (just now, by `probe`) and again half a ttl later, then written once the first
        renew's ttl has passed (within the second's): a store that judges a write's expiry by an earlier grant or
        renew than the latest refuses a live holder (`live-accepted`). It writes the surfaces this worker has not yet
        had answered `ok` under the probe first (every surface again once all have been), going on past an answer a
        fault left unknown, and renews last. True when the tenure is lost."""
        ttl_s = self.sc.lease_ttl_ms / 1000.0
        first = time.monotonic()  # the first renew returned before this
        self.sleep(ttl_s / 2)
        out = self.renew(lease, "live")
        if not out.ok:
            return out.refused(LeaseHeldError)
        self.publish(lease)
        self.sleep(max(0.0, first + ttl_s * 1.05 - time.monotonic()))
        if not self.renewed_left:
            self.renewed_left = list(_RENEWED_KINDS)
        for kind in list(self.renewed_left):
            if self.ctx.should_stop():
                return False
            out = self.mutate(kind, lease.run_id, lease, "renewed") if kind != "renew" else self.renew(lease, "renewed")
            if out is not None and out.ok:
                self.renewed_left.remove(kind)
                if kind == "renew":
                    self.publish(lease)
            elif out is not None and out.refused(LeaseHeldError):
                return True
        return False

    def after_grant(self, lease: Lease) -> None:
        """Now and then, the worker's latest ended tenure of this run on every surface: superseded by `lease`."""
        prev = self.past.get(lease.run_id)
        if prev is None or prev[0].epoch >= lease.epoch or self.rng.random() >= self.opt.past_probe_prob:
            return
        self.present(prev[0], "released_superseded" if prev[1] else "superseded")

    def after_release(self, lease: Lease) -> None:
        """Now and then after a release: the released lease on every surface, the run acquired again at once (a
        released run is free), the released lease again (now superseded), and the new tenure released."""
        if self.ctx.should_stop() or self.rng.random() >= self.opt.released_probe_prob:
            return
        self.present(lease, "released")
        if self.ctx.should_stop():
            return
        out = self.acquire(lease.run_id, "reacquire")
        if not out.ok:
            return  # another worker took the run over first
        self.publish(out.result)
        self.present(lease, "released_superseded")
        if self.release(out.result, "reacquire").ok and self.ctx.expiry(lease.run_id) == self.expires:
            self.ctx.note_expiry(lease.run_id, 0)  # free at once, as after a live release
