"""The scenario keys the runs workload adds, with their schema, and the quorum it counts.

A scenario file names them at its top level beside the storm's own keys (`soak.scenario`), and the tenure mix as
a `[mix]` table; `RunsOptions()` holds the smoke preset's values (the workload's root preset).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from soak.errors import ScenarioError
from soak.scenario import int_key, number_key
from soak.workloads.runs.coverage import COVER_KEYS

__all__ = ["ACCEPT_SURFACES", "MIX_KEYS", "QUORUM_KEYS", "RunsOptions", "SCHEMA", "STALE_SURFACES", "STRUCK_SURFACES",
           "TABLES", "check_options"]

#: Surfaces a stale sweep probes; each has its own `stale_<surface>` counter.
STALE_SURFACES: tuple[str, ...] = (
    "append", "put_meta", "blob_put", "blob_delete", "delete", "renew", "release", "cross",
)
#: Surfaces a live tenure writes; each has its own `accepted_<surface>` counter.
ACCEPT_SURFACES: tuple[str, ...] = ("append", "put_meta", "blob_put", "blob_delete", "renew")

#: The surfaces a tenure's struck edge write calls (`soak.workloads.runs.worker`); each has a `swept_<surface>`
#: counter: 1 once a hold has tried every gap between its calls' exchanges (`soak.storm.nemesis.Nemesis.note_swept`).
STRUCK_SURFACES: tuple[str, ...] = ("append", "put_meta", "blob_put")

#: The quorum counters of the runs workload (the nemesis's `pauses`, `pauses_in_call`, `kills` are the storm's).
QUORUM_KEYS: tuple[str, ...] = (
    "grants",
    "takeovers",
    "stale_refusals",
    *(f"stale_{s}" for s in STALE_SURFACES),
    *(f"accepted_{s}" for s in ACCEPT_SURFACES),
    "deletion_cycles",
    "cross_refusals",
    "stalls",
    *(f"swept_{s}" for s in STRUCK_SURFACES),
    *COVER_KEYS,
)

#: The weights of one live tenure's operation mix.
#: `order_probe` is an append at or below the fresh tail under the live lease: the order guard
#: (JournalOrderError) must refuse it, which appends at tail + 1 alone never exercise.
#: `read` reads back the journal tail, meta and a blob of the run mid-tenure (evidence for the checker).
#: `probe` presents forged leases beside the live one (another owner's, a never-issued epoch), writes
#: without a lease to a run nobody leases, or asks for the held run again (`soak.workloads.runs.coverage`).
MIX_KEYS: tuple[str, ...] = (
    "append", "put_meta", "blob_put", "blob_delete", "renew", "side_cycle", "cross", "order_probe", "read",
    "edge", "probe",
)

# The smoke preset's mix and quorum (soak/scenarios/smoke.toml spells the same; a test holds them equal)
_DEFAULT_MIX = {"append": 30.0, "put_meta": 20.0, "blob_put": 15.0, "blob_delete": 10.0, "renew": 8.0,
                "side_cycle": 10.0, "cross": 7.0, "order_probe": 3.0, "read": 10.0, "edge": 8.0,
                "probe": 5.0}
DEFAULT_QUORUM = {
    "takeovers": 40, "stale_refusals": 100,
    "stale_append": 10, "stale_put_meta": 10, "stale_blob_put": 10, "stale_blob_delete": 10, "stale_delete": 10,
    "stale_renew": 10, "stale_release": 10, "stale_cross": 10,
    "accepted_append": 50, "accepted_put_meta": 30, "accepted_blob_put": 20, "accepted_blob_delete": 10,
    "accepted_renew": 10,
    "deletion_cycles": 10, "cross_refusals": 10, "stalls": 10, "pauses": 5, "pauses_in_call": 1,
    "strikes_held": 15, "kills": 2,
    # every gap between the exchanges of every struck surface's calls tried by a held strike
    **{f"swept_{s}": 1 for s in STRUCK_SURFACES},
    # every cell of the probe coverage table at least once (`soak.workloads.runs.coverage`)
    **dict.fromkeys(COVER_KEYS, 1),
}


@dataclass(frozen=True)
class RunsOptions:
    """The runs workload's knobs (defaults: the smoke preset's). Times in seconds unless the name says `_ms`."""

    runs: int = 3
    side_runs: int = 2
    # one live tenure
    ops_min: int = 3
    ops_max: int = 8
    blob_names: int = 4
    # cooperative stalls
    stall_prob: float = 0.3
    stall_factor: float = 1.4
    # the share of tenures that end with a struck edge write (the worker stops itself inside it,
    # soak.storm.strike, and the nemesis holds it past the lease while a successor takes over);
    # also the chance an `edge` write of the mix is struck. Tenures end with a stall
    # (stall_prob), a strike (strike_prob) or else a release.
    strike_prob: float = 0.55
    # the share of released tenures whose released lease is then presented on every surface, the run
    # acquired again at once, and the released lease presented again (now superseded)
    released_probe_prob: float = 1.0
    # the share of tenures that begin by presenting the worker's latest ended tenure of the run (superseded
    # by the new grant) on every surface
    past_probe_prob: float = 0.3
    #: a weight for every `MIX_KEYS` key (one left out is 0)
    mix: dict[str, float] = field(default_factory=lambda: dict(_DEFAULT_MIX))

    def __post_init__(self) -> None:
        object.__setattr__(self, "mix", {**dict.fromkeys(MIX_KEYS, 0.0), **self.mix})

    def main_runs(self) -> list[str]:
        return [f"r{i}" for i in range(self.runs)]

    def side_run_ids(self) -> list[str]:
        return [f"s{i}" for i in range(self.side_runs)]

    def stall_ms(self, lease_ttl_ms: int) -> int:
        return int(lease_ttl_ms * self.stall_factor)


#: key -> (check, what it accepts)
SCHEMA: dict[str, tuple[Any, str]] = {
    "runs": int_key(2, 1000),
    "side_runs": int_key(1, 1000),
    "ops_min": int_key(1),
    "ops_max": int_key(1),
    "blob_names": int_key(1),
    "stall_prob": number_key(0, 1),
    "stall_factor": number_key(1, open_lo=True),
    "strike_prob": number_key(0, 1),
    "released_probe_prob": number_key(0, 1),
    "past_probe_prob": number_key(0, 1),
}
#: table -> (its keys, the check of a value, what a value accepts)
TABLES: dict[str, tuple[tuple[str, ...], Any, str]] = {
    "mix": (MIX_KEYS, number_key(0)[0], "a number >= 0"),
}


def check_options(options: RunsOptions, source: str) -> None:
    """Raise `ScenarioError` naming the keys where the runs options do not go together."""
    if sum(options.mix.values()) <= 0:
        raise ScenarioError(f"scenario {source}: the weights in 'mix' sum to 0; give at least one a weight > 0")
    if options.stall_prob + options.strike_prob > 1:
        raise ScenarioError(
            f"scenario {source}: keys 'stall_prob' ({options.stall_prob:g}) and 'strike_prob' "
            f"({options.strike_prob:g}) are shares of the tenures and must sum to at most 1"
        )
    if options.ops_max < options.ops_min:
        raise ScenarioError(
            f"scenario {source}: key 'ops_max' ({options.ops_max}) must be >= 'ops_min' ({options.ops_min})"
        )
