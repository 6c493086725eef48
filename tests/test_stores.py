"""The reference stores: both pass every conformance clause; SQLite specifics across objects."""

from __future__ import annotations

import sqlite3
import time

import pytest

from soak.clauses import CLAUSES
from soak.conformance import run_conformance
from soak.spi import JournalEntry, LeaseHeldError, RunMeta, StoreBusyError
from soak.stores.sqlite import open_sqlite


@pytest.mark.parametrize("spec", ["memory:", "sqlite:"])
def test_reference_store_passes_every_clause(spec):
    t0 = time.monotonic()
    report = run_conformance(spec)
    elapsed = time.monotonic() - t0
    assert report.passed, "\n".join(f"{r.clause} {r.check}: {r.detail}" for r in report.failed)
    assert {r.clause for r in report.results} == set(CLAUSES)
    assert report.timing == "injected clock"
    print(f"conformance {spec}: {len(report.results)} checks in {elapsed:.1f} s")


def test_sqlite_epoch_high_water_survives_reopen(tmp_path):
    a = open_sqlite(str(tmp_path), lease_ttl_ms=200)
    lease = a.acquire("r", "a")
    a.delete("r", lease)
    a.release(lease)
    a.close()
    a.close()  # idempotent
    b = open_sqlite(str(tmp_path), lease_ttl_ms=200)
    try:
        assert b.acquire("r", "b").epoch == lease.epoch + 1
    finally:
        b.close()


def test_sqlite_objects_over_one_file_share_one_fencing_domain(tmp_path):
    a = open_sqlite(str(tmp_path), lease_ttl_ms=10_000)
    b = open_sqlite(str(tmp_path), lease_ttl_ms=10_000)
    try:
        lease = a.acquire("r", "a")
        with pytest.raises(LeaseHeldError) as info:
            b.acquire("r", "b")
        assert info.value.holder == lease
        a.append("r", JournalEntry(1, b"x"), lease)
        assert b.load("r") == [JournalEntry(1, b"x")]
        b.transcripts.put("r/t", b"blob", lease)  # the lease is valid through any object
        assert a.transcripts.get("r/t") == b"blob"
    finally:
        a.close()
        b.close()


def test_sqlite_busy_becomes_store_busy_error_and_writes_nothing(tmp_path):
    store = open_sqlite(str(tmp_path), lease_ttl_ms=200, busy_timeout_ms=50)
    blocker = sqlite3.connect(str(tmp_path / "store.db"), isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreBusyError):
            store.append("r", JournalEntry(1, b"x"))
        with pytest.raises(StoreBusyError):
            store.put_meta(RunMeta("r", "running", 1))
        blocker.execute("ROLLBACK")
        assert store.load("r") == [] and store.get_meta("r") is None
        store.append("r", JournalEntry(1, b"x"))  # and works once the lock is gone
        assert store.load("r") == [JournalEntry(1, b"x")]
    finally:
        blocker.close()
        store.close()


def test_memory_objects_over_one_location_share_it(tmp_path):
    """One fencing domain per location within one process (threads each open their own object), nothing on disk,
    and another location is another domain."""
    from soak.stores.memory import open_memory

    a = open_memory(str(tmp_path), lease_ttl_ms=200)
    b = open_memory(str(tmp_path), lease_ttl_ms=200)
    other = open_memory(str(tmp_path / "elsewhere"), lease_ttl_ms=200)
    a.put_meta(RunMeta("r", "running", 0))
    assert b.get_meta("r") == RunMeta("r", "running", 0)
    assert other.get_meta("r") is None
    for s in (a, b, other):
        s.close()
    assert open_memory(str(tmp_path), lease_ttl_ms=200).get_meta("r") is None  # freed with the last object
    assert list(tmp_path.iterdir()) == []
