"""The clock-skew nemesis: some workers run with their wall clock shifted by more than the ttl, both ways.

Jepsen's clock nemesis is the anchor. Each worker incarnation is drawn at spawn: with probability
`clock_skew_share` its wall clock (`CLOCK_REALTIME`, so `time.time()`) is shifted by +-(1..2) x `clock_skew_ms`
through libfaketime (`LD_PRELOAD`, `FAKETIME`), with the monotonic clocks left true (`DONT_FAKE_MONOTONIC=1`) so
the history's timestamps stay comparable across processes. A killed worker's replacement draws again, so the
skew moves during a storm. Each skewed incarnation is a `clock-skew` event in `history/nemesis.jsonl`.

A store that judges expiry by its own clock (a server's) is untouched by it; one that judges expiry by its
caller's clock grants overlapping tenures (`lease-exclusive`) or blocks takeovers past the ttl (`ttl-honoured`).
An embedded store (SQLite, the in-process memory store) reads the host clock inside its callers, so the skew
would be the store's own clock moving: it does not apply, and a storm asking for it is refused.
"""

from __future__ import annotations

import glob
import os
import random
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from soak.errors import ScenarioError

__all__ = ["ClockSkew", "check_skew", "libfaketime", "skew_environment", "skewed_worker_entry", "spawn_environment"]

#: where Debian and Ubuntu (`apt-get install faketime`) and a source build put the library
_LIB_GLOBS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
              "/usr/local/lib/faketime/libfaketime.so.1")
LIB_ENV = "SOAK_LIBFAKETIME"


def libfaketime() -> str:
    """The path of libfaketime (`SOAK_LIBFAKETIME`, else the distribution's), or a ScenarioError naming the fix."""
    path = os.environ.get(LIB_ENV)
    if path:
        if not os.path.isfile(path):
            raise ScenarioError(f"{LIB_ENV}={path} is not a file; point it at libfaketime.so.1 or unset it")
        return path
    for pattern in _LIB_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise ScenarioError("clock_skew_ms needs libfaketime, which is not installed: apt-get install faketime "
                        f"(or set {LIB_ENV}=/path/to/libfaketime.so.1), or set clock_skew_ms = 0")


def _embedded(target: Any) -> bool:
    """True for a store that lives in its callers' processes (SQLite, memory, their mutants): it shares their clock."""
    spec = str(getattr(target, "spec", ""))
    if spec.startswith(("sqlite:", "memory:")) or getattr(target, "single_process", False):
        return True
    if spec.startswith("mutant:"):
        from soak.stores.net_mutants import NET_MUTANTS

        return spec[len("mutant:"):].partition("?")[0] not in NET_MUTANTS
    return False


def check_skew(scenario: Any, target: Any) -> None:
    """Refuse clock skew where it cannot apply (an embedded store) or cannot run (no libfaketime)."""
    if not getattr(scenario, "clock_skew_ms", 0):
        return
    if _embedded(target):
        raise ScenarioError(f"clock_skew_ms: store {target.spec} is embedded and reads the host clock inside its "
                            "callers, so a skewed worker skews the store's own clock; clock skew applies to a "
                            "networked store (postgresql://, redis://): set clock_skew_ms = 0")
    libfaketime()


def skew_environment(offset_ms: int, lib: str) -> dict[str, str]:
    """The environment that shifts a process's wall clock by `offset_ms`, its monotonic clocks left true."""
    preload = os.environ.get("LD_PRELOAD", "")
    return {"LD_PRELOAD": f"{lib} {preload}".strip(), "FAKETIME": f"{offset_ms / 1000.0:+.3f}",
            "DONT_FAKE_MONOTONIC": "1"}


@contextmanager
def spawn_environment(env: dict[str, str]) -> Iterator[None]:
    """`env` set in this process while a child is spawned (it inherits the environment), then restored."""
    if not env:
        yield
        return
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _sleep(seconds: float) -> None:
    """`time.sleep` by `select` against the monotonic clock. libfaketime 0.9.10 answers the absolute
    `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` that Python's own sleep makes with EINVAL."""
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        select.select([], [], [], left)


def skewed_worker_entry(*args: Any) -> None:
    """The storm worker's entry in a skewed process: the sleep above in place of `time.sleep`, then the worker."""
    from soak.storm.worker import worker_entry

    time.sleep = _sleep
    worker_entry(*args)


class ClockSkew:
    """Draws, per worker incarnation, whether and how far its wall clock is shifted; logs each shift."""

    def __init__(self, scenario: Any, rng: random.Random, writer: Any) -> None:
        self.ms = int(getattr(scenario, "clock_skew_ms", 0))
        self.share = float(getattr(scenario, "clock_skew_share", 0.5))
        self.rng = rng
        self.writer = writer
        self.lib = libfaketime() if self.ms else ""
        self.skewed: dict[str, int] = {}  # worker -> offset ms
        self._first = True

    def draw(self, name: str) -> dict[str, str]:
        """The environment for the worker `name` (empty: its clock is left true). The first draw of a storm is
        always skewed, so a short storm has skew from its start."""
        if not self.ms:
            return {}
        if not (self._first or self.rng.random() < self.share):
            return {}
        self._first = False
        offset = int(self.ms * self.rng.uniform(1.0, 2.0)) * self.rng.choice((1, -1))
        self.skewed[name] = offset
        return skew_environment(offset, self.lib)

    def log(self, name: str, pid: int) -> None:
        if name in self.skewed:
            self.writer.event("clock-skew", {"target": name, "pid": pid, "offset_ms": self.skewed[name],
                                             "monotonic": "true"})

    def summary(self) -> dict[str, Any]:
        return {"skewed_workers": len(self.skewed),
                "ahead": sum(o > 0 for o in self.skewed.values()),
                "behind": sum(o < 0 for o in self.skewed.values())}
