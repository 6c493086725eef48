"""The history reader (`soak.history.operations`): pairing, unknown outcomes, truncated and corrupt lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from soak.history import HistoryCorruptError, HistoryWriter, Operation, Record, operations
from soak.spi import Lease


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
                                  b'{"t":"bogus","p":"w1.1","ts":5}\n'])
def test_fast_reader_names_file_and_line_of_corrupt_input(tmp_path: Path, line: bytes):
    path = tmp_path / "w1.1.jsonl"
    _write(path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(2, line)
    path.write_bytes(b"".join(lines))
    with pytest.raises(HistoryCorruptError, match=r"w1\.1\.jsonl:3"):
        list(operations([path]))
