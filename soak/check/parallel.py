"""Fold a run's history files on both cores: the later files in a forked child, merged in file order.

Decoding and folding a file needs nothing from the other files, and `soak.check.core.merge`
combines two partial folds exactly as one pass over all files in order would have continued.
So the files (sorted, as one pass reads them) are cut into two contiguous groups of about
equal size; a forked child folds the second while this process folds the first, then sends
its summaries back through a pipe, a frame at a time. Per-object summaries are consulted only
for objects some read names (`check_reads`), so only those cross the pipe and stay. Then half
the checkers run in a second forked child that shares the facts copy-on-write. Without
`os.fork`, with threads running (forking them is unsafe), for small histories, or if a child
fails, everything is done here; the verdict is the same either way.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from soak.check.core import Checker, Facts, FoldOverlap, fold, merge, merge_objects, merge_tenures, run_checkers
from soak.check.verdict import Violation
from soak.history import HistoryCorruptError, Record, operation_tuples

__all__ = ["CHILD_CHECKERS", "fold_files", "history_tuples", "split_checkers"]

#: Below this many bytes of history a child process costs more than it saves.
MIN_PARALLEL_BYTES = 4 << 20
#: Tenures or objects per frame the folding child sends (each frame is pickled on its own).
_CHUNK = 4096
#: Below this many operations the checkers run in this process.
MIN_PARALLEL_OPS = 200_000
#: The checkers a forked child runs while this process runs the others: about half the work.
CHILD_CHECKERS = frozenset(("refusals", "reads", "boot", "takeovers", "probe"))


def history_tuples(paths: Sequence[Path]) -> Iterator[tuple[Any, ...] | Record]:
    """The operation tuples and events of `paths` in order; a corrupt file is named in the error."""
    for path in paths:
        try:
            yield from operation_tuples(path)
        except HistoryCorruptError as exc:
            msg = str(exc)
            raise HistoryCorruptError(msg if str(path) in msg else f"{path}: {msg}") from exc


def fold_files(paths: Sequence[Path], new: Callable[[], Facts], *, workers: int = 2) -> Facts:
    """Fold the history files `paths` (in this order) into fresh facts from `new`, using two processes if it pays."""
    paths = list(paths)
    first, second = _split(paths)
    if workers < 2 or not second or not _can_fork() or sum(_size(p) for p in paths) < MIN_PARALLEL_BYTES:
        facts = new()
        fold(facts, history_tuples(paths))
        return facts

    def child() -> Generator[Any, Any, None]:
        try:
            later = new()
            fold(later, history_tuples(second))
        except HistoryCorruptError as exc:
            yield "corrupt", str(exc)
            return
        tenures, objects = list(later.tenures.items()), later.objects
        later.snapshot, later.index, later.tenures, later.objects = None, {}, {}, {}  # the parent has the first two
        yield "ok", later
        for i in range(0, len(tenures), _CHUNK):
            yield "tenures", tenures[i:i + _CHUNK]
        # Object summaries are consulted only for objects some read names: send just those.
        read = yield _ASK
        wanted = [item for item in objects.items() if item[0] in read]
        for i in range(0, len(wanted), _CHUNK):
            yield "objects", wanted[i:i + _CHUNK]

    def here() -> Facts:
        facts = new()
        fold(facts, history_tuples(first))
        return facts

    facts, frames = _fork_join(child, here)
    try:
        kind, body = next(frames, ("error", None))
        if kind == "corrupt":
            raise HistoryCorruptError(body)
        if kind == "ok":
            merge(facts, body)
            read = {rd.obj for rd in facts.reads}  # the objects the reads of both groups name
            for obj in [o for o in facts.objects if o not in read]:
                del facts.objects[obj]  # never consulted: free it before the child's summaries arrive
            for frame in frames:
                if frame == _ASK:
                    frames.reply(read)
                    continue
                kind, items = frame
                (merge_tenures if kind == "tenures" else merge_objects)(facts, items)
            return facts
    except FoldOverlap:
        pass  # one process's records in both groups: fold them in one pass below
    finally:
        frames.close()
    facts = new()
    fold(facts, history_tuples(paths))
    return facts


def split_checkers(facts: Facts, checkers: Sequence[tuple[str, Checker]]) -> list[tuple[list[Violation], str | None]]:
    """`run_checkers`, with those named in `CHILD_CHECKERS` in a forked child when the history is long.

    The child shares the facts copy-on-write and sends back only its findings (and the statistics
    its checkers add), so the results are the same, in the same order, as one process gives.
    """
    mine = [c for c in checkers if c[0] not in CHILD_CHECKERS]
    theirs = [c for c in checkers if c[0] in CHILD_CHECKERS]
    if (not mine or not theirs or not _can_fork() or facts.stats.get("operations", 0) < MIN_PARALLEL_OPS):
        return run_checkers(facts, checkers)
    stats_before = dict(facts.stats)

    def child() -> Generator[Any, Any, None]:
        results = run_checkers(facts, theirs)
        yield results, {k: v for k, v in facts.stats.items() if stats_before.get(k) != v}

    own, frames = _fork_join(child, lambda: run_checkers(facts, mine))
    sent = next(frames, None)
    frames.close()
    if sent is None:
        results = run_checkers(facts, theirs)
    else:
        results, added = sent
        facts.stats.update(added)
    found = dict(zip([c[0] for c in mine], own)) | dict(zip([c[0] for c in theirs], results))
    return [found[name] for name, _ in checkers]


T = TypeVar("T")
#: What a child yields to ask this process a question; its next frame follows the answer (`_Child.reply`).
_ASK = "?"


def _fork_join(child: Callable[[], Generator[Any, Any, None]], here: Callable[[], T]) -> tuple[T, _Child]:
    """Run `child` in a forked process while this one runs `here`: what `here` returns, and the child.

    The child pickles each frame it yields on its own (no pickle memo grows with the whole) and
    leaves without running this process's cleanup; a frame `_ASK` waits for this process's
    `reply`, which the yield returns in the child.
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
                    pickle.dump(frame, out, protocol=pickle.HIGHEST_PROTOCOL)
                    answer = None
                    if frame is _ASK:
                        out.flush()
                        answer = pickle.load(answers)
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
    """A forked child: its frames as they are read (they end when it ends), and answers to its questions."""

    def __init__(self, pid: int, frames: Any, answers: Any) -> None:
        self.pid, self._frames, self._answers = pid, frames, answers

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return pickle.load(self._frames)
        except (EOFError, pickle.UnpicklingError, OSError, ValueError):  # ended, cut short, or closed
            raise StopIteration from None

    def reply(self, answer: Any) -> None:
        pickle.dump(answer, self._answers, protocol=pickle.HIGHEST_PROTOCOL)
        self._answers.flush()

    def close(self) -> None:
        """Stop the child if it is still running and reap it."""
        for f in (self._frames, self._answers):
            try:
                f.close()
            except OSError:
                pass
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)  # a no-op once it has exited
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0


def _can_fork() -> bool:
    """Forking is safe only where there is fork and no other thread (it could hold a lock the child needs)."""
    return hasattr(os, "fork") and threading.active_count() == 1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _split(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """Two contiguous groups of about equal bytes (the first group never empty when there are paths)."""
    sizes = [_size(p) for p in paths]
    total, acc = sum(sizes), 0
    for i, size in enumerate(sizes):
        if i and acc + size / 2 > total / 2:
            return paths[:i], paths[i:]
        acc += size
    return paths, []
