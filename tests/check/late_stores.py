"""A split-fence store whose window between fence check and write is sometimes wide.

`mutant:split-fence` checks the fence in one transaction and writes in the next; a storm sees
that only when a pause lands in the microseconds between them. Here the holder sleeps there
(1.6 x ttl, like the nemesis's pause) with probability `p`, so a successor is granted before the
write lands: the late stale write the tenured reads must expose. Nothing here is fit for data.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager

from soak.spi import Lease
from soak.stores.mutants import SplitFence


class LateSplitFence(SplitFence):
    """SplitFence with a sleep of 1.6 x ttl between the fence check and the write, now and then."""

    def __init__(self, *args, p: float = 0.03, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._p = p
        self._rng = random.Random(os.getpid() ^ time.monotonic_ns())

    @contextmanager
    def _fenced(self, run_id: str, lease: Lease | None) -> Iterator:
        if lease is not None:
            with self._tx() as conn:
                self._check(conn, run_id, lease, self._clock())
            if self._rng.random() < self._p:
                time.sleep(self.lease_ttl_ms * 1.6 / 1000.0)
        with self._tx() as conn:
            yield conn


def open_late_split(location: str, *, lease_ttl_ms: int, p: str = "0.03") -> LateSplitFence:
    """Factory for `tests.check.late_stores:open_late_split` (option `?p=` sets the sleep probability)."""
    return LateSplitFence(os.path.join(location, "store.db"), lease_ttl_ms, p=float(p))
