"""The checker: rebuild the serial order of a stored run, diff it against the store, check fencing.

`check` is the pure core (operations and final state in, `Verdict` out); `check_run` reads a
run directory, checks it and writes `verdict.json` next to it, so a stored run can be
re-checked offline (`soak check RUN_DIR`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from soak.check.core import CHECKERS, check, finish, judge, new_facts
from soak.check.parallel import TwoCores, history_tuples
from soak.check.verdict import Evidence, Verdict, Violation, merge_results
from soak.history import Operation, Record
from soak.rundir import VERDICT_FILE, history_paths, load_run_info, load_snapshot, write_json
from soak.errors import RunDirError

__all__ = ["CHECKERS", "Evidence", "Verdict", "Violation", "check", "check_run", "merge_results", "read_history"]


def read_history(run_dir: str | os.PathLike[str]) -> Iterator[Operation | Record]:
    """Every operation and event of a run directory, file by file; a corrupt file is named."""
    for item in history_tuples(history_paths(run_dir)):
        yield Operation(*item) if type(item) is tuple else item


def check_run(run_dir: str | os.PathLike[str], *, write: bool = True) -> Verdict:
    """Check a stored run and write its `verdict.json` (unless `write` is False).

    Raises `RunDirError` when `run_dir` is not a run directory. A final state that is missing or damaged does not
    stop the check: the history is judged without it (a violation it proves still fails the run; otherwise the
    verdict is inconclusive, naming what is missing). A damaged history is inconclusive with the reason named.
    """
    run_dir = Path(run_dir)
    info = load_run_info(run_dir)
    try:
        snapshot, state_error = load_snapshot(run_dir), None
    except RunDirError as exc:
        snapshot, state_error = None, str(exc)
        if info.error:
            state_error = f"{state_error}; the storm said: {info.error}"
    if not history_paths(run_dir):
        verdict = Verdict.build(reasons=[f"{run_dir} has no history/*.jsonl: nothing to check the final state against"])
    else:
        quorum = ", ".join(
            f"{k} {info.quorum_reached.get(k, 0)}/{v}" for k, v in sorted(info.quorum_target.items())
        )
        settings = dict(
            lease_ttl_ms=info.lease_ttl_ms,
            runs=[*info.runs, *info.side_runs],
            status=info.status if info.error is None else f"{info.status} ({info.error})",
            quorum=quorum,
            call_bound_s=info.call_bound_s or None,
            quorum_target=info.quorum_target if info.status == "quorum" else None,
            workload=info.workload,
            from_storm=True,
            state_error=state_error,
        )
        with TwoCores(history_paths(run_dir), lambda: new_facts(snapshot, **settings)) as cores:
            verdict = judge(lambda: finish(cores.fold()))
    if write:
        write_json(run_dir / VERDICT_FILE, verdict.to_json())
    return verdict
