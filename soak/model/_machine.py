"""`FencedStoreMachine`: the rules that drive a store and the pure model in lockstep, and the state invariant.

Each rule makes one store call (or a few: a tenure used after a fenced delete or past its ttl),
judges the outcome by where the lease stood (`StoreDriver`, `soak.model._driver`), and applies an
accepted write to the model; after every step the invariant compares the store's whole observable
state with the model's and names the clause a difference breaks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, initialize, invariant, rule

from soak.model._driver import CallOutcome, StoreDriver
from soak.oracle import LeaseStanding
from soak.spi import RUN_STATUSES, JournalEntry, JournalOrderError, Lease, LeaseHeldError, RunMeta, StoreError

__all__ = ["BLOB_NAMES", "FencedStoreMachine", "MODEL_NEVER_EXERCISES", "OWNERS", "RUNS"]

RUNS = ("r1", "r2")
OWNERS = ("w1", "w2", "w3")
BLOB_NAMES = ("t1", "t2")

#: Clauses the model never exercises, and why (`ModelOutcome.exercised` never names them).
MODEL_NEVER_EXERCISES: dict[str, str] = {
    "atomic-fence": "the model runs one store object in one process, one call at a time: no takeover can land "
                    "inside a call",
    "concurrent-boot": "the model opens one store object at a time",
    "expired-unsuperseded": "either outcome is conformant, so the model can only report the store's choice",
    "no-crash": "a store that kills its process kills the model with it; conformance and the storm see that",
}

_LEASE = Bundle("leases")
_MAYBE_LEASE = st.none() | _LEASE
_RUN = st.sampled_from(RUNS)
_PAYLOAD = st.binary(max_size=4)

_LIVE, _EXPIRED, _STALE, _FOREIGN, _UNDECIDED = (
    LeaseStanding.LIVE, LeaseStanding.EXPIRED, LeaseStanding.STALE, LeaseStanding.FOREIGN, LeaseStanding.UNDECIDED)


class FencedStoreMachine(StoreDriver):
    """Drives one store and `soak.oracle.Oracle` in lockstep; build one with `machine_for(spec)`.

    `prepare()` (run once per class, before the first program) reads the store's injectable-clock
    declaration, settles the clock and ttl, and checks that locations do not share data."""

    leases = _LEASE

    def __init__(self) -> None:
        super().__init__()
        self._delete_evidence = f"the probe before the programs: {self.delete_probe_evidence}"
        # the tenure on which a program learned the delete choice (where the probe could not tell it)
        self._choice_tenure: tuple[str, int] | None = None
        # What the last step did, the clause it threatens and whether it was a refusal, so the
        # state invariant can name the clause a difference breaks.
        self._last = ("the initial state", "typed-refusal", False)

    # -- the delete choice ----------------------------------------------------------------

    def _tenure_of(self, lease: Lease):
        """The run's newest tenure, when `lease` is it."""
        t = self.oracle.state.tenures.get(lease.run_id)
        return t if t is not None and (t.owner, t.epoch) == (lease.owner, lease.epoch) else None

    def _delete_choice(self, run: str, ends: bool, evidence: str) -> None:
        """The store showed its delete choice on `run`'s tenure; the program holds it to that from now on."""
        t = self.oracle.state.tenures[run]
        self._choice_tenure = (run, t.epoch)
        self.oracle.settle_delete_choice(ends)
        self._delete_evidence = evidence
        self.run_stats.delete_choice[ends] += 1
        self.run_stats.delete_evidence.setdefault(ends, evidence)
        self._exercise("delete-semantics")

    def _both_ways(self, run: str, message: str) -> None:
        """A store that showed one delete choice on another tenure earlier in this program now acts
        on the other choice. (On the tenure that showed it, a contrary outcome breaks the ordinary
        clause: the store itself has shown that tenure live, or ended.)"""
        t = self.oracle.state.tenures[run]
        if self._choice_tenure == (run, t.epoch):
            return
        ends = self.oracle.delete_ends_tenure
        self._fail("delete-semantics", f"{message}; the store has shown that a fenced delete "
                   f"{'ends' if ends else 'keeps'} the deleting holder's tenure ({self._delete_evidence}): "
                   "it answered both ways")

    def _ended_by_its_delete(self, lease: Lease) -> bool:
        """A live lease was refused after a fenced delete under it, by a store that keeps tenures on delete:
        a broken store refusing a live holder (`live-accepted`), or one whose delete ended this tenure after
        all (`delete-semantics`)? A refusal cannot tell them apart, so ask the store: another owner granted
        the run while the tenure was surely still live shows the delete ended it. (The program fails either
        way; the call only names the clause.)"""
        run, other = lease.run_id, next(o for o in OWNERS if o != lease.owner)
        out, _, t1 = self._call(f"acquire({run!r}, {other!r})", lambda: self.store.acquire(run, other))
        return out.ok and self.oracle.holder(run, t1 + self._slack) == lease

    def _kept_by_its_delete(self, run: str) -> bool:
        """The converse, for a store that ends tenures on delete: another owner was refused the run after a
        fenced delete ended its tenure (`ttl-honoured`), or did the delete keep it after all? A renew under
        the deleted tenure accepted while it would still have been live shows that it did."""
        t = self.oracle.state.tenures[run]
        lease = t.lease(run)
        out, _, t1 = self._call(f"renew({lease!r})", lambda: self.store.renew(lease))
        return out.ok and t.expires_at > t1 + self._slack

    def _settle_from_lease_outcome(self, lease: Lease, what: str, out: CallOutcome, t0: float, t1: float) -> None:
        """An operation under a lease whose tenure waits on the delete choice: what it shows."""
        kept = self._standing(lease, lease.run_id, t0, t1, delete_ends=False)
        if out.ok:  # under "ends" the lease would be stale and refused
            self._delete_choice(lease.run_id, False, f"{what} was accepted after a fenced delete under that lease")
        elif isinstance(out.error, LeaseHeldError) and kept is _LIVE:  # under "keeps" it would be accepted
            self._delete_choice(lease.run_id, True,
                                f"{what} was refused within the ttl after a fenced delete under that lease")

    # -- leases ---------------------------------------------------------------------------

    @initialize(target=leases, run=_RUN, owner=st.sampled_from(OWNERS))
    def first_acquire(self, run: str, owner: str):
        """Every program starts holding a lease, so rules drawing one never meet an empty bundle."""
        return self.acquire(run, owner)

    @rule(target=leases, run=_RUN, owner=st.sampled_from(OWNERS))
    def acquire(self, run: str, owner: str):
        what = f"acquire({run!r}, {owner!r})"
        out, t0, t1 = self._call(what, lambda: self.store.acquire(run, owner))
        self._untyped(what, out)
        self._last = (what, "lease-exclusive", False)
        lo, hi = t0 - self._slack, t1 + self._slack
        if self.oracle.undecided(run):
            kept_lo = self.oracle.holder(run, lo, delete_ends=False)
            kept_hi = self.oracle.holder(run, hi, delete_ends=False)
            if out.ok and kept_hi is not None:
                self._delete_choice(run, True, f"{what} was granted at once after a fenced delete under {kept_hi!r}")
            elif isinstance(out.error, LeaseHeldError) and kept_lo is not None:
                self._delete_choice(run, False, f"{what} was refused after a fenced delete under {kept_lo!r}, "
                                                "within its ttl")
        held_lo, held_hi = self.oracle.holder(run, lo), self.oracle.holder(run, hi)
        tenure = self.oracle.state.tenures.get(run)
        self._exercise("lease-exclusive" if held_hi is not None else None,
                       "ttl-honoured" if tenure is not None and not tenure.released else None)
        if out.ok:
            self._exercise("epoch-monotonic")
            if held_hi is not None:  # live at the latest instant the call could have run
                message = (f"{what} was granted while {held_hi} was still within its ttl "
                           "(two live tenures, or the store ended the first before its ttl)")
                if tenure.deleted_live and self.oracle.delete_ends_tenure is False:
                    self._both_ways(run, message)
                self._fail("lease-exclusive", message)
            want = Lease(run, owner, self.oracle.high_water(run) + 1)
            if out.value != want:
                clause = "epoch-monotonic" if getattr(out.value, "epoch", None) != want.epoch else "live-accepted"
                self._fail(clause, f"{what} returned {out.value!r}; expected {want!r}")
            self.oracle.acquire(run, owner, max(t0, t1 + self._slack) if held_lo is not None else t0)
            self.oracle.state.tenures[run].expires_at = t0 + self.oracle.ttl
            return out.value
        self._exercise("typed-refusal")
        if not isinstance(out.error, LeaseHeldError):
            self._fail("typed-refusal", f"{what} {out.describe()}; a refused acquire raises LeaseHeldError")
        if held_lo is None:  # nobody could have held it at any instant of the call
            # The run's last tenure expired or was released (or never existed): it must be free.
            message = f"{what} was refused though no tenure was live ({out.describe()})"
            if self.oracle.ended_by_delete(run) and tenure.expires_at > lo and self._kept_by_its_delete(run):
                self._both_ways(run, message)
            self._fail("ttl-honoured", message)
        # Refused: the bundle still gains one lease (the run's newest tenure), so that what later rules draw
        # never depends on an outcome; in real time a grant near an expiry depends on call latency.
        return tenure.lease(run)

    def _lease_op(self, verb: str, lease: Lease, call: Callable[[], Any],
                  accepted: Callable[[Any, float], None]) -> None:
        """Renew or release: judged by where the lease stands; `accepted` follows an ok outcome."""
        what = f"{verb}({lease!r})"
        out, t0, t1 = self._call(what, call)
        self._untyped(what, out)
        self._last = (what, "stale-lease-ops", False)
        if self.oracle.classify(lease, lease.run_id, t1) is _UNDECIDED:
            self._settle_from_lease_outcome(lease, what, out, t0, t1)
        lo, hi = self._standings(lease, lease.run_id, t0, t1)
        standing = lo if lo is hi and lo is not _UNDECIDED else _EXPIRED  # still undecided: either way
        clearly_expired = lo is hi is _EXPIRED
        self._exercise({_LIVE: "live-accepted", _STALE: "stale-lease-ops"}.get(standing))
        if out.ok:
            if standing is _STALE:
                message = f"{what} was accepted under a superseded or released tenure"
                if self.oracle.ended_by_delete(lease.run_id) and self._tenure_of(lease) is not None:
                    self._both_ways(lease.run_id, message)
                self._fail("stale-lease-ops", message)
            if clearly_expired:
                self._expired_choice(verb, accepted=True)
            accepted(out, t0)
            return
        self._exercise("typed-refusal")
        if not isinstance(out.error, LeaseHeldError):
            self._fail("typed-refusal", f"{what} {out.describe()}; a refused {verb} raises LeaseHeldError")
        if standing is _LIVE:
            message = f"{what} was refused under the live tenure ({out.describe()})"
            tenure = self._tenure_of(lease)
            if tenure is not None and tenure.deleted_live and self._ended_by_its_delete(lease):
                self._both_ways(lease.run_id, message)
            self._fail("live-accepted", message)
        if clearly_expired:
            self._expired_choice(verb, accepted=False)

    def _expired_choice(self, surface: str, *, accepted: bool) -> None:
        counts = self.run_stats.expired.setdefault(surface, [0, 0])
        counts[0 if accepted else 1] += 1

    @rule(lease=leases)
    def renew(self, lease: Lease) -> None:
        def accepted(out: Any, t0: float) -> None:
            if out.value != lease:
                self._fail("live-accepted", f"renew({lease!r}) returned {out.value!r}; a renew keeps owner and epoch")
            self.oracle.state.tenures[lease.run_id].expires_at = t0 + self.oracle.ttl

        self._lease_op("renew", lease, lambda: self.store.renew(lease), accepted)

    @rule(lease=leases)
    def release(self, lease: Lease) -> None:
        def accepted(out: Any, t0: float) -> None:
            self.oracle.state.tenures[lease.run_id].released = True

        self._lease_op("release", lease, lambda: self.store.release(lease), accepted)

    # -- fenced mutations -----------------------------------------------------------------

    def _mutate(
        self,
        what: str,
        run_id: str,
        lease: Lease | None,
        call: Callable[[], Any],
        apply: Callable[[], None],
        accepted_clauses: tuple[str, ...],
        surface: str,
        order_refuses: bool = False,
        fenced: bool = True,
    ) -> LeaseStanding | None:
        """One fenced mutation: judge the store's outcome, then apply it to the model if accepted.

        `accepted_clauses` are the clauses the state invariant judges after an accepted write (the
        first names a difference). `fenced` is the store's `fenced_writes` claim: where it is
        False, a leased mutation may be accepted or refused (no fencing clause applies) and the
        model follows the store. Returns where the lease stood when the store accepted, else None.
        """
        out, t0, t1 = self._call(what, call)
        self._untyped(what, out)
        lo = hi = None
        if lease is not None:
            if fenced and self.oracle.classify(lease, run_id, t1) is _UNDECIDED:
                self._settle_from_lease_outcome(lease, what, out, t0, t1)
            lo, hi = self._standings(lease, run_id, t0, t1)
        standing = None if lease is None else lo if lo is hi and lo is not _UNDECIDED else _EXPIRED
        if not fenced and standing is not None and standing is not _LIVE:
            standing = _EXPIRED  # either outcome is allowed
        clearly_expired = fenced and lo is hi is _EXPIRED
        fence_refuses = standing in (_STALE, _FOREIGN)
        fence_clause = "run-match" if standing is _FOREIGN else "stale-rejected"
        self._exercise("unleased-passthrough" if lease is None else None,
                       {_LIVE: "live-accepted", _STALE: "stale-rejected", _FOREIGN: "run-match"}.get(standing))
        if out.ok:
            self._last = (what, accepted_clauses[0], False)
            if fence_refuses:
                message = f"{what} was accepted under a {standing.value} lease"
                if standing is _STALE and self.oracle.ended_by_delete(run_id) and self._tenure_of(lease) is not None:
                    self._both_ways(run_id, message)
                self._fail(fence_clause, message)
            if order_refuses:
                self._fail("journal-a5", f"{what} was accepted though its seq is not above the tail")
            if clearly_expired:
                self._expired_choice(surface, accepted=True)
            self._exercise(*accepted_clauses, "journal-a3")
            apply()  # under an expired, unsuperseded lease the store may accept: follow it
            return standing
        err = out.error
        self._exercise("typed-refusal")
        self._last = (f"refused {what}", fence_clause if fence_refuses else "typed-refusal", True)
        allowed: list[type[StoreError]] = []
        if fence_refuses or standing is _EXPIRED:
            allowed.append(LeaseHeldError)
        if order_refuses:
            allowed.append(JournalOrderError)
        if isinstance(err, tuple(allowed)):
            if clearly_expired and isinstance(err, LeaseHeldError):
                self._expired_choice(surface, accepted=False)
            return None
        if isinstance(err, LeaseHeldError):
            clause = "unleased-passthrough" if lease is None else "live-accepted"
            message = (f"{what} was refused ({out.describe()}) though the lease stood "
                       f"{'absent' if standing is None else standing.value}")
            tenure = None if lease is None else self._tenure_of(lease)
            if fenced and tenure is not None and tenure.deleted_live and standing is _LIVE \
                    and self._ended_by_its_delete(lease):
                self._both_ways(run_id, message)
            self._fail(clause, message)
        if isinstance(err, JournalOrderError):
            self._fail("journal-a5", f"{what} was refused with JournalOrderError though its seq is above the tail")
        names = " or ".join(e.__name__ for e in allowed) or "acceptance"
        self._fail("typed-refusal", f"{what} {out.describe()}; expected {names}")
        return None

    @rule(run=_RUN, lease=_MAYBE_LEASE, seq_offset=st.sampled_from([1, 2, 0, -1]), payload=_PAYLOAD)
    def append(self, run: str, lease: Lease | None, seq_offset: int, payload: bytes) -> None:
        entry = JournalEntry(max(self.oracle.tail(run) + seq_offset, 0), payload)
        self._exercise("journal-a5")
        self._mutate(
            f"append({run!r}, {entry!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.append(run, entry, lease),
            lambda: self.oracle.append(run, entry, None, self._now()),
            ("journal-a1", "journal-a2", "journal-a4"),
            "append",
            fenced=bool(self.store.fenced_writes),
            order_refuses=entry.seq <= self.oracle.tail(run),
        )

    @rule(
        run=_RUN,
        lease=_MAYBE_LEASE,
        status=st.sampled_from(RUN_STATUSES),
        segments=st.integers(0, 3),
        payload=_PAYLOAD,
    )
    def put_meta(self, run: str, lease: Lease | None, status: str, segments: int, payload: bytes) -> None:
        meta = RunMeta(run, status, segments, payload)
        self._mutate(
            f"put_meta({meta!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.put_meta(meta, lease),
            lambda: self.oracle.put_meta(meta, None, self._now()),
            ("meta-last-write", "journal-a4"),
            "put_meta",
            fenced=bool(self.store.fenced_writes),
        )

    @rule(run=_RUN, lease=_MAYBE_LEASE)
    def delete_run(self, run: str, lease: Lease | None) -> None:
        fenced = bool(self.store.fenced_writes)
        standing = self._mutate(
            f"delete({run!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.delete(run, lease),
            lambda: self.oracle.delete(run, None, self._now()),
            ("delete-semantics",),
            "delete",
            fenced=fenced,
        )
        if fenced and standing is _LIVE:
            # The store's choice: the tenure ends with the run or stays live (undecided until shown).
            self.oracle.deleted_under_live(run)

    @rule(lease=leases)
    def delete_own_run(self, lease: Lease) -> None:
        """A holder deleting its own run: where the store's delete choice shows."""
        self.delete_run(lease.run_id, lease)

    @rule(run=_RUN, name=st.sampled_from(BLOB_NAMES), lease=_MAYBE_LEASE, blob=_PAYLOAD)
    def put_blob(self, run: str, name: str, lease: Lease | None, blob: bytes) -> None:
        ref = f"{run}/{name}"
        self._mutate(
            f"transcripts.put({ref!r}, {blob!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.transcripts.put(ref, blob, lease),
            lambda: self.oracle.blob_put(ref, blob, None, self._now()),
            ("blob-semantics", "journal-a4"),
            "blob put",
            fenced=bool(self.store.transcripts.fenced_writes),
        )

    @rule(run=_RUN, name=st.sampled_from(BLOB_NAMES), lease=_MAYBE_LEASE)
    def delete_blob(self, run: str, name: str, lease: Lease | None) -> None:
        ref = f"{run}/{name}"
        self._mutate(
            f"transcripts.delete({ref!r}, lease={lease!r})",
            run,
            lease,
            lambda: self.store.transcripts.delete(ref, lease),
            lambda: self.oracle.blob_delete(ref, None, self._now()),
            ("blob-semantics",),
            "blob delete",
            fenced=bool(self.store.transcripts.fenced_writes),
        )

    # The two rules below read their lease off the model. They have no preconditions, and each adds the
    # same number of leases to the bundle whatever happens: whether they apply depends on the store's answers
    # (in real time also on call latency), and Hypothesis must see the same draws when it replays a program.

    @rule(target=leases, how=st.sampled_from(["renew", "acquire", "append", "release"]))
    def after_fenced_delete(self, how: str):
        """Use the newest tenure a fenced delete was accepted under (read off the model, never the store):
        the store must treat it as its delete choice says (a no-op where no such tenure exists)."""
        tenures = self.oracle.state.tenures
        run = next((r for r in RUNS if r in tenures and tenures[r].deleted_live), None)
        if run is None:  # first_acquire made a tenure: its lease goes in, as a refused acquire's would
            run = next(iter(tenures))
            return tenures[run].lease(run)
        lease = tenures[run].lease(run)
        if how == "acquire":
            return self.acquire(run, next(o for o in OWNERS if o != lease.owner))
        if how == "append":
            self.append(run, lease, 1, b"d")
        else:
            getattr(self, how)(lease)
        return lease

    @rule(how=st.sampled_from(["put_meta", "renew", "append", "put_blob", "release"]))
    def outlive_the_ttl(self, how: str) -> None:
        """Let the newest unreleased tenure expire, then use its lease (read off the model): where
        a store shows its `expired-unsuperseded` choice (a no-op where every tenure was released)."""
        tenures = self.oracle.state.tenures
        run = next((r for r in RUNS if r in tenures and not tenures[r].released), None)
        if run is None:
            return
        lease = tenures[run].lease(run)
        self.let_time_pass(1.5)
        if how == "put_meta":
            self.put_meta(run, lease, "running", 1, b"e")
        elif how == "append":
            self.append(run, lease, 1, b"e")
        elif how == "put_blob":
            self.put_blob(run, BLOB_NAMES[0], lease, b"e")
        else:
            getattr(self, how)(lease)

    # -- time -----------------------------------------------------------------------------

    @rule(ttls=st.sampled_from([0.5, 1.5, 0.25, 0.9, 3.0]))
    def let_time_pass(self, ttls: float) -> None:
        """Advance the shared fake clock, or sleep (real time), by a multiple of the ttl."""
        if self.clock is not None:
            self.clock.advance(ttls * self.lease_ttl_ms / 1000.0)
            # From here on expiry is judged by the injected clock alone, never by wall time.
            self._exercise("store-clock")
        else:  # real time: past the ttl is past it; longer sleeps only cost wall time
            time.sleep(min(ttls, 1.5) * self.lease_ttl_ms / 1000.0)
        self._last = (f"let_time_pass({ttls})", "store-clock", False)

    # -- the state invariant --------------------------------------------------------------

    @invariant()
    def observable_state_matches_model(self) -> None:
        what, clause, refused = self._last
        store, oracle, read = self.store, self.oracle, self._read

        def differs(kind: str, got: Any, want: Any, bytes_only: bool) -> None:
            # After an accepted write, the same rows with other bytes break A4 (byte for byte).
            named = "journal-a4" if bytes_only and not refused else clause
            self._fail(named, f"after {what}: {kind} = {got!r}, model expects {want!r}")

        for run in RUNS:
            got, want = list(read(f"load({run!r})", lambda: store.load(run))), oracle.load(run)
            if got != want:
                seqs, want_seqs = [e.seq for e in got], [e.seq for e in want]
                if not refused and seqs != want_seqs and sorted(seqs) == sorted(want_seqs):
                    self._fail("journal-a2", f"after {what}: load({run!r}) = {got!r}, out of append order {want!r}")
                differs(f"load({run!r})", got, want, seqs == want_seqs)
            got_meta, want_meta = read(f"get_meta({run!r})", lambda: store.get_meta(run)), oracle.get_meta(run)
            if got_meta != want_meta:
                same_row = got_meta is not None and want_meta is not None and (
                    (got_meta.status, got_meta.segments) == (want_meta.status, want_meta.segments))
                differs(f"get_meta({run!r})", got_meta, want_meta, same_row)
            refs = sorted(read(f"transcripts.list({run!r})", lambda: store.transcripts.list(run)))
            want_refs = oracle.blob_list(run)
            if refs != want_refs:
                differs(f"transcripts.list({run!r})", refs, want_refs, False)
            for name in BLOB_NAMES:
                ref = f"{run}/{name}"
                got_blob, want_blob = read(f"transcripts.get({ref!r})", lambda: store.transcripts.get(ref)), \
                    oracle.blob_get(ref)
                if got_blob != want_blob:
                    differs(f"transcripts.get({ref!r})", got_blob, want_blob, None not in (got_blob, want_blob))
        listed = sorted(read("list_runs()", store.list_runs), key=lambda m: m.run_id)
        if listed != oracle.list_runs():
            differs("list_runs()", listed, oracle.list_runs(), False)

