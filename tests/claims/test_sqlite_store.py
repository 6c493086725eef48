"""The sqlite: claim store: the seed's unit contract test and barrier race, its layout, bootstrap from many
processes, and a split write repaired by the reconciler."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3

import pytest

from soak.claims import RECOVER_EVENT, CheckoutConflictError, Claimant
from soak.claims._sqlite import SQLITE_OPTIONS, SqliteClaimStore, open_sqlite_claims, project_file_name
from soak.clock import FakeClock
from tests.claims import claim_workers

A = Claimant("node-a", "agent-a", "run-a")
B = Claimant("node-b", "agent-b", "run-b")


@pytest.fixture
def store(tmp_path):
    s = open_sqlite_claims(str(tmp_path), lease_ttl_ms=1000, clock=FakeClock())
    yield s
    s.close()


def test_seed_unit_contract(tmp_path):
    """Seed section 2.8: a pre-seeded central row with owner A; B's claim fails naming A."""
    s = open_sqlite_claims(str(tmp_path), lease_ttl_ms=1000)
    s.close()
    with sqlite3.connect(tmp_path / "central.db") as conn:  # pre-seed the row directly, as the seed's test does
        conn.execute("INSERT INTO task_claims VALUES ('p', 't', 'node-a', 'agent-a', 'run-a', 4, 10.0, 10.0, 10.0)")
    s = open_sqlite_claims(str(tmp_path), lease_ttl_ms=1000)
    try:
        with pytest.raises(CheckoutConflictError) as info:
            s.claim("p", "t", B)
        holder = info.value.current_holder
        assert holder is not None and holder.owner == A and holder.lease_epoch == 4
        assert s.get("p", "t") == holder  # nothing mutated
    finally:
        s.close()


def test_layout_and_options(tmp_path, store):
    store.claim("My Project/..", "t1", A)
    assert (tmp_path / "central.db").exists()
    files = [f for f in os.listdir(tmp_path / "projects") if f.endswith(".db")]
    assert files == [project_file_name("My Project/..")] == ["p%4Dy%20%50roject%2F%2E%2E.db"]
    assert set(SQLITE_OPTIONS) >= {"path", "busy_timeout_ms", "synchronous"}
    with sqlite3.connect(tmp_path / "central.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT version FROM schema_migrations").fetchall() == [(1,)]
    other = tmp_path / "elsewhere"
    s = open_sqlite_claims(str(tmp_path / "unused"), lease_ttl_ms=100, path=str(other), busy_timeout_ms="200",
                           synchronous="FULL")
    s.close()
    assert (other / "central.db").exists()


