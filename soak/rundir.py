"""The run directory: where a storm leaves everything the checker and the report need.

Layout (paths relative to the run directory)::

    scenario.toml       the scenario as run, seed included
    run.json            what ran and how it ended (see `RunInfo`)
    history/*.jsonl     one history file per worker incarnation, plus nemesis.jsonl
    final_state.json    the store's state read back after every worker stopped (the workload's reader)
    verdict.json        the checker's verdict (written by `soak.check`)

The final state is the workload's to read and write (`Workload.read_final_state`, `save_final_state`,
`CheckPlan.load_state`): through the public store API only, so it works for every store.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from soak.errors import RunDirError

__all__ = [
    "EVENTS_FILE",
    "FINAL_STATE",
    "HISTORY_DIR",
    "RUN_INFO",
    "RunInfo",
    "SCENARIO_FILE",
    "VERDICT_FILE",
    "history_paths",
    "info_to_json",
    "load_run_info",
    "write_json",
]

SCENARIO_FILE = "scenario.toml"
RUN_INFO = "run.json"
HISTORY_DIR = "history"
EVENTS_FILE = "history/nemesis.jsonl"
FINAL_STATE = "final_state.json"
VERDICT_FILE = "verdict.json"


@dataclass(slots=True)
class RunInfo:
    """What ran and how the storm ended.

    `status` is `quorum` (every threshold met), `timeout` (time bound hit first),
    `interrupted` (Ctrl-C or a signal), `suspect` (stopped early at a suspect operation:
    `stop_on_suspect`), `violation` (stopped early at the first violation the early judge proved:
    `stop_on_violation`, or `stop_on_suspect`), `workers-lost` (every worker ended on its own and the replacements were
    used up), `error` (no worker could boot the store: `error` names the cause), or `crashed`
    (the harness itself failed; `error` names the file holding the traceback). `call_bound_s`
    is the `call-returns` bound the storm ran with (0 in run directories older than it: the
    checker then derives it from the ttl).
    """

    soak_version: str
    workload: str
    store: str
    seed: int
    lease_ttl_ms: int
    workers: int
    runs: list[str] = field(default_factory=list)  # the keys the workers write (the runs workload's main runs)
    side_runs: list[str] = field(default_factory=list)
    status: str = "running"
    error: str | None = None
    started_ns: int = 0
    ended_ns: int = 0
    wall_started: float = field(default_factory=time.time)
    quorum_target: dict[str, int] = field(default_factory=dict)
    quorum_reached: dict[str, int] = field(default_factory=dict)
    worker_seeds: dict[str, int] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    call_bound_s: float = 0.0
    #: a storm across hosts: the largest error of any host's clock offset estimate (`clocks.json`), 0 on one host
    clock_error_ms: float = 0.0


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write JSON atomically (temp file, then rename)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_run_info(run_dir: str | os.PathLike[str]) -> RunInfo:
    path = Path(run_dir) / RUN_INFO
    if not path.is_file():
        raise RunDirError(f"{run_dir} is not a soak run directory (no {RUN_INFO}); pass the directory a storm wrote")
    try:
        return RunInfo(**json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise RunDirError(f"{path} is unreadable ({exc}); the run directory is damaged") from exc


def history_paths(run_dir: str | os.PathLike[str]) -> list[Path]:
    return sorted((Path(run_dir) / HISTORY_DIR).glob("*.jsonl"))


def info_to_json(info: RunInfo) -> dict[str, Any]:
    return asdict(info)
