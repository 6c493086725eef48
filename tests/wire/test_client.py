"""The wire client against the Python wire server and against children that misbehave: every call round-trips, the
contract's errors arrive typed, everything else is an untyped `WireStoreError`, and boot failures are one line."""

from __future__ import annotations

import shlex
import sys
import time

import pytest

from soak.errors import StoreBootError, StoreSpecError
from soak.spi import JournalEntry, JournalOrderError, Lease, LeaseHeldError, RunMeta, StoreError
from soak.stores import resolve
from soak.stores.wire import WireStoreError

PY = shlex.quote(sys.executable)
SERVER = f"exec:{PY} -m soak.stores.wire_server"


def _open(tmp_path, spec: str, ttl: int = 500):
    loc = tmp_path / "loc"
    loc.mkdir(exist_ok=True)
    return resolve(spec).open(str(loc), ttl)


def test_every_call_round_trips_with_typed_refusals(tmp_path):
    store = _open(tmp_path, f"{SERVER} sqlite:")
    try:
        assert store.lease_ttl_ms == 500 and store.fenced_writes and store.transcripts.fenced_writes
        lease = store.acquire("r", "me")
        assert lease == Lease("r", "me", 1)
        assert store.renew(lease) == lease
        payload = bytes(range(256))
        store.append("r", JournalEntry(1, payload), lease)
        assert store.load("r") == [JournalEntry(1, payload)]
        with pytest.raises(JournalOrderError):
            store.append("r", JournalEntry(1, b"again"), lease)
        with pytest.raises(LeaseHeldError) as held:
            store.acquire("r", "other")
        assert held.value.run_id == "r" and held.value.holder == lease
        store.put_meta(RunMeta("r", "running", 2, b"\x00"), lease)
        assert store.get_meta("r") == RunMeta("r", "running", 2, b"\x00")
        assert store.get_meta("nope") is None and store.list_runs() == [RunMeta("r", "running", 2, b"\x00")]
        store.transcripts.put("r/t", b"\xff\x00", lease)
        assert store.transcripts.get("r/t") == b"\xff\x00" and store.transcripts.list("r") == ["r/t"]
        store.transcripts.delete("r/t", lease)
        assert store.transcripts.get("r/t") is None
        store.release(lease)
        with pytest.raises(LeaseHeldError):
            store.append("r", JournalEntry(2, b"late"), lease)  # stale: refused typed over the wire
        store.delete("r", None)
        assert store.load("r") == [] and store.acquire("r", "me").epoch == 2  # the high-water mark survived
    finally:
        store.close()
    store.close()  # idempotent
    with pytest.raises(WireStoreError, match="after close"):
        store.load("r")


def test_an_untyped_refusal_is_indeterminate_not_a_store_error(tmp_path):
    store = _open(tmp_path, f"{SERVER} mutant:untyped-refusal")
    try:
        lease = store.acquire("r", "a")
        store.release(lease)
        with pytest.raises(WireStoreError, match="RuntimeError") as exc:
            store.append("r", JournalEntry(1, b"x"), lease)
        assert not isinstance(exc.value, StoreError)
        assert store.load("r") == []  # the child lives on: an error answer is not a death
    finally:
        store.close()


def test_the_spec_options_reach_the_served_store(tmp_path):
    store = _open(tmp_path, f"{SERVER} sqlite:?busy_timeout_ms=50")
    try:
        assert store.load("r") == []
    finally:
        store.close()
    with pytest.raises(StoreBootError, match="sqlite: has no option 'nonsense'"):
        _open(tmp_path, f"{SERVER} sqlite:?nonsense=1")


def test_stdout_prints_of_the_store_do_not_break_the_protocol(tmp_path):
    store = _open(tmp_path, f"{SERVER} tests.wire.stores:chatty")
    try:
        assert store.acquire("r", "a").epoch == 1
    finally:
        store.close()


def test_boot_failures_are_one_line_naming_the_cause_and_the_stderr_tail(tmp_path):
    with pytest.raises(StoreBootError) as exc:
        _open(tmp_path, f"{SERVER} tests.wire.stores:boot_fails")
    msg = str(exc.value)
    assert "\n" not in msg and "vendor database refused the connection" in msg and "fix the store" in msg
    with pytest.raises(StoreBootError, match="cannot start '/no/such/server'"):
        _open(tmp_path, "exec:/no/such/server --flag")
    with pytest.raises(StoreBootError, match=r"closed its stdout.*stderr ends: boom"):
        _open(tmp_path, f"exec:{PY} -c 'import sys; print(\"boom\", file=sys.stderr); sys.exit(3)'")
    with pytest.raises(StoreBootError, match="not its response"):
        _open(tmp_path, f"exec:{PY} -c 'print(\"ready!\"); import time; time.sleep(5)'")
    with pytest.raises(StoreSpecError, match="names no command"):
        resolve("exec:")
    with pytest.raises(StoreSpecError, match="quoting"):
        resolve("exec:python 'unclosed")


def test_a_server_of_another_version_is_refused_at_hello(tmp_path):
    script = ("import sys, json; line = sys.stdin.readline(); "
              "print(json.dumps({'id': 0, 'error': {'type': 'ProtocolVersionError', 'message': 'I speak 2'}}), "
              "flush=True)")
    with pytest.raises(StoreBootError, match="ProtocolVersionError: I speak 2.*speak protocol version 1"):
        _open(tmp_path, f"exec:{PY} -c {shlex.quote(script)}")


