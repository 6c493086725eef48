"""The `claims` workload: task claims across nodes (CONTRACT section 2), stormed.

Storm workers are nodes whose agents race for a pool of tasks, heartbeat, record progress under their epoch,
release, and recover the tasks of nodes that went silent past their lease under the handoff policy (`worker`);
the quorum counts claims won, conflicts, progress, recoveries, returning-owner aborts and split writes repaired
(`counts`); the final state is every project's central claims, task rows (before and after one reconcile) and
audit trail (`read_state`); the checker holds the history and that state to the claim clauses (`check`). Its
scenario keys are in `options`; its store is a claim store (`soak.claims.resolve_claims`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from soak.claims import CheckoutConflictError, claim_json, task_json
from soak.clauses import CLAIM_CLAUSES, LIVENESS_CLAUSES
from soak.workloads.claims.options import (
    DEFAULT_QUORUM, QUORUM_KEYS, SCHEMA, TABLES, ClaimsOptions, check_options,
)
from soak.workloads.simple import SimpleWorkload

__all__ = ["ClaimLease", "ClaimsWorkload", "MUTATIONS", "SURFACES", "counts_of"]

#: Every surface its nodes record besides `open`.
SURFACES: tuple[str, ...] = ("claim", "heartbeat", "release", "record_progress", "recover", "get", "task",
                             "reconcile")
#: The surfaces that change claims or task rows under the fence (where the nemesis aims).
MUTATIONS: tuple[str, ...] = ("claim", "heartbeat", "release", "record_progress", "recover")


def counts_of(f: str, intent: str, outcome: str, error: str | None, args: dict[str, Any],
              result: dict[str, Any]) -> list[tuple[str, int]]:
    """The quorum counters one operation adds to: the one reading the storm's tailer and the checker share."""
    if intent == "stale" and outcome in ("ok", "fail"):  # the harness's sweep of a dead epoch (accepted: judged)
        refused = outcome == "fail" and error == "CheckoutConflictError"
        return [("stale_sweeps", 1)] + ([("stale_refusals", 1)] if refused else []) + (
            [("stale_progress", 1)] if refused and f == "record_progress" else [])
    if outcome == "ok":
        if f == "claim":
            epoch = (result.get("claim") or {}).get("epoch")
            return [("renewals", 1)] if intent == "renew" and epoch == args.get("renew") else [("claims_won", 1)]
        if f == "heartbeat":
            return [("renewals", 1)]
        if f == "record_progress":
            return [("progress", 1)]
        if f == "recover":  # a probe accepted: the store recovered a claim within its lease (the checker judges)
            return [("probes", 1)] if intent == "probe" else [("recoveries", 1)]
        if f == "release":
            return [("releases", 1)]
        if f == "reconcile" and result.get("repaired"):
            return [("splits_repaired", len(result["repaired"]))]
        return []
    if outcome == "fail" and error == "CheckoutConflictError":
        if f == "claim" and intent == "claim":
            return [("conflicts", 1)]
        if f == "heartbeat" or (f == "claim" and intent == "renew"):
            return [("aborts", 1)]
        if f == "record_progress":
            return [("aborts", 1), ("stale_progress", 1)]
        if f == "recover" and intent == "probe":
            return [("probes", 1), ("probes_refused", 1)]
    return []


class _Counter:
    def __init__(self) -> None:
        self.c: dict[str, int] = {}
        self.suspects: list[dict[str, Any]] = []

    def feed(self, inv: dict[str, Any], done: dict[str, Any] | None) -> None:
        t = done.get("t") if done else "info"
        for name, n in counts_of(inv.get("f", ""), inv.get("intent", ""), t, done.get("err") if done else None,
                                 inv.get("v") or {}, (done or {}).get("v") or {}):
            self.c[name] = self.c.get(name, 0) + n

    def settle(self, latest_ts: int, pending: list[dict[str, Any]]) -> None:
        pass

    def counts(self) -> dict[str, int]:
        return dict(self.c)


class ClaimLease(NamedTuple):
    """A claims record's lease: the task key, the owner (node, agent) and the epoch the call is made under."""

    key: str
    node: str
    agent: str
    epoch: int


def _refusal_value(exc: BaseException) -> dict[str, Any]:
    """A refused call's completion records the holder the conflict named (None: it named none)."""
    if isinstance(exc, CheckoutConflictError):
        return {"holder": claim_json(exc.current_holder)}
    return {}


class ClaimsWorkload(SimpleWorkload):
    """Task claims across nodes (CONTRACT section 2)."""

    name = "claims"
    root_preset = "claims"
    store_kind = "claims"
    surfaces = SURFACES
    mutations = frozenset(MUTATIONS)
    #: a claim, release or recovery commits the central row, then the task row: a kill between is a split write
    kill_surfaces = frozenset(("claim", "release", "recover"))
    quorum_keys = QUORUM_KEYS
    options = ClaimsOptions
    option_schema = SCHEMA
    option_tables = TABLES

    @property
    def checkers(self) -> tuple[tuple[str, Any], ...]:
        from soak.workloads.claims.check import CHECKERS

        return CHECKERS

    def check_options(self, options: ClaimsOptions, source: str) -> None:
        check_options(options, source)

    def default_quorum(self) -> dict[str, int]:
        return dict(DEFAULT_QUORUM)

    def keys(self, scenario: Any) -> list[str]:
        return scenario.options.keys()

    def run_info(self, scenario: Any) -> dict[str, Any]:
        return {"runs": scenario.options.keys(), "side_runs": []}

    make_lease = ClaimLease
    #: the clauses its verdict judges (JUnit's test cases): the claim clauses and every workload's liveness
    clauses = (*CLAIM_CLAUSES, *LIVENESS_CLAUSES)

    def report_tenures(self, ops: list[Any], t1: int) -> list[Any]:
        from soak.workloads.claims.report import report_tenures

        return report_tenures(ops, t1)

    def report_timeline(self, data: Any) -> Any:
        from soak.workloads.claims.report import report_timeline

        return report_timeline(data)

    def context_hooks(self) -> dict[str, Any]:
        return {"refusal_value": _refusal_value}

    def worker_loop(self, ctx: Any) -> None:
        from soak.workloads.claims.worker import run_node

        run_node(ctx)

    def new_counter(self, scenario: Any = None) -> _Counter:
        return _Counter()

    def read_final_state(self, store: Any, scenario: Any) -> Any:
        """Every project's claims, task rows before and after one reconcile, the task ids it repaired, and its
        audit trail, through the claim store's API."""
        out = {}
        for project in scenario.options.project_ids():
            before = [task_json(r) | {"task": r.task_id} for r in store.tasks(project)]
            repaired = list(store.reconcile(project))
            out[project] = {
                "claims": {c.task_id: claim_json(c) for c in store.claims(project)},
                "tasks_before": {r.pop("task"): r for r in before},
                "repaired": repaired,
                "tasks": {r.task_id: task_json(r) for r in store.tasks(project)},
                "audit": [{"task": e.task_id, "kind": e.kind, "epoch": e.epoch, "node": e.node_id,
                           "detail": e.detail} for e in store.audit(project)],
            }
        return out

    def recount(self, facts: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in facts.ops:
            for name, n in counts_of(op[2], op[5], op[7], op[9], op[6] or {}, op[8] or {}):
                out[name] = out.get(name, 0) + n
        return out

    def exercised(self, facts: Any, strikes_held: int = 0) -> dict[str, int]:
        from soak.workloads.claims.check import exercised

        return exercised(facts)
