"""Strikes: a worker stops itself inside one store call, and the nemesis holds it until a successor works the run.

The stops are real (SIGSTOP from inside the process, seen by the kernel as state T); the
processes the nemesis judges are real OS processes whose shared state is set by hand.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from soak.history import HistoryWriter, now_ns
from soak.scenario import load_scenario
from soak.storm.nemesis import Nemesis, WorkerHandle, _is_stopped, _wait_stopped
from soak.storm.strike import BOARD_ROWS, BOARD_SPAN, REPEATS, StrikeTimer
from soak.storm.worker import (
    IN_CALL,
    OP_INDEX,
    PHASE,
    RUNNING,
    SINCE_NS,
    SLOTS,
    STRIKE,
    TENURE_EPOCH,
    TENURE_EXPIRES_NS,
    TENURE_KEY,
    TENURE_OP,
    WANTED,
    WITNESSED,
)

pytestmark = pytest.mark.skipif(not StrikeTimer().available, reason="strikes need Linux timer_create")

_CHILD = textwrap.dedent("""
    import sqlite3, sys, time
    from soak.storm.strike import StrikeTimer
    from soak.workloads.context import Strike
    timer = StrikeTimer()
    conn = sqlite3.connect(":memory:")
    mode, u, steps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])

    def call():  # a store call of many small steps
        for _ in range(steps):
            conn.execute("SELECT 1").fetchone()
        if mode == "kernel":  # Python work long enough for the lead alarm and the kernel timer
            end = time.monotonic() + 0.3
            while time.monotonic() < end:
                pass

    timer.arm(Strike("s", mode, 1_000, 1_000, u))
    call()
    timer.disarm()
    print("returned", flush=True)
""")


def _child(mode: str, u: float, steps: int = 20) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-c", _CHILD, mode, str(u), str(steps)], stdout=subprocess.PIPE,
                            text=True, env=env)


def _u_whose_first_step(test) -> float:
    """A plan's `u` whose sweep (64 boundaries assumed, no call counted yet) strikes first at a k passing `test`."""
    return next(u for u in (i / 1000 for i in range(1000)) if test(StrikeTimer().plan_step("s", u)[0]))


def test_step_strikes_sweep_every_boundary_once_per_cycle_in_a_seeded_order():
    timer = StrikeTimer()
    timer._steps["s"] = [12, 12, 12]  # recent struck calls of the surface made 12 boundaries
    cycle = [timer.plan_step("s", 0.25) for _ in range(12)]
    assert sorted(k for k, _, _ in cycle) == list(range(1, 13)) and {n for _, n, _ in cycle} == {12}
    assert not any(again for _, _, again in cycle)
    again = StrikeTimer()
    again._steps["s"] = [12, 12, 12]
    assert [again.plan_step("s", 0.25) for _ in range(12)] == cycle  # the same seed, the same sweep
    other = StrikeTimer()
    other._steps["s"] = [12, 12, 12]
    assert [other.plan_step("s", 0.75) for _ in range(12)] != cycle
    timer._steps["s"] = [5, 5, 5]  # the calls changed: a new cycle over their boundaries
    assert sorted(timer.plan_step("s", 0.5)[0] for _ in range(5)) == [1, 2, 3, 4, 5]


def _struck(timer: StrikeTimer, u: float, witnessed: bool = False) -> tuple[int, bool]:
    """One step-mode strike of surface `s` planned and ended as `arm` and `disarm` do (no hook set: the test
    process must not stop itself): its k and whether it repeats a position."""
    k, n, again = timer.plan_step("s", u)
    timer.position, timer.again, timer._counting = (k, n), again, ("s", k)
    timer.disarm(witnessed=witnessed)
    return k, again


