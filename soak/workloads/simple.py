"""`SimpleWorkload`: the defaults of the `Workload` protocol for a small workload, so that one is a worker loop, a
counting rule, a final-state reader and its checkers.

A simple workload adds no scenario keys of its own, counts its quorum with `count` (a counter name per operation,
or None), keeps its final state as JSON (`final_state.json`), and is checked by `soak.check.base.simple_plan`:
every operation is kept, and its checkers read them at the end. Enough for a storm of thousands of operations; a
workload meant for nightly storms writes its own fold (as `soak.workloads.runs` does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak.errors import RunDirError
from soak.rundir import FINAL_STATE, write_json

__all__ = ["NoOptions", "SimpleWorkload"]


@dataclass(frozen=True)
class NoOptions:
    """The scenario keys of a workload that adds none."""


class _Counter:
    """Quorum counts by a workload's `count` rule; no suspect rules."""

    def __init__(self, count: Any) -> None:
        self.count, self.c, self.suspects = count, {}, []

    def feed(self, inv: dict[str, Any], done: dict[str, Any] | None) -> None:
        name = self.count(inv.get("f", ""), done.get("t") if done else "info")
        if name:
            self.c[name] = self.c.get(name, 0) + 1

    def settle(self, latest_ts: int, pending: list[dict[str, Any]]) -> None:
        pass

    def counts(self) -> dict[str, int]:
        return dict(self.c)


class SimpleWorkload:
    """Defaults for a workload's protocol members (see `soak.workloads.Workload`); subclasses set `name`,
    `surfaces`, `mutations`, `quorum_keys`, `checkers` and define `worker_loop`, `count`, `read_final_state`."""

    name = "simple"
    root_preset: str | None = None  # a scenario of it names every knob it changes, on the `Scenario` defaults
    surfaces: tuple[str, ...] = ()
    mutations: frozenset[str] = frozenset()
    quorum_keys: tuple[str, ...] = ()
    options: type = NoOptions
    option_schema: dict[str, Any] = {}
    option_tables: dict[str, Any] = {}
    #: (name, checker) pairs over `soak.check.base.SimpleFacts`
    checkers: tuple[tuple[str, Any], ...] = ()
    make_lease = None

    def check_options(self, options: Any, source: str) -> None:
        pass

    def default_quorum(self) -> dict[str, int]:
        return {}

    def keys(self, scenario: Any) -> list[str]:
        return []

    def run_info(self, scenario: Any) -> dict[str, Any]:
        return {}

    def context_hooks(self) -> dict[str, Any]:
        return {}

    def worker_loop(self, ctx: Any) -> None:
        raise NotImplementedError

    def count(self, f: str, outcome: str) -> str | None:
        """The quorum counter an operation of surface `f` that ended `outcome` adds to, or None."""
        return None

    def new_counter(self, scenario: Any = None) -> _Counter:
        return _Counter(self.count)

    def read_final_state(self, store: Any, scenario: Any) -> Any:
        """The final state as JSON values."""
        return None

    def save_final_state(self, run_dir: Path, state: Any) -> None:
        write_json(Path(run_dir) / FINAL_STATE, state)

    def load_final_state(self, run_dir: Path) -> Any:
        path = Path(run_dir) / FINAL_STATE
        if not path.is_file():
            raise RunDirError(f"{path} is missing: the storm did not read the final state back")
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            raise RunDirError(f"{path} is unreadable ({exc}); the run directory is damaged") from exc

    def check_plan(self) -> Any:
        from soak.check.base import simple_plan

        return simple_plan(self.checkers, self.load_final_state, make_lease=self.make_lease)

    def recount(self, facts: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in facts.ops:
            name = self.count(op[2], op[7])
            if name:
                out[name] = out.get(name, 0) + 1
        return out

    def exercised(self, facts: Any, strikes_held: int) -> dict[str, int]:
        return {}
