"""A wire store's child lives and dies with the process that opened it: SIGKILL of the opener kills it (parent-death
signal), a closed stdin ends it (EOF), and a stop or continue of the opener's process group reaches it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from soak.storm.worker import signal_worker

_OPENER = textwrap.dedent("""
    import os, sys, time
    from soak.stores import resolve
    os.makedirs(sys.argv[1], exist_ok=True)
    store = resolve("exec:" + sys.executable + " -m soak.stores.wire_server sqlite:").open(sys.argv[1], 5000)
    store.acquire("r", "opener")
    print(store._child.proc.pid, flush=True)
    time.sleep(600)
""")


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def _state(pid: int) -> str:
    return psutil.Process(pid).status()


def _wait_status(pid: int, wanted: str, within_s: float = 5.0) -> str:
    deadline = time.monotonic() + within_s
    while (status := _state(pid)) != wanted and time.monotonic() < deadline:
        time.sleep(0.01)
    return status


@pytest.fixture
def opener(tmp_path):
    """A process in a session (and process group) of its own, like a storm worker, with a wire store open:
    (its Popen, its child's pid)."""
    proc = subprocess.Popen([sys.executable, "-c", _OPENER, str(tmp_path / "loc")], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        child = int(proc.stdout.readline())
        yield proc, child
    finally:
        for pid in (proc.pid,):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(10)


def test_sigkill_of_the_opener_kills_its_child_by_the_parent_death_signal(opener):
    proc, child = opener
    assert psutil.Process(child).ppid() == proc.pid
    assert os.getpgid(child) == proc.pid  # the child stays in its opener's process group
    os.kill(proc.pid, signal.SIGKILL)  # the opener alone, not its group
    proc.wait(10)
    assert _gone(child)


def test_stopping_and_continuing_the_openers_group_reaches_the_child(opener):
    proc, child = opener
    signal_worker(proc.pid, signal.SIGSTOP)
    assert _wait_status(proc.pid, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED
    assert _wait_status(child, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED
    signal_worker(proc.pid, signal.SIGCONT)
    assert _wait_status(child, psutil.STATUS_SLEEPING) == psutil.STATUS_SLEEPING
    assert _wait_status(proc.pid, psutil.STATUS_SLEEPING) == psutil.STATUS_SLEEPING
    signal_worker(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert _gone(child)


def _hello(tmp_path) -> bytes:
    (tmp_path / "loc").mkdir(exist_ok=True)
    return (json.dumps({"id": 0, "op": "hello", "args": {"version": 1, "kind": "runs", "location": str(tmp_path / "loc"),
                                                          "lease_ttl_ms": 500, "options": {}}}) + "\n").encode()


def test_a_server_whose_stdin_reaches_eof_exits(tmp_path):
    server = subprocess.Popen([sys.executable, "-m", "soak.stores.wire_server", "sqlite:"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    server.stdin.write(_hello(tmp_path))
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["ok"]["protocol"] == 1
    server.stdin.close()
    assert server.wait(10) == 0


def test_a_server_without_the_parent_death_signal_exits_when_its_parent_dies(tmp_path):
    # the parent starts the server with plain pipes (no prctl) and is killed: the pipe's EOF alone ends the server
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        server = subprocess.Popen([sys.executable, "-m", "soak.stores.wire_server", "sqlite:"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        server.stdin.write({_hello(tmp_path)!r}); server.stdin.flush()
        server.stdout.readline()
        print(server.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server = int(parent.stdout.readline())
    assert _state(server) == psutil.STATUS_SLEEPING
    parent.kill()
    parent.wait(10)
    assert _gone(server)
