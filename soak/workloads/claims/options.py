"""The scenario keys the claims workload adds, with their schema, and the quorum it counts.

`ClaimsOptions()` holds the claims preset's values (`soak/scenarios/claims.toml`, the workload's root preset).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from soak.errors import ScenarioError
from soak.scenario import int_key, number_key

__all__ = ["ClaimsOptions", "DEFAULT_QUORUM", "POLICIES", "QUORUM_KEYS", "SCHEMA", "TABLES", "check_options"]

#: The policies a claims storm may run under (the legacy `fallback-local` is `reassign-to-local`).
POLICIES: tuple[str, ...] = ("block", "reassign-to-local", "reassign-any-healthy", "fallback-local")

#: The claims workload's quorum counters (the nemesis's `pauses`, `kills` are the storm's).
QUORUM_KEYS: tuple[str, ...] = (
    "claims_won",     # claims that made the claimant the owner (a new epoch)
    "renewals",       # claims and heartbeats of the current owner accepted
    "conflicts",      # claims refused with CheckoutConflictError naming a holder
    "progress",       # progress writes accepted
    "recoveries",     # recoveries of an unreachable owner's task accepted
    "aborts",         # a returning owner's heartbeat or progress write refused: it aborted before writing on
    "stale_progress", # progress writes of a superseded owner refused
    "stale_sweeps",   # calls of the harness's sweep of a dead epoch that completed (whatever the answer)
    "stale_refusals", # ... and were refused
    "probes",         # recoveries asked of a claim within its lease (whatever the store answered)
    "probes_refused", # ... and refused
    "splits_repaired",  # task rows a reconcile repaired (a split write found and fixed)
    "releases",       # releases accepted
)

DEFAULT_QUORUM = {"claims_won": 40, "conflicts": 40, "recoveries": 5, "aborts": 5, "splits_repaired": 1,
                  "progress": 100, "probes": 10, "stale_sweeps": 30, "pauses": 5, "kills": 3}


@dataclass(frozen=True)
class ClaimsOptions:
    """The claims workload's knobs (defaults: the claims preset's)."""

    projects: int = 2
    tasks: int = 3
    agents: int = 2
    policy: str = "reassign-to-local"
    #: progress steps an owner records before it releases the task (the next owner goes on from there)
    task_steps: int = 6
    #: the chance an idle agent claims a task without looking first (contention: a held task answers a conflict)
    contend_prob: float = 0.5
    #: a node silent this long reads offline (0: 0.8 x ttl, below the nemesis's pause of 1.6 x ttl)
    offline_after_ms: int = 0
    #: the chance a node that finds a claim held within its lease asks the store to recover it anyway (a probe:
    #: the store, which judges expiry, must refuse it)
    probe_prob: float = 0.5
    #: the chance a working agent's next call is struck (stopped inside it and held past the lease; at most one
    #: strike per node every 8 ttls)
    strike_prob: float = 0.2
    #: about every this many seconds a node's next claim or release is crashed at a random step inside it (a kill
    #: strike; between its central commit and its task-row write it leaves a split write); 0 disables
    split_kill_interval_s: float = 1.5

    def keys(self) -> list[str]:
        return [f"p{p}/t{t}" for p in range(self.projects) for t in range(self.tasks)]

    def project_ids(self) -> list[str]:
        return [f"p{p}" for p in range(self.projects)]

    def offline_after_s(self, lease_ttl_ms: int) -> float:
        return (self.offline_after_ms or 0.8 * lease_ttl_ms) / 1000.0


def _policy(v: Any) -> bool:
    return v in POLICIES


SCHEMA: dict[str, tuple[Any, str]] = {
    "projects": int_key(1, 100),
    "tasks": int_key(1, 1000),
    "agents": int_key(1, 16),
    "policy": (_policy, "one of " + ", ".join(POLICIES)),
    "task_steps": int_key(1),
    "contend_prob": number_key(0, 1),
    "offline_after_ms": int_key(0),
    "strike_prob": number_key(0, 1),
    "probe_prob": number_key(0, 1),
    "split_kill_interval_s": number_key(0),
}
TABLES: dict[str, tuple[tuple[str, ...], Any, str]] = {}


def check_options(options: ClaimsOptions, source: str) -> None:
    """Raise `ScenarioError` naming the keys where the claims options do not go together."""
    if options.projects * options.tasks > 10_000:
        raise ScenarioError(f"scenario {source}: keys 'projects' x 'tasks' make more than 10000 tasks; use fewer")
