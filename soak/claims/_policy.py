"""The unavailable-node handoff policy (CONTRACT section 2, seed section 3): pure decisions, no store and no clock.

`decide_handoff` is transition B (an owner unreachable mid-task): keep the task owned, recover it, or block.
`pre_dispatch` is transition A (the node a task is placed on is unavailable when it is dispatched). The recovery
itself is the store's `recover` (one transaction with its audit event); `recover_unreachable` is the call a
scheduler makes: decide, then recover.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soak.claims._types import Claim, Claimant, ClaimStore, TaskRow

__all__ = ["Decision", "DispatchDecision", "HandoffPolicy", "NodeHealth", "UNREACHABLE", "decide_handoff",
           "pre_dispatch", "recover_unreachable"]


class HandoffPolicy(str, Enum):
    """What happens to a task whose owner became unreachable after its lease expired."""

    BLOCK = "block"
    REASSIGN_TO_LOCAL = "reassign-to-local"
    REASSIGN_ANY_HEALTHY = "reassign-any-healthy"

    @classmethod
    def parse(cls, name: str | HandoffPolicy) -> HandoffPolicy:
        """The policy named `name`; the legacy `fallback-local` is `reassign-to-local`."""
        if isinstance(name, HandoffPolicy):
            return name
        if name == "fallback-local":
            return cls.REASSIGN_TO_LOCAL
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"unknown handoff policy {name!r}; use one of "
                             f"{', '.join(p.value for p in cls)} (or the legacy fallback-local)") from None


class NodeHealth(str, Enum):
    """A node's health as the node health monitor reports it."""

    ONLINE = "online"
    OFFLINE = "offline"
    ERROR = "error"
    UNKNOWN = "unknown"


#: The health values that make a node unreachable (after its lease expired, its tasks may be recovered).
UNREACHABLE = frozenset({NodeHealth.OFFLINE, NodeHealth.ERROR})


@dataclass(frozen=True, slots=True)
class Decision:
    """Transition B's outcome: `keep` (stays owned), `recover` (release it; `dispatch_to` says where it may go
    next: `local` or `any-healthy`) or `block` (unreachable, but the policy keeps it until an operator acts)."""

    action: str
    reason: str
    dispatch_to: str | None = None

    @property
    def recovers(self) -> bool:
        return self.action == "recover"


def decide_handoff(policy: HandoffPolicy | str, owner_health: NodeHealth | str, lease_expired: bool) -> Decision:
    """What to do with a task whose owner reports `owner_health`, its lease expired or not.

    Within its lease a task stays owned whatever the health (online-owner protection, and a paused owner is
    not yet known to be gone). After expiry only `offline` or `error` make the owner unreachable: `online` will
    heartbeat, and `unknown` is no evidence. Then `block` keeps the task, the reassigning policies recover it."""
    policy, health = HandoffPolicy.parse(policy), NodeHealth(owner_health)
    if not lease_expired:
        return Decision("keep", "the owner is within its lease")
    if health not in UNREACHABLE:
        return Decision("keep", f"the lease expired but the owner is {health.value}, not unreachable")
    if policy is HandoffPolicy.BLOCK:
        return Decision("block", f"the owner is {health.value} past its lease and the policy is block")
    where = "local" if policy is HandoffPolicy.REASSIGN_TO_LOCAL else "any-healthy"
    return Decision("recover", f"the owner is {health.value} past its lease; policy {policy.value}", where)


@dataclass(frozen=True, slots=True)
class DispatchDecision:
    """Transition A's outcome: dispatch to `node` (None: refused, `reason` says why)."""

    node: str | None
    reason: str

    @property
    def allowed(self) -> bool:
        return self.node is not None


def pre_dispatch(policy: HandoffPolicy | str, placed_on: str, health: dict[str, NodeHealth | str],
                 local_node: str) -> DispatchDecision:
    """Where a task placed on `placed_on` is dispatched, given every node's health, from `local_node`.

    A healthy (online) placement is honoured. Otherwise `block` refuses with the reason, `reassign-to-local`
    (legacy `fallback-local`) falls back to the local node when it is online, and `reassign-any-healthy` takes
    the local node if online, else the first online node by name."""
    policy = HandoffPolicy.parse(policy)
    state = {n: NodeHealth(h) for n, h in health.items()}
    placed = state.get(placed_on, NodeHealth.UNKNOWN)
    if placed is NodeHealth.ONLINE:
        return DispatchDecision(placed_on, f"{placed_on} is online")
    why = f"{placed_on} is {placed.value}"
    if policy is HandoffPolicy.BLOCK:
        return DispatchDecision(None, f"{why} and the policy is block: dispatch refused")
    if state.get(local_node) is NodeHealth.ONLINE:
        return DispatchDecision(local_node, f"{why}; falling back to the local node {local_node}")
    if policy is HandoffPolicy.REASSIGN_ANY_HEALTHY:
        healthy = sorted(n for n, h in state.items() if h is NodeHealth.ONLINE)
        if healthy:
            return DispatchDecision(healthy[0], f"{why}; reassigned to the healthy node {healthy[0]}")
    return DispatchDecision(None, f"{why} and no node the policy allows is online: dispatch refused")


def recover_unreachable(store: ClaimStore, policy: HandoffPolicy | str, claim: Claim, owner_health: NodeHealth | str,
                        lease_expired: bool, by: Claimant) -> tuple[Decision, TaskRow | None]:
    """Decide on `claim` and, where the policy recovers it, have the store recover it (refused with
    `CheckoutConflictError` if the claim moved on meanwhile: the store, not this decision, is the fence)."""
    decision = decide_handoff(policy, owner_health, lease_expired)
    if not decision.recovers or claim.owner is None:
        return decision, None
    return decision, store.recover(claim.project_id, claim.task_id, claim.lease_epoch, by, decision.reason)
