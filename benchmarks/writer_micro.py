"""HistoryWriter cost per recorded call (invoke + completion), against the stdlib-json encoder it replaced.

    .venv/bin/python benchmarks/writer_micro.py

`_StdlibWriter` is the writer as it was before the orjson fast path (json.dumps per record), kept
here so that the before/after comparison is one command on one machine.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any

from soak.history import HistoryWriter, payload_for
from soak.spi import Lease

__all__ = ["per_call_us"]


class _StdlibWriter(HistoryWriter):
    def _write(self, obj: dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(obj, separators=(",", ":")) + "\n").encode())


def per_call_us(cls: type[HistoryWriter] = HistoryWriter, n: int = 50_000) -> float:
    """Microseconds for one recorded append (tag, invoke line, payload, ok line) with `cls`."""
    with tempfile.TemporaryDirectory(prefix="soak-writer-") as tmp:
        w = cls(os.path.join(tmp, "w.jsonl"), "w0.1")
        lease = Lease("r0", "w0.1", 7)
        t0 = time.perf_counter()
        for seq in range(n):
            tag = f"w0.1#{w.next_index()}"
            i = w.invoke("append", "r0", lease, "live", {"seq": seq, "tag": tag, "c": seq})
            payload_for(tag)
            w.complete(i, "ok")
        dt = time.perf_counter() - t0
        w.close()
    return dt / n * 1e6


if __name__ == "__main__":
    before = [per_call_us(_StdlibWriter) for _ in range(5)]
    after = [per_call_us(HistoryWriter) for _ in range(5)]
    b, a = statistics.median(before), statistics.median(after)
    print(f"stdlib json (before): {b:.1f} us per recorded call ({min(before):.1f}-{max(before):.1f})")
    print(f"orjson (after):       {a:.1f} us per recorded call ({min(after):.1f}-{max(after):.1f}); {b / a:.1f}x faster")