def test_project_file_names_are_injective_and_safe():
    ids = ["p", "P", "a/b", "a%2Fb", "..", ".", "", "ü", "x" * 500, "x" * 501, "p.db", "A-b_c"]
    names = [project_file_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    for n in names:
        assert n.startswith("p") and n.endswith(".db") and len(n) < 255
        assert set(n[:-3]) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-%~ABCDEF")


def test_epochs_renewal_release_and_recovery(store):
    clock = store._clock
    c1 = store.claim("p", "t", A)
    assert c1.lease_epoch == 1 and store.task("p", "t").worktree == "wt/node-a/agent-a/t@1"
    clock.advance(0.5)
    assert store.claim("p", "t", Claimant("node-a", "agent-a", "other-run")).lease_epoch == 1
    store.record_progress("p", "t", A, 1, 3)
    store.release("p", "t", A, 1)
    assert store.get("p", "t").owner is None and store.get("p", "t").lease_epoch == 1
    assert store.claim("p", "t", B).lease_epoch == 2
    with pytest.raises(CheckoutConflictError):
        store.recover("p", "t", 2, A, "too early")
    clock.advance(1.01)
    row = store.recover("p", "t", 2, Claimant("node-r", "policy"), "offline")
    assert (row.status, row.step, row.worktree, row.checked_out_by) == ("todo", 3, None, None)
    assert [(e.kind, e.epoch, e.node_id) for e in store.audit("p")] == [(RECOVER_EVENT, 2, "node-r")]
    assert store.reconcile("p") == []


def _spawn():
    return multiprocessing.get_context("spawn")


def test_barrier_race_8_processes_50_rounds(tmp_path):
    """Seed section 2.8's race, 50 rounds in a row over long-lived processes, a fresh task per round."""
    n, rounds = 8, 50
    mp = _spawn()
    barrier = mp.Barrier(n)
    pipes = [mp.Pipe() for _ in range(n)]
    procs = [mp.Process(target=claim_workers.racer, args=(str(tmp_path), i, barrier, c), daemon=True)
             for i, (_, c) in enumerate(pipes)]
    for p in procs:
        p.start()
    conns = [a for a, _ in pipes]
    s = open_sqlite_claims(str(tmp_path), lease_ttl_ms=5000)
    try:
        assert [c.recv() for c in conns] == ["ready"] * n
        for rnd in range(rounds):
            task = f"t{rnd}"
            initial = 0
            if rnd % 2:  # a released task: the epoch must rise exactly once from its value
                initial = s.claim("race", task, Claimant("seed", "seed")).lease_epoch
                s.release("race", task, Claimant("seed", "seed"), initial)
            for c in conns:
                c.send(("race", task))
            msgs = [c.recv() for c in conns]
            won = [m for m in msgs if m[0] == "won"]
            assert len(won) == 1, (rnd, msgs)
            winner = (f"node-{won[0][1]}", f"agent-{won[0][1]}")
            assert won[0][2] == initial + 1
            final = s.get("race", task)
            assert (final.owner.node_id, final.owner.agent_id) == winner and final.lease_epoch == initial + 1
            assert all(m[2] == (*winner, initial + 1) for m in msgs if m[0] == "lost"), msgs
            assert s.task("race", task).mirrors(final)
    finally:
        s.close()
        for c in conns:
            c.send(None)
        for p in procs:
            p.join(10)


def test_concurrent_bootstrap_16_processes_and_rerun_keeps_data(tmp_path):
    n = 16
    mp = _spawn()
    for rnd in range(2):
        barrier = mp.Barrier(n)
        pipes = [mp.Pipe() for _ in range(n)]
        procs = [mp.Process(target=claim_workers.booter, args=(str(tmp_path), i, barrier, c))
                 for i, (_, c) in enumerate(pipes)]
        for p in procs:
            p.start()
        msgs = [a.recv() for a, _ in pipes]
        for p in procs:
            p.join(30)
        assert [m[0] for m in msgs] == ["ok"] * n, msgs
        if rnd:
            assert all(m[1] >= n for m in msgs)  # the rerun found every claim of the first boot
    s = open_sqlite_claims(str(tmp_path), lease_ttl_ms=5000)
    try:
        assert len(s.claims("boot")) == 2 * n
    finally:
        s.close()


@pytest.mark.parametrize("op", ["claim", "release", "recover"])
def test_split_write_is_repaired_by_reconcile(tmp_path, op):
    """A process killed between the central commit and the task-row commit leaves the row stale; reconcile
    repairs it (and only it), and a later claim by the owner re-mirrors its own row too."""
    clock = FakeClock()
    s = SqliteClaimStore(str(tmp_path), 1000, clock=clock)
    s.claim("p", "other", B)
    if op == "claim":
        args = ("p", "t", A)
    else:
        s.claim("p", "t", A)
        s.record_progress("p", "t", A, 1, 4)
        args = ("p", "t", A, 1) if op == "release" else ("p", "t", 1, B, "offline")
    if op == "recover":
        clock.advance(5)  # the victim judges expiry by real time, far past the fake clock's claim
    proc = _spawn().Process(target=claim_workers.split_writer, args=(str(tmp_path), op, args))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -9
    central, row = s.get("p", "t"), s.task("p", "t")
    assert central is not None and (row is None or not row.mirrors(central))
    assert s.reconcile("p") == ["t"]
    assert s.task("p", "t").mirrors(s.get("p", "t"))
    if op != "claim":
        assert s.task("p", "t").step == 4
        assert s.task("p", "t").worktree is None
    assert s.reconcile("p") == []
    if op == "recover":
        assert [e.kind for e in s.audit("p")] == [RECOVER_EVENT]
    s.close()


def test_claim_re_mirrors_a_stale_row(tmp_path):
    s = SqliteClaimStore(str(tmp_path), 1000)
    proc = _spawn().Process(target=claim_workers.split_writer, args=(str(tmp_path), "claim", ("p", "t", A)))
    proc.start()
    proc.join(30)
    assert s.task("p", "t") is None and s.get("p", "t").owner == A
    s.claim("p", "t", A)  # the owner's renewal repairs its own row before dispatch
    assert s.task("p", "t").mirrors(s.get("p", "t"))
    s.close()


def test_close_is_idempotent_and_closed_store_refuses(store):
    store.close()
    store.close()
    with pytest.raises(ValueError):
        store.get("p", "t")
