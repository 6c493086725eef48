"""The history reader (`soak.history.operations`): pairing, unknown outcomes, truncated and corrupt lines.

The reader decodes a batch of lines with a typed decoder and reads a batch it rejects line by line; the
tests below hold both to the same expected operations, in batches of one line and of many.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import soak.history as history
from soak.history import HistoryCorruptError, HistoryWriter, Operation, Record, operation_tuples, operations
from soak.spi import Lease

#: Batch sizes in bytes: one line a batch, a few lines, the default (the whole small file).
BATCHES = [1, 300, history._BATCH_BYTES]
INCOMPLETE = ("Incomplete", "no completion recorded (process killed or storm ended mid-call)")


@pytest.fixture(params=BATCHES, ids=lambda n: f"batch{n}")
def batch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(history, "_BATCH_BYTES", request.param)
    return request.param


def _jsonl(path: Path, *records: dict[str, Any] | str) -> Path:
    """One line a record; a str is written as it is (a line the writer would not produce)."""
    lines = (r if isinstance(r, str) else json.dumps(r, separators=(",", ":")) for r in records)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _invoke(p: str, i: Any, ts: Any, f: str = "append", lease: Any = None, v: Any = None,
            **extra: Any) -> dict[str, Any]:
    return {"t": "invoke", "p": p, "i": i, "ts": ts, "f": f, "run": "r1", "lease": lease, "intent": "live",
            "v": {} if v is None else v, **extra}


def _done(t: str, p: str, i: Any, ts: Any, v: Any = None, **extra: Any) -> dict[str, Any]:
    return {"t": t, "p": p, "i": i, "ts": ts, "v": {} if v is None else v, **extra}


def _write(path: Path) -> None:
    w = HistoryWriter(path, "w1.1")
    lease = Lease("r1", "w1.1", 3)
    i = w.invoke("acquire", "r1", None, "live", {"owner": "w1.1"})
    w.complete(i, "ok", {"epoch": 3})
    w.event("stall", {"ms": 5})
    i = w.invoke("append", "r1", lease, "live", {"seq": 1, "tag": "w1.1#1", "c": 1})
    w.complete(i, "fail", {"holder": ["r1", "w2.1", 4]}, error="LeaseHeldError", message="held")
    i = w.invoke("put_meta", "r1", lease, "stale", {"tag": "w1.1#2", "c": 2, "status": "running", "segments": 1})
    w.complete(i, "info", error="RuntimeError", message="boom")
    w.invoke("blob_put", "r1", lease, "live", {"ref": "r1/b", "tag": "w1.1#3", "c": 3})  # killed mid-call
    w.close()


def test_reader_pairs_invokes_with_completions_and_keeps_the_unknown(tmp_path: Path):
    path = tmp_path / "w1.1.jsonl"
    _write(path)
    with open(path, "ab") as fh:
        fh.write(b'{"t":"ok","p":"w1.1","i":4,"ts":1')  # truncated completion: stays unknown
    got = list(operations([path]))
    assert [type(x) for x in got] == [Operation, Record, Operation, Operation, Operation]
    acquire, stall, append, meta, blob = got
    assert (acquire.f, acquire.outcome, acquire.result, acquire.lease) == ("acquire", "ok", {"epoch": 3}, None)
    assert (stall.kind, stall.value) == ("stall", {"ms": 5})
    assert (append.outcome, append.error, append.message) == ("fail", "LeaseHeldError", "held")
    assert append.result == {"holder": ["r1", "w2.1", 4]} and append.args["seq"] == 1
    assert (meta.outcome, meta.error, meta.intent) == ("info", "RuntimeError", "stale")
    assert (blob.f, blob.outcome, blob.error, blob.complete_ns) == ("blob_put", "info", "Incomplete", None)
    assert blob.invoke_ns > 0 and append.complete_ns >= append.invoke_ns
    assert append.lease == Lease("r1", "w1.1", 3) and append.lease is meta.lease  # leases are shared
    assert [op.tag for op in (acquire, append, meta, blob)] == ["w1.1#0", "w1.1#1", "w1.1#2", "w1.1#3"]


@pytest.mark.parametrize("line", [b'{"t":"ok","p":\n', b'{"t":"ok","p":"w9.1","i":0,"ts":5,"v":{}}\n',
                                  b'{"t":"bogus","p":"w1.1","ts":5}\n', b'[1]\n',
                                  b'{"t":"event","p":"w1.1","ts":5},{"t":"event","p":"w1.1","ts":6}\n',
                                  b'{"t":"invoke","p":"w1.1","i":"one","ts":5}\n'])
def test_fast_reader_names_file_and_line_of_corrupt_input(tmp_path: Path, line: bytes, batch: int):
    path = tmp_path / "w1.1.jsonl"
    _write(path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(2, line)
    path.write_bytes(b"".join(lines))
    with pytest.raises(HistoryCorruptError, match=r"w1\.1\.jsonl:3"):
        list(operations([path]))


def test_values_the_untyped_reader_accepts_read_as_before_beside_typed_lines(tmp_path: Path, batch: int):
    """Numbers as strings or floats, an epoch as a string, a CR before the newline: read as the old reader did."""
    a = ["r1", "w1.1", 3]
    path = _jsonl(
        tmp_path / "w1.1.jsonl",
        _invoke("w1.1", 0, 10, lease=a, v={"seq": 1}),
        _done("ok", "w1.1", 0, "20"),
        _invoke("w1.1", 1, "30", lease=["r1", "w1.1", "3"], v={"seq": 2}),
        _done("fail", "w1.1", 1, 40, err="LeaseHeldError", msg="held"),
        _invoke("w1.1", "2", 50.0, f="delete", lease=a),
        json.dumps(_done("info", "w1.1", 2.0, 60)) + "\r",  # paired by value, numbered by the invoke
        _invoke("w1.1", 3, 70, lease=a, v={"seq": 3}),
        _done("ok", "w1.1", 3, 80, v={"tail": 3}),
    )
    got = list(operation_tuples(path))
    lease = Lease("r1", "w1.1", 3)
    assert got == [
        ("w1.1", 0, "append", "r1", lease, "live", {"seq": 1}, "ok", {}, None, None, 10, 20),
        ("w1.1", 1, "append", "r1", lease, "live", {"seq": 2}, "fail", {}, "LeaseHeldError", "held", 30, 40),
        ("w1.1", 2, "delete", "r1", lease, "live", {}, "info", {}, None, None, 50, 60),
        ("w1.1", 3, "append", "r1", lease, "live", {"seq": 3}, "ok", {"tail": 3}, None, None, 70, 80),
    ]
    assert all(type(x) is int for op in got for x in (op[1], op[11], op[12]))  # converted, as the old reader did
    assert got[0][4] is got[2][4] is got[3][4]  # one Lease per file, whichever way each batch was read


def test_unknown_keys_are_ignored_and_a_value_need_not_be_an_object(tmp_path: Path, batch: int):
    path = _jsonl(
        tmp_path / "w1.1.jsonl",
        _invoke("w1.1", 0, 10, v=[1, 2], zz=1, kind="stall", err="x"),
        _done("ok", "w1.1", 0, 20, v=None, extra={"a": 1}),
        _invoke("w1.1", 1, 30, v="text"),
        _done("fail", "w1.1", 1, 40, v=0, err=7),  # a falsy value reads as {}; err is passed through
        _invoke("w1.1", 2, 50, v={"seq": 1}, lease=None),
        _done("ok", "w1.1", 2, 60, v=[3]),
        {"t": "event", "p": "w1.1", "ts": 70, "kind": "stall", "v": None, "lease": ["r1", "w1.1", 2], "zz": [1]},
    )
    got = list(operation_tuples(path))
    assert got[:3] == [
        ("w1.1", 0, "append", "r1", None, "live", [1, 2], "ok", {}, None, None, 10, 20),
        ("w1.1", 1, "append", "r1", None, "live", "text", "fail", {}, 7, None, 30, 40),
        ("w1.1", 2, "append", "r1", None, "live", {"seq": 1}, "ok", [3], None, None, 50, 60),
    ]
    assert got[3] == Record("event", "w1.1", 70, lease=Lease("r1", "w1.1", 2), value={}, kind="stall")


def test_events_and_two_processes_interleave_in_one_file(tmp_path: Path, batch: int):
    b = ["r1", "w2.1", 4]
    path = _jsonl(
        tmp_path / "mixed.jsonl",
        _invoke("w1.1", 0, 10, f="acquire", v={"owner": "w1.1"}),
        _invoke("w2.1", 0, 11, lease=b, v={"seq": 1}),
        {"t": "event", "p": "w1.1", "ts": 12, "kind": "stall", "v": {"ms": 5}},
        _done("ok", "w2.1", 0, 13),
        _done("fail", "w1.1", 0, 14, v={"holder": b}, err="LeaseHeldError"),
        _invoke("w2.1", 1, 15, f="put_meta", lease=b, v={"tag": "w2.1#1"}),  # killed mid-call
        _invoke("w1.1", 1, 16, f="acquire", v={"owner": "w1.1"}),
        {"t": "event", "p": "nemesis", "ts": 17, "kind": "kill", "v": {"target": "w2.1"}, "lease": b, "i": 3,
         "err": "E", "msg": "m", "f": "put_meta", "run": "r1", "intent": "stale"},
        _done("info", "w1.1", 1, 18, err="TimeoutError"),
    )
    got = list(operation_tuples(path))
    lease = Lease("r1", "w2.1", 4)
    assert got == [
        Record("event", "w1.1", 12, value={"ms": 5}, kind="stall"),
        ("w2.1", 0, "append", "r1", lease, "live", {"seq": 1}, "ok", {}, None, None, 11, 13),
        ("w1.1", 0, "acquire", "r1", None, "live", {"owner": "w1.1"}, "fail", {"holder": b}, "LeaseHeldError", None,
         10, 14),
        Record("event", "nemesis", 17, 3, "put_meta", "r1", lease, "stale", {"target": "w2.1"}, "E", "m", "kill"),
        ("w1.1", 1, "acquire", "r1", None, "live", {"owner": "w1.1"}, "info", {}, "TimeoutError", None, 16, 18),
        ("w2.1", 1, "put_meta", "r1", lease, "live", {"tag": "w2.1#1"}, "info", {}, *INCOMPLETE, 15, None),
    ]


def test_blank_lines_are_skipped(tmp_path: Path, batch: int):
    path = _jsonl(tmp_path / "w1.1.jsonl", "", _invoke("w1.1", 0, 10), "  ", _done("ok", "w1.1", 0, 20), "")
    assert list(operation_tuples(path)) == [("w1.1", 0, "append", "r1", None, "live", {}, "ok", {}, None, None, 10, 20)]


def test_a_value_nested_past_msgspecs_limit_reads_as_orjson_reads_it(tmp_path: Path, batch: int):
    deep = json.dumps(_invoke("w1.1", 0, 10, v={"deep": "?"})).replace('"?"', "[" * 1000 + "1" + "]" * 1000)
    path = _jsonl(tmp_path / "w1.1.jsonl", deep, _done("ok", "w1.1", 0, 20))  # orjson reads 1024 deep
    (op,) = list(operation_tuples(path))
    assert op[:6] == ("w1.1", 0, "append", "r1", None, "live") and op[7:] == ("ok", {}, None, None, 10, 20)
    depth, v = 0, op[6]["deep"]
    while isinstance(v, list):
        depth, v = depth + 1, v[0]
    assert (depth, v) == (1000, 1)


def test_errors_name_the_line_in_any_batch(tmp_path: Path, batch: int):
    ok = [_invoke("w1.1", 0, 10), _done("ok", "w1.1", 0, 20), "", _invoke("w1.1", 1, 30)]
    for bad, says in [
        (_done("ok", "w1.1", 7, 40), "process w1.1: completion 7 without its invoke"),
        (_done("ok", "w1.1", "1", 40), "process w1.1: completion 1 without its invoke"),  # "1" is not 1 here
        (_invoke("w1.1", 2, 40), "process w1.1: invoke 2 while invoke 1 is pending"),
        (_done("ok", "w1.1", 1, "soon"), "unreadable history record"),
        ({"t": "later", "p": "w1.1", "ts": 40}, "unknown record type 'later'"),
    ]:
        path = _jsonl(tmp_path / "w1.1.jsonl", *ok, bad, _done("ok", "w9.1", 0, 50))
        with pytest.raises(HistoryCorruptError, match=rf"w1\.1\.jsonl:5: {says}"):
            list(operation_tuples(path))


def test_a_bad_lease_is_named_at_the_completion_that_uses_it(tmp_path: Path, batch: int):
    path = _jsonl(tmp_path / "w1.1.jsonl", _invoke("w1.1", 0, 10, lease=["r1", "w1.1", "x"]),
                  _done("ok", "w1.1", 0, 20))
    with pytest.raises(HistoryCorruptError, match=r"w1\.1\.jsonl:2: unreadable history record \(invalid literal"):
        list(operation_tuples(path))
