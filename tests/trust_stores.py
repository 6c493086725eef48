"""Stores that misbehave the way real stores do, for the trust tests (tests/storm/test_trust.py).

Each wraps the reference SQLite store and breaks one promise of CONTRACT section 1 that is not about what a call
returns: a call that never returns (`call-returns`), a call that kills or exits its process (`no-crash`), a boot
that fails now and then (`concurrent-boot`). Module-level factories, so spawned workers import them by name.
"""

from __future__ import annotations

import os
import random
import signal
import time

from soak.spi import StoreBusyError
from soak.stores.sqlite import SqliteStore


def _path(location: str) -> str:
    return os.path.join(location, "store.db")


def _nth_boot(location: str) -> int:
    """How many boots of this location came before this one (0 for the first), counted in files: across processes."""
    n = 0
    while True:
        try:
            os.close(os.open(os.path.join(location, f"boot-{n}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return n
        except FileExistsError:
            n += 1


class _CountingStore(SqliteStore):
    """Counts this store object's calls of each surface (each worker opens its own object)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: dict[str, int] = {}

    def _count(self, surface: str) -> int:
        self.calls[surface] = self.calls.get(surface, 0) + 1
        return self.calls[surface]


class HangingMeta(_CountingStore):
    """Every store object's 12th put_meta never returns (outside any transaction: nobody else is held up)."""

    def put_meta(self, meta, lease=None):
        if self._count("put_meta") == 12:
            time.sleep(3600)
        super().put_meta(meta, lease)


class SegfaultingAppend(_CountingStore):
    """Every store object's 15th append kills its process with SIGSEGV (a crash in a C extension)."""

    def append(self, run_id, entry, lease=None):
        if self._count("append") == 15:
            os.kill(os.getpid(), signal.SIGSEGV)
        super().append(run_id, entry, lease)


class ExitingBlobPut(_CountingStore):
    """Every store object's 8th blob put calls os._exit(3) (a library that exits on an error)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        put = self.transcripts.put

        def exiting_put(ref, blob, lease=None):
            if self._count("blob_put") == 8:
                os._exit(3)
            put(ref, blob, lease)

        self.transcripts.put = exiting_put


class RaisingSystemExit(_CountingStore):
    """Every store object's 10th renew raises SystemExit(2), as a CLI library deep inside a store might."""

    def renew(self, lease):
        if self._count("renew") == 10:
            raise SystemExit(2)
        return super().renew(lease)


def open_hanging_meta(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    return HangingMeta(_path(location), lease_ttl_ms, clock=clock or time.time)


def open_segfaulting_append(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    return SegfaultingAppend(_path(location), lease_ttl_ms, clock=clock or time.time)


def open_exiting_blob_put(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    return ExitingBlobPut(_path(location), lease_ttl_ms, clock=clock or time.time)


def open_raising_system_exit(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    return RaisingSystemExit(_path(location), lease_ttl_ms, clock=clock or time.time)


_READER_BOOTS = [0]  # boots of this process, where it is the storm's final-state reader


def open_flaky_boot(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    """Boots 1, 3, 5, ... of a location fail (RuntimeError), the others come up: the first boot of every storm
    fails; so does the first boot of the storm's final-state reader (the process the storm names `snapshot`)."""
    import multiprocess  # what the storm spawns its processes with

    reader = multiprocess.current_process().name == "snapshot"
    if reader:
        _READER_BOOTS[0] += 1
    if (reader and _READER_BOOTS[0] == 1) or (_nth_boot(location) % 2 == 0 and not reader):
        raise RuntimeError("flaky bootstrap: could not create the schema")
    return SqliteStore(_path(location), lease_ttl_ms, clock=clock or time.time)


def open_first_boots_fail(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    """The first four boots of a location fail: a storm's whole first wave of workers; every later boot comes up."""
    if _nth_boot(location) < 4:
        raise RuntimeError("the first boots fail: no schema yet")
    return SqliteStore(_path(location), lease_ttl_ms, clock=clock or time.time)


def open_timeout_boot(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    """Every third boot raises TimeoutError, as redis-py and socket timeouts do: the store's answer, whatever the
    exception's name."""
    if _nth_boot(location) % 3 == 1:
        raise TimeoutError("timed out connecting to the lock service")
    return SqliteStore(_path(location), lease_ttl_ms, clock=clock or time.time)


class StopsItselfInMeta(SqliteStore):
    """Every put_meta stops its own process (SIGSTOP) inside the write transaction, as a strike does: a test device
    for the harness, which must continue such a worker at once, also while the storm is ending (a worker left
    stopped there holds the lock, and every other call waits out its busy timeout)."""

    def put_meta(self, meta, lease=None):
        with self._tx():  # hold the write lock while stopped
            os.kill(os.getpid(), signal.SIGSTOP)
        super().put_meta(meta, lease)


def open_stops_itself_in_meta(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    return StopsItselfInMeta(_path(location), lease_ttl_ms, clock=clock or time.time)


class _BusyNowAndThen(SqliteStore):
    """One fenced put_meta or blob_put in four answers `StoreBusyError` (which promises nothing was written), either
    before writing (`wrote = False`: a correct store under contention) or after the write committed (`wrote = True`:
    a lost COMMIT answered busy, as pg-lost-commit-busy does). The retry that follows writes a fresh tag over what
    the lie left, so only a read between the two can show it."""

    wrote = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rng = random.Random(os.getpid())
        blobs = self.transcripts
        put = blobs.put

        def busy_put(ref, blob, lease=None):
            self._busy(lease, lambda: put(ref, blob, lease))

        blobs.put = busy_put  # type: ignore[method-assign]

    def _busy(self, lease, write):
        if lease is None or self._rng.random() >= 0.25:
            return write()
        if self.wrote:
            write()
        raise StoreBusyError("database is locked")

    def put_meta(self, meta, lease=None):
        self._busy(lease, lambda: super(_BusyNowAndThen, self).put_meta(meta, lease))


class BusyAfterWrite(_BusyNowAndThen):
    wrote = True


def open_busy_before_write(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    return _BusyNowAndThen(_path(location), lease_ttl_ms, clock=clock or time.time)


def open_busy_after_write(location: str, *, lease_ttl_ms: int, clock=None) -> SqliteStore:
    return BusyAfterWrite(_path(location), lease_ttl_ms, clock=clock or time.time)
