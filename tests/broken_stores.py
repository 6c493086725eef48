"""Small deliberately broken stores: each is the reference SQLite store with one defect.

The conformance tests name them by spec (`tests.broken_stores:open_unfenced_append`, ...) and
assert that the suite fails the one clause each breaks, by id. Nothing here is fit for data.
"""

from __future__ import annotations

import os
import time

from soak.spi import JournalEntry, Lease, LeaseHeldError
from soak.stores import mutants
from soak.stores.sqlite import SqliteStore


# Where the mutant catalogue already has the defect, the tests use the catalogue's store.
UnfencedAppend = mutants.UnfencedAppend
UnfencedMeta = mutants.UnfencedMeta
UnfencedBlobPut = mutants.UnfencedBlobPut
RunMatchIgnored = mutants.NoRunMatch
AcquireWhileLive = mutants.AcquireWhileLive


#: Checks the fence in one BEGIN IMMEDIATE transaction, mutates in the next, unpinned (atomic-fence).
TwoTransactionFence = mutants.SplitFence


#: Checks the fence with a plain read (no write lock), then mutates (atomic-fence).
ReadThenWrite = mutants.CheckThenWrite


class EpochResetOnRelease(SqliteStore):
    """release deletes the lease row, so the next acquire starts again at epoch 1 (epoch-monotonic)."""

    def release(self, lease: Lease) -> None:
        super().release(lease)
        with self._tx() as conn:
            conn.execute("DELETE FROM leases WHERE run_id = ?", (lease.run_id,))




class UntypedRefusal(SqliteStore):
    """The fence refuses with PermissionError instead of LeaseHeldError (typed-refusal)."""

    def _check(self, conn, run_id, lease, now, *, allow_expired: bool = False):
        try:
            super()._check(conn, run_id, lease, now, allow_expired=allow_expired)
        except LeaseHeldError as exc:
            raise PermissionError(f"not your lease: {exc}") from None

    def acquire(self, run_id: str, owner: str) -> Lease:
        try:
            return super().acquire(run_id, owner)
        except LeaseHeldError as exc:
            raise PermissionError(f"run is busy: {exc}") from None




class DroppedPayloadBytes(SqliteStore):
    """Journal payloads lose trailing NUL bytes, C-string style (journal-a4)."""

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        super().append(run_id, JournalEntry(entry.seq, bytes(entry.payload).rstrip(b"\x00")), lease)


def _factory(cls: type[SqliteStore], name: str):
    def open_store(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
        return cls(os.path.join(location, "store.db"), lease_ttl_ms, clock=clock or time.time)

    open_store.__name__ = open_store.__qualname__ = name  # pickles by reference into spawned workers
    open_store.__doc__ = cls.__doc__
    return open_store


open_unfenced_append = _factory(UnfencedAppend, "open_unfenced_append")
open_unfenced_meta = _factory(UnfencedMeta, "open_unfenced_meta")
open_unfenced_blob_put = _factory(UnfencedBlobPut, "open_unfenced_blob_put")
open_two_transaction_fence = _factory(TwoTransactionFence, "open_two_transaction_fence")
open_read_then_write = _factory(ReadThenWrite, "open_read_then_write")
open_epoch_reset_on_release = _factory(EpochResetOnRelease, "open_epoch_reset_on_release")
open_run_match_ignored = _factory(RunMatchIgnored, "open_run_match_ignored")
open_untyped_refusal = _factory(UntypedRefusal, "open_untyped_refusal")
open_acquire_while_live = _factory(AcquireWhileLive, "open_acquire_while_live")
open_dropped_payload_bytes = _factory(DroppedPayloadBytes, "open_dropped_payload_bytes")


#: spec suffix -> the clause id it must fail
BROKEN: dict[str, str] = {
    "open_unfenced_append": "stale-rejected",
    "open_unfenced_meta": "stale-rejected",
    "open_unfenced_blob_put": "stale-rejected",
    "open_two_transaction_fence": "atomic-fence",
    "open_read_then_write": "atomic-fence",
    "open_epoch_reset_on_release": "epoch-monotonic",
    "open_run_match_ignored": "run-match",
    "open_untyped_refusal": "typed-refusal",
    "open_acquire_while_live": "lease-exclusive",
    "open_dropped_payload_bytes": "journal-a4",
}


# -- stores that fail or hang at boot (for the boot storm) ----------------------------------

def open_refusing(location: str, *, lease_ttl_ms: int) -> SqliteStore:
    """A networked store whose server is down: every boot fails."""
    raise ConnectionRefusedError("no server here")


def open_hanging_in_worker_1(location: str, *, lease_ttl_ms: int) -> SqliteStore:
    """Hangs in the boot process named `soak-boot-1`; the others boot the reference store."""
    import multiprocess

    if multiprocess.current_process().name.endswith("-1"):
        time.sleep(3600)
    return SqliteStore(os.path.join(location, "store.db"), lease_ttl_ms)


class CrashingLoad(SqliteStore):
    """load raises an untyped error: checks that read the journal must error, never pass."""

    def load(self, run_id: str) -> list[JournalEntry]:
        raise RuntimeError("disk on fire")


open_crashing_load = _factory(CrashingLoad, "open_crashing_load")
