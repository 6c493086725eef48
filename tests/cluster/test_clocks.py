"""Cristian's algorithm as `soak.cluster.clocks` runs it, on a scripted pair of clocks: the bound holds the truth."""

from __future__ import annotations

import random

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


def test_the_bound_holds_the_true_offset_of_an_uneven_link():
    pair = _Pair(offset=37_000 * MS)
    clocks = Clocks(pair.local)
    clocks.sync("h", pair.remote)
    for _ in range(20):
        pair.now += 1_000 * MS
        clocks.sample("h", pair.remote)
    h = clocks.summary()["hosts"]["h"]
    assert abs(h["offset_ms"] * MS - pair.true_offset()) <= h["error_ms"] * MS
    assert h["error_ms"] < 3  # half the fastest of the round trips, about


def test_a_drifting_clock_widens_the_bound_to_cover_it():
    pair = _Pair(offset=0, drift=200e-6)  # 200 ppm: 0.2 ms a second
    clocks = Clocks(pair.local)
    clocks.sync("h", pair.remote)
    for _ in range(30):
        pair.now += 1_000 * MS
        clocks.sample("h", pair.remote)
    h = clocks.summary()["hosts"]["h"]
    assert h["error_ms"] * MS >= abs(h["offset_ms"] * MS - pair.true_offset())
    assert h["error_ms"] > 5  # it moved about 6 ms over the storm


def test_a_sample_too_slow_to_tell_is_recorded_not_used():
    pair = _Pair(offset=5 * MS)
    clocks = Clocks(pair.local)
    clocks.sync("h", pair.remote)
    before = clocks.summary()["max_error_ms"]
    pair.slow = True
    clocks.sample("h", pair.remote)
    h = clocks.summary()["hosts"]["h"]
    assert h["slow_samples_skipped"] == 1 and len(h["samples"]) == 2 and h["error_ms"] == before
