"""The pure model of fenced run semantics, shared by the checker, the models and `memory:`.

Every operation takes the current time (`now`, seconds on the store's clock) as an argument:
the oracle reads no clock and does no I/O.

Where the contract leaves a choice to the store, the oracle takes the reference stores' reading,
and says where a caller may meet the other one:
- `expired-unsuperseded`: a mutation or renew under an expired tenure nobody superseded is
  refused, a release of it is accepted (it ends only its own tenure). `classify` returns
  `EXPIRED` there, so a model comparing a vendor's store against the oracle accepts either outcome.
- a fenced `delete` under the live tenure keeps that tenure live (`delete_ends_tenure=False`);
  `True` models a store that ends it with the run. Either way the epoch high-water mark
  survives. `None` is the reading of a model that follows a store it has not yet seen choose:
  the tenure is then `UNDECIDED` until `settle_delete_choice` records what the store showed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from soak.spi import (
    RUN_STATUSES,
    JournalEntry,
    JournalOrderError,
    Lease,
    LeaseHeldError,
    RunMeta,
    ref_run,
)

__all__ = ["LeaseStanding", "Oracle", "State", "Tenure"]


class LeaseStanding(Enum):
    """Where a presented lease stands against the run it is used on, at one instant."""

    LIVE = "live"  # current, unreleased, unexpired: must be accepted (live-accepted)
    EXPIRED = "expired"  # current, unreleased, expired, no successor: MAY be accepted
    STALE = "stale"  # a later epoch was issued or it was released: must be refused
    FOREIGN = "foreign"  # lease for another run: must be refused (run-match)
    # a fenced delete under this live tenure was accepted and the store has not shown whether that
    # ended it: live (or expired) if the store keeps tenures on delete, stale if it ends them
    UNDECIDED = "undecided"


@dataclass(slots=True)
class Tenure:
    """The newest tenure of a run; it survives release and delete as the epoch high-water."""

    owner: str
    epoch: int
    expires_at: float
    released: bool = False
    #: a fenced delete was accepted under this tenure while it was live (its standing after that is
    #: the store's delete choice)
    deleted_live: bool = False

    def lease(self, run_id: str) -> Lease:
        return Lease(run_id, self.owner, self.epoch)


@dataclass(slots=True)
class State:
    """Everything observable in one fencing domain."""

    journals: dict[str, list[JournalEntry]] = field(default_factory=dict)
    metas: dict[str, RunMeta] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    tenures: dict[str, Tenure] = field(default_factory=dict)


class Oracle:
    """A single-threaded, clock-free reading of CONTRACT section 1."""

    def __init__(self, lease_ttl_ms: int, *, delete_ends_tenure: bool | None = False) -> None:
        if lease_ttl_ms <= 0:
            raise ValueError(f"lease_ttl_ms must be positive, got {lease_ttl_ms}")
        self.lease_ttl_ms = lease_ttl_ms
        #: the delete choice: False keeps the deleting holder's tenure (the reference stores), True
        #: ends it, None is not known yet (see the module docstring)
        self.delete_ends_tenure = delete_ends_tenure
        self.state = State()

    @property
    def ttl(self) -> float:
        return self.lease_ttl_ms / 1000.0

    # -- leases -----------------------------------------------------------------------------

    def _ended(self, t: Tenure, delete_ends: bool | None) -> bool:
        """Whether `t` has ended; an undecided tenure is read by `delete_ends` (None: as kept)."""
        if t.released:
            return True
        if t.deleted_live and self.delete_ends_tenure is None:
            return bool(delete_ends)
        return False

    def holder(self, run_id: str, now: float, *, delete_ends: bool | None = None) -> Lease | None:
        """The live lease of a run, if any. An `UNDECIDED` tenure is read as `delete_ends` says
        (None: as kept, the reading under which fewer acquires may be granted)."""
        t = self.state.tenures.get(run_id)
        if t is None or self._ended(t, delete_ends) or now >= t.expires_at:
            return None
        return t.lease(run_id)

    def undecided(self, run_id: str) -> bool:
        """True while the run's tenure waits on the store's delete choice (`UNDECIDED`)."""
        t = self.state.tenures.get(run_id)
        return t is not None and not t.released and t.deleted_live and self.delete_ends_tenure is None

    def high_water(self, run_id: str) -> int:
        t = self.state.tenures.get(run_id)
        return t.epoch if t else 0

    def classify(self, lease: Lease, run_id: str, now: float, *, delete_ends: bool | None = None) -> LeaseStanding:
        """Where `lease` stands when used on `run_id` at `now`. A tenure waiting on the store's
        delete choice is `UNDECIDED`, unless `delete_ends` says which reading to take."""
        if lease.run_id != run_id:
            return LeaseStanding.FOREIGN
        t = self.state.tenures.get(run_id)
        if t is None or t.released or (t.owner, t.epoch) != (lease.owner, lease.epoch):
            return LeaseStanding.STALE
        if self.undecided(run_id):
            if delete_ends is None:
                return LeaseStanding.UNDECIDED
            if delete_ends:
                return LeaseStanding.STALE
        if now >= t.expires_at:
            return LeaseStanding.EXPIRED
        return LeaseStanding.LIVE

    def fence(self, run_id: str, lease: Lease | None, now: float) -> None:
        """Raise `LeaseHeldError` unless `lease` is None or live on `run_id` (an undecided tenure
        is not live: the oracle cannot accept for a store whose choice it does not know)."""
        if lease is None:
            return
        if self.classify(lease, run_id, now) is not LeaseStanding.LIVE:
            raise LeaseHeldError(run_id, self.holder(run_id, now))

    def acquire(self, run_id: str, owner: str, now: float) -> Lease:
        live = self.holder(run_id, now)
        if live is not None:
            raise LeaseHeldError(run_id, live)
        t = Tenure(owner, self.high_water(run_id) + 1, now + self.ttl)
        self.state.tenures[run_id] = t
        return t.lease(run_id)

    def renew(self, lease: Lease, now: float) -> Lease:
        self.fence(lease.run_id, lease, now)
        self.state.tenures[lease.run_id].expires_at = now + self.ttl
        return lease

    def release(self, lease: Lease, now: float) -> None:
        standing = self.classify(lease, lease.run_id, now)
        if standing not in (LeaseStanding.LIVE, LeaseStanding.EXPIRED):
            raise LeaseHeldError(lease.run_id, self.holder(lease.run_id, now))
        self.state.tenures[lease.run_id].released = True

    # -- journal and meta -------------------------------------------------------------------

    def tail(self, run_id: str) -> int:
        journal = self.state.journals.get(run_id)
        return journal[-1].seq if journal else 0

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None, now: float) -> None:
        self.fence(run_id, lease, now)
        if entry.seq <= self.tail(run_id):
            raise JournalOrderError(
                f"append seq {entry.seq} to run {run_id!r} is not above the tail {self.tail(run_id)}"
            )
        self.state.journals.setdefault(run_id, []).append(entry)

    def load(self, run_id: str) -> list[JournalEntry]:
        return list(self.state.journals.get(run_id, ()))

    def put_meta(self, meta: RunMeta, lease: Lease | None, now: float) -> None:
        if meta.status not in RUN_STATUSES:
            raise ValueError(f"RunMeta.status {meta.status!r} is not one of {RUN_STATUSES}")
        self.fence(meta.run_id, lease, now)
        self.state.metas[meta.run_id] = meta

    def get_meta(self, run_id: str) -> RunMeta | None:
        return self.state.metas.get(run_id)

    def list_runs(self) -> list[RunMeta]:
        return [self.state.metas[r] for r in sorted(self.state.metas)]

    def delete(self, run_id: str, lease: Lease | None, now: float) -> None:
        self.fence(run_id, lease, now)
        self.state.journals.pop(run_id, None)
        self.state.metas.pop(run_id, None)
        if lease is not None:
            self.deleted_under_live(run_id)

    def deleted_under_live(self, run_id: str) -> None:
        """A fenced delete under the run's live tenure was accepted: apply the delete choice to it
        (end it, keep it, or leave it `UNDECIDED` while the choice is not known)."""
        t = self.state.tenures.get(run_id)
        if t is None or t.released:
            return
        t.deleted_live = True
        if self.delete_ends_tenure:
            t.released = True

    def settle_delete_choice(self, ends: bool) -> None:
        """Record the delete choice the store showed; every undecided tenure takes it."""
        self.delete_ends_tenure = ends
        if ends:
            for t in self.state.tenures.values():
                if t.deleted_live:
                    t.released = True

    def ended_by_delete(self, run_id: str) -> bool:
        """True where the run's newest tenure was ended by a fenced delete (the store ends them)."""
        t = self.state.tenures.get(run_id)
        return t is not None and t.deleted_live and self.delete_ends_tenure is True

    # -- blobs ------------------------------------------------------------------------------

    def blob_put(self, ref: str, blob: bytes, lease: Lease | None, now: float) -> None:
        self.fence(ref_run(ref), lease, now)
        self.state.blobs[ref] = bytes(blob)

    def blob_get(self, ref: str) -> bytes | None:
        return self.state.blobs.get(ref)

    def blob_list(self, run_id: str) -> list[str]:
        prefix = run_id + "/"
        return sorted(r for r in self.state.blobs if r.startswith(prefix))

    def blob_delete(self, ref: str, lease: Lease | None, now: float) -> None:
        self.fence(ref_run(ref), lease, now)
        self.state.blobs.pop(ref, None)
