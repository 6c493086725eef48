"""The `redis://` reference store against the real server: conformance, its key prefix, its error
mapping, and its mutants (conformance catches each one that needs no fault)."""

from __future__ import annotations

import pytest
import redis

from soak.conformance import run_conformance
from soak.errors import StoreSpecError
from soak.spi import JournalEntry, LeaseHeldError, RunMeta
from soak.stores import resolve
from soak.stores.net_mutants import NET_MUTANTS
from soak.stores.redis import REGISTRY, namespace
from tests.stores.net import REDIS, location

pytestmark = pytest.mark.redis


def _keys(prefix: str) -> int:
    with redis.Redis.from_url(REDIS) as r:
        return sum(1 for _ in r.scan_iter(match=prefix + "*"))


def test_conformance_passes():
    report = run_conformance(REDIS)
    assert report.passed, [(r.clause, r.check, r.detail) for r in report.failed]


@pytest.mark.parametrize("name", sorted(n for n, m in NET_MUTANTS.items() if m.backend == "redis" and not m.waits_for))
def test_conformance_catches_each_mutant_that_needs_no_fault(name):
    clause = NET_MUTANTS[name].clause
    report = run_conformance(f"mutant:{name}", clauses=[clause])
    assert clause in report.failed_clauses(), report.to_dict()


def test_each_location_has_its_own_prefix_removed_by_cleanup_of_it_or_a_parent(tmp_path):
    target = resolve(REDIS)
    first, second = tmp_path / "a", tmp_path / "b" / "nested"
    first.mkdir()
    second.mkdir(parents=True)
    a, b = target.open(str(first), 500), target.open(str(second), 500)
    try:
        a.put_meta(RunMeta("r", "running", 1))
        b.append("r", JournalEntry(1, b"x"))
        assert b.get_meta("r") is None and a.load("r") == []  # no data shared between locations
    finally:
        a.close()
        b.close()
    target.cleanup(str(tmp_path / "b"))
    assert _keys(namespace(str(second))) == 0 and _keys(namespace(str(first))) == 1
    target.cleanup(str(tmp_path))
    assert _keys(namespace(str(first))) == 0
    with redis.Redis.from_url(REDIS) as r:
        assert not r.hexists(REGISTRY, namespace(str(first)))


def test_a_lost_connection_is_indeterminate_then_the_store_reconnects():
    target = resolve(REDIS)
    with location(target) as loc:
        store = target.open(loc, 5000)
        lease = store.acquire("r", "a")
        with redis.Redis.from_url(REDIS) as admin:
            mine = [c["id"] for c in admin.client_list() if c["id"] != str(admin.client_id())]
            assert mine
            for cid in mine:
                admin.client_kill_filter(_id=cid)
        with pytest.raises(redis.ConnectionError):  # untyped: it may or may not have applied
            store.append("r", JournalEntry(1, b"x"), lease)
        store.append("r", JournalEntry(1, b"x"), lease)
        assert [e.seq for e in store.load("r")] == [1]
        store.close()


def test_the_epoch_high_water_survives_release_and_delete():
    target = resolve(REDIS)
    with location(target) as loc:
        store = target.open(loc, 5000)
        a = store.acquire("r", "a")
        store.delete("r", a)
        store.release(a)
        b = store.acquire("r", "b")
        with pytest.raises(LeaseHeldError) as err:
            store.append("r", JournalEntry(1, b"x"), a)
        assert b.epoch == 2 and err.value.holder == b
        store.close()


def test_spec_errors_are_one_line_naming_the_fix():
    with pytest.raises(StoreSpecError, match="options are socket_timeout_s"):
        resolve(REDIS + "?pool=3")
    with pytest.raises(StoreSpecError, match="redis://HOST:PORT/DB"):
        resolve("redis://127.0.0.1:6379/zero")


def test_a_smoke_storm_passes_and_removes_its_keys(tmp_path):
    from soak.check import check_run
    from soak.scenario import load_scenario
    from soak.storm.orchestrator import run_storm

    info = run_storm(load_scenario("smoke"), REDIS, tmp_path / "run", progress=False)
    assert info.status == "quorum", info.error
    assert check_run(tmp_path / "run").result == "pass"
    assert _keys(namespace(str(tmp_path / "run" / "store"))) == 0
