"""Check a run's history on both cores: fold the files in two processes, then run the checkers in both.

Decoding and folding a file needs nothing from the other files, and `soak.check.core.merge`
combines two partial folds exactly as one pass over all files in order would have continued.
So the files (sorted, as one pass reads them) are cut into two contiguous groups of about
equal size; a forked child folds the second while this process folds the first. Then the two
trade what they folded: the child sends its summaries, less its reads and per-object summaries
(the bulk of them), a frame at a time, and this process reads them all, then sends the child its
whole fold (packed while the child was still folding), which the child reads whole before it
unpacks it, so neither waits on the other's full pipe. Each side merges; the child checks the
reads, which need the reads and objects of both halves, while this process runs every other
checker, each on its own copy of the facts (a child forked after the merge would copy every page
it touched instead).
Without `os.fork`, with threads running (forking them is unsafe), for small histories, or if
the child fails, everything is done here; the verdict is the same either way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import marshal
import os
import pickle
import select
import signal
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any, TypeVar

from soak.check.core import (
    CHECKERS, Checker, Facts, FoldOverlap, _Tenure, finish, fold, merge, merge_objects, merge_reads,
    merge_tenures, run_checkers,
)
from soak.check.verdict import Violation
from soak.history import HistoryCorruptError, Record, operation_tuples

__all__ = ["CHILD_CHECKERS", "TwoCores", "fold_files", "history_tuples"]

#: Below this many bytes of history a child process costs more than it saves.
MIN_PARALLEL_BYTES = 4 << 20
#: Tenures, reads or objects per frame the folding child sends (each frame is pickled on its own).
_CHUNK = 4096
#: Below this many operations the checkers all run in this process.
MIN_PARALLEL_OPS = 200_000
#: The checkers the child always runs: the reads and per-object summaries of both halves they judge
#: (the bulk of the facts) stay with the child. This process runs the others, less those `_balance`
#: moves to the child as well.
CHILD_CHECKERS = frozenset(("reads",))
#: What a checker costs, in CPU microseconds per item of the facts it walks (measured at 1M operations):
#: used only to split the checkers between the two processes.
_COSTS: dict[str, tuple[float, Callable[[Facts], int]]] = {
    "reads": (3.8, lambda f: len(f.reads)),
    "grants": (4.7, lambda f: len(f.tenures)),
    "fencing": (3.4, lambda f: len(f.tenures)),
    "takeovers": (2.1, lambda f: sum(len(ra.held) for ra in f.run_acc.values()) // 4),
}


def history_tuples(paths: Sequence[Path]) -> Iterator[tuple[Any, ...] | Record]:
    """The operation tuples and events of `paths` in order; a corrupt file is named in the error."""
    for path in paths:
        with _naming(path):
            yield from operation_tuples(path)


def fold_files(facts: Facts, paths: Sequence[Path]) -> None:
    """Fold the files `paths` in order into `facts` (as `fold(facts, history_tuples(paths))`, a layer cheaper)."""
    for path in paths:
        with _naming(path):
            fold(facts, operation_tuples(path))


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """Name `path` in a corrupt-history error that does not already."""
    try:
        yield
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
        self._theirs: frozenset[str] = frozenset()  # the checkers the child runs

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
        fold_files(facts, paths)
        return facts

    def fold(self) -> Facts:
        """The facts of every file, folded in two processes when that pays (the child stays for the checkers)."""
        self.close()
        paths = self.paths
        first, second, total = _split(paths)
        if self.workers < 2 or not second or not _can_fork() or total < MIN_PARALLEL_BYTES:
            return self._fold_here(paths)
        checkers, new = self.checkers, self.new

        def child() -> Generator[Any, Any, None]:
            try:
                later = new()
                fold_files(later, second)
            except HistoryCorruptError as exc:
                yield "corrupt", str(exc)
                return
            yield "reading", frozenset(rd[0] for rd in later.reads)  # the parent sends only these objects' summaries
            # Its small parts and tenures go first: the parent merges them and starts its checkers while this
            # process reads the parent's fold. (The parent had the snapshot and its index before the fork.)
            yield "rest", dataclasses.replace(later, snapshot=None, index={}, tenures={}, objects={}, reads=[])
            yield from _send("tenures", later.tenures)
            incoming = yield _ASK  # which checkers to run and the parent's fold, whole, or nothing
            earlier, names = _receive(incoming)
            if earlier is None:
                yield from _send("reads", later.reads)
                yield from _send("objects", later.objects)
                yield "end", None
                return
            earlier.snapshot, earlier.index = later.snapshot, later.index
            merge(earlier, later)
            finish(earlier)
            before = dict(earlier.stats)
            results = run_checkers(earlier, [c for c in checkers if c[0] in names])
            yield "checked", results, {k: v for k, v in earlier.stats.items() if before.get(k) != v}

        facts, frames = _fork_join(child, lambda: self._fold_here(first))
        try:
            # The child will check the reads (and more, to balance the work) if it pays: it gets this fold
            # whole (taken before the merge changes it), packed while it is still folding, the rest as sent.
            self._theirs = _balance(facts, checkers)
            checking = bool(self._theirs) and 2 * facts.stats["operations"] >= MIN_PARALLEL_OPS
            packing: Iterator[Any] = _fold_frames(facts, self._theirs) if checking else iter(())
            packed: list[Any] = []
            try:
                for frame in packing:
                    packed.append(frame)
                    if frames.waiting():
                        break
                kind, body = next(frames, ("error", None))
                if kind == "corrupt":
                    raise HistoryCorruptError(body)
                if kind != "reading":
                    raise _ChildFailed
                # The child's frames up to its question are read (not merged) before it is answered, so that
                # neither process waits on the other's full pipe.
                theirs: list[Any] = []
                for frame in frames:
                    if frame == _ASK:
                        break
                    theirs.append(frame)
                else:
                    raise _ChildFailed
                # per-object summaries are consulted only for objects some read names (`check_reads`): those this
                # fold's reads name went with the fold, those only the child's name follow
                mine = {rd[0] for rd in facts.reads}
                objects = {obj: per for obj, per in facts.objects.items() if obj in body and obj not in mine}
                frames.send(itertools.chain(packed, packing, _send("objects", objects) if checking else ()))
            except (ValueError, TypeError, OSError) as exc:  # a value marshal cannot carry (not from a JSON
                raise _ChildFailed from exc                   # history), or the child died before it read all
            del packed
            if checking:
                facts.objects, facts.reads = {}, []  # only the child's checkers read them
            merged = False
            for kind, body in itertools.chain(theirs, () if checking else frames):
                if kind == "rest":
                    merge(facts, body)
                    merged = True
                elif not merged:
                    break
                elif kind == "tenures":
                    merge_tenures(facts, _unpack(kind, body))
                elif kind == "reads":
                    merge_reads(facts, _unpack(kind, body))  # before the child's objects: the views gain this fold's
                elif kind == "objects":
                    merge_objects(facts, _unpack(kind, body))
                elif kind == "end":
                    read = {rd[0] for rd in facts.reads}
                    for obj in [o for o in facts.objects if o not in read]:
                        del facts.objects[obj]  # never consulted (`check_reads` reads only these)
                    return facts
            if checking and merged:
                self._child, frames = frames, None
                return facts
        except (FoldOverlap, _ChildFailed):
            pass  # one process's records in both groups, or the child failed: fold in one pass below
        finally:
            if frames is not None:
                frames.close()
        return self._fold_here(paths)

    def run_checkers(self, facts: Facts, checkers: Sequence[tuple[str, Checker]]) -> list[tuple[list[Violation], str | None]]:
        """`soak.check.core.run_checkers`, with some (`CHILD_CHECKERS` and more) run by the child that folded with `fold`.

        The child runs them on its own merged copy and sends back only its findings (and the
        statistics its checkers add); should it fail, the history is folded again here for them.
        Without that child, or for other checkers, all run here.
        """
        child, self._child = self._child, None
        if child is None or tuple(checkers) != self.checkers:
            if child is not None:
                child.close()
            return run_checkers(facts, checkers)
        mine = [c for c in checkers if c[0] not in self._theirs]
        theirs = [c for c in checkers if c[0] in self._theirs]
        try:
            own = run_checkers(facts, mine)
            sent = next(child, None)
        finally:
            child.close()
        if sent is None or sent[0] != "checked":  # the child failed: its checkers run here
            # this process freed what only `CHILD_CHECKERS` read (the child had it): fold again for them
            whole = finish(self._fold_here(self.paths)) if self._theirs & CHILD_CHECKERS else facts
            before = dict(whole.stats)
            results = run_checkers(whole, theirs)
            added = {k: v for k, v in whole.stats.items() if before.get(k) != v}
        else:
            _, results, added = sent
        facts.stats.update(added)
        found = dict(zip([c[0] for c in mine], own)) | dict(zip([c[0] for c in theirs], results))
        return [found[name] for name, _ in checkers]


class _ChildFailed(Exception):
    """The child's frames stopped or made no sense: do its part here."""


