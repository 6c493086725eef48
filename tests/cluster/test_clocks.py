"""Cristian's algorithm as `soak.cluster.clocks` runs it, on a scripted pair of clocks: the bound holds the truth."""

from __future__ import annotations

import random

import pytest

from soak.cluster.clocks import Clocks

MS = 1_000_000


class _Pair:
    """The orchestrator's clock and a host's (`offset` ahead, drifting by `drift` per orchestrator ns); each
    round trip takes a random time, split unevenly between the two directions."""

    def __init__(self, offset: int, drift: float = 0.0, seed: int = 1) -> None:
        self.now, self.offset, self.drift = 1_000 * MS, offset, drift
        self.rng = random.Random(seed)
        self.slow = False

    def local(self) -> int:
        return self.now

    def remote(self) -> int:
        trip = int(self.rng.uniform(0.2, 3) * MS) * (40 if self.slow else 1)
        there = int(trip * self.rng.random())
        self.now += there  # the request on its way
        read = self.now + self.offset + int(self.drift * self.now)
        self.now += trip - there  # the answer on its way back
        return read

    def true_offset(self) -> int:
        return self.offset + int(self.drift * self.now)


@pytest.mark.parametrize("offset, drift, samples, lo_ms, hi_ms", [
    # an uneven link, 37 s ahead: the bound is about half the fastest of the round trips
    (37_000 * MS, 0.0, 20, 0, 3),
    # 200 ppm (0.2 ms a second): the bound widens to cover the 6 ms it moved over the storm
    (0, 200e-6, 30, 5, float("inf")),
], ids=["uneven-link", "drifting-clock"])
def test_the_bound_holds_the_true_offset(offset, drift, samples, lo_ms, hi_ms):
    pair = _Pair(offset=offset, drift=drift)
    clocks = Clocks(pair.local)
    clocks.sync("h", pair.remote)
    for _ in range(samples):
        pair.now += 1_000 * MS
        clocks.sample("h", pair.remote)
    h = clocks.summary()["hosts"]["h"]
    assert abs(h["offset_ms"] * MS - pair.true_offset()) <= h["error_ms"] * MS
    assert lo_ms < h["error_ms"] < hi_ms


def test_a_sample_too_slow_to_tell_is_recorded_not_used():
    pair = _Pair(offset=5 * MS)
    clocks = Clocks(pair.local)
    clocks.sync("h", pair.remote)
    before = clocks.summary()["max_error_ms"]
    pair.slow = True
    clocks.sample("h", pair.remote)
    h = clocks.summary()["hosts"]["h"]
    assert h["slow_samples_skipped"] == 1 and len(h["samples"]) == 2 and h["error_ms"] == before