def test_a_step_position_where_a_takeover_got_in_mid_call_is_struck_again_ahead_of_the_sweep():
    timer = StrikeTimer()
    timer._steps["s"] = [12, 12, 12]
    sweep = StrikeTimer()
    sweep._steps["s"] = [12, 12, 12]
    plan = [sweep.plan_step("s", 0.25)[0] for _ in range(12)]
    # the first strike is held and a successor takes the run over meanwhile (the nemesis sets WITNESSED)
    first, _ = _struck(timer, 0.25, witnessed=True)
    timer._steps["s"] = [12, 12, 12]  # disarm counted the call's boundaries: keep n at 12
    got = []
    for _ in range(4):
        # not witnessed: a repeat is never queued again, and a position that blocked the store is not either
        got.append(_struck(timer, 0.25, witnessed=True if not got else False))
        timer._steps["s"] = [12, 12, 12]
    assert got[:REPEATS] == [(first, True)] * REPEATS
    assert got[REPEATS:] == [(k, False) for k in plan[1:5 - REPEATS]]  # then the sweep goes on where it was
    timer._repeat["s"] = [[3, 12, REPEATS, 0]]
    timer._steps["s"] = [5, 5, 5]  # the calls changed: a position of the old n is not repeated
    assert timer.plan_step("s", 0.5)[2] is False


@pytest.mark.parametrize(("mode", "u"), [("step", _u_whose_first_step(lambda k: k <= 3)),
                                         ("step", _u_whose_first_step(lambda k: 10 <= k <= 20)), ("kernel", 0.0)])
def test_a_strike_stops_the_process_inside_the_call(mode, u):
    proc = _child(mode, u)
    try:
        assert _wait_stopped(proc.pid, 10.0), "the struck call never stopped its process"
        time.sleep(0.05)
        assert _is_stopped(proc.pid)  # it stays stopped until continued
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert out.strip() == "returned" and proc.returncode == 0


def test_a_strike_past_the_last_step_never_stops():
    # a boundary past 40 of the 64 assumed: the call has about 20, so it returns unstopped
    proc = _child("step", _u_whose_first_step(lambda k: k > 40), steps=5)
    try:
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert out.strip() == "returned" and proc.returncode == 0


class _Proc:
    """A real process in the shape the nemesis reads (`pid`, `is_alive`)."""

    def __init__(self) -> None:
        self.popen = subprocess.Popen(["sleep", "60"])
        self.pid = self.popen.pid

    def is_alive(self) -> bool:
        return self.popen.poll() is None


@pytest.fixture
def procs():
    made: list[_Proc] = []

    def make() -> _Proc:
        made.append(_Proc())
        return made[-1]

    yield make
    for p in made:
        p.popen.kill()
        p.popen.wait()


def _handle(procs, slot: int, state: dict[int, int]) -> WorkerHandle:
    """A worker handle over a real process, its shared slots set from `state` (slot -> value)."""
    st = [0] * SLOTS
    st[TENURE_KEY] = -1
    st[PHASE] = RUNNING
    for k, v in state.items():
        st[k] = v
    return WorkerHandle(f"w{slot}.1", slot, 1, 0, procs(), st)


