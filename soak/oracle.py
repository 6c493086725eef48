"""The pure model of fenced run semantics, shared by the checker, the models and `memory:`.

Every operation takes the current time (`now`, seconds on the store's clock) as an argument:
the oracle reads no clock and does no I/O. Where the contract leaves a choice open
(`expired-unsuperseded`), the oracle takes the strict reading: a mutation or renew under an
expired tenure is refused, a release of it is accepted (it ends only its own tenure).
`classify` tells callers which cases are such choices, so a model comparing a vendor's store
against the oracle can accept either outcome there.
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


@dataclass(slots=True)
class Tenure:
    """The newest tenure of a run; it survives release and delete as the epoch high-water."""

    owner: str
    epoch: int
    expires_at: float
    released: bool = False

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

    def __init__(self, lease_ttl_ms: int) -> None:
        if lease_ttl_ms <= 0:
            raise ValueError(f"lease_ttl_ms must be positive, got {lease_ttl_ms}")
        self.lease_ttl_ms = lease_ttl_ms
        self.state = State()

    @property
    def ttl(self) -> float:
        return self.lease_ttl_ms / 1000.0

    # -- leases -----------------------------------------------------------------------------

    def holder(self, run_id: str, now: float) -> Lease | None:
        """The live lease of a run, if any."""
        t = self.state.tenures.get(run_id)
        if t is None or t.released or now >= t.expires_at:
            return None
        return t.lease(run_id)

    def high_water(self, run_id: str) -> int:
        t = self.state.tenures.get(run_id)
        return t.epoch if t else 0

    def classify(self, lease: Lease, run_id: str, now: float) -> LeaseStanding:
        """Where `lease` stands when used on `run_id` at `now`."""
        if lease.run_id != run_id:
            return LeaseStanding.FOREIGN
        t = self.state.tenures.get(run_id)
        if t is None or t.released or (t.owner, t.epoch) != (lease.owner, lease.epoch):
            return LeaseStanding.STALE
        if now >= t.expires_at:
            return LeaseStanding.EXPIRED
        return LeaseStanding.LIVE

    def fence(self, run_id: str, lease: Lease | None, now: float) -> None:
        """Raise `LeaseHeldError` unless `lease` is None or live on `run_id`."""
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
