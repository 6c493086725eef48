"""The settable clock that conformance and the model inject into stores that declare `injectable_clock`.

CONTRACT section 1: a store object with `injectable_clock = True` accepts `clock=` from its factory (a
zero-argument callable returning seconds) and judges expiry by it alone. Only `advance` moves a `FakeClock`; an
optional `hook` runs on every read (conformance uses it to find the first clock read inside a fenced call).
`offset(seconds)` is a view of the same clock that many seconds ahead, for a second store object that must see
a later time than the first (the thief in the atomic-fence check).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["FakeClock"]


class FakeClock:
    """A clock in seconds that moves only when `advance` moves it."""

    def __init__(self, start: float = 1_000_000.0, *, base: FakeClock | None = None, ahead_s: float = 0.0) -> None:
        self._base = base
        self._now = start
        self.ahead_s = ahead_s
        self._lock = threading.Lock()
        #: called on every read of this clock (not of its offsets), in the reading thread
        self.hook: Callable[[], None] | None = None

    @property
    def now(self) -> float:
        return self._base.now + self.ahead_s if self._base is not None else self._now

    def __call__(self) -> float:
        hook = self.hook
        if hook is not None:
            hook()
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds` (of the base clock, for an offset view)."""
        if self._base is not None:
            self._base.advance(seconds)
            return
        with self._lock:
            self._now += seconds

    def offset(self, ahead_s: float = 0.0) -> FakeClock:
        """A view of this clock `ahead_s` seconds ahead (settable later through its `ahead_s`)."""
        return FakeClock(base=self, ahead_s=ahead_s)
