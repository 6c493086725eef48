"""Retrying `StoreBusyError`, the one way every suite does it.

CONTRACT section 1: `StoreBusyError` means nothing was written and the caller may retry; a store may fail fast
with it instead of waiting. So conformance, the boot storm, the model and the storm retry it (bounded, with the
count reported), and a store that only ever answers busy is undecided (`BusyExhausted`), never a violation of
another clause.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from soak.spi import StoreBusyError

__all__ = ["BUSY_ATTEMPTS", "BusyCount", "BusyExhausted", "retry_busy"]

T = TypeVar("T")

#: Attempts before a call that keeps answering busy is given up (about 2.5 s of backing off in all).
BUSY_ATTEMPTS = 60


class BusyExhausted(Exception):
    """A store call answered `StoreBusyError` on every attempt: nothing can be concluded from it."""

    def __init__(self, what: str, attempts: int, last: StoreBusyError) -> None:
        self.what = what
        self.attempts = attempts
        self.last = last
        super().__init__(f"{what} answered StoreBusyError {attempts} times in a row (last: {last}); the store "
                         "never got past its contention, so nothing could be concluded from it")


@dataclass
class BusyCount:
    """How often calls answered busy and were retried (reported beside a suite's results)."""

    retries: int = 0
    exhausted: int = 0

    def summary(self) -> str:
        return f"{self.retries} StoreBusyError answer(s) retried" + (
            f", {self.exhausted} call(s) busy on every attempt" if self.exhausted else "")


def retry_busy(call: Callable[[], T], what: str = "store call", *, attempts: int = BUSY_ATTEMPTS,
               count: BusyCount | None = None, base_delay_s: float = 0.002, max_delay_s: float = 0.05) -> T:
    """`call()`, retried while it raises `StoreBusyError` (backing off from 2 ms to 50 ms), at most `attempts`
    times; raises `BusyExhausted` once they are used up. Every other outcome, raised or returned, is the call's."""
    delay = base_delay_s
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except StoreBusyError as exc:
            if count is not None:
                count.retries += 1
            if attempt == attempts:
                if count is not None:
                    count.exhausted += 1
                raise BusyExhausted(what, attempts, exc) from exc
            time.sleep(delay)
            delay = min(delay * 1.6, max_delay_s)
    raise AssertionError("unreachable")  # pragma: no cover
