"""Running the checks under a watchdog: in a child process, or (when the target cannot be sent to one) in a
thread of this process.

The parent starts one child (spawn, via `multiprocess`; the `StoreTarget` is sent pickled with dill) that runs
the checks in order and streams every result over a pipe as it is recorded, while the parent reads the board
(`_watch`) of calls in flight. A call still running at the bound makes the parent kill the child, file a
`call-returns` fail for that check, and go on with the next check in a fresh child; a child that dies inside a
store call files a `no-crash` fail naming the call and the signal or exit status; one that dies outside any
store call is an `error` of that check (the harness's problem, not the store's). In a thread the watchdog can
still give up on a hung call (the thread is abandoned and stops at its next store call) but cannot survive a
crash, so `no-crash` is then not exercised.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from soak.clauses import CLAUSES, LIVENESS_CLAUSES
from soak.clock import FakeClock
from soak.conformance._checks import ALSO_COVERS, CHECKS, DELETE_CHOICE
from soak.conformance._context import OPEN_TIMEOUT_S, Ctx, Settings, Suite, classify, one_line
from soak.conformance._report import ERROR, FAIL, INCONCLUSIVE, NOT_EXERCISED, PASS, CheckResult, ConformanceReport
from soak.conformance._watch import KIND_OPEN, Abandoned, Board, Watch
from soak.errors import HarnessCrash, StoreBootError
from soak.retry import BusyCount
from soak.stores import StoreTarget, redact

__all__ = ["run_checks", "run_suite"]

#: A store factory may take this long (StoreTarget.open gives up at OPEN_TIMEOUT_S in the main thread first).
OPEN_BOUND_S = OPEN_TIMEOUT_S + 5.0
_POLL_S = 0.02


# -- the side that runs the checks ------------------------------------------------------------

def run_checks(target: StoreTarget, settings: Settings, watch: Watch, emit: Any) -> None:
    """Run `settings.checks` in order (probing the clock declaration first when it is not known yet)."""
    suite = Suite(target, settings, watch, emit)
    if settings.clock_ok is None:
        try:
            suite.clock_ok = _probe(suite)
        except StoreBootError as exc:
            emit(("boot-error", str(exc)))
            return
        emit(("probe", suite.clock_ok))
    table = {name: (clause, fn) for clause, name, fn in CHECKS}
    for name in settings.checks:
        clause, fn = table[name]
        emit(("start", name, clause))
        ctx = Ctx(suite, clause, name)
        try:
            fn(ctx)
        except Exception as exc:  # noqa: BLE001 - outside any sub-check: the whole check ends so
            status, detail = classify(exc)
            ctx.record(clause, name, status, detail)
        finally:
            ctx.close()
            ctx.flush_late()
            emit(("busy", watch.busy.retries, watch.busy.exhausted))
        emit(("done", name))


def _probe(suite: Suite) -> bool:
    """Read the store's injectable-clock declaration; where it declares one, check that `clock=` is taken."""
    target, ttl, root = suite.target, suite.settings.ttl_ms, suite.settings.root
    location = tempfile.mkdtemp(prefix="probe-", dir=root)
    declared = suite.watch.open(lambda: target.probe_injectable_clock(location, ttl),
                                "open (the store factory, reading its injectable_clock declaration)")
    if declared:
        second = tempfile.mkdtemp(prefix="probe-clock-", dir=root)
        try:
            store = suite.watch.open(lambda: target.open(second, ttl, timeout_s=OPEN_TIMEOUT_S, clock=FakeClock()),
                                     "open (the store factory, with clock=)")
        except StoreBootError as exc:
            raise StoreBootError(f"store {redact(target.spec)} declares injectable_clock = True but its factory "
                                 f"refused clock= ({exc}); take clock= or drop the declaration") from exc
        with contextlib.suppress(Exception):
            store.close()
    return declared


