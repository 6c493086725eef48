"""Fold a run's history in bounded memory, on both cores: for any workload whose `CheckPlan` is bounded.

Every history file holds its processes' operations in invocation order, so the files can be read
a time slice at a time: after a slice, every operation invoked before its end is folded, and the
workload's `settle` judges what can no longer change and retires what nothing still to come can
consult. The facts then hold what is in flight, not the history (`stream_files`).

On two cores (`TwoCores`), the files (sorted, as one pass reads them) are cut into two contiguous
groups of about equal size. A forked child folds each slice of the second group into fresh facts
and sends them; this process folds the same slice of the first, merges the child's part (the
plan's `merge` continues a fold exactly as one pass would have) and settles, while the child
already folds the next slice. The checkers then run here, on what is left.

Without `os.fork`, with threads running (forking them is unsafe), for small histories, or if the
child fails, everything is done here. A file out of invocation order (a hand-written one holding
several processes) cannot be sliced: the history is then folded whole, file by file, and checked
at the end, as are histories checked with other checkers than the plan's (settling runs those by
name) and histories of a workload whose plan does not settle. The verdict is the same either way.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import queue
import signal
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar

from soak.check.judge import CheckPlan
from soak.history import INVOKE_NS, HistoryCorruptError, Record, first_invoke_ns, operation_tuples

__all__ = ["SLICE_OPS", "TwoCores", "fold_files", "history_tuples", "stream_files"]

#: Below this many bytes of history a child process costs more than it saves.
MIN_PARALLEL_BYTES = 4 << 20
#: The child's share of the history's bytes: this process also merges, settles and checks.
CHILD_SHARE = 0.65
#: Operations a time slice aims at: what is in flight between two settlings (about 10 MB of summaries).
SLICE_OPS = 1 << 15


_NEVER = float("inf")


def history_tuples(paths: Sequence[Path], make_lease: Any = None) -> Iterator[tuple[Any, ...] | Record]:
    """The operation tuples and events of `paths` in order (leases decoded by `make_lease`, default a run lease);
    a corrupt file is named in the error."""
    for path in paths:
        with _naming(path):
            yield from operation_tuples(path, make_lease)


def fold_files(facts: Any, paths: Sequence[Path], plan: CheckPlan) -> None:
    """Fold the files `paths` whole, in order, into `facts` (as `plan.fold(facts, history_tuples(paths))`, a layer
    cheaper)."""
    for path in paths:
        with _naming(path):
            plan.fold(facts, operation_tuples(path, plan.make_lease))


def stream_files(facts: Any, paths: Sequence[Path], plan: CheckPlan, slice_ops: int = SLICE_OPS) -> None:
    """Fold the files `paths` into `facts` a time slice of about `slice_ops` operations at a time, settling after
    each (`plan.settle`). Raises `plan.unordered` for a file out of invocation order."""
    files = _Files(paths, plan)
    slices = _Slices(facts, slice_ops)
    start = files.next_invoke()
    until = slices.first(start)
    while True:
        before = facts.stats["operations"]
        files.fold(facts, until)
        if files.done:
            return
        plan.settle(facts, until)
        start, until = until, slices.next(facts.stats["operations"] - before, until - start, files.next_invoke())


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """Name `path` in a corrupt-history error that does not already."""
    try:
        yield
    except HistoryCorruptError as exc:
        msg = str(exc)
        raise HistoryCorruptError(msg if str(path) in msg else f"{path}: {msg}") from exc


class _Files:
    """History files read a time slice at a time, each up to its first operation not yet folded.

    A file is opened once the slices reach its first invocation, and closed once it is read: a long
    storm leaves a file per worker incarnation, of which only the current ones are open at a time.
    """

    def __init__(self, paths: Sequence[Path], plan: CheckPlan) -> None:
        self.plan = plan
        firsts = [(first_invoke_ns(p), k, p) for k, p in enumerate(paths)]
        # (first invocation, position, path) of the files not opened yet, the earliest last
        self.waiting = sorted((f for f in firsts if f[0] is not None), reverse=True)
        # [position, path, its operations, the first one not folded or _FRESH]; a file whose first invocation is
        # not known at a glance is read from the first slice
        self.open: list[list[Any]] = [[k, p, operation_tuples(p, plan.make_lease), _FRESH] for start, k, p in firsts if start is None]

    @property
    def done(self) -> bool:
        """Whether every file is read."""
        return not self.open and not self.waiting

    def next_invoke(self) -> float:
        """The earliest invocation not yet folded (infinity once every file is)."""
        first = self.waiting[-1][0] if self.waiting else _NEVER
        return min(first, min((f[3][INVOKE_NS] for f in self.open if f[3] is not _FRESH), default=_NEVER))

    def fold(self, facts: Any, until: float) -> None:
        """Fold every operation invoked before `until` into `facts`."""
        fold = self.plan.fold
        if self.waiting and self.waiting[-1][0] < until:
            while self.waiting and self.waiting[-1][0] < until:
                _, k, path = self.waiting.pop()
                self.open.append([k, path, operation_tuples(path, self.plan.make_lease), _FRESH])
            self.open.sort(key=_position)  # folded in file order, as the whole history is
        for f in self.open:
            with _naming(f[1]):
                f[3] = fold(facts, f[2] if f[3] is _FRESH else itertools.chain((f[3],), f[2]), until)
        self.open = [f for f in self.open if f[3] is not None]


#: A file opened but not read yet (`_Files`).
_FRESH = ("fresh",)
_position = itemgetter(0)


class _Slices:
    """Where time slices end: a ttl apart at first, then as far apart as `ops` operations took in a slice
    measured (the rate, not the count, is carried over, so that a slice measured late does not make them swing)."""

    def __init__(self, facts: Any, ops: int) -> None:
        self.span, self.ops = max(1, facts.ttl_ns), ops
        self.end: float = -_NEVER  # the end of the latest slice handed out

    def first(self, start: float) -> float:
        self.end = start + self.span if start != _NEVER else _NEVER
        return self.end

    def next(self, folded: int, span: float, start: float) -> float:
        """The end of the next slice, after a slice of `span` nanoseconds (0: none measured yet) that held `folded`
        operations; the next operation not folded was invoked at `start` (a gap in the history is skipped)."""
        if 0 < span < _NEVER and folded:
            want = self.ops * span / folded
        else:
            want = 4 * self.span if span else self.span  # an empty slice widens the next
        self.span = max(1, int(min(4 * self.span, max(self.span / 4, want))))
        self.end = max(self.end, start) + self.span if start != _NEVER else _NEVER
        return self.end


class TwoCores:
    """Fold the history files `paths` (in this order) into facts from `new`, on two cores, settling as it goes.

    `fold` returns the facts left to check (what settling judged is in them). Use as a context
    manager, so that a child is reaped however the check ends::

        with TwoCores(paths, new, plan) as cores:
            verdict = judge(lambda: plan.finish(cores.fold()), plan)

    `checkers` other than the plan's fold the history whole (settling judges by the plan's checkers).
    """

    def __init__(self, paths: Sequence[Path], new: Callable[[], Any], plan: CheckPlan,
                 checkers: Sequence[tuple[str, Any]] | None = None, *, workers: int = 2,
                 slice_ops: int = SLICE_OPS) -> None:
        self.paths, self.new, self.plan, self.workers = list(paths), new, plan, workers
        self.whole = not plan.bounded or (checkers is not None and tuple(checkers) != plan.all_checkers())
        self.slice_ops = slice_ops
        self._child: _Child | None = None

    def __enter__(self) -> TwoCores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._child is not None:
            self._child.close()
            self._child = None

    def fold(self) -> Any:
        """The facts of every file: sliced and settled on two cores, or here, or folded whole (see the module)."""
        paths, plan = self.paths, self.plan
        try:
            if self.whole:
                return self._fold_here(paths)  # settling judges by the plan's checkers
            first, second, total = _split(paths, CHILD_SHARE)
            if self.workers >= 2 and second and _can_fork() and total >= MIN_PARALLEL_BYTES:
                try:
                    return self._stream_two(first, second)
                except (plan.overlap, _ChildFailed):
                    pass  # one process's records in both groups, or the child failed: do it all here
                finally:
                    self.close()
            facts = self.new()
            stream_files(facts, paths, plan, self.slice_ops)
            return facts
        except plan.unordered:
            return self._fold_here(paths)

    def _fold_here(self, paths: Sequence[Path]) -> Any:
        facts = self.new()
        fold_files(facts, paths, self.plan)
        return facts

    def _stream_two(self, first: Sequence[Path], second: Sequence[Path]) -> Any:
        """`stream_files` with the files `second` folded by a forked child, a slice at a time."""
        new, plan = self.new, self.plan
        merge, settle, unordered = plan.merge, plan.settle, plan.unordered

        def child() -> Generator[Any, Any, None]:
            template = new()
            try:
                files = _Files(second, plan)
                yield "first", plan.ship(template), files.next_invoke()
                settled = -_NEVER
                while True:
                    answer = list((yield _ASK))
                    if not answer or answer[0] is None:
                        return
                    until = answer[0]
                    part = plan.new_part(template)
                    part.settled = settled
                    files.fold(part, until)
                    yield "slice", plan.ship(part), files.next_invoke()
                    settled = until
            except HistoryCorruptError as exc:
                yield "corrupt", str(exc)
            except unordered as exc:
                yield "unordered", str(exc)

        facts = self.new()
        mine, frames = _fork_join(child, lambda: _Files(first, plan))
        self._child = frames
        part, theirs = _expect(frames, "first", unordered)
        merge(facts, part)
        slices = _Slices(facts, self.slice_ops)
        # The child is told where a slice ends one slice ahead, so that it never waits for this process to
        # merge and settle: the ends are reckoned from this process's counts (about its share of each slice).
        start = min(mine.next_invoke(), theirs)
        until = slices.first(start)
        ahead = slices.next(0, 0, until)
        frames.send([until])
        frames.send([ahead])
        scale = 1 / (1 - CHILD_SHARE)
        while True:
            before = facts.stats["operations"]
            mine.fold(facts, until)
            folded = int(scale * (facts.stats["operations"] - before))
            after = slices.next(folded, until - start, min(mine.next_invoke(), theirs))
            frames.send([after])
            part, theirs = _expect(frames, "slice", unordered)
            merge(facts, part)
            if mine.done and theirs == _NEVER:
                return facts
            settle(facts, until)
            start, until, ahead = until, ahead, after


class _ChildFailed(Exception):
    """The child's frames stopped or made no sense: do its part here."""


