"""Fold a run's history files on both cores: the later files in a forked child, merged in file order.

Decoding and folding a file needs nothing from the other files, and `soak.check.core.merge`
combines two partial folds exactly as one pass over all files in order would have continued.
So the files (sorted, as one pass reads them) are cut into two contiguous groups of about
equal size; a forked child folds the second while this process folds the first, then sends
its compact summaries back through a pipe. Without `os.fork`, with threads running (forking
them is unsafe), for small histories, or if the child fails, everything is folded here.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
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

    def child() -> Iterator[Any]:
        try:
            later = new()
            fold(later, history_tuples(second))
        except HistoryCorruptError as exc:
            yield "corrupt", str(exc)
            return
        tenures, objects = list(later.tenures.items()), list(later.objects.items())
        later.snapshot, later.index, later.tenures, later.objects = None, {}, {}, {}  # the parent has the first two
        yield "ok", later
        for i in range(0, len(tenures), _CHUNK):
            yield "tenures", tenures[i:i + _CHUNK]
        for i in range(0, len(objects), _CHUNK):
            yield "objects", objects[i:i + _CHUNK]

    def here() -> Facts:
        facts = new()
        fold(facts, history_tuples(first))
        return facts

    facts, frames = _fork_join(child, here)
    if frames is not None:
        try:
            kind, body = next(frames, ("error", None))
            if kind == "corrupt":
                raise HistoryCorruptError(body)
            if kind == "ok":
                merge(facts, body)
                for kind, items in frames:
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

    def child() -> Iterator[Any]:
        results = run_checkers(facts, theirs)
        yield results, {k: v for k, v in facts.stats.items() if stats_before.get(k) != v}

    own, frames = _fork_join(child, lambda: run_checkers(facts, mine))
    sent = None if frames is None else next(frames, None)
    if frames is not None:
        frames.close()
    if sent is None:
        results = run_checkers(facts, theirs)
    else:
        results, added = sent
        facts.stats.update(added)
    found = dict(zip([c[0] for c in mine], own)) | dict(zip([c[0] for c in theirs], results))
    return [found[name] for name, _ in checkers]


T = TypeVar("T")


def _fork_join(child: Callable[[], Iterable[Any]], here: Callable[[], T]) -> tuple[T, Iterator[Any] | None]:
    """Run `child` in a forked process while this one runs `here`: what `here` returns, and the child's frames.

    The child pickles each object it yields on its own (no pickle memo grows with the whole) and
    leaves without running this process's cleanup. The frames iterator reads them as they are
    consumed and reaps the child once exhausted or closed; it is None when `here` finished but
    the child could not be started.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        status = 0
        try:
            with os.fdopen(write_end, "wb") as out:
                for frame in child():
                    pickle.dump(frame, out, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # noqa: BLE001 - the parent sees the frames stop and does the work itself
            status = 1
        os._exit(status)
    os.close(write_end)
    inp = os.fdopen(read_end, "rb")
    try:
        result = here()
    except BaseException:
        inp.close()
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    return result, _frames(inp, pid)


def _frames(inp: Any, pid: int) -> Iterator[Any]:
    """The child's frames, until it ends (a broken last frame ends them too); then the child is reaped."""
    try:
        while True:
            try:
                yield pickle.load(inp)
            except (EOFError, pickle.UnpicklingError):
                return
    finally:
        inp.close()
        try:
            os.kill(pid, signal.SIGKILL)  # a no-op once it has exited; stops it when the frames were left unread
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)


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
