"""The single-project -> multi-project / multi-node transition path (seed section 4) as code a test can drive.

A node's runtime is in one of four states (`RuntimeState`): `single-project/in-process`,
`multi-project/in-process`, `multi-project/child-process` and `multi-project/in-process + remote runtime
placement`. `NodeRuntime` is one node over a claim store (any `soak.claims.ClaimStore`, opened by a factory the
caller passes) and a central registry of nodes (`CentralCore`), and holds what the seed asks of a transition:

- restart-bound only: `request_transition(target, force=False, reason=...)` records a pending transition and
  changes nothing else; the new state takes effect at `restart()`, never hot-swapped;
- preconditions: a transition is allowed only when the node is idle (no task `in-progress`) or with `force`;
  `force` pauses the in-flight tasks through the engine path (`paused_by="engine"`, never `user_paused`);
  refused requests raise `TransitionRefusedError` and change nothing;
- rollback to `single-project/in-process` only while this node is the sole node registered in the central core
  (checked at the request and again at the restart), else `RollbackRefusedError` naming the other nodes;
- bootstrap: every startup (construction and each `restart()`) opens the claim store again, which is the
  central claims migration: a claim store's factory creates what it needs if missing and must be safe to rerun,
  with no claim or epoch lost. The new store object is opened before the old one is closed, so a store whose
  state lives as long as an open object (`memory:`) keeps it too;
- resumption after ownership re-validation: at restart each task the engine paused (and any still in progress)
  heartbeats with its owner and epoch; a `CheckoutConflictError` (another node recovered it meanwhile) aborts
  that task cleanly before any write: no progress write, no release. Tasks a user paused stay paused;
- durable trail in the central core: each applied transition writes the activity `project:isolation-transition`
  per project, and each restart the event `project:runtime-restarted` with `projectId`, `isolationMode` and
  `reason`.

Not modelled: the engine's executors and the hybrid-executor gate (the state names the runtime a project gets);
per-project databases, which the transition does not touch.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from soak.claims._types import CheckoutConflictError, Claimant, ClaimStore
from soak.errors import HarnessError
from soak.retry import retry_busy

__all__ = ["ACTIVITY_TRANSITION", "EVENT_RESTARTED", "CentralCore", "LocalTask", "NodeRuntime", "PendingTransition",
           "RestartReport", "RollbackRefusedError", "RuntimeState", "TaskPausedError", "TrailEntry",
           "TransitionError", "TransitionPendingError", "TransitionRefusedError"]

#: The activity every applied transition writes, per project.
ACTIVITY_TRANSITION = "project:isolation-transition"
#: The event every restart writes, per project, with `projectId`, `isolationMode` and `reason`.
EVENT_RESTARTED = "project:runtime-restarted"


class RuntimeState(str, Enum):
    """The supported operational states of a node's runtime (seed section 4.1)."""

    SINGLE_PROJECT_IN_PROCESS = "single-project/in-process"
    MULTI_PROJECT_IN_PROCESS = "multi-project/in-process"
    MULTI_PROJECT_CHILD_PROCESS = "multi-project/child-process"
    MULTI_PROJECT_REMOTE_PLACEMENT = "multi-project/in-process + remote runtime placement"

    @classmethod
    def parse(cls, name: str | RuntimeState) -> RuntimeState:
        if isinstance(name, RuntimeState):
            return name
        try:
            return cls(name)
        except ValueError:
            raise TransitionError(f"unknown runtime state {name!r}; use one of "
                                  f"{', '.join(repr(s.value) for s in cls)}") from None


class TransitionError(HarnessError, ValueError):
    """A transition request or restart the transition path refuses; the message names the fix."""


class TransitionRefusedError(TransitionError):
    """A transition requested while tasks are in progress, without `force`."""


class RollbackRefusedError(TransitionError):
    """A rollback to single-project mode while other nodes are registered in the central core."""


class TransitionPendingError(TransitionError):
    """Work started while a transition waits for the restart (a draining node takes no new tasks)."""


class TaskPausedError(TransitionError):
    """A write for a task that is paused (it resumes only after a restart re-validates its ownership)."""