def _child_main(payload: bytes, settings: Settings, buffer: Any, conn: Any) -> None:
    """The child process: load the target, run the checks, stream every message to the parent."""
    lock = threading.Lock()

    def emit(msg: tuple) -> None:
        with lock:
            try:
                conn.send(msg)
            except OSError:  # the parent stopped listening (it raised, or was interrupted): nothing left to do
                raise SystemExit(0) from None

    try:
        import dill

        target = dill.loads(payload)
    except BaseException as exc:  # noqa: BLE001 - told to the parent, which runs the checks itself
        emit(("unloadable", f"{type(exc).__name__}: {one_line(exc)}"))
        return
    emit(("hello",))
    watch = Watch(Board(buffer), settings.call_bound_s, BusyCount())
    try:
        run_checks(target, settings, watch, emit)
    except Exception as exc:  # noqa: BLE001 - a harness bug: one line to the parent, no traceback on the console
        emit(("harness-error", f"{type(exc).__name__}: {one_line(exc)}"))
        return
    emit(("bye",))
    conn.close()


# -- workers: a child process, or a thread of this one ----------------------------------------

class _ChildWorker:
    isolated = True

    def __init__(self, mp: Any, payload: bytes, settings: Settings) -> None:
        self.buffer = mp.RawArray("B", Board.size())
        self.board = Board(self.buffer)
        self.conn, send = mp.Pipe(duplex=False)
        self.proc = mp.Process(target=_child_main, args=(payload, settings, self.buffer, send), daemon=False,
                               name="soak-conformance")
        self.proc.start()
        send.close()
        self.eof = False

    def recv(self, timeout: float) -> tuple | None:
        if self.eof:
            return None
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            self.eof = True
        return None

    def ended(self) -> bool:
        return self.eof or not self.proc.is_alive()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)

    def how_it_ended(self) -> str:
        self.proc.join(5)
        code = self.proc.exitcode
        if code is None:
            self.kill()
            return "a closed pipe (the process was then killed)"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "unknown"
            return f"signal {-code} ({name})"
        return f"exit status {code}"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        if self.proc.is_alive():
            self.proc.join(5)
        if self.proc.is_alive():
            self.kill()


class _ThreadWorker:
    isolated = False

    def __init__(self, target: StoreTarget, settings: Settings) -> None:
        self.board = Board(bytearray(Board.size()))
        self.watch = Watch(self.board, settings.call_bound_s, BusyCount())
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.raised = ""
        self.thread = threading.Thread(target=self._main, args=(target, settings), daemon=True,
                                       name="soak-conformance")
        self.thread.start()

    def _main(self, target: StoreTarget, settings: Settings) -> None:
        self.queue.put(("hello",))
        try:
            run_checks(target, settings, self.watch, self.queue.put)
        except Abandoned:
            return
        except Exception as exc:  # noqa: BLE001 - a harness bug
            self.queue.put(("harness-error", f"{type(exc).__name__}: {one_line(exc)}"))
            return
        except BaseException as exc:  # noqa: BLE001 - SystemExit and the like from a store call
            self.raised = f"{type(exc).__name__}({one_line(exc)})"
            return
        self.queue.put(("bye",))

    def recv(self, timeout: float) -> tuple | None:
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def ended(self) -> bool:
        return not self.thread.is_alive()

    def kill(self) -> None:
        self.watch.abandoned = True  # the thread stops at its next store call

    def how_it_ended(self) -> str:
        return f"{self.raised} raised through the checks' thread" if self.raised else "the checks' thread ending"

    def close(self) -> None:
        pass


# -- the watchdog ------------------------------------------------------------------------------

@dataclass
class _Progress:
    """Where one worker is: the check and sub-check it last started, the checks it finished."""

    gen: int
    check: str | None = None
    clause: str = ""
    sub: tuple[str, str] | None = None
    finished: set[str] = field(default_factory=set)
    clauses_seen: set[str] = field(default_factory=set)  # clauses the current check has recorded
    since: float = 0.0  # when the current check or sub-check began (this process's monotonic clock)


