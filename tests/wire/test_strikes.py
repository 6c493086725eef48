"""Strikes reach a wire store's child: a struck call stops the child inside its handling of the request (step mode:
at boundary k, by the Python server itself; kernel mode: at an instant after the request is written, by the
opener), then the opener stops itself, inside the call; continuing the opener's process group lets both go on
and the call completes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from soak.storm.worker import signal_worker

_STRUCK = textwrap.dedent("""
    import os, sys
    from soak.spi import JournalEntry
    from soak.stores import resolve
    os.makedirs(sys.argv[1], exist_ok=True)
    store = resolve("exec:" + sys.executable + " -m soak.stores.wire_server sqlite:").open(sys.argv[1], 10_000)
    lease = store.acquire("r", "me")
    print(store._child.proc.pid, flush=True)
    for seq in range(1, 51):  # a process descheduled past the instant misses it (the answer is in): strike again
        store.strike_next(sys.argv[2], k=int(sys.argv[3]), delay_ns=1)
        store.append("r", JournalEntry(seq, b"struck"), lease)
        if store.strike_landed:
            break
    print(store.strike_seen, len(store.load("r")) == seq, flush=True)
    store.close()
""")


def _stopped(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.mark.parametrize("mode, k", [("step", 5), ("kernel", 0)])
def test_a_struck_call_stops_the_child_then_the_opener_and_completes_once_continued(tmp_path, mode, k):
    proc = subprocess.Popen([sys.executable, "-c", _STRUCK, str(tmp_path / "loc"), mode, str(k)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(proc.stdout.readline())
        assert _stopped(proc.pid) and _stopped(child)  # the opener stops itself only once the child is stopped
        time.sleep(0.1)
        assert psutil.Process(child).status() == psutil.STATUS_STOPPED  # held: nothing lets the child go alone
        signal_worker(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    seen, complete = out.split()
    assert complete == "True"  # the struck append completed
    if mode == "step":
        assert int(seen) >= k  # the server counted its boundaries and reported them
    else:
        assert seen == "None"