def test_a_child_that_dies_mid_call_makes_it_unknown_and_the_next_call_restarts_it(tmp_path):
    store = _open(tmp_path, f"{SERVER} tests.wire.stores:dies_after_nth_append?n=2")
    try:
        lease = store.acquire("r", "a")
        store.append("r", JournalEntry(1, b"one"), lease)
        first = store._child.proc
        with pytest.raises(WireStoreError, match="closed its stdout during append") as exc:
            store.append("r", JournalEntry(2, b"two"), lease)
        assert not isinstance(exc.value, StoreError)
        assert "dying after append 2" in str(exc.value)  # the stderr tail is quoted
        assert first.poll() is not None
        # the next call runs in a fresh child over the same location: the unknown append had applied
        assert [e.seq for e in store.load("r")] == [1, 2]
        assert store._child.proc.pid != first.pid
        stderr = (tmp_path / "loc.wire").glob("*.stderr")
        assert any("dying after append 2" in p.read_text() for p in stderr)
    finally:
        store.close()


def test_a_child_that_hangs_fails_the_call_at_the_client_bound(tmp_path, monkeypatch):
    monkeypatch.setenv("SOAK_WIRE_CALL_TIMEOUT_S", "1")
    store = _open(tmp_path, f"{SERVER} tests.wire.stores:hangs_at_nth_append?n=1", ttl=10_000)
    try:
        lease = store.acquire("r", "a")
        hung = store._child.proc
        started = time.monotonic()
        with pytest.raises(WireStoreError, match="did not answer append within 1 s"):
            store.append("r", JournalEntry(1, b"one"), lease)
        assert time.monotonic() - started < 20  # the 1 s bound, not the hang
        assert hung.poll() is not None  # killed
        assert store.renew(lease) == lease  # a fresh child
    finally:
        store.close()


def test_stderr_beside_a_location_outside_a_run_directory_is_dropped_when_empty(tmp_path):
    store = _open(tmp_path, f"{SERVER} sqlite:")
    path = store._child.stderr_path
    assert path.parent == tmp_path / "loc.wire" and path.name.startswith("main-")
    store.close()
    assert not path.exists() and not path.parent.exists()


def test_a_claim_store_round_trips_with_conflicts_typed(tmp_path):
    from soak.claims import CheckoutConflictError, Claimant

    loc = tmp_path / "loc"
    loc.mkdir()
    store = resolve(f"{SERVER} sqlite:", kind="claims").open(str(loc), 5000)
    try:
        me, other = Claimant("n1", "a1", "run-1"), Claimant("n2", "a2")
        claim = store.claim("p", "t", me)
        assert claim.owner == me and claim.lease_epoch == 1 and isinstance(claim.renewed_at, float)
        assert store.heartbeat("p", "t", me, 1).lease_epoch == 1
        with pytest.raises(CheckoutConflictError) as conflict:
            store.claim("p", "t", other)
        assert conflict.value.current_holder is not None and conflict.value.current_holder.owner == me
        store.record_progress("p", "t", me, 1, 4)
        row = store.task("p", "t")
        assert row.step == 4 and row.mirrors(store.get("p", "t")) and store.tasks("p") == [row]
        assert store.claims("p") == [store.get("p", "t")] and store.audit("p") == [] and store.reconcile("p") == []
        with pytest.raises(CheckoutConflictError):
            store.recover("p", "t", 1, other, "node offline")  # still within its lease
        store.release("p", "t", me, 1)
        assert store.get("p", "t").owner is None and store.claim("p", "t", other).lease_epoch == 2
    finally:
        store.close()


def test_soaks_own_server_runs_in_soaks_interpreter_whatever_python_the_path_names():
    # a PATH without soak's environment names another Python, which died at its first strike for want of soak's
    # dependencies: soak's own server is soak's code and runs in soak's interpreter
    for command in ("python", "python3", "/usr/bin/python3.11"):
        target = resolve(f"exec:{command} -m soak.stores.wire_server sqlite:")
        assert target.factory.argv == [sys.executable, "-m", "soak.stores.wire_server", "sqlite:"]
    assert resolve("exec:python -m vendor.server").factory.argv[0] == "python"  # a vendor's command is its own
    assert resolve("exec:pythonic -m soak.stores.wire_server sqlite:").factory.argv[0] == "pythonic"


def test_a_server_whose_strike_counter_cannot_load_answers_without_striking(monkeypatch, capsys, tmp_path):
    import io
    import json

    from soak.stores import wire_server

    monkeypatch.setitem(sys.modules, "soak.storm.strike", None)  # as under a Python without soak's dependencies
    requests = [{"id": 0, "op": "hello", "args": {"version": 1, "kind": "runs", "location": str(tmp_path),
                                                  "lease_ttl_ms": 1000, "options": {}}},
                {"id": 1, "op": "acquire", "args": {"run_id": "r", "owner": "me"}, "strike": {"mode": "step", "k": 3}},
                {"id": 2, "op": "load", "args": {"run_id": "r"}, "strike": {"mode": "step", "k": 0}}]
    out = io.BytesIO()
    assert wire_server.serve("memory:", io.BytesIO(b"".join(json.dumps(r).encode() + b"\n" for r in requests)),
                             out) == 0
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert answers[1] == {"id": 1, "ok": {"run_id": "r", "owner": "me", "epoch": 1}}  # answered, no strike field
    assert answers[2] == {"id": 2, "ok": []}
    assert "strikes are ignored" in capsys.readouterr().err