def _wait_running(pid: int, timeout_s: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _is_stopped(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _nemesis(tmp_path, **kw) -> Nemesis:
    return Nemesis(load_scenario("smoke"), random.Random(1), HistoryWriter(tmp_path / "nemesis.jsonl", "nemesis"),
                   **kw)


def test_a_struck_holder_is_held_past_its_lease_until_a_successor_has_read_the_run(tmp_path, procs):
    nem = _nemesis(tmp_path)
    now = now_ns()
    expires = now + 50_000_000
    victim = _handle(procs, 0, {IN_CALL: 1, STRIKE: 2, TENURE_KEY: 1, TENURE_EPOCH: 5, TENURE_EXPIRES_NS: expires,
                                OP_INDEX: 10, SINCE_NS: now})
    free = _handle(procs, 1, {OP_INDEX: 40})
    os.kill(victim.pid, signal.SIGSTOP)
    assert _wait_stopped(victim.pid)
    nem.find_strikes([victim, free], now)
    assert victim.hold is not None and victim in nem.paused and nem.strikes["held"] == 1
    workers = [victim, free]
    assert nem._let_go(victim, workers, expires - 1) is None  # the lease may still be live
    assert nem._let_go(victim, workers, expires + 1) is None
    assert free.state[WANTED] == 2  # asked to take run 1 over
    # epoch 6 granted by its call 41
    free.state[TENURE_KEY], free.state[TENURE_EPOCH], free.state[OP_INDEX], free.state[TENURE_OP] = 1, 6, 41, 41
    assert nem._let_go(victim, workers, expires + 2) is None
    free.state[OP_INDEX] = 43  # its journal read is done, the meta read in flight
    assert nem._let_go(victim, workers, expires + 3) is None
    free.state[OP_INDEX] = 44  # both done, a third call started
    assert nem._let_go(victim, workers, expires + 4) == "successor"
    nem.resume(victim, "successor")
    assert victim.hold is None and _wait_running(victim.pid)
    # a takeover got in while the call was held: the worker is told to strike that position again
    assert victim.state[WITNESSED] == 1 and nem.strikes["witnessed"] == 1


def test_a_struck_holder_that_blocks_the_store_is_let_go_and_a_miss_is_continued(tmp_path, procs):
    nem = _nemesis(tmp_path)
    now = now_ns()
    victim = _handle(procs, 0, {IN_CALL: 1, STRIKE: 1, TENURE_KEY: 0, TENURE_EPOCH: 3, TENURE_EXPIRES_NS: now,
                                OP_INDEX: 7})
    stuck = _handle(procs, 1, {IN_CALL: 1, SINCE_NS: now, OP_INDEX: 20, TENURE_KEY: 2, TENURE_EPOCH: 1})
    missed = _handle(procs, 2, {STRIKE: 2, TENURE_KEY: 1, TENURE_EPOCH: 2, OP_INDEX: 30})  # stopped after its call
    for h in (victim, missed):
        os.kill(h.pid, signal.SIGSTOP)
        assert _wait_stopped(h.pid)
    nem.find_strikes([victim, stuck, missed], now)
    assert missed.hold is None and nem.strikes["missed"] == 1
    assert victim.hold is not None and _is_stopped(victim.pid)
    assert _wait_running(missed.pid)  # continued at once
    idle = victim.hold.idle_ns
    workers = [victim, stuck, missed]
    assert nem._let_go(victim, workers, now + 1) is None  # progress is watched from here
    assert nem._let_go(victim, workers, now + idle // 2) is None
    # nobody moved, but one stuck in a call of the two others that run could be a call starved of CPU
    assert nem._let_go(victim, workers, now + idle + 1) is None
    missed.state[IN_CALL], missed.state[SINCE_NS] = 1, now
    assert nem._let_go(victim, workers, now + idle + 2) == "blocked"  # nobody moved, both are stuck in a call
    # the others went on (reads that do not wait for the lock), and one began a new call: not blocked now
    stuck.state[OP_INDEX], stuck.state[SINCE_NS] = 23, now + 2 * idle
    assert nem._let_go(victim, workers, now + 2 * idle + 3) is None
    assert nem._let_go(victim, workers, now + 3 * idle + 2) is None
    # they stand still again, stuck in calls begun that long ago: blocked, however far they went after the stop
    assert nem._let_go(victim, workers, now + 3 * idle + 4) == "blocked"
    assert nem._let_go(victim, workers, victim.hold.cap_ns) == "cap"
    nem.resume_all(workers)
    assert all(_wait_running(h.pid) for h in workers)
    assert victim.state[WITNESSED] == 0 and "witnessed" not in nem.strikes  # nobody took over: not repeated


def test_a_hold_beside_a_pause_inside_a_call_is_not_judged_blocked_and_the_pause_ends_once_it_blocks(tmp_path,
                                                                                                       procs):
    """The others stuck while a pause sits inside a call may be stuck behind the pause, not the hold: the hold is
    never marked blocked then (it may sit in a split fence's window). The pause itself ends once its lease has
    expired and the store stands still (where the workload allows it, as `runs` does); a pause that does not block
    runs its whole length."""
    nem = _nemesis(tmp_path, blocked_pauses_end=True)
    now = now_ns()
    expires = now + 50_000_000
    held = _handle(procs, 0, {IN_CALL: 1, STRIKE: 1, TENURE_KEY: 0, TENURE_EPOCH: 3, TENURE_EXPIRES_NS: now,
                              OP_INDEX: 7})
    paused = _handle(procs, 1, {IN_CALL: 1, TENURE_KEY: 1, TENURE_EPOCH: 2, TENURE_EXPIRES_NS: expires, OP_INDEX: 9})
    a = _handle(procs, 2, {IN_CALL: 1, SINCE_NS: now, OP_INDEX: 20, TENURE_KEY: 2, TENURE_EPOCH: 1})
    b = _handle(procs, 3, {IN_CALL: 1, SINCE_NS: now, OP_INDEX: 30})
    workers = [held, paused, a, b]
    os.kill(held.pid, signal.SIGSTOP)
    assert _wait_stopped(held.pid)
    nem.find_strikes(workers, now)
    nem.pause(paused)
    assert paused.watch is not None and held.hold is not None
    idle = held.hold.idle_ns
    start = paused.paused_since
    for t in (start + 1, start + idle + 1, expires - 1):
        assert nem._let_go(held, workers, t) is None  # a and b are stuck, but the pause may hold the lock
        assert nem._blocked(paused, paused.watch, nem._others(paused, workers), t, alone=False) == (
            "blocked" if t > start + idle else None)
    # the loop of `step`: the pause is let go once its lease has expired, as `blocked`
    nem.resume(paused, "blocked")
    assert paused.watch is None and _wait_running(paused.pid)
    assert nem._let_go(held, workers, expires + 1) is None  # progress is watched afresh from here
    assert nem._let_go(held, workers, expires + idle + 2) == "blocked"  # alone now: a and b still stuck
    nem.resume_all(workers)
    # a pause inside a call that does not block the store (the others move) runs its whole length
    nem.pause(paused)
    t = paused.paused_since
    for i in range(1, 6):
        a.state[OP_INDEX] += 1
        a.state[SINCE_NS] = t + i * idle
        assert nem._blocked(paused, paused.watch, nem._others(paused, workers), t + i * idle, alone=False) is None
    nem.resume_all(workers)


def test_the_nemesis_ends_a_pause_that_blocks_the_store_after_its_lease_and_logs_why(tmp_path, procs):
    from soak.workloads import get_workload

    assert get_workload("runs").blocked_pauses_end_at_expiry
    assert not getattr(get_workload("claims"), "blocked_pauses_end_at_expiry", False)  # must outlast offline too
    (tmp_path / "claims").mkdir()
    quiet = _nemesis(tmp_path / "claims")
    other = _handle(procs, 3, {IN_CALL: 1, TENURE_KEY: 0, TENURE_EXPIRES_NS: now_ns(), OP_INDEX: 5})
    quiet.pause(other)
    assert other.watch is None  # a workload that does not allow it keeps every pause whole
    quiet.resume(other)
    nem = _nemesis(tmp_path, blocked_pauses_end=True)
    now = now_ns()
    expires = now + 30_000_000
    paused = _handle(procs, 0, {IN_CALL: 1, TENURE_KEY: 0, TENURE_EPOCH: 2, TENURE_EXPIRES_NS: expires, OP_INDEX: 5})
    a = _handle(procs, 1, {IN_CALL: 1, SINCE_NS: now, OP_INDEX: 20})
    b = _handle(procs, 2, {IN_CALL: 1, SINCE_NS: now, OP_INDEX: 30})
    nem.next_pause = nem.next_kill = None
    nem.pause(paused)
    workers = [paused, a, b]
    deadline = time.monotonic() + 2.0
    while paused.paused_since is not None and time.monotonic() < deadline:
        nem.step(workers)
        time.sleep(0.002)
    assert paused.paused_since is None and _wait_running(paused.pid)
    waited = now_ns() - now
    assert max(expires - now, nem.idle_ns) <= waited < nem.pause_ns  # after its lease, before its whole length
    nem.writer.close()
    resumes = [line for line in (tmp_path / "nemesis.jsonl").read_text().splitlines() if '"resume"' in line]
    assert len(resumes) == 1 and '"why":"blocked"' in resumes[0]


def test_one_strike_is_held_at_a_time_and_a_taker_is_asked_at_its_expiry(tmp_path, procs):
    nem = _nemesis(tmp_path)
    now = now_ns()
    expires = now + 50_000_000
    first = _handle(procs, 0, {IN_CALL: 1, STRIKE: 2, TENURE_KEY: 0, TENURE_EPOCH: 4, TENURE_EXPIRES_NS: expires,
                               OP_INDEX: 9})
    second = _handle(procs, 1, {IN_CALL: 1, STRIKE: 2, TENURE_KEY: 1, TENURE_EPOCH: 2, TENURE_EXPIRES_NS: expires,
                                OP_INDEX: 12})
    free = _handle(procs, 2, {OP_INDEX: 40})
    for h in (first, second):
        os.kill(h.pid, signal.SIGSTOP)
        assert _wait_stopped(h.pid)
    workers = [first, second, free]
    nem.find_strikes(workers, now)
    assert first.hold is not None and second.hold is None and nem.strikes == {"held": 1, "missed": 0, "overlapped": 1}
    assert _wait_running(second.pid)  # continued at once
    assert nem._let_go(first, workers, now + 1) is None and free.state[WANTED] == 0  # the lease may still be live
    assert nem._let_go(first, workers, expires + 1) is None and free.state[WANTED] == 1  # asked to take run 0
    nem.resume_all(workers)


# -- strikes aimed at a call's exchanges ------------------------------------------------------------------------------

_AIMED_CHILD = textwrap.dedent("""
    import os, sqlite3, sys
    from soak.storm.strike import StrikeTimer, io_position
    timer = StrikeTimer()
    conn = sqlite3.connect(":memory:")
    kind, j, fd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

    def call():  # three steps, each an exchange on a pipe (os.write) and a statement (execute): 6 exchanges
        for step in range(3):
            os.write(fd, b"%d" % step)
            conn.execute("SELECT 1")
            sum(range(200))  # steps of the store's own code between exchanges

    timer.count_to("s", 0)
    call()
    timer.note_steps("s", timer.stop_counting())
    print("exchanges", timer._io["s"][0], flush=True)
    timer.count_to("s", 0)
    timer._aim = (kind, j)
    call()
    timer.stop_counting()
    print("returned", flush=True)
""")




def _aimed_stop(script: str, kind: int, j: int, counted: int) -> tuple[list[str], bytes]:
    """Run `script` (a counted call writing `counted` bytes to a pipe, then the same call with an aimed strike at
    (kind, j)): what it printed of the counted call, and what the struck call had written when it stopped."""
    r, w = os.pipe()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", script, str(kind), str(j), str(w)], stdout=subprocess.PIPE,
                            text=True, env=env, pass_fds=(w,))
    os.close(w)
    try:
        first = b""
        while len(first) < counted:  # the counted call's bytes, and not one more
            first += os.read(r, counted - len(first))
        printed = proc.stdout.readline().split()
        assert _wait_stopped(proc.pid, 10.0), "the aimed strike never stopped its process"
        os.set_blocking(r, False)
        got = b""
        try:
            got = os.read(r, 16)
        except BlockingIOError:
            pass
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
        os.close(r)
    assert out.strip() == "returned"
    return printed, got

@pytest.mark.parametrize(("kind", "j", "written"), [(0, 3, b"0"), (1, 3, b"01"), (0, 6, b"012"), (1, 1, b"0")])
def test_an_aimed_strike_stops_just_before_the_jth_exchange_or_as_it_returns(kind, j, written):
    printed, got = _aimed_stop(_AIMED_CHILD, kind, j, 3)
    assert printed == ["exchanges", "6"]
    assert got == written  # exchange 3 is the second write: stopped before it, or as it returned


def _aimed_plans(timer: StrikeTimer, count: int) -> list[tuple[int, int]]:
    """The aimed positions of `count` plans of surface `s` (plans of the other sweep left out)."""
    got = []
    u = 0.0
    while len(got) < count:
        u += 0.0007
        k, n, _ = timer.plan_step("s", u % 1, io=True)
        if timer.io:
            got.append((k, n))
    return got


def test_the_aimed_sweep_strikes_every_exchange_once_per_cycle_but_the_last_return():
    from soak.storm.strike import AFTER, BEFORE, io_position

    timer = StrikeTimer()
    timer._steps["s"] = [80, 80, 80]
    timer._io["s"] = (3, 0)  # three exchanges
    # the gaps: before the first exchange, between the first and the second, between the second and the third (as
    # the last returns, the call has nothing left to change)
    gaps = [{io_position(BEFORE, 1)}, {io_position(AFTER, 1), io_position(BEFORE, 2)},
            {io_position(AFTER, 2), io_position(BEFORE, 3)}]
    plans = _aimed_plans(timer, 30)
    assert {n for _, n in plans} == {3}
    for cycle in range(10):  # every gap once per cycle
        struck = [k for k, _ in plans[3 * cycle:3 * cycle + 3]]
        assert sorted(next(i for i, g in enumerate(gaps) if k in g) for k in struck) == [0, 1, 2]
    assert {k for k, _ in plans} == set().union(*gaps)  # both points of a gap are struck, in turn
    # without a counted exchange, the aimed sweep is over the waits
    waits = StrikeTimer()
    waits._steps["s"] = [80, 80, 80]
    waits._io["s"] = (0, 2)
    from soak.storm.strike import WAIT
    assert {k for k, _ in _aimed_plans(waits, 4)} == {io_position(WAIT, 1), io_position(WAIT, 2)}
    # a wire store's child counts its own steps: its plans are never aimed
    assert not any(timer.plan_step("s", i / 97)[2] or timer.io for i in range(40))


def test_a_position_that_blocked_the_store_is_skipped_by_every_worker_of_the_storm(tmp_path, procs):
    import multiprocessing

    from soak.storm.strike import AFTER, BEFORE, board_index, io_position
    from soak.storm.worker import AGAIN, AGAIN_IO, BLOCKED, STRIKE_STEP, STRIKE_STEPS, SURFACE

    board = multiprocessing.RawArray("i", 4 * BOARD_ROWS * BOARD_SPAN)
    nem = Nemesis(load_scenario("smoke"), random.Random(1), HistoryWriter(tmp_path / "nemesis.jsonl", "nemesis"),
                  strike_board=board)
    blocking = io_position(BEFORE, 2)
    now = now_ns()
    victim = _handle(procs, 0, {IN_CALL: 1, STRIKE: 2, TENURE_KEY: 0, TENURE_EPOCH: 3, TENURE_EXPIRES_NS: now,
                                OP_INDEX: 7, SURFACE: 1, STRIKE_STEP: blocking, STRIKE_STEPS: 3, AGAIN: AGAIN_IO})
    os.kill(victim.pid, signal.SIGSTOP)
    assert _wait_stopped(victim.pid)
    nem.find_strikes([victim], now)
    assert victim.hold is not None
    nem.resume(victim, "blocked")
    assert victim.state[WITNESSED] == BLOCKED and board[board_index(1, True, blocking)] == 3
    # another worker's timer (surface "s" is row 1) never strikes there while the calls keep three exchanges
    other = StrikeTimer(board, {"s": 1})
    other._steps["s"] = [80, 80, 80]
    other._io["s"] = (3, 0)
    plans = _aimed_plans(other, 12)
    # the blocking position's gap (between exchange 1 and 2) is skipped: both its points are one state of the store
    assert {k for k, _ in plans} == {io_position(BEFORE, 1), io_position(AFTER, 2), io_position(BEFORE, 3)}
    other._io["s"] = (4, 0)  # the calls changed: the mark no longer applies
    assert blocking in {k for k, _ in _aimed_plans(other, 14)}


def test_the_storm_sweeps_every_gap_of_a_surface_once_before_its_swept_counter_is_set(tmp_path, procs):
    """Every worker's step strikes are aimed at a gap no hold has tried yet while one is left; a hold there that a
    successor took over or that blocked the store tries it; once every gap of a surface is tried the nemesis logs
    `swept`, which the quorum counts as `swept_<surface>` (a surface whose calls show no exchange is swept at once)."""
    import multiprocessing

    from soak.history import decode_line
    from soak.storm.strike import AFTER, BEFORE, gaps, io_position, untried
    from soak.storm.worker import AGAIN, AGAIN_IO, STRIKE_STEP, STRIKE_STEPS, SURFACE
    from soak.workloads import count_event

    board = multiprocessing.RawArray("i", 4 * BOARD_ROWS * BOARD_SPAN)
    nem = Nemesis(load_scenario("smoke"), random.Random(1), HistoryWriter(tmp_path / "nemesis.jsonl", "nemesis"),
                  strike_board=board, surfaces=("", "s", "quiet"))
    timers = [StrikeTimer(board, {"s": 1, "quiet": 2}) for _ in range(2)]
    for t in timers:
        t._steps["s"] = [80, 80, 80]
        t.note_steps("s", 80, exchanges=3, waits=0)  # publishes the count: 3 exchanges, 3 gaps
    assert untried(board, 1) == gaps(3, True) == [(io_position(BEFORE, 1),),
                                                 (io_position(AFTER, 1), io_position(BEFORE, 2)),
                                                 (io_position(AFTER, 2), io_position(BEFORE, 3))]
    timers[1].note_steps("quiet", 30, exchanges=0, waits=0, provisional=True)  # nothing to aim at
    nem.step([])
    tried = []
    for i, k in enumerate([io_position(BEFORE, 1), io_position(AFTER, 1), io_position(BEFORE, 3)]):
        # every plan of either worker is aimed, at a gap not tried yet
        plans = [t.plan_step("s", u / 10, io=True) for t in timers for u in range(1, 6)]
        assert all(t.io for t in timers) and {p[0] for p in plans} <= set().union(*untried(board, 1))
        now = now_ns()
        victim = _handle(procs, i, {IN_CALL: 1, STRIKE: 2, TENURE_KEY: 0, TENURE_EPOCH: 3, TENURE_EXPIRES_NS: now,
                                    OP_INDEX: 7, SURFACE: 1, STRIKE_STEP: k, STRIKE_STEPS: 3, AGAIN: AGAIN_IO})
        os.kill(victim.pid, signal.SIGSTOP)
        assert _wait_stopped(victim.pid)
        nem.find_strikes([victim], now)
        if i == 1:  # a hold nobody took over is no try
            nem.resume(victim, "cap")
            assert len(untried(board, 1)) == 2
            os.kill(victim.pid, signal.SIGSTOP)
            assert _wait_stopped(victim.pid)
            nem.find_strikes([victim], now)
        victim.hold.successor = victim if i != 1 else None
        nem.resume(victim, "successor" if i != 1 else "blocked")
        tried.append(k)
        assert len(untried(board, 1)) == 2 - i
    nem.writer.close()
    lines = (decode_line(raw) for raw in (tmp_path / "nemesis.jsonl").read_bytes().splitlines())
    events = [e for e in lines if e.get("kind") == "swept"]
    assert [(e["v"]["surface"], e["v"]["gaps"]) for e in events] == [("quiet", 0), ("s", 3)]
    counts: dict[str, int] = {}
    for e in events:
        count_event(counts, "nemesis", "swept", e["v"])
    assert counts == {"swept_quiet": 1, "swept_s": 1}
    # the sweep done, the plans are shared between both sweeps again
    plans = [timers[0].plan_step("s", u / 97, io=True) and timers[0].io for u in range(1, 60)]
    assert 0 < sum(plans) < len(plans)


_RETRY_CHILD = textwrap.dedent("""
    import os, sys
    from soak.storm.strike import StrikeTimer
    timer = StrikeTimer()
    kind, j, fd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    tries = [2]

    def call():  # one exchange, then a lock taken after two attempts that fail (busy), then one more exchange
        os.write(fd, b"0")
        while True:
            try:
                os.write(-1 if tries[0] else fd, b"1")
                break
            except OSError:
                tries[0] -= 1
        os.write(fd, b"2")

    timer.count_to("s", 0)
    call()
    timer.note_steps("s", timer.stop_counting())
    print("exchanges", timer._io["s"][0], flush=True)
    tries[0] = 1
    timer.count_to("s", 0)
    timer._aim = (kind, j)
    call()
    timer.stop_counting()
    print("returned", flush=True)
""")


@pytest.mark.parametrize(("kind", "j", "written"), [(0, 2, b"0"), (1, 2, b"01"), (0, 3, b"01"), (1, 1, b"0")])
def test_an_exchange_that_raises_is_not_counted_so_positions_stay_put_when_a_store_retries(kind, j, written):
    """A busy answer the store retries changed nothing: the j-th exchange is the same step of the call whether the
    lock came at the first attempt or the third (a split fence's window stays at one gap)."""
    printed, got = _aimed_stop(_RETRY_CHILD, kind, j, 3)
    assert printed == ["exchanges", "3"]  # the two failed attempts are not exchanges
    assert got == written


def test_a_surface_is_counted_before_its_first_strike():
    timer = StrikeTimer()
    assert timer.wants_count("s")
    timer.learn("s")  # never stops
    sum(range(10))
    timer.disarm()
    assert not timer.wants_count("s")
    n = timer._provisional["s"][0]
    assert n > 0 and timer.plan_step("s", 0.5)[1] == n  # the first sweep is over the counted boundaries
    timer.note_steps("s", 40)  # a struck call's count replaces the provisional one (the path strikes take)
    assert timer.plan_step("s", 0.5)[1] == 40


_DRIVER_CHILD = textwrap.dedent("""
    import os, sys
    from soak.storm.strike import StrikeTimer
    timer = StrikeTimer()
    kind, j, fd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

    class Cursor:  # a driver whose statement call is Python, its round trip inside it (two writes here)
        def execute(self, sql):
            os.write(fd, b"<")
            os.write(fd, b">")

    def call():
        cur = Cursor()
        for _ in range(3):
            cur.execute("UPDATE t SET x = 1")

    timer.count_to("s", 0)
    call()
    timer.note_steps("s", timer.stop_counting())
    print("exchanges", timer._io["s"][0], flush=True)
    timer.count_to("s", 0)
    timer._aim = (kind, j)
    call()
    timer.stop_counting()
    print("returned", flush=True)
""")


@pytest.mark.parametrize(("kind", "j", "written"), [(0, 2, b"<>"), (1, 2, b"<><>"), (1, 1, b"<>")])
def test_a_drivers_statement_call_is_one_exchange_however_deep_its_own_io_goes(kind, j, written):
    printed, got = _aimed_stop(_DRIVER_CHILD, kind, j, 6)
    assert printed == ["exchanges", "3"]  # three statements, not six writes
    assert got == written
