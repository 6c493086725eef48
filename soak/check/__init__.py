"""The checker: a stored run's history and final state in, a `Verdict` out, whatever its workload.

`check_run(run_dir)` reads `run.json`, finds the run's workload (`soak.workloads.get_workload`) and checks the
history by the workload's `CheckPlan`: its fold, its clause checkers, and the generic checks every workload gets
(`soak.check.judge`: composition and the false > unknown > true merge; `soak.check.liveness`: call-returns,
no-crash and what the history must hold; `soak.check.parallel`: time slices on two cores). It writes
`verdict.json` next to the run, so a stored run can be re-checked offline (`soak check RUN_DIR`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from soak.check.judge import CheckPlan, judge
from soak.check.parallel import TwoCores, history_tuples
from soak.check.verdict import Evidence, Verdict, Violation, merge_results
from soak.errors import RunDirError
from soak.history import Operation, Record
from soak.rundir import VERDICT_FILE, RunInfo, history_paths, load_run_info, write_json

__all__ = ["CheckPlan", "Evidence", "Verdict", "Violation", "check_run", "merge_results", "read_history",
           "run_settings"]


def read_history(run_dir: str | os.PathLike[str]) -> Iterator[Operation | Record]:
    """Every operation and event of a run directory, file by file; a corrupt file is named."""
    for item in history_tuples(history_paths(run_dir)):
        yield Operation(*item) if type(item) is tuple else item


def run_settings(info: RunInfo, state_error: str | None = None) -> dict[str, Any]:
    """The generic settings of a stored run's facts (`CheckPlan.new_facts`), from its `run.json`."""
    quorum = ", ".join(f"{k} {info.quorum_reached.get(k, 0)}/{v}" for k, v in sorted(info.quorum_target.items()))
    # a storm across hosts: the hosts' clock offset error (clocks.json), slack for every real-time rule
    clock = {"clock_error_ms": info.clock_error_ms} if info.clock_error_ms else {}
    return dict(
        **clock,
        lease_ttl_ms=info.lease_ttl_ms,
        status=info.status if info.error is None else f"{info.status} ({info.error})",
        quorum=quorum,
        call_bound_s=info.call_bound_s or None,
        quorum_target=info.quorum_target if info.status == "quorum" else None,
        workload=info.workload,
        from_storm=True,
        state_error=state_error,
    )


def _confirm_early(run_dir: Path, verdict: Verdict, write: bool) -> Verdict:
    """The verdict, with a reason added when the early judge stopped the storm at a violation this check does not
    confirm (a harness defect: never a pass, whatever else the check found); `storm.json` records whether it was
    confirmed."""
    from soak.check.early import unconfirmed

    path = run_dir / "storm.json"
    try:
        storm = json.loads(path.read_text())
    except (OSError, ValueError):
        return verdict
    early = storm.get("early_judge") if isinstance(storm, dict) else None
    if not isinstance(early, dict) or not early.get("violation"):
        return verdict
    why = unconfirmed(early, list(verdict.violations))
    if write and (early.get("confirmed") != (why is None) or early.get("harness_defect") != why):
        early["confirmed"] = why is None
        early.pop("harness_defect", None)
        if why is not None:
            early["harness_defect"] = why
        write_json(path, storm)
    if why is None:
        return verdict
    return Verdict.build(verdict.violations, [*verdict.reasons, why], verdict.stats)


def check_run(run_dir: str | os.PathLike[str], *, write: bool = True) -> Verdict:
    """Check a stored run and write its `verdict.json` (unless `write` is False).

    Raises `RunDirError` when `run_dir` is not a run directory (or names a workload this soak cannot load). A
    final state that is missing or damaged does not stop the check: the history is judged without it (a violation
    it proves still fails the run; otherwise the verdict is inconclusive, naming what is missing). A damaged
    history is inconclusive with the reason named.
    """
    from soak.errors import ScenarioError
    from soak.workloads import get_workload

    run_dir = Path(run_dir)
    info = load_run_info(run_dir)
    try:
        plan = get_workload(info.workload).check_plan()
    except ScenarioError as exc:
        raise RunDirError(f"{run_dir} was stormed by workload {info.workload!r}, which cannot be checked here: {exc}")
    try:
        state, state_error = plan.load_state(run_dir), None
    except RunDirError as exc:
        state, state_error = None, str(exc)
        if info.error:
            state_error = f"{state_error}; the storm said: {info.error}"
    paths = history_paths(run_dir)
    if not paths:
        verdict = Verdict.build(reasons=[f"{run_dir} has no history/*.jsonl: nothing to check the final state against"])
    else:
        settings = run_settings(info, state_error)
        with TwoCores(paths, lambda: plan.new_facts(state, info, **settings), plan) as cores:
            verdict = judge(lambda: plan.finish(cores.fold()), plan)
        verdict = _confirm_early(run_dir, verdict, write)
    if write:
        write_json(run_dir / VERDICT_FILE, verdict.to_json())
    return verdict
