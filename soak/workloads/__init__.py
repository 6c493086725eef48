"""Workloads: everything a storm, its checker and its report know about one kind of store activity.

A workload (`Workload`) owns what is particular to it: the loop each storm worker runs, the shape of its history
records (what a lease looks like), its surfaces and which of them mutate (the nemesis aims at those), the scenario
keys it adds and the quorum it counts (with the tailer's suspect rules), its final state, and how its histories
are checked (`soak.check.judge.CheckPlan`); optionally, which clauses its verdict judges (`clauses`) and what its
report draws (`report_tenures`, `report_timeline`). The storm, the checker, the run directory and the report are
generic: they know a workload only through this interface, by the name recorded in `scenario.toml` and `run.json`.

`get_workload(name)` finds one: a registered name (`runs`), or `package.module:attr` for a workload defined
elsewhere (a test's toy workload, a vendor's): the attribute is the workload, or a class to instantiate. Storm
workers are spawned processes, so a workload named that way must be importable in a fresh interpreter.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from soak.errors import ScenarioError
from soak.workloads.context import MODES, Outcome, StoreEndedProcess, Strike, WorkerContext

if TYPE_CHECKING:
    from pathlib import Path

    from soak.check.judge import CheckPlan
    from soak.scenario import Scenario

__all__ = ["MODES", "Outcome", "QuorumCounter", "StoreEndedProcess", "Strike", "WORKLOADS", "WorkerContext",
           "Workload", "count_event", "get_workload", "register_workload", "store_kind"]


class QuorumCounter(Protocol):
    """Counts quorum activity from paired history lines while a storm runs, and notes suspects (a workload's view).

    A suspect is an operation the workload's rules say looks like a violation (a stale write accepted, say): a
    hint for `stop_on_suspect`, never a verdict."""

    #: the suspects noted so far: {"process", "index", "f", "run", "intent", "lease", "ts", "reason"}
    suspects: list[dict[str, Any]]

    def feed(self, inv: dict[str, Any], done: dict[str, Any] | None) -> None:
        """One operation: the raw invoke line and its completion line (None: never completed)."""

    def settle(self, latest_ts: int, pending: list[dict[str, Any]]) -> None:
        """After each poll: the latest completion read so far and the invokes still pending (suspect rules that
        wait for later lines decide here)."""

    def counts(self) -> dict[str, int]:
        """Every counter this workload contributes to the quorum."""


class Workload(Protocol):
    """What one kind of storm does to a store, and how its history is read and checked."""

    name: str
    #: the contract its store implements (`runs`: soak.spi; `claims`: soak.claims); optional, default `runs`
    store_kind: str
    #: the preset a scenario file of this workload builds on when it names no `base`
    root_preset: str
    #: every surface its workers record besides `open` (the shared call state names them by position)
    surfaces: tuple[str, ...]
    #: the surfaces that change store state under the fence: where the nemesis aims its stops
    mutations: frozenset[str]
    #: optional: where the nemesis aims its kills (default: `mutations`), e.g. calls that commit twice, where a kill
    #: between the commits leaves a split write
    kill_surfaces: frozenset[str]
    #: optional, default False: a pause inside a call that visibly blocks the store may end once the paused worker's
    #: lease has expired (a pause of this workload only needs to outlast the lease; `soak.storm.nemesis`)
    blocked_pauses_end_at_expiry: bool
    #: the quorum counters it counts (a scenario may set a threshold on these and on the nemesis's own)
    quorum_keys: tuple[str, ...]
    #: its scenario keys: a frozen dataclass whose defaults are its root preset's (a dict field is a table)
    options: type
    #: key -> (check, what it accepts) for its scalar scenario keys; table -> (its keys, check, what it accepts)
    option_schema: dict[str, tuple[Callable[[Any], bool], str]]
    option_tables: dict[str, tuple[tuple[str, ...], Callable[[Any], bool], str]]

    def check_options(self, options: Any, source: str) -> None:
        """Raise `ScenarioError` naming the keys when its options do not go together."""

    def default_quorum(self) -> dict[str, int]:
        """The quorum of its root preset (what `Scenario()` runs to)."""

    def keys(self, scenario: Scenario) -> list[str]:
        """What a worker may hold (the nemesis asks one to take one over) and the final state reads."""

    def run_info(self, scenario: Scenario) -> dict[str, Any]:
        """What `run.json` records of this storm's keys (`runs`, `side_runs`)."""

    def context_hooks(self) -> dict[str, Callable[..., Any]]:
        """`WorkerContext` hooks: `encode_lease(lease)` (the list its records hold) and `refusal_value(exc)`
        (what a typed refusal's completion records, e.g. the holder)."""

    def make_lease(self, *fields: Any) -> Any:
        """The lease object of a record's lease list (the history reader's decoder)."""

    def worker_loop(self, ctx: WorkerContext) -> None:
        """Storm the store until `ctx.should_stop()`."""

    def new_counter(self) -> QuorumCounter:
        """A fresh quorum counter for one storm."""

    def read_final_state(self, store: Any, scenario: Scenario) -> Any:
        """Read the store's final state back through its public API (the storm's final-state reader)."""

    def save_final_state(self, run_dir: Path, state: Any) -> None:
        """Write what `read_final_state` returned into the run directory (`final_state.json`)."""

    def check_plan(self) -> CheckPlan:
        """How its histories are checked."""

    def recount(self, facts: Any) -> dict[str, int]:
        """Its quorum counters, recounted from the facts its checker folded."""

    def exercised(self, facts: Any, strikes_held: int) -> dict[str, int]:
        """clause -> recorded operations that exercised it (certificates show these)."""

    # Optional members, read with getattr (a workload without them still storms, checks and reports):
    #
    # clauses: tuple[str, ...]
    #     the clause ids its verdict judges: `junit.xml` has a test case per one (default `soak.clauses.CLAUSES`).
    # report_tenures(ops: list[Operation], t1: int) -> list[soak.report.data.Tenure]
    #     the tenures the report's timeline draws, from the history's operations (`t1`: the history's end);
    #     without it the report draws none.
    # report_timeline(data: soak.report.data.RunData) -> soak.report.data.Timeline
    #     its own timeline (tenures on key lanes, marks, a strip panel of spans) and the tables it adds to the
    #     report, drawn instead of the per-worker timeline.
    # storm_rates(scenario: Scenario, counts: dict[str, int], running_s: float) -> dict[str, float]
    #     rates `storm.json` records and `soak storm` prints, from the final quorum counts over the seconds the
    #     workers ran (the runs workload: takeovers per second over the physical limit R/T).


def count_event(counts: dict[str, int], process: str, kind: str, value: dict[str, Any]) -> None:
    """Add one history event to the nemesis's quorum counters (stalls, pauses, pauses inside a call, strikes held,
    kills, surfaces whose aimed sweep is complete): the
    one reading the storm's tailer and the checker's recount share."""
    if process == "nemesis":
        if kind == "pause":
            counts["pauses"] = counts.get("pauses", 0) + 1
            if value.get("in_call"):
                counts["pauses_in_call"] = counts.get("pauses_in_call", 0) + 1
            if value.get("strike"):  # a strike held: a worker stopped at a random point inside a store call
                counts["strikes_held"] = counts.get("strikes_held", 0) + 1
        elif kind == "kill":
            counts["kills"] = counts.get("kills", 0) + 1
        elif kind == "swept":  # every gap of the surface's calls tried by an aimed hold (soak.storm.nemesis)
            counts[f"swept_{value.get('surface')}"] = 1
        elif kind == "timeout-kill":
            counts["timeout_kills"] = counts.get("timeout_kills", 0) + 1
    elif kind == "stall":
        counts["stalls"] = counts.get("stalls", 0) + 1


def _runs_workload() -> Workload:
    from soak.workloads.runs import RunsWorkload

    return RunsWorkload()


def _claims_workload() -> Workload:
    from soak.workloads.claims import ClaimsWorkload

    return ClaimsWorkload()


#: workload name -> constructor
WORKLOADS: dict[str, Callable[[], Workload]] = {"runs": _runs_workload, "claims": _claims_workload}


def store_kind(workload: Any) -> str:
    """The contract a workload's store implements (`soak.stores.resolve`'s kind): `runs` unless it says."""
    return getattr(workload, "store_kind", "runs")
_MADE: dict[str, Workload] = {}


def register_workload(name: str, make: Callable[[], Workload]) -> None:
    """Register a workload under a short name (in this process: storm workers find a workload by its name, so one
    registered at run time must also be registered where they import it, or be named `module:attr`)."""
    WORKLOADS[name] = make
    _MADE.pop(name, None)


def get_workload(name: str) -> Workload:
    """The workload called `name` (registered, or `package.module:attr`), or a `ScenarioError` naming the choices."""
    made = _MADE.get(name)
    if made is not None:
        return made
    if name in WORKLOADS:
        made = WORKLOADS[name]()
    elif ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ScenarioError(f"workload {name!r} cannot be loaded ({exc}); name a registered workload "
                                f"({', '.join(sorted(WORKLOADS))}) or an importable package.module:attr") from None
        made = obj() if isinstance(obj, type) else obj
    else:
        raise ScenarioError(f"unknown workload {name!r}; set 'workload' to one of {', '.join(sorted(WORKLOADS))} "
                            "or to package.module:attr")
    _MADE[name] = made
    return made