#: How the bulky parts of the facts travel: marshalled (several times cheaper than pickling objects), a chunk per
#: frame. Reads and per-object summaries are plain tuples and lists already; tenures go as tuples of their slots.
_TENURE_STATE = attrgetter(*_Tenure.__slots__)


def _send(kind: str, items: Any) -> Iterator[tuple[str, bytes]]:
    """Frames of the facts' `kind` part (a dict of tenures or objects, or the list of reads)."""
    seq = items if kind == "reads" else list(items.items())
    for i in range(0, len(seq), _CHUNK):
        chunk = seq[i:i + _CHUNK]
        yield kind, marshal.dumps([(key, _TENURE_STATE(t)) for key, t in chunk] if kind == "tenures" else chunk)


def _unpack(kind: str, data: bytes) -> list[Any]:
    """What `_send` packed into one frame: reads, or (key, tenure) or (object, {epoch: summary}) items."""
    body = marshal.loads(data)
    if kind != "tenures":
        return body  # type: ignore[no-any-return]
    slots, make = _Tenure.__slots__, _Tenure.__new__

    def revive(state: tuple[Any, ...]) -> _Tenure:
        t = make(_Tenure)
        for name, value in zip(slots, state):
            setattr(t, name, value)
        return t

    return [(key, revive(st)) for key, st in body]


