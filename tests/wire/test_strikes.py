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


def test_k_0_counts_the_call_in_the_child_without_stopping_it(tmp_path):
    from soak.spi import JournalEntry
    from soak.stores import resolve

    loc = tmp_path / "loc"
    loc.mkdir()
    store = resolve("exec:" + sys.executable + " -m soak.stores.wire_server sqlite:").open(str(loc), 10_000)
    try:
        lease = store.acquire("r", "me")
        store.strike_next("step", 0)
        store.append("r", JournalEntry(1, b"counted"), lease)
        assert not store.strike_landed and store.strike_seen > 10  # a fenced sqlite append makes dozens
        store.strike_next(None)
        store.append("r", JournalEntry(2, b"plain"), lease)
        assert store.strike_seen is None  # an unstruck call is not counted
    finally:
        store.close()


def test_the_aim_sends_half_the_step_strikes_next_to_the_childs_exchanges_each_once_a_sweep():
    import random

    from soak.storm.wire_aim import SHARE, ChildAim

    aim = ChildAim()
    assert not aim.counted("append") and aim.pick("append", 25, 0.5) is None  # nothing known: the uniform sweep
    aim.note("append", 25, (11, 14))  # exchanges had returned at boundaries 11 and 14
    assert aim.counted("append") and aim.near("append", 25) == (10, 11, 13, 14)
    aim.note("append", 25, (2, 11, 14))
    aim.note("append", 25, (11, 14, 20))
    assert aim.near("append", 25) == (10, 11, 13, 14)  # a wait in one call of three is the child's scheduling
    near = [11, 10, 13, 14]
    draws = [random.Random(i).random() for i in range(400)]
    picks = [aim.pick("append", 25, u) for u in draws]
    aimed = [k for k in picks if k is not None]
    assert abs(len(aimed) / len(picks) - SHARE) < 0.1
    assert set(aimed) == set(near)
    for start in range(0, len(aimed) - 3, 4):  # a sweep strikes each of the four before any again
        assert sorted(aimed[start:start + 4]) == sorted(near)
    assert aim.pick("append", 27, 0.1) is None  # another n (a refused call's): its own, still unknown, positions
    aim.before_check("append", 10, 25)  # held at 10 while a successor took over, then refused: 10 precedes the check
    assert aim.near("append", 25) == (11, 13, 14)
    aim.before_check("append", 20, 25)
    assert aim.near("append", 25) == (10, 11, 13, 14)  # nothing would be left: every one stays
