"""The fenced run store contract (CONTRACT section 1): types, errors and protocols.

Every name here is pinned: store vendors import them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "BlobStore",
    "FencedRunStore",
    "JournalEntry",
    "JournalOrderError",
    "Lease",
    "LeaseHeldError",
    "RUN_STATUSES",
    "RunMeta",
    "StoreBusyError",
    "StoreError",
    "StoreFactory",
    "ref_run",
]

#: The statuses a `RunMeta` may carry.
RUN_STATUSES: tuple[str, ...] = ("running", "suspended", "completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class Lease:
    """One tenure of one run: the owner and the fencing epoch it was granted."""

    run_id: str
    owner: str
    epoch: int


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journal entry; `payload` is opaque and stored byte for byte."""

    seq: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class RunMeta:
    """The one metadata row of a run (last write wins)."""

    run_id: str
    status: str
    segments: int
    payload: bytes = b""


class StoreError(Exception):
    """Root of everything a store raises on purpose."""


class LeaseHeldError(StoreError):
    """A lease operation or fenced mutation refused by the fence."""

    def __init__(self, run_id: str, holder: Lease | None = None, message: str | None = None):
        self.run_id = run_id
        self.holder = holder
        super().__init__(message or f"lease refused for run {run_id!r} (holder: {holder})")


class JournalOrderError(StoreError):
    """An append whose seq is not above the stored tail."""


class StoreBusyError(StoreError):
    """Transient contention: nothing was written; the caller may retry."""


def ref_run(ref: str) -> str:
    """The run a blob ref belongs to: its leading path segment."""
    run_id, sep, name = ref.partition("/")
    if not sep or not run_id or not name:
        raise ValueError(f"blob ref {ref!r} is not of the form '<run_id>/<name>'")
    return run_id


@runtime_checkable
class BlobStore(Protocol):
    """The transcript blob store of one fencing domain (`store.transcripts`)."""

    fenced_writes: bool

    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None: ...

    def get(self, ref: str) -> bytes | None: ...

    def list(self, run_id: str) -> list[str]: ...

    def delete(self, ref: str, lease: Lease | None = None) -> None: ...


@runtime_checkable
class FencedRunStore(Protocol):
    """One fencing domain: journal, meta, leases and blobs of one location."""

    lease_ttl_ms: int
    fenced_writes: bool
    transcripts: BlobStore

    def acquire(self, run_id: str, owner: str) -> Lease: ...

    def renew(self, lease: Lease) -> Lease: ...

    def release(self, lease: Lease) -> None: ...

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None: ...

    def load(self, run_id: str) -> list[JournalEntry]: ...

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None: ...

    def get_meta(self, run_id: str) -> RunMeta | None: ...

    def list_runs(self) -> list[RunMeta]: ...

    def delete(self, run_id: str, lease: Lease | None = None) -> None: ...

    def close(self) -> None: ...


class StoreFactory(Protocol):
    """What a vendor names as `package.module:callable`."""

    def __call__(self, location: str, *, lease_ttl_ms: int, **options: str) -> FencedRunStore: ...
