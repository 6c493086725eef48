"""The `runs` workload: the fenced run store storm of CONTRACT section 1.

Workers take tenures on a few main runs, run deletion cycles on side runs and sweep dead leases over every fenced
surface (`worker`); the quorum counts takeovers, accepted writes and typed stale refusals (`quorum`); the final
state is every run's journal, meta and blobs, and a probe of each run's epoch (`state`); the checker rebuilds the
serial history the epochs promise and holds the final state and every read to it (`check`). Its scenario keys and
quorum items are in `options`.
"""

from __future__ import annotations

from typing import Any

from soak.clauses import CLAUSES
from soak.spi import Lease, LeaseHeldError
from soak.workloads.runs.options import (
    DEFAULT_QUORUM, QUORUM_KEYS, SCHEMA, TABLES, RunsOptions, check_options,
)
from soak.workloads.runs.coverage import table as coverage_table
from soak.workloads.runs.quorum import RunsCounter, exercised, takeover_rates
from soak.workloads.runs.report import report_tenures
from soak.workloads.runs.load import load_runs, run_load_worker
from soak.workloads.runs.worker import CROSS_RUN, run_worker

__all__ = ["CROSS_RUN", "LEASE_OPS", "MUTATIONS", "RunsCounter", "RunsOptions", "RunsWorkload", "SURFACES"]

#: The surfaces that change store state under the fence (where the nemesis aims its stops).
MUTATIONS: tuple[str, ...] = ("append", "put_meta", "delete", "blob_put", "blob_delete")
#: The lease surfaces.
LEASE_OPS: tuple[str, ...] = ("acquire", "renew", "release")
#: Every surface its workers record besides `open`.
SURFACES: tuple[str, ...] = ("acquire", "renew", "release", "load", "append", "put_meta", "blob_put", "blob_delete",
                             "delete", "get_meta", "blob_get")


def _lease_list(lease: Lease | None) -> list[Any] | None:
    return None if lease is None else [lease.run_id, lease.owner, lease.epoch]


def _refusal_value(exc: BaseException) -> dict[str, Any]:
    """A refused call's completion names the holder the store named (the tailer's ttl-honoured suspects read it)."""
    if isinstance(exc, LeaseHeldError):
        h = exc.holder
        return {"holder": None if h is None else [h.run_id, h.owner, h.epoch]}
    return {}


def _lease(run_id: Any, owner: Any, epoch: Any) -> Lease:
    return Lease(run_id, owner, int(epoch))


class RunsWorkload:
    """The fenced run store storm (CONTRACT section 1)."""

    name = "runs"
    root_preset = "smoke"
    surfaces = SURFACES
    mutations = frozenset(MUTATIONS)
    quorum_keys = QUORUM_KEYS
    options = RunsOptions
    option_schema = SCHEMA
    option_tables = TABLES

    @staticmethod
    def check_options(options: RunsOptions, source: str) -> None:
        check_options(options, source)

    @staticmethod
    def default_quorum() -> dict[str, int]:
        return dict(DEFAULT_QUORUM)

    @staticmethod
    def keys(scenario: Any) -> list[str]:
        """Main runs, side runs, the run no tenure ever acquires (every write to it is a cross-run probe), and the
        load workers' runs."""
        return [*scenario.options.main_runs(), *scenario.options.side_run_ids(), CROSS_RUN,
                *load_runs(scenario.load_workers)]

    #: a pause's work here is done once the paused worker's lease has expired (its next calls are stale); past that,
    #: a pause inside a call that holds the store's lock only freezes every worker (claims pauses must also outlast
    #: the offline threshold, and keep their length)
    blocked_pauses_end_at_expiry = True

    @staticmethod
    def successor_calls(scenario: Any) -> int:
        """Calls a successor starts after its grant before the nemesis lets a struck holder go: the taker's first
        whole-run read (the journal, the meta, every blob) and one more, so a write the holder lands late lands
        after that read, where the taker's second read (or its own writes) shows it after the grant."""
        return 3 + scenario.options.blob_names

    @staticmethod
    def run_info(scenario: Any) -> dict[str, Any]:
        return {"runs": scenario.options.main_runs(), "side_runs": scenario.options.side_run_ids()}

    @staticmethod
    def context_hooks() -> dict[str, Any]:
        return {"encode_lease": _lease_list, "refusal_value": _refusal_value}

    make_lease = staticmethod(_lease)
    #: the clauses its verdict judges (JUnit's test cases)
    clauses = tuple(CLAUSES)
    #: the report's tenures per worker (`soak.workloads.runs.report`)
    report_tenures = staticmethod(report_tenures)

    @staticmethod
    def worker_loop(ctx: Any) -> None:
        (run_load_worker if ctx.load else run_worker)(ctx)

    @staticmethod
    def new_counter(scenario: Any = None) -> RunsCounter:
        return RunsCounter(scenario.lease_ttl_ms if scenario is not None else None)

    def read_final_state(self, store: Any, scenario: Any) -> Any:
        from soak.workloads.runs.state import read_snapshot

        return read_snapshot(store, self.keys(scenario))

    @staticmethod
    def save_final_state(run_dir: Any, state: Any) -> None:
        from soak.workloads.runs.state import save_snapshot

        save_snapshot(run_dir, state)

    @staticmethod
    def check_plan() -> Any:
        from soak.workloads.runs.check import PLAN

        return PLAN

    @staticmethod
    def recount(facts: Any) -> dict[str, int]:
        """The quorum recounted from the checker's per-kind counts and granted/released epochs."""
        counter = RunsCounter()
        for key, n in facts.hist.items():
            counter.add(key, n)
        for run, b in facts.epochs.items():
            counter.granted[run] = {e for e, bits in enumerate(b) if bits & 1}
            counter.released[run] = {e for e, bits in enumerate(b) if bits & 2}
        return counter.counts()

    @staticmethod
    def storm_rates(scenario: Any, counts: dict[str, int], running_s: float) -> dict[str, float]:
        """Takeovers per second, and that over the physical limit R/T: with R main runs and a ttl T, takeovers
        driven by expiry cannot exceed R/T per second (one per run per ttl)."""
        return takeover_rates(counts.get("takeovers", 0), running_s, scenario.options.runs, scenario.lease_ttl_ms)

    @staticmethod
    def coverage(counts: dict[str, int]) -> list[dict[str, Any]]:
        """The probe coverage table from the quorum counts (`soak.workloads.runs.coverage.table`)."""
        return coverage_table(counts)

    @staticmethod
    def exercised(facts: Any, strikes_held: int = 0) -> dict[str, int]:
        """clause -> recorded operations that exercised it (see `soak.workloads.runs.quorum.exercised`)."""
        return exercised(facts.hist, strikes_held)
