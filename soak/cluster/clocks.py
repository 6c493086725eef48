"""Each host's clock against the orchestrator's, with error bounds (Cristian's algorithm).

The orchestrator reads its clock (t0), asks the host for its own (r), reads its clock again (t1). The host read
its clock somewhere inside [t0, t1], so its offset to the orchestrator's clock lies in
[r - t1, r - t0]: the estimate r - (t0 + t1) / 2, give or take half the round trip. Of several round trips the
shortest gives the tightest bound (`sync`). The history of a host is moved onto the orchestrator's clock by that
estimate; during the storm the clock is sampled again (`sample`), and the bound recorded for the host is the
largest error the estimate could have had at any sample: |estimate - sample| + the sample's half round trip (a
drifting clock widens it); a sample whose round trip was too slow to tell (`_SLOW`) is recorded, not used. The checker's real-time rules give every cross-host comparison that much slack
(`max_error_ms`, twice over: both ends may be off), so a rule fires only when the order is certain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from soak.history import now_ns

__all__ = ["Clocks", "estimate"]

_SYNC_ROUNDS = 8
#: A sample whose half round trip is this many times the start's (and over 2 ms) says nothing the next one will not
#: say better: it is kept in clocks.json but does not widen the bound. Between samples the bound assumes the offset
#: moves smoothly (a monotonic clock is slewed by NTP at most 500 ppm: 0.5 ms a second).
_SLOW = 5


def estimate(read_remote: Callable[[], int], clock: Callable[[], int] = now_ns) -> tuple[int, int, int]:
    """One round trip: (offset estimate, error bound, when by the local clock), all ns."""
    t0 = clock()
    r = int(read_remote())
    t1 = clock()
    return r - (t0 + t1) // 2, (t1 - t0 + 1) // 2, t1


@dataclass
class _Host:
    offset_ns: int
    error_ns: int
    samples: list[tuple[int, int, int]] = field(default_factory=list)  # (at, offset, error)
    worst_ns: int = 0
    skipped: int = 0  # samples whose round trip was too slow to say anything (`_SLOW`)


class Clocks:
    """The offset estimate and error bound of every host."""

    def __init__(self, clock: Callable[[], int] = now_ns) -> None:
        self.clock = clock
        self.hosts: dict[str, _Host] = {}

    def sync(self, host: str, read_remote: Callable[[], int], rounds: int = _SYNC_ROUNDS) -> None:
        """Estimate `host`'s offset from the tightest of `rounds` round trips."""
        best = min((estimate(read_remote, self.clock) for _ in range(rounds)), key=lambda s: s[1])
        h = self.hosts[host] = _Host(best[0], best[1])
        h.samples.append((best[2], best[0], best[1]))
        h.worst_ns = best[1]

    def sample(self, host: str, read_remote: Callable[[], int], rounds: int = 4) -> None:
        """The tightest of `rounds` more round trips during the storm: widen the host's bound to cover it."""
        off, err, at = min((estimate(read_remote, self.clock) for _ in range(rounds)), key=lambda s: s[1])
        h = self.hosts[host]
        h.samples.append((at, off, err))
        if err > max(_SLOW * h.error_ns, 2_000_000):
            h.skipped += 1
            return
        h.worst_ns = max(h.worst_ns, abs(off - h.offset_ns) + err)

    def offset_ns(self, host: str) -> int:
        h = self.hosts.get(host)
        return h.offset_ns if h is not None else 0

    def summary(self) -> dict[str, Any]:
        """What `clocks.json` holds: per host its offset estimate and bound (ms) and every sample."""
        hosts = {name: {"offset_ms": h.offset_ns / 1e6, "sync_error_ms": h.error_ns / 1e6,
                        "error_ms": h.worst_ns / 1e6, "slow_samples_skipped": h.skipped,
                        "samples": [{"at_ns": a, "offset_ms": o / 1e6, "error_ms": e / 1e6} for a, o, e in h.samples]}
                 for name, h in sorted(self.hosts.items())}
        return {"method": "cristian", "hosts": hosts,
                "max_error_ms": max((h["error_ms"] for h in hosts.values()), default=0.0)}
