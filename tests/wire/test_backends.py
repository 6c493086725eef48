"""The wire protocol over the networked reference stores: the Python server serves `postgresql://` and `redis://`
as it serves `sqlite:`, their typed refusals cross the pipe, conformance passes, and the exec: target removes the
served store's namespace."""

from __future__ import annotations

import shlex
import sys

import pytest

from soak.conformance import run_conformance
from soak.spi import JournalEntry, LeaseHeldError, RunMeta
from soak.stores import resolve
from tests.stores.net import PG, REDIS, location, one_at_a_time

SERVER = f"exec:{shlex.quote(sys.executable)} -m soak.stores.wire_server"
BACKENDS = [pytest.param(PG, marks=pytest.mark.postgres, id="postgres"),
            pytest.param(REDIS, marks=pytest.mark.redis, id="redis")]


@pytest.mark.parametrize("spec", BACKENDS)
def test_a_networked_store_round_trips_over_the_wire(spec):
    target = resolve(f"{SERVER} {spec}")
    assert target.remove is not None  # the served store's namespace is the exec: target's to remove
    with location(target) as loc:
        store = target.open(loc, 5000)
        try:
            lease = store.acquire("r", "a")
            store.append("r", JournalEntry(1, b"\x00\xff"), lease)
            store.put_meta(RunMeta("r", "running", 1, b"m"), lease)
            store.transcripts.put("r/t", b"\x01", lease)
            with pytest.raises(LeaseHeldError) as held:
                store.acquire("r", "b")
            assert held.value.holder == lease
            assert store.load("r") == [JournalEntry(1, b"\x00\xff")] and store.transcripts.get("r/t") == b"\x01"
        finally:
            store.close()
        again = resolve(spec).open(loc, 5000)  # the same namespace, opened directly
        try:
            assert again.get_meta("r") == RunMeta("r", "running", 1, b"m")
        finally:
            again.close()


@pytest.mark.parametrize("spec", BACKENDS)
def test_conformance_passes_over_the_wire(spec):
    with one_at_a_time("postgres-conformance"):
        report = run_conformance(f"{SERVER} {spec}", clauses=["stale-rejected", "stale-lease-ops", "typed-refusal"])
    assert report.verdict == "pass", [(r.check, r.status, r.detail) for r in report.results if r.status != "pass"]