@dataclass(frozen=True, slots=True)
class TrailEntry:
    """One durable trail record: an `activity` or an `event`, its name, project and payload."""

    seq: int
    kind: str
    name: str
    project_id: str
    node_id: str
    payload: dict[str, Any]
    at: float


class CentralCore:
    """The central registry: which nodes are registered, and the durable trail of every project.

    A SQLite file every node of a deployment opens (`CentralCore(path)`), or an in-process one (`path=None`)."""

    def __init__(self, path: str | None = None) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path or ":memory:", timeout=30.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 30000")
        self._db.execute("CREATE TABLE IF NOT EXISTS nodes (node_id TEXT PRIMARY KEY)")
        self._db.execute("CREATE TABLE IF NOT EXISTS trail (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT, "
                         "name TEXT, project_id TEXT, node_id TEXT, payload TEXT, at REAL)")

    def register(self, node_id: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO nodes VALUES (?)", (node_id,))

    def unregister(self, node_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM nodes WHERE node_id = ?", (node_id,))

    def nodes(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT node_id FROM nodes ORDER BY node_id")]

    def record(self, kind: str, name: str, project_id: str, node_id: str, payload: dict[str, Any], at: float) -> None:
        with self._lock:
            self._db.execute("INSERT INTO trail (kind, name, project_id, node_id, payload, at) VALUES (?, ?, ?, ?, ?, ?)",
                             (kind, name, project_id, node_id, json.dumps(payload, sort_keys=True), at))

    def trail(self, project_id: str | None = None) -> list[TrailEntry]:
        sql, args = "SELECT * FROM trail ORDER BY seq", ()
        if project_id is not None:
            sql, args = "SELECT * FROM trail WHERE project_id = ? ORDER BY seq", (project_id,)
        with self._lock:
            rows = list(self._db.execute(sql, args))
        return [TrailEntry(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6]) for r in rows]

    def close(self) -> None:
        self._db.close()


@dataclass(frozen=True, slots=True)
class LocalTask:
    """A task this node works on: its claim (owner and epoch) and where it stands locally."""

    project_id: str
    task_id: str
    claimant: Claimant
    epoch: int
    status: str = "in-progress"  # or "paused"
    paused_by: str | None = None  # "engine" (a forced transition) or "user"
    user_paused: bool = False
    step: int = 0


@dataclass(frozen=True, slots=True)
class PendingTransition:
    """A transition requested and waiting for the restart."""

    source: RuntimeState
    target: RuntimeState
    reason: str
    force: bool
    paused: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class RestartReport:
    """What a restart did: the state before and after, whether a transition was applied, which paused tasks
    resumed after re-validation and which were aborted (with why)."""

    previous: RuntimeState
    state: RuntimeState
    transitioned: bool
    reason: str
    resumed: tuple[tuple[str, str], ...]
    aborted: tuple[tuple[str, str, str], ...]


class NodeRuntime:
    """One node's runtime over a claim store and the central core (see the module docstring).

    `open_claims()` opens one claim store object over the node's claim store location (the bootstrap migration);
    it is called at construction and at every restart. `clock` stamps the trail."""

    def __init__(self, node_id: str, open_claims: Callable[[], ClaimStore], core: CentralCore,
                 projects: Sequence[str], *, state: RuntimeState | str = RuntimeState.SINGLE_PROJECT_IN_PROCESS,
                 clock: Callable[[], float] = time.time) -> None:
        if not projects:
            raise TransitionError("a node runtime needs at least one project")
        self.node_id, self.core, self.projects, self.clock = node_id, core, tuple(projects), clock
        self._open_claims = open_claims
        self._state = RuntimeState.parse(state)
        self._pending: PendingTransition | None = None
        self._tasks: dict[tuple[str, str], LocalTask] = {}
        self._runs = 0
        self.startups = 0
        self.store: ClaimStore = self._bootstrap()
        self.core.register(node_id)

    # -- what the node holds -------------------------------------------------------------------

    @property
    def state(self) -> RuntimeState:
        """The state in effect (a requested transition takes effect only at `restart()`)."""
        return self._state

    @property
    def pending(self) -> PendingTransition | None:
        return self._pending

    @property
    def tasks(self) -> dict[tuple[str, str], LocalTask]:
        return dict(self._tasks)

    def in_progress(self) -> list[LocalTask]:
        return [t for t in self._tasks.values() if t.status == "in-progress"]

    # -- work ----------------------------------------------------------------------------------

    def start_task(self, project_id: str, task_id: str, agent_id: str = "engine") -> LocalTask:
        """Claim a task and start it (`CheckoutConflictError` where another node holds it)."""
        if project_id not in self.projects:
            raise TransitionError(f"node {self.node_id} does not run project {project_id!r}; its projects are "
                                  f"{', '.join(self.projects)}")
        if self._pending is not None:
            raise TransitionPendingError(f"node {self.node_id} is waiting to restart into "
                                         f"{self._pending.target.value}; restart it before starting {task_id!r}")
        if (project_id, task_id) in self._tasks:
            raise TransitionError(f"node {self.node_id} already works on {project_id}/{task_id}")
        self._runs += 1
        claimant = Claimant(self.node_id, agent_id, f"{self.node_id}-run-{self._runs}")
        claim = self._busy(lambda: self.store.claim(project_id, task_id, claimant), f"claim {project_id}/{task_id}")
        row = self.store.task(project_id, task_id)
        task = LocalTask(project_id, task_id, claimant, claim.lease_epoch, step=row.step if row is not None else 0)
        self._tasks[(project_id, task_id)] = task
        return task

    def _task(self, project_id: str, task_id: str) -> LocalTask:
        try:
            return self._tasks[(project_id, task_id)]
        except KeyError:
            raise TransitionError(f"node {self.node_id} does not work on {project_id}/{task_id}") from None

    def record_progress(self, project_id: str, task_id: str, step: int) -> None:
        """A fenced progress write; a conflict aborts the task here (it is no longer ours) and propagates."""
        task = self._task(project_id, task_id)
        if task.status != "in-progress":
            raise TaskPausedError(f"{project_id}/{task_id} is paused ({task.paused_by}); it resumes after a restart "
                                  "re-validates its ownership")
        try:
            self._busy(lambda: self.store.record_progress(project_id, task_id, task.claimant, task.epoch, step),
                       f"progress of {project_id}/{task_id}")
        except CheckoutConflictError:
            del self._tasks[(project_id, task_id)]
            raise
        self._tasks[(project_id, task_id)] = replace(task, step=int(step))

    def finish_task(self, project_id: str, task_id: str) -> None:
        """Release a finished task's claim."""
        task = self._task(project_id, task_id)
        if task.status != "in-progress":
            raise TaskPausedError(f"{project_id}/{task_id} is paused ({task.paused_by}); it cannot finish now")
        try:
            self._busy(lambda: self.store.release(project_id, task_id, task.claimant, task.epoch),
                       f"release of {project_id}/{task_id}")
        finally:
            del self._tasks[(project_id, task_id)]

    def pause_task(self, project_id: str, task_id: str) -> None:
        """A user's pause: the task stays claimed and stays paused across restarts until the user resumes it."""
        task = self._task(project_id, task_id)
        self._tasks[(project_id, task_id)] = replace(task, status="paused", paused_by="user", user_paused=True)

    # -- the transition ------------------------------------------------------------------------

    def request_transition(self, target: RuntimeState | str, *, force: bool = False,
                           reason: str = "reconfiguration") -> PendingTransition:
        """Ask for `target` at the next restart; refused (nothing changed) unless idle or `force`."""
        target = RuntimeState.parse(target)
        if target is self._state:
            raise TransitionError(f"node {self.node_id} is already in {target.value}; nothing to transition "
                                  "(cancel_transition() drops a pending one)")
        self._check_rollback(target)
        busy = self.in_progress()
        if busy and not force:
            names = ", ".join(f"{t.project_id}/{t.task_id}" for t in busy)
            raise TransitionRefusedError(
                f"node {self.node_id} has {len(busy)} task(s) in progress ({names}); wait until it is idle, or pass "
                "force=True to pause them through the engine and resume them after the restart")
        paused = tuple(sorted((t.project_id, t.task_id) for t in busy))
        for t in busy:
            self._tasks[(t.project_id, t.task_id)] = self._pause_for_transition(t)
        earlier = self._pending.paused if self._pending is not None else ()
        self._pending = PendingTransition(self._state, target, reason, force, tuple(sorted(set(earlier + paused))))
        return self._pending

    def cancel_transition(self) -> None:
        """Drop a pending transition (tasks it paused resume at the next restart, after re-validation)."""
        self._pending = None

    def _pause_for_transition(self, task: LocalTask) -> LocalTask:
        """The engine-initiated pause of a forced transition: never a user pause."""
        return replace(task, status="paused", paused_by="engine", user_paused=False)

    def _rollback_allowed(self, others: list[str]) -> bool:
        return not others

    def _check_rollback(self, target: RuntimeState) -> None:
        if target is not RuntimeState.SINGLE_PROJECT_IN_PROCESS:
            return
        others = [n for n in self.core.nodes() if n != self.node_id]
        if not self._rollback_allowed(others):
            raise RollbackRefusedError(
                f"rollback of node {self.node_id} to {target.value} refused: {len(others)} other node(s) are "
                f"registered in the central core ({', '.join(others)}), and single-project mode would orphan "
                "their claims; unregister those nodes first, or stay in a multi-project state")

    def restart(self, reason: str | None = None) -> RestartReport:
        """Restart the runtime: bootstrap the claim store, apply a pending transition, write the trail, then
        resume paused tasks whose ownership re-validates (aborting the others before any write)."""
        pending = self._pending
        target = pending.target if pending is not None else self._state
        if pending is not None:
            self._check_rollback(target)  # a node may have registered since the request
        why = reason or (pending.reason if pending is not None else "restart")
        new_store = self._bootstrap()  # opened before the old object closes: nothing is lost with it
        old, self.store = self.store, new_store
        try:
            old.close()
        except Exception:  # noqa: BLE001 - the old object is done with either way
            pass
        previous = self._state
        self._state = self._apply_state(target)
        self._pending = None
        now = self.clock()
        for project in self.projects:
            if pending is not None:
                self.core.record("activity", ACTIVITY_TRANSITION, project, self.node_id,
                                 {"projectId": project, "from": previous.value, "to": target.value, "reason": why,
                                  "force": pending.force}, now)
            self.core.record("event", EVENT_RESTARTED, project, self.node_id,
                             {"projectId": project, "isolationMode": self._state.value, "reason": why}, now)
        resumed: list[tuple[str, str]] = []
        aborted: list[tuple[str, str, str]] = []
        for key, task in sorted(self._tasks.items()):
            if task.user_paused:
                continue
            why_not = self._revalidate(task)
            if why_not is None:
                self._tasks[key] = replace(task, status="in-progress", paused_by=None)
                resumed.append(key)
            else:
                del self._tasks[key]
                aborted.append((*key, why_not))
        return RestartReport(previous, self._state, pending is not None, why, tuple(resumed), tuple(aborted))

    def _apply_state(self, target: RuntimeState) -> RuntimeState:
        return target

    def _revalidate(self, task: LocalTask) -> str | None:
        """A heartbeat with owner and epoch: None where the task is still ours, else why it is not."""
        try:
            self._busy(lambda: self.store.heartbeat(task.project_id, task.task_id, task.claimant, task.epoch),
                       f"re-validation of {task.project_id}/{task.task_id}")
        except CheckoutConflictError as exc:
            holder = exc.current_holder
            who = (f"{holder.owner.node_id}/{holder.owner.agent_id} at epoch {holder.lease_epoch}"
                   if holder is not None and holder.owner is not None else "nobody")
            return f"ownership moved on (now held by {who})"
        return None

    def _bootstrap(self) -> ClaimStore:
        store = self._open_claims()
        self.startups += 1
        return store

    @staticmethod
    def _busy(call: Callable[[], Any], what: str) -> Any:
        return retry_busy(call, what)

    def close(self) -> None:
        self.store.close()