def _expect(frames: _Child, kind: str, unordered: type[Exception]) -> tuple[Any, ...]:
    """The body of the child's next frame, which must be `kind` (its questions are skipped)."""
    for frame in frames:
        if frame == _ASK:
            continue
        if frame[0] == kind:
            return frame[1:]
        if frame[0] == "corrupt":
            raise HistoryCorruptError(frame[1])
        if frame[0] == "unordered":
            raise unordered(frame[1])
        break
    raise _ChildFailed


T = TypeVar("T")
#: What a child yields to ask this process a question; its next frame follows the answer (`_Child.send`).
_ASK = "?"
#: What ends an answer.
_END = "."


def _incoming(answers: Any) -> Iterator[Any]:
    """The frames of one answer, as the child reads them."""
    while (frame := pickle.load(answers)) != _END:
        yield frame


def _fork_join(child: Callable[[], Generator[Any, Any, None]], here: Callable[[], T]) -> tuple[T, _Child]:
    """Run `child` in a forked process while this one runs `here`: what `here` returns, and the child.

    The child pickles each frame it yields on its own (no pickle memo grows with the whole), sends it
    with its length first (this process reads them off the pipe as they come, `_Child`, so the child
    never waits on a full pipe) and leaves without running this process's cleanup; a frame `_ASK`
    waits for this process's answer (`_Child.send`, which may come before the question), whose
    frames the yield returns in the child as an iterator to read up.
    """
    read_end, write_end = os.pipe()
    back_read, back_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.close(back_write)
        status = 0
        try:
            with os.fdopen(write_end, "wb") as out, os.fdopen(back_read, "rb") as answers:
                frames = child()
                frame = next(frames, None)
                while frame is not None:
                    data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
                    out.write(len(data).to_bytes(8, "little"))
                    out.write(data)
                    out.flush()  # the parent may be waiting for this very frame
                    answer = None
                    if frame == _ASK:
                        answer = _incoming(answers)
                    frame = frames.send(answer)
        except StopIteration:
            pass
        except BaseException:  # noqa: BLE001 - the parent sees the frames stop and does the work itself
            status = 1
        os._exit(status)
    os.close(write_end)
    os.close(back_read)
    them = _Child(pid, os.fdopen(read_end, "rb"), os.fdopen(back_write, "wb"))
    try:
        result = here()
    except BaseException:
        them.close()
        raise
    return result, them


