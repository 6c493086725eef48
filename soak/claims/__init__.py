"""Task claims across nodes (CONTRACT section 2): the pinned names, the claim store protocol, the handoff policy.

- `Claimant`, `Claim`, `CheckoutConflictError` (with `current_holder`), `ClaimStore`: the checkout mutex, a
  central claim row per `(project_id, task_id)` whose epoch rises by one per owner change and never resets;
- `TaskRow`, `AuditEvent`, `RECOVER_EVENT`: the per-project task rows that mirror the central row, and the audit
  trail a recovery writes;
- `HandoffPolicy`, `NodeHealth`, `decide_handoff`, `pre_dispatch`, `recover_unreachable`: what happens to a task
  whose node is unreachable, and where a task may be dispatched;
- `NodeHealthMonitor`, `NodeRegistry`: node health from heartbeats;
- `ClaimsOracle` (`soak.claims.oracle`): the contract as pure state transitions;
- `resolve_claims(spec)`: `memory:`, `sqlite:` (the reference stores) or `package.module:callable`;
- `soak.claims.model` (imported on its own: it needs Hypothesis): the Hypothesis claims model,
  `run_claims_model(spec)`;
- `soak.claims.transition`: the restart-bound single-project -> multi-project transition path, `NodeRuntime`.
"""

from __future__ import annotations

from soak.claims._health import HealthChange, NodeHealthMonitor, NodeRegistry
from soak.claims._policy import (
    UNREACHABLE, Decision, DispatchDecision, HandoffPolicy, NodeHealth, decide_handoff, pre_dispatch,
    recover_unreachable,
)
from soak.claims._spec import resolve_claims
from soak.claims._types import (
    RECOVER_EVENT, TASK_STATUSES, AuditEvent, CheckoutConflictError, Claim, Claimant, ClaimStore, TaskRow, claim_json,
    task_json,
)

__all__ = ["AuditEvent", "CheckoutConflictError", "Claim", "ClaimStore", "Claimant", "Decision", "DispatchDecision",
           "HandoffPolicy", "HealthChange", "NodeHealth", "NodeHealthMonitor", "NodeRegistry", "RECOVER_EVENT",
           "TASK_STATUSES", "TaskRow", "UNREACHABLE", "claim_json", "decide_handoff", "pre_dispatch",
           "recover_unreachable", "resolve_claims", "task_json"]