class _Suite:
    """The parent's side of one conformance run: starts workers, watches them, gathers what they report."""

    def __init__(self, target: StoreTarget, settings: Settings, wanted: set[str]) -> None:
        self.target = target
        self.settings = settings
        self.wanted = wanted
        self.bound = settings.call_bound_s
        self.results: list[CheckResult] = []
        self.liveness: list[CheckResult] = []
        self.late: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
        self.observed: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self.busy: dict[int, tuple[int, int]] = {}
        self.boards: list[Board] = []
        self.children = 0
        self.isolation = "child process"
        self.why = ""
        self.stop = False

    def keep(self, result: CheckResult) -> None:
        if result.clause in self.wanted:
            self.results.append(result)

    def unreported(self, report: ConformanceReport) -> None:
        """A clause asked for that no check filed a result for is undecided, never silently absent."""
        seen = {r.clause for r in report.results}
        for clause in CLAUSES:
            if clause in self.wanted and clause not in seen and clause not in LIVENESS_CLAUSES:
                report.results.append(CheckResult(clause, "-", INCONCLUSIVE,
                                                  "no check of this clause recorded a result"))

    def run(self, names: list[str]) -> None:
        payload, why = _pickled(self.target)
        remaining = list(names)
        while (remaining or self.settings.clock_ok is None) and not self.stop:
            self.settings.checks = remaining
            if payload is not None:
                try:
                    import multiprocess

                    worker: Any = _ChildWorker(multiprocess.get_context("spawn"), payload, self.settings)
                    self.children += 1
                except Exception as exc:  # noqa: BLE001 - no child process here: run in this one
                    payload, why = None, f"a child process could not be started ({type(exc).__name__}: {one_line(exc)})"
                    continue
            else:
                self.isolation, self.why = f"in-process: {why}", why
                worker = _ThreadWorker(self.target, self.settings)
            try:
                outcome, finished = self._drive(worker, remaining)
            finally:
                worker.close()
            if outcome == "unloadable":
                payload, why = None, finished
                continue
            self.boards.append(worker.board)
            remaining = [n for n in remaining if n not in finished]

    def _drive(self, worker: Any, names: list[str]) -> tuple[str, Any]:
        """Read one worker's messages and its board until it finishes, hangs or dies.
        Returns (outcome, the checks it finished or the reason it could not load the target)."""
        p = _Progress(len(self.boards))
        over: dict[int, int] = {}
        while True:
            ended = worker.ended()  # looked at before draining: every message it wrote is then read below
            msg = worker.recv(0 if ended else _POLL_S)
            while msg is not None:
                outcome = self._handle(msg, p)
                if outcome == "done":
                    return "done", set(names)
                if outcome == "unloadable":
                    return "unloadable", f"the child process could not load the store target ({msg[1]})"
                if outcome == "died":
                    return self._cut(p)
                msg = worker.recv(0)
            if ended:
                how = worker.how_it_ended()
                inside = [label for _, _, label, _ in worker.board.in_flight()]
                if inside:
                    self.liveness.append(CheckResult(
                        "no-crash", p.check or "probe", FAIL,
                        f"the process running the checks ended by {how} inside a store call: "
                        + " or ".join(inside[:3])))
                    self._interrupted(p, INCONCLUSIVE, f"interrupted: the process ended by {how} inside "
                                      f"{_call_of(inside[0])} (see no-crash)")
                elif p.check is None:
                    raise HarnessCrash(f"the conformance {'child process' if worker.isolated else 'thread'} ended by "
                                       f"{how} outside any check and any store call; nothing was concluded (a soak "
                                       "bug or an environment problem)")
                else:
                    self._interrupted(p, ERROR, f"the process running the checks ended by {how} outside any store "
                                      "call (a harness problem, not the store's)")
                return self._cut(p)
            hung = self._overdue(worker.board, over)
            if hung is not None:
                worker.kill()
                _, kind, label, took = hung
                bound = OPEN_BOUND_S if kind == KIND_OPEN else self.bound
                what = ("the child process running the checks was killed" if worker.isolated
                        else "the thread running the checks was abandoned")
                self.liveness.append(CheckResult(
                    "call-returns", p.check or "probe", FAIL,
                    f"{label} was still running at the {bound:g} s bound ({took:.1f} s charged to the store); {what} "
                    "and the suite went on with the next check"))
                self._interrupted(p, INCONCLUSIVE, f"interrupted: {_call_of(label)} did not return within the "
                                  f"{bound:g} s bound (see call-returns)")
                return self._cut(p)

    def _handle(self, msg: tuple, p: _Progress) -> str | None:
        """One message from a worker; returns 'done', 'unloadable' or 'died' where it ends the worker's run."""
        kind = msg[0]
        if kind in ("bye", "unloadable"):
            return "done" if kind == "bye" else kind
        if kind == "boot-error":
            raise StoreBootError(msg[1])
        if kind == "harness-error":
            if p.check is None:
                raise HarnessCrash(f"the conformance run failed outside any check: {msg[1]}; nothing was concluded "
                                   "(a soak bug)")
            self._interrupted(p, ERROR, f"the conformance run failed outside any check: {msg[1]} (a harness problem)")
            return "died"
        if kind == "probe":
            self.settings.clock_ok = bool(msg[1])
        elif kind == "start":
            p.check, p.clause, p.sub = msg[1], msg[2], None
            p.clauses_seen, p.since = set(), time.monotonic()
        elif kind == "sub":
            p.sub, p.since = (msg[1], msg[2]), time.monotonic()
        elif kind == "result":
            self.keep(CheckResult(*msg[1:]))
            p.clauses_seen.add(msg[1])
            p.sub = None
        elif kind == "late":
            self.late[p.check or "probe"].append(msg[1:])
        elif kind == "choice":
            self.observed[msg[1]].append((msg[2], msg[3]))
        elif kind == "busy":
            self.busy[p.gen] = (msg[1], msg[2])
        elif kind == "done":
            p.finished.add(msg[1])
            p.check, p.sub = None, None
        return None

    def _cut(self, p: _Progress) -> tuple[str, set[str]]:
        """A worker ended before its last check: the check it was in counts as run; the rest go to a fresh one."""
        if p.check is None and not p.finished:
            self.stop = True  # it ended before its first check: a fresh worker would end the same way
        return "died", p.finished | ({p.check} if p.check else set())

    def _interrupted(self, p: _Progress, status: str, detail: str) -> None:
        """File the sub-check (or check) a worker was in when it ended, and the clauses the check had not reached."""
        took = time.monotonic() - p.since
        if p.sub is not None:
            self.keep(CheckResult(p.sub[0], p.sub[1], status, detail, took))
            p.clauses_seen.add(p.sub[0])
        elif p.check is not None:
            self.keep(CheckResult(p.clause, p.check, status, detail, took))
            p.clauses_seen.add(p.clause)
        if p.check is not None:
            for clause in sorted(ALSO_COVERS.get(p.check, {p.clause}) - p.clauses_seen):
                self.keep(CheckResult(clause, p.check, INCONCLUSIVE, f"not run: check {p.check} was cut short "
                                      f"before it reached this clause ({detail})"))

    def _overdue(self, board: Board, over: dict[int, int]) -> tuple[int, int, str, float] | None:
        """The longest call past its bound, seen so on two scans in a row (a torn read is never acted on)."""
        worst = None
        seen = set()
        for slot, kind, label, took in board.in_flight():
            bound = OPEN_BOUND_S if kind == KIND_OPEN else self.bound
            if took <= bound:
                continue
            seen.add(slot)
            over[slot] = over.get(slot, 0) + 1
            if over[slot] >= 2 and (worst is None or took > worst[3]):
                worst = (slot, kind, label, took)
        for slot in list(over):
            if slot not in seen:
                del over[slot]
        return worst

    # -- what the workers reported, summed up -----------------------------------------------

    def finish(self, report: ConformanceReport) -> None:
        report.results = list(self.results)
        report.isolation = self.isolation
        report.busy = BusyCount(sum(r for r, _ in self.busy.values()), sum(e for _, e in self.busy.values()))
        self._choices(report)
        self._liveness(report)
        self.unreported(report)

    def _choices(self, report: ConformanceReport) -> None:
        for key, seen in self.observed.items():
            values = {v for v, _ in seen}
            report.choices[key] = values.pop() if len(values) == 1 else "mixed"
        deletes = self.observed.get(DELETE_CHOICE, [])
        if "delete-semantics" in self.wanted and len(deletes) >= 2:
            values = {v for v, _ in deletes}
            places = "; ".join(how for _, how in deletes)
            if len(values) == 1:
                self.keep_report(report, CheckResult(
                    "delete-semantics", "delete-choice", PASS,
                    f"a fenced delete {deletes[0][0]} the caller's tenure, the same at all {len(deletes)} fenced "
                    f"deletes seen ({places}); both choices are conformant"))
            else:
                first = {v: how for v, how in reversed(deletes)}
                self.keep_report(report, CheckResult(
                    "delete-semantics", "delete-choice", FAIL,
                    f"the store's fenced delete ended the caller's tenure in one place ({first['ends']}) but kept it "
                    f"in another ({first['keeps']}); either choice is conformant, but a store must make one"))

    def keep_report(self, report: ConformanceReport, result: CheckResult) -> None:
        if result.clause in self.wanted:
            report.results.append(result)

    def _liveness(self, report: ConformanceReport) -> None:
        calls = opens = slowest = 0
        slowest_name = ""
        for board in self.boards:
            c, o, s, name = board.totals()
            calls, opens = calls + c, opens + o
            if s > slowest:
                slowest, slowest_name = s, name
        liveness = list(self.liveness)
        for check, lates in self.late.items():
            lates = sorted(lates, key=lambda item: -item[2])
            where, label, took = lates[0]
            more = f"; {len(lates) - 1} more call(s) of this check returned late too" if len(lates) > 1 else ""
            liveness.append(CheckResult("call-returns", check, FAIL,
                                        f"{label} returned after {took:.2f} s, past the {self.bound:g} s bound "
                                        f"(in {where}){more}"))
        numbers = (f"{calls} store calls (and {opens} store factory calls); slowest {slowest / 1e6:.0f} ms"
                   + (f" ({slowest_name})" if slowest_name else "") + f"; bound {self.bound:g} s; time the harness "
                   "held a call up is not counted")
        if not any(r.clause == "call-returns" for r in liveness):
            liveness.append(CheckResult("call-returns", "call-returns", PASS, f"every call returned: {numbers}"))
        if not any(r.clause == "no-crash" for r in liveness):
            if self.isolation == "child process":
                liveness.append(CheckResult("no-crash", "no-crash", PASS,
                                            f"no store call ended the process running it: {calls} store calls in "
                                            f"{self.children} child process(es)"))
            else:
                liveness.append(CheckResult("no-crash", "no-crash", NOT_EXERCISED,
                                            f"the checks ran in this process, not a child ({self.why}), where a "
                                            "store call that ended the process would end the suite too"))
        for r in liveness:
            if r.status == FAIL:
                report.results.append(r)  # a proven violation is reported, asked for or not
            else:
                self.keep_report(report, r)


def _call_of(label: str) -> str:
    """The call itself from a board label ('check/sub: call(args)')."""
    return label.split(": ", 1)[-1]


def _pickled(target: StoreTarget) -> tuple[bytes | None, str]:
    try:
        import dill

        return dill.dumps(target), ""
    except Exception as exc:  # noqa: BLE001 - then the checks run in this process
        return None, f"the store target cannot be sent to a child process ({type(exc).__name__}: {one_line(exc)})"


def run_suite(target: StoreTarget, settings: Settings, names: list[str], wanted: set[str],
              report: ConformanceReport) -> None:
    """Run the named checks under the watchdog and fill `report` with what they found."""
    suite = _Suite(target, settings, wanted)
    suite.run(names)
    suite.finish(report)
    report.timing = "injected clock" if settings.clock_ok else "real time"


def selected_checks(wanted: set[str]) -> list[str]:
    """The checks to run for `wanted` clause ids; liveness alone is judged over every check."""
    names = [name for clause, name, _ in CHECKS if ALSO_COVERS.get(name, {clause}) & wanted]
    if not names and wanted & set(LIVENESS_CLAUSES):
        names = [name for _, name, _ in CHECKS]
    return names


assert set(LIVENESS_CLAUSES) <= set(CLAUSES)
