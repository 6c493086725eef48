"""Check a run's history on both cores: fold the files in two processes, then run the checkers in both.

Decoding and folding a file needs nothing from the other files, and `soak.check.core.merge`
combines two partial folds exactly as one pass over all files in order would have continued.
So the files (sorted, as one pass reads them) are cut into two contiguous groups of about
equal size; a forked child folds the second while this process folds the first. Then the two
trade what they folded: the child sends all of its summaries, a frame at a time, and this
process sends the child its own, less what only its own checkers read (per-object summaries and
reads, the bulk). Each side merges, and the checkers run on both cores, each process on its own
copy of the facts (a child forked after the merge would copy every page it touched instead).
Without `os.fork`, with threads running (forking them is unsafe), for small histories, or if
the child fails, everything is done here; the verdict is the same either way.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from soak.check.core import (
    CHECKERS, Checker, Facts, FoldOverlap, finish, fold, merge, merge_objects, merge_tenures, run_checkers,
)
from soak.check.verdict import Violation
from soak.history import HistoryCorruptError, Record, operation_tuples

__all__ = ["CHILD_CHECKERS", "TwoCores", "history_tuples"]

#: Below this many bytes of history a child process costs more than it saves.
MIN_PARALLEL_BYTES = 4 << 20
#: Tenures or objects per frame the folding child sends (each frame is pickled on its own).
_CHUNK = 4096
#: Below this many operations the checkers all run in this process.
MIN_PARALLEL_OPS = 200_000
#: The checkers the child runs while this process runs the others (the read checks and the state
#: diff): about half the work each.
CHILD_CHECKERS = frozenset(("grants", "fencing", "refusals", "boot", "takeovers", "probe"))
#: What no checker in `CHILD_CHECKERS` reads: this process keeps it (and the child keeps its own
#: snapshot and state index, which it had before the fork).
_KEPT_HERE = {"objects": dict, "reads": list, "snapshot": lambda: None, "index": dict}


def history_tuples(paths: Sequence[Path]) -> Iterator[tuple[Any, ...] | Record]:
    """The operation tuples and events of `paths` in order; a corrupt file is named in the error."""
    for path in paths:
        try:
            yield from operation_tuples(path)
        except HistoryCorruptError as exc:
            msg = str(exc)
            raise HistoryCorruptError(msg if str(path) in msg else f"{path}: {msg}") from exc


class TwoCores:
    """Fold the history files `paths` (in this order) into facts from `new`, then run `checkers`, on two cores.

    `fold` returns the merged facts; `run_checkers` is a `soak.check.core.Runner` that gives the
    results one process gives, in the same order. Use as a context manager, so the child is
    reaped however the check ends::

        with TwoCores(paths, new) as cores:
            verdict = judge(lambda: finish(cores.fold()), runner=cores.run_checkers)
    """

    def __init__(self, paths: Sequence[Path], new: Callable[[], Facts],
                 checkers: Sequence[tuple[str, Checker]] = CHECKERS, *, workers: int = 2) -> None:
        self.paths, self.new, self.checkers, self.workers = list(paths), new, tuple(checkers), workers
        self._child: _Child | None = None

    def __enter__(self) -> TwoCores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._child is not None:
            self._child.close()
            self._child = None

    def _fold_here(self, paths: Sequence[Path]) -> Facts:
        facts = self.new()
        fold(facts, history_tuples(paths))
        return facts

    def fold(self) -> Facts:
        """The facts of every file, folded in two processes when that pays (the child stays for the checkers)."""
        self.close()
        paths = self.paths
        first, second = _split(paths)
        if (self.workers < 2 or not second or not _can_fork()
                or sum(_size(p) for p in paths) < MIN_PARALLEL_BYTES):
            return self._fold_here(paths)
        theirs = [c for c in self.checkers if c[0] in CHILD_CHECKERS]
        new = self.new

        def child() -> Generator[Any, Any, None]:
            try:
                later = new()
                fold(later, history_tuples(second))
            except HistoryCorruptError as exc:
                yield "corrupt", str(exc)
                return
            tenures, objects, snapshot, index = later.tenures, later.objects, later.snapshot, later.index
            later.snapshot, later.index, later.tenures, later.objects = None, {}, {}, {}  # the parent has the first two
            yield "ok", later
            for items, kind in ((list(tenures.items()), "tenures"), (list(objects.items()), "objects")):
                for i in range(0, len(items), _CHUNK):
                    yield kind, items[i:i + _CHUNK]
            del objects
            earlier = yield _ASK  # the parent's fold without what only its checkers read, or None: done
            if earlier is None:
                return
            earlier.snapshot, earlier.index = snapshot, index
            later.tenures, later.reads = tenures, []
            merge(earlier, later)
            finish(earlier)
            before = dict(earlier.stats)
            results = run_checkers(earlier, theirs)
            yield "checked", results, {k: v for k, v in earlier.stats.items() if before.get(k) != v}

        facts, frames = _fork_join(child, lambda: self._fold_here(first))
        try:
            # What the child's checkers need of this fold, taken before the merge changes it (while the
            # child is still sending): not worth a process below MIN_PARALLEL_OPS.
            part = None
            if theirs and 2 * facts.stats["operations"] >= MIN_PARALLEL_OPS:
                part = pickle.dumps(dataclasses.replace(facts, **{k: v() for k, v in _KEPT_HERE.items()}),
                                    protocol=pickle.HIGHEST_PROTOCOL)
            kind, body = next(frames, ("error", None))
            if kind == "corrupt":
                raise HistoryCorruptError(body)
            if kind == "ok":
                merge(facts, body)
                read = {rd.obj for rd in facts.reads}  # the objects the reads of both groups name
                for obj in [o for o in facts.objects if o not in read]:
                    del facts.objects[obj]  # never consulted: free it before the child's summaries arrive
                for frame in frames:
                    if frame == _ASK:  # the child has sent everything
                        frames.reply_pickled(part)
                        if part is not None:
                            self._child, frames = frames, None
                        return facts
                    kind, items = frame
                    if kind == "tenures":
                        merge_tenures(facts, items)
                    else:
                        merge_objects(facts, [item for item in items if item[0] in read])
        except FoldOverlap:
            pass  # one process's records in both groups: fold them in one pass below
        finally:
            if frames is not None:
                frames.close()
        return self._fold_here(paths)

    def run_checkers(self, facts: Facts, checkers: Sequence[tuple[str, Checker]]) -> list[tuple[list[Violation], str | None]]:
        """`soak.check.core.run_checkers`, with those in `CHILD_CHECKERS` run by the child that folded with `fold`.

        The child runs them on its own merged copy and sends back only its findings (and the
        statistics its checkers add). Without that child, or for other checkers, all run here.
        """
        child, self._child = self._child, None
        if child is None or tuple(checkers) != self.checkers:
            if child is not None:
                child.close()
            return run_checkers(facts, checkers)
        mine = [c for c in checkers if c[0] not in CHILD_CHECKERS]
        theirs = [c for c in checkers if c[0] in CHILD_CHECKERS]
        try:
            own = run_checkers(facts, mine)
            sent = next(child, None)
        finally:
            child.close()
        if sent is None or sent[0] != "checked":
            results = run_checkers(facts, theirs)
        else:
            results = sent[1]
            facts.stats.update(sent[2])
        found = dict(zip([c[0] for c in mine], own)) | dict(zip([c[0] for c in theirs], results))
        return [found[name] for name, _ in checkers]


T = TypeVar("T")
#: What a child yields to ask this process a question; its next frame follows the answer (`_Child.reply_pickled`).
_ASK = "?"


def _fork_join(child: Callable[[], Generator[Any, Any, None]], here: Callable[[], T]) -> tuple[T, _Child]:
    """Run `child` in a forked process while this one runs `here`: what `here` returns, and the child.

    The child pickles each frame it yields on its own (no pickle memo grows with the whole) and
    leaves without running this process's cleanup; a frame `_ASK` waits for this process's
    `reply_pickled`, which the yield returns in the child.
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

    def reply_pickled(self, answer: bytes | None) -> None:
        """Answer the child's question with `answer`, already pickled (None: answer None)."""
        self._answers.write(pickle.dumps(None) if answer is None else answer)
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