class _Child:
    """A forked child: its frames as they are read (they end when it ends), and answers to its questions.

    A thread reads the frames off the pipe as the child writes them (it holds the interpreter lock only
    between reads); they are unpickled here as they are asked for.
    """

    def __init__(self, pid: int, frames: Any, answers: Any) -> None:
        self.pid, self._frames, self._answers = pid, frames, answers
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, name="soak-check-child-frames", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while len(head := self._frames.read(8)) == 8:
                n = int.from_bytes(head, "little")
                data = self._frames.read(n)
                if len(data) != n:
                    break
                self._queue.put(data)
        except (OSError, ValueError):  # closed
            pass
        self._queue.put(None)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        data = self._queue.get()
        if data is None:
            self._queue.put(None)  # ended, for good
            raise StopIteration
        try:
            return pickle.loads(data)
        except (EOFError, pickle.UnpicklingError, ValueError):
            raise StopIteration from None

    def send(self, frames: Iterable[Any]) -> None:
        """Answer the child's question with `frames`, each pickled on its own (the child reads them all)."""
        try:
            for frame in frames:
                pickle.dump(frame, self._answers, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.dump(_END, self._answers)
            self._answers.flush()
        except OSError as exc:  # the child is gone (a broken pipe)
            raise _ChildFailed from exc

    def close(self) -> None:
        """Stop the child if it is still running, reap it, and end the reading thread (the pipe ends with it)."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)  # a no-op once it has exited
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0
        self._reader.join()
        for f in (self._frames, self._answers):
            try:
                f.close()
            except OSError:
                pass


def _can_fork() -> bool:
    """Forking is safe only where there is fork and no other thread (it could hold a lock the child needs)."""
    return hasattr(os, "fork") and threading.active_count() == 1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _split(paths: list[Path], share: float = 0.5) -> tuple[list[Path], list[Path], int]:
    """Two contiguous groups, the second with about `share` of the bytes (the first never empty when there are
    paths), and the bytes."""
    sizes = [_size(p) for p in paths]
    total, acc = sum(sizes), 0
    for i, size in enumerate(sizes):
        if i and acc + size / 2 > total * (1 - share):
            return paths[:i], paths[i:], total
        acc += size
    return paths, [], total