def _balance(facts: Facts, checkers: Sequence[tuple[str, Checker]]) -> frozenset[str]:
    """The checkers the child runs: those in `CHILD_CHECKERS`, then, costliest first, any whose move lightens
    the busier side (costs estimated from this process's half of the facts, `_COSTS`)."""
    names = [c[0] for c in checkers]
    cost = {n: _COSTS[n][0] * _COSTS[n][1](facts) for n in names if n in _COSTS}
    theirs = {n for n in names if n in CHILD_CHECKERS}
    load = sum(cost.get(n, 0.0) for n in theirs)
    left = sum(v for n, v in cost.items() if n not in theirs)
    for n in sorted((n for n in cost if n not in theirs), key=cost.__getitem__, reverse=True):
        if 0 < cost[n] and max(load + cost[n], left - cost[n]) < max(load, left):
            theirs.add(n)
            load, left = load + cost[n], left - cost[n]
    return frozenset(theirs)


def _fold_frames(facts: Facts, names: frozenset[str]) -> Iterator[Any]:
    """Which checkers the child runs, then this process's fold as frames: the small parts pickled whole, then the
    bulky ones, with the summaries of the objects its own reads name (those only the child's name follow later)."""
    yield "checkers", names
    yield "rest", dataclasses.replace(facts, snapshot=None, index={}, tenures={}, objects={}, reads=[])
    for kind in ("tenures", "reads"):
        yield from _send(kind, getattr(facts, kind))
    mine = {rd[0] for rd in facts.reads}
    yield from _send("objects", {obj: per for obj, per in facts.objects.items() if obj in mine})


def _receive(incoming: Iterable[Any]) -> tuple[Facts | None, frozenset[str]]:
    """The parent's fold from its frames (`_fold_frames`) and the checkers to run, or (None, none).

    The frames are all read before any is unpacked: the parent, blocked on the pipe until then, goes on
    to its own checkers while this process unpacks.
    """
    facts, names = None, frozenset()
    frames = list(incoming)
    frames.reverse()
    while frames:
        kind, body = frames.pop()  # each frame's bytes are freed once unpacked
        if kind == "checkers":
            names = body
        elif kind == "rest":
            facts = body
        elif kind == "reads":
            facts.reads.extend(_unpack(kind, body))
        else:
            getattr(facts, kind).update(_unpack(kind, body))
    return facts, names


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

    The child pickles each frame it yields on its own (no pickle memo grows with the whole) and
    leaves without running this process's cleanup; a frame `_ASK` waits for this process's
    answer (`_Child.send`), whose frames the yield returns in the child as an iterator to read up.
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

    def waiting(self) -> bool:
        """Whether the child has sent a frame this process has not read yet (before any frame is read)."""
        return bool(select.select([self._frames], [], [], 0)[0])

    def send(self, frames: Iterable[Any]) -> None:
        """Answer the child's question with `frames`, each pickled on its own (the child reads them all)."""
        for frame in frames:
            pickle.dump(frame, self._answers, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.dump(_END, self._answers)
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


def _split(paths: list[Path]) -> tuple[list[Path], list[Path], int]:
    """Two contiguous groups of about equal bytes (the first never empty when there are paths), and the bytes."""
    sizes = [_size(p) for p in paths]
    total, acc = sum(sizes), 0
    for i, size in enumerate(sizes):
        if i and acc + size / 2 > total / 2:
            return paths[:i], paths[i:], total
        acc += size
    return paths, [], total
