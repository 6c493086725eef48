"""The JavaScript shim (adapters/js): first driven over the wire protocol by a minimal JSON-lines driver (real `node`
children serving the example stores over one fresh location, as soak's workers would; docs/wire.md, section 7),
then through soak's own client (`exec:`) by conformance, the storm and the model: the correct stores pass, each
broken variant fails naming its clause."""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
import time
from pathlib import Path

import pytest

from soak.check import check_run
from soak.conformance import run_conformance
from soak.model import check_model
from soak.scenario import load_scenario
from soak.stores import resolve
from soak.storm import run_storm
from tests.conftest import JS_ADAPTER

pytestmark = pytest.mark.node

SERVE = JS_ADAPTER / "serve.mjs"
EXAMPLES = JS_ADAPTER / "examples"
TTL_MS = 300


class Refused(Exception):
    """A wire error response: `type` and the rest of its fields."""

    def __init__(self, error: dict) -> None:
        super().__init__(f"{error['type']}: {error['message']}")
        self.type, self.error = error["type"], error


class Child:
    """One `node serve.mjs STORE` child: hello at start, then one request and one response at a time."""

    def __init__(self, store: str, location: Path, *, ttl_ms: int = TTL_MS, options: dict | None = None) -> None:
        self.proc = subprocess.Popen(["node", str(SERVE), str(EXAMPLES / store)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.next_id = 0
        self.hello = self.send("hello", version=1, kind="runs", location=str(location), lease_ttl_ms=ttl_ms,
                               options=options or {})

    def send(self, op: str, **args) -> dict:
        request = {"id": self.next_id, "op": op, "args": args}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"child ended without answering {op}: {self.proc.stderr.read()}"
        response = json.loads(line)
        assert response["id"] == self.next_id
        self.next_id += 1
        if "error" in response:
            raise Refused(response["error"])
        return response["ok"]

    def close(self) -> int:
        self.proc.stdin.close()
        return self.proc.wait(timeout=10)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def entry(seq: int, data: bytes = b"") -> dict:
    return {"seq": seq, "payload": b64(data)}


@pytest.fixture
def children(tmp_path):
    opened: list[Child] = []

    def open_child(store: str, **kw) -> Child:
        opened.append(Child(store, tmp_path, **kw))
        return opened[-1]

    yield open_child
    for c in opened:
        if c.proc.poll() is None:
            c.close()


def test_node_unit_tests_pass():
    done = subprocess.run(["node", "--test", "adapters/js/test/"], cwd=JS_ADAPTER.parent.parent, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout


def test_hello_answers_the_store_and_its_markers(children):
    c = children("sqlite-store.mjs", ttl_ms=1234)
    assert c.hello == {"protocol": 1, "store": "js-sqlite-example", "lease_ttl_ms": 1234, "fenced_writes": True,
                       "blob_fenced_writes": True, "injectable_clock": False}
    assert c.close() == 0


def test_a_bad_option_is_a_one_line_boot_error(children):
    with pytest.raises(Refused) as err:
        children("sqlite-store.mjs", options={"busy_timout_ms": "50"})
    assert err.value.type == "StoreBootError"
    assert "unknown option busy_timout_ms: this store takes file, busy_timeout_ms" in err.value.error["message"]
    assert "\n" not in err.value.error["message"]


def test_two_children_share_one_sqlite_fencing_domain(children):
    a, b = children("sqlite-store.mjs"), children("sqlite-store.mjs")
    la = a.send("acquire", run_id="r", owner="a")
    assert la == {"run_id": "r", "owner": "a", "epoch": 1}
    a.send("append", run_id="r", entry=entry(1, b"\x00\xffone"), lease=la)
    with pytest.raises(Refused) as held:
        b.send("acquire", run_id="r", owner="b")
    assert held.value.type == "LeaseHeldError" and held.value.error["holder"] == la
    time.sleep(TTL_MS * 1.2 / 1000)
    lb = b.send("acquire", run_id="r", owner="b")
    assert lb["epoch"] == 2
    stale = {"ref": "r/x", "blob": b64(b"stale"), "lease": la}
    for op, args in [("append", {"run_id": "r", "entry": entry(5), "lease": la}), ("blob_put", stale),
                     ("put_meta", {"meta": {"run_id": "r", "status": "failed", "segments": 1, "payload": ""}, "lease": la}),
                     ("delete", {"run_id": "r", "lease": la}), ("renew", {"lease": la}), ("release", {"lease": la})]:
        with pytest.raises(Refused) as refused:
            a.send(op, **args)
        assert refused.value.type == "LeaseHeldError", op
    assert b.send("load", run_id="r") == [entry(1, b"\x00\xffone")]
    assert b.send("get_meta", run_id="r") is None and b.send("blob_get", ref="r/x") is None
    b.send("release", lease=lb)
    assert a.send("acquire", run_id="r", owner="a")["epoch"] == 3  # the high-water mark survives the release


def test_many_children_boot_one_fresh_file_at_once(tmp_path):
    procs = [subprocess.Popen(["node", str(SERVE), str(EXAMPLES / "sqlite-store.mjs")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    hello = json.dumps({"id": 0, "op": "hello", "args": {"version": 1, "kind": "runs", "location": str(tmp_path),
                                                         "lease_ttl_ms": TTL_MS, "options": {}}})
    for p in procs:
        p.stdin.write(hello + "\n")
        p.stdin.flush()
    answers = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert [a.get("ok", a).get("protocol") for a in answers] == [1] * 8, answers
    assert all(p.returncode == 0 for p in procs)


def test_epoch_reset_variant_reissues_an_epoch(children):
    a, b = children("sqlite-epoch-reset.mjs"), children("sqlite-epoch-reset.mjs")
    la = a.send("acquire", run_id="r", owner="a")
    a.send("release", lease=la)
    assert b.send("acquire", run_id="r", owner="b")["epoch"] == la["epoch"]  # epoch-monotonic broken


@pytest.mark.parametrize("store, op, args", [
    ("sqlite-unfenced-blob-put.mjs", "blob_put", {"ref": "r/x", "blob": b64(b"stale")}),
    ("memory-unfenced-meta.mjs", "put_meta", {"meta": {"run_id": "r", "status": "failed", "segments": 1, "payload": ""}}),
])
def test_broken_variants_accept_a_stale_write(children, store, op, args):
    c = children(store)
    la = c.send("acquire", run_id="r", owner="a")
    c.send("release", lease=la)
    c.send("acquire", run_id="r", owner="b")
    assert c.send(op, **args, lease=la) is None  # stale-rejected broken: accepted under a superseded lease
    with pytest.raises(Refused):  # while the other surfaces still refuse it
        c.send("append", run_id="r", entry=entry(1), lease=la)


# -- through soak's client ------------------------------------------------------------------------------------------


def spec(store: str, options: str = "") -> str:
    return f"exec:node {SERVE} {EXAMPLES / store}{options}"


# Conformance runs these stores in real time (no clock crosses the pipe): a 500 ms ttl leaves 250 ms of slack where a
# check expects a tenure live at half the ttl, which a loaded 2-core machine can take from 200 ms's 100 ms.
REAL_TIME_TTL_MS = 500


def test_conformance_passes_the_sqlite_store_on_the_fencing_clauses():
    report = run_conformance(spec("sqlite-store.mjs"), lease_ttl_ms=REAL_TIME_TTL_MS,
                             clauses=["stale-rejected", "stale-lease-ops", "run-match", "typed-refusal", "journal-a4"])
    assert report.passed, report.to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite-store.mjs", "memory-store.mjs"])
def test_conformance_passes_every_clause(store):
    report = run_conformance(spec(store), lease_ttl_ms=REAL_TIME_TTL_MS)
    assert report.passed, [c for c in report.to_dict()["results"] if c["status"] not in ("pass", "not-exercised")]


@pytest.mark.parametrize("store, clause", [
    ("memory-unfenced-meta.mjs", "stale-rejected"),
    ("sqlite-unfenced-blob-put.mjs", "stale-rejected"),
    ("sqlite-epoch-reset.mjs", "epoch-monotonic"),
])
def test_conformance_fails_a_broken_variant_naming_its_clause(store, clause):
    report = run_conformance(spec(store), lease_ttl_ms=REAL_TIME_TTL_MS, clauses=[clause])
    failed = {c["clause"] for c in report.to_dict()["results"] if c["status"] == "fail"}
    assert failed == {clause}, report.to_dict()


def test_a_boot_error_names_the_problem_in_one_line(tmp_path):
    from soak.errors import StoreBootError

    with pytest.raises(StoreBootError) as err:
        resolve(spec("sqlite-store.mjs", "?busy_timout_ms=50")).open(str(tmp_path), 200)
    assert "unknown option busy_timout_ms: this store takes file, busy_timeout_ms" in str(err.value)


def test_a_storm_passes_the_sqlite_store(tmp_path):
    sc = load_scenario("smoke", {"time_bound_s": 60.0})
    sc = dataclasses.replace(sc, quorum={k: max(1, v // 5) for k, v in sc.quorum.items()})
    info = run_storm(sc, resolve(spec("sqlite-store.mjs")), tmp_path / "run", progress=False)
    assert info.status == "quorum", info.quorum_reached
    assert check_run(tmp_path / "run").result == "pass"


@pytest.mark.slow
def test_a_storm_catches_the_two_statement_fence(tmp_path):
    """The seed's F3 over the wire: a step-mode strike stops the child between its check and its write. Measured:
    caught by 12 of 13 smoke storms, 6-15 s each (docs/wire.md, section 7), so two storms here, and slow: one miss
    in thirteen is too often for the default run."""
    verdicts = []
    for seed in (11, 12):
        sc = load_scenario("smoke", {"time_bound_s": 90.0, "stop_on_violation": True, "seed": seed})
        run_storm(sc, resolve(spec("sqlite-two-statement.mjs")), tmp_path / str(seed), progress=False)
        verdicts.append(check_run(tmp_path / str(seed)))
    assert any(v.result == "fail" and {"stale-rejected", "live-accepted"} & set(v.clauses) for v in verdicts), verdicts


def test_the_model_passes_the_memory_store():
    outcome = check_model(spec("memory-store.mjs"), max_examples=8)
    assert outcome.passed, outcome


@pytest.mark.slow
@pytest.mark.parametrize("store, clauses", [
    ("memory-unfenced-meta.mjs", {"stale-rejected", "run-match"}),
    ("sqlite-epoch-reset.mjs", {"epoch-monotonic"}),
])
def test_the_model_fails_a_broken_variant_naming_its_clause(store, clauses):
    outcome = check_model(spec(store), max_examples=100)
    assert not outcome.passed and outcome.clause in clauses, outcome


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        stat = fh.read()
    return stat[stat.rindex(")") + 2]


def test_a_step_strike_stops_the_child_inside_the_call_and_reports_the_boundaries(children):
    import os
    import signal

    c = children("sqlite-two-statement.mjs")
    la = c.send("acquire", run_id="r", owner="a")
    request = {"id": c.next_id, "op": "put_meta", "strike": {"mode": "step", "k": 3},
               "args": {"meta": {"run_id": "r", "status": "running", "segments": 1, "payload": ""}, "lease": la}}
    c.proc.stdin.write(json.dumps(request) + "\n")
    c.proc.stdin.flush()
    deadline = time.monotonic() + 10
    while _state(c.proc.pid) != "T":
        assert time.monotonic() < deadline, "the child never stopped itself"
        time.sleep(0.001)
    os.kill(c.proc.pid, signal.SIGCONT)
    response = json.loads(c.proc.stdout.readline())
    assert response["id"] == request["id"] and response["ok"] is None
    assert response["strike"]["seen"] > 3  # every call and return of the store's methods in put_meta
    c.next_id += 1
    assert c.send("get_meta", run_id="r")["segments"] == 1
