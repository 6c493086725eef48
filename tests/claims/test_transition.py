"""The transition path (seed section 4) as a Hypothesis state machine over `NodeRuntime`, and broken variants it
must catch.

The machine drives one node (`n1`) over a claim store and a central core, with other nodes registering and
leaving, tasks started, written, paused and finished, transitions requested with and without force, other nodes
stealing a paused task's claim through recovery, and restarts. Its expectations are written here from the seed,
never read off the runtime; each failed check starts with the rule it guards:

- `[restart-bound]` the state changes only at a restart, to the requested target;
- `[idle-or-force]` a transition with tasks in progress needs force; a refused request changes nothing;
- `[force-engine-pause]` force pauses in-flight tasks with paused_by="engine", never userPaused;
- `[rollback-sole-node]` rollback to single-project/in-process only while n1 is the sole registered node;
- `[resume-revalidated]` at restart a paused task resumes only if its owner and epoch still hold; a stolen one is
  aborted before any write;
- `[no-data-loss]` claims, epochs and step progress survive every restart (the bootstrap migration reruns);
- `[durable-trail]` one activity per applied transition and one event per restart, per project, with
  projectId, isolationMode and reason.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace

import pytest
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from soak.claims import CheckoutConflictError, Claimant, resolve_claims
from soak.claims.transition import (
    ACTIVITY_TRANSITION, EVENT_RESTARTED, CentralCore, NodeRuntime, RollbackRefusedError, RuntimeState,
    TaskPausedError, TransitionError, TransitionPendingError, TransitionRefusedError,
)
from soak.clock import FakeClock
from soak.errors import HarnessError
from soak.model import model_settings

SPECS = ["memory:"]
try:
    import soak.claims._sqlite  # noqa: F401

    SPECS.append("sqlite:")
except ImportError:
    pass

PROJECTS = ("p1", "p2")
TASKS = ("t1", "t2")
KEYS = [(p, t) for p in PROJECTS for t in TASKS]
OTHERS = ("n2", "n3")
TTL_MS = 1000
SINGLE = RuntimeState.SINGLE_PROJECT_IN_PROCESS
SETTINGS = Settings(model_settings("ci"), max_examples=150, stateful_step_count=30)


def check(ok: bool, rule: str, message: str) -> None:
    __tracebackhide__ = True
    if not ok:
        raise AssertionError(f"[{rule}] {message}")


class TransitionMachine(RuleBasedStateMachine):
    runtime_class: type[NodeRuntime] = NodeRuntime
    spec = "memory:"

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.location = tempfile.mkdtemp(prefix="soak-transition-")
        self.target = resolve_claims(self.spec)
        self.core = CentralCore()
        self.observer = self._open()  # the other nodes' view of the claim store
        self.rt = self.runtime_class("n1", self._open, self.core, PROJECTS, clock=self.clock)
        # the model, written from the seed
        self.state = SINGLE
        self.pending: RuntimeState | None = None
        self.others: set[str] = set()
        self.local: dict[tuple[str, str], str] = {}  # key -> in-progress | paused-engine | paused-user
        self.stolen: dict[tuple[str, str], tuple] = {}  # key -> (owner, epoch, step) right after the steal
        self.transitions = 0
        self.restarts = 0

    def _open(self):
        return self.target.open(self.location, TTL_MS, clock=self.clock)

    def teardown(self) -> None:
        try:
            self.rt.close()
            self.observer.close()
            self.core.close()
        finally:
            shutil.rmtree(self.location, ignore_errors=True)

    def _keys(self, status: str | None = None) -> list[tuple[str, str]]:
        return sorted(k for k, s in self.local.items() if status is None or s == status)

    def _snapshot(self):
        return {k: (self.observer.get(*k), self.observer.task(*k)) for k in KEYS}, self.rt.tasks, self.rt.pending

    # -- work ------------------------------------------------------------------------------------

    @rule(p=st.sampled_from(PROJECTS), t=st.sampled_from(TASKS))
    def start(self, p: str, t: str) -> None:
        key = (p, t)
        cur = self.observer.get(p, t)
        try:
            task = self.rt.start_task(p, t)
        except TransitionPendingError:
            check(self.pending is not None, "restart-bound", f"start {key} refused as pending with none pending")
            return
        except TransitionError:
            check(key in self.local, "idle-or-force", f"start {key} refused though n1 does not work on it")
            return
        except CheckoutConflictError:
            check(cur is not None and cur.owner is not None, "resume-revalidated",
                  f"start {key} met a conflict on a free task ({cur!r})")
            return
        check(self.pending is None, "restart-bound", f"start {key} accepted while a transition is pending")
        check(key not in self.local and (cur is None or cur.owner is None), "resume-revalidated",
              f"start {key} accepted though it was held ({cur!r})")
        now = self.observer.get(p, t)
        check(now.owner == task.claimant and now.lease_epoch == task.epoch and task.claimant.node_id == "n1",
              "resume-revalidated", f"start {key}: local task {task!r}, central row {now!r}")
        self.local[key] = "in-progress"

    @precondition(lambda self: self._keys("in-progress"))
    @rule(pick=st.integers(0, 3))
    def finish(self, pick: int) -> None:
        keys = self._keys("in-progress")
        key = keys[pick % len(keys)]
        self.rt.finish_task(*key)
        del self.local[key]
        check(self.observer.get(*key).owner is None, "resume-revalidated", f"finish {key} left the claim held")

    @precondition(lambda self: self.local)
    @rule(pick=st.integers(0, 3), step=st.integers(1, 9))
    def progress(self, pick: int, step: int) -> None:
        keys = self._keys()
        key = keys[pick % len(keys)]
        before = self.observer.task(*key).step
        if self.local[key] == "in-progress":
            self.rt.record_progress(*key, step)
            check(self.observer.task(*key).step == step, "no-data-loss", f"progress {step} on {key} not stored")
            return
        with pytest.raises(TaskPausedError):
            self.rt.record_progress(*key, step)
        check(self.observer.task(*key).step == before, "resume-revalidated",
              f"a paused task {key} wrote progress {step}")

    @precondition(lambda self: self._keys("in-progress"))
    @rule(pick=st.integers(0, 3))
    def user_pause(self, pick: int) -> None:
        keys = self._keys("in-progress")
        key = keys[pick % len(keys)]
        self.rt.pause_task(*key)
        self.local[key] = "paused-user"

    # -- other nodes -----------------------------------------------------------------------------

    @rule(node=st.sampled_from(OTHERS))
    def register(self, node: str) -> None:
        self.core.register(node)
        self.others.add(node)

    @rule(node=st.sampled_from(OTHERS))
    def unregister(self, node: str) -> None:
        self.core.unregister(node)
        self.others.discard(node)

    @precondition(lambda self: any(s.startswith("paused") and k not in self.stolen for k, s in self.local.items()))
    @rule(pick=st.integers(0, 3), thief=st.sampled_from(OTHERS))
    def steal(self, pick: int, thief: str) -> None:
        """Another node recovers a paused task's expired claim and claims it (the owner is restarting)."""
        keys = sorted(k for k, s in self.local.items() if s.startswith("paused") and k not in self.stolen)
        self._steal(keys[pick % len(keys)], thief)

    def _steal(self, key: tuple[str, str], thief: str) -> None:
        cur = self.observer.get(*key)
        self.clock.advance(1.5 * TTL_MS / 1000.0)
        by = Claimant(thief, "agent", f"{thief}-run")
        self.observer.recover(*key, cur.lease_epoch, by, "owner unreachable")
        claim = self.observer.claim(*key, by)
        self.stolen[key] = (claim.owner, claim.lease_epoch, self.observer.task(*key).step)

    @rule(seconds=st.sampled_from([0.25, 2.0]))
    def let_time_pass(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- the transition --------------------------------------------------------------------------

    @rule(to=st.sampled_from(list(RuntimeState)), force=st.booleans())
    def request(self, to: RuntimeState, force: bool) -> None:
        target = to
        before = self._snapshot()
        busy = self._keys("in-progress")
        try:
            pending = self.rt.request_transition(target, force=force, reason=f"to {target.value}")
        except RollbackRefusedError as exc:
            check(target is SINGLE and bool(self.others), "rollback-sole-node",
                  f"rollback refused with no other node registered: {exc}")
            check(all(n in str(exc) for n in self.others), "rollback-sole-node", f"the refusal names no node: {exc}")
            check(self._snapshot() == before, "idle-or-force", "a refused rollback changed something")
            return
        except TransitionRefusedError as exc:
            check(bool(busy) and not force, "idle-or-force", f"refused though idle or forced: {exc}")
            check("force=True" in str(exc), "idle-or-force", f"the refusal does not name the fix: {exc}")
            check(self._snapshot() == before, "idle-or-force", "a refused transition changed something")
            return
        except TransitionError as exc:
            check(target is self.state, "restart-bound", f"request for {target.value} refused: {exc}")
            return
        check(target is not self.state, "restart-bound", f"a transition to the current state {target.value} "
                                                         "was accepted")
        check(not (target is SINGLE and self.others), "rollback-sole-node",
              f"rollback accepted with {sorted(self.others)} registered")
        check(not busy or force, "idle-or-force", f"accepted with {busy} in progress and no force")
        check(pending.target is target, "restart-bound", f"pending {pending!r}")
        self.pending = target
        for key in busy:
            self.local[key] = "paused-engine"

    @precondition(lambda self: self._keys("in-progress"))
    @rule(to=st.sampled_from(list(RuntimeState)))
    def force_transition(self, to: RuntimeState) -> None:
        """A forced request while work is in flight (the case force exists for)."""
        self.request(to, True)

    @precondition(lambda self: any(k not in self.stolen for k in self._keys("paused-engine")))
    @rule(pick=st.integers(0, 3), thief=st.sampled_from(OTHERS))
    def steal_while_restarting(self, pick: int, thief: str) -> None:
        """While n1 restarts into its new state, another node takes over one of its force-paused tasks."""
        keys = [k for k in self._keys("paused-engine") if k not in self.stolen]
        self._steal(keys[pick % len(keys)], thief)
        self.restart()

    @rule()
    def restart(self) -> None:
        before, _, _ = self._snapshot()
        audit = {p: self.observer.audit(p) for p in PROJECTS}
        if self.pending is SINGLE and self.others:
            with pytest.raises(RollbackRefusedError):
                self.rt.restart()
            check(self._snapshot()[0] == before, "rollback-sole-node", "a refused rollback restart changed claims")
            return
        report = self.rt.restart()
        self.restarts += 1
        if self.pending is not None:
            self.transitions += 1
            self.state, self.pending = self.pending, None
        check(report.state is self.state, "restart-bound", f"restart report {report!r}, expected {self.state}")
        check(self.rt.startups == 1 + self.restarts, "no-data-loss",
              f"{self.rt.startups} bootstraps after {self.restarts} restarts")
        for key, status in sorted(self.local.items()):
            got = self.rt.tasks.get(key)
            if status == "paused-user":
                check(got is not None and got.user_paused, "resume-revalidated", f"a user-paused task {key} resumed")
                continue
            if key in self.stolen:
                owner, epoch, step = self.stolen.pop(key)
                del self.local[key]
                now, row = self.observer.get(*key), self.observer.task(*key)
                check(got is None, "resume-revalidated", f"{key} resumed though {owner} took it ({got!r})")
                check(now.owner == owner and now.lease_epoch == epoch and row.step == step, "resume-revalidated",
                      f"aborting the stolen {key} wrote: central row {now!r}, step {row.step} (was {step})")
                continue
            check(got is not None and got.status == "in-progress", "resume-revalidated",
                  f"{key} still ours but not resumed ({got!r})")
            self.local[key] = "in-progress"
        for key in KEYS:  # the re-validating heartbeats renew; nothing else moves
            (c0, r0), c1, r1 = before[key], self.observer.get(*key), self.observer.task(*key)
            same = (c0 is None and c1 is None) or (c0 is not None and c1 is not None and
                                                  (c0.owner, c0.lease_epoch) == (c1.owner, c1.lease_epoch))
            check(same and (r0 is None) == (r1 is None) and (r0 is None or r0.step == r1.step), "no-data-loss",
                  f"restart changed {key}: {c0!r} -> {c1!r}, row {r0!r} -> {r1!r}")
        check({p: self.observer.audit(p) for p in PROJECTS} == audit, "no-data-loss", "restart changed the audit")

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def restart_bound(self) -> None:
        check(self.rt.state is self.state, "restart-bound", f"state {self.rt.state} before a restart applied it "
                                                            f"(model: {self.state}, pending {self.pending})")
        pending = self.rt.pending
        check((pending.target if pending else None) is self.pending, "restart-bound", f"pending {pending!r}")

    @invariant()
    def tasks_as_expected(self) -> None:
        tasks = self.rt.tasks
        check(set(tasks) == set(self.local), "resume-revalidated", f"tasks {sorted(tasks)}, expected "
                                                                   f"{sorted(self.local)}")
        for key, status in self.local.items():
            t = tasks[key]
            if status == "paused-engine":
                check(t.status == "paused" and t.paused_by == "engine" and not t.user_paused, "force-engine-pause",
                      f"a force-paused task reads {t!r} (paused_by must be 'engine', never userPaused)")
            elif status == "paused-user":
                check(t.status == "paused" and t.user_paused, "force-engine-pause", f"a user pause reads {t!r}")
            else:
                check(t.status == "in-progress" and not t.user_paused, "resume-revalidated", f"{key} reads {t!r}")
            if key not in self.stolen:
                cur = self.observer.get(*key)
                check(cur.owner == t.claimant and cur.lease_epoch == t.epoch, "resume-revalidated",
                      f"n1 works on {key} as {t.claimant} at epoch {t.epoch}, the central row is {cur!r}")

    @invariant()
    def durable_trail(self) -> None:
        check(self.core.nodes() == sorted({"n1"} | self.others), "rollback-sole-node", f"nodes {self.core.nodes()}")
        for p in PROJECTS:
            trail = self.core.trail(p)
            acts = [e for e in trail if e.kind == "activity" and e.name == ACTIVITY_TRANSITION]
            events = [e for e in trail if e.kind == "event" and e.name == EVENT_RESTARTED]
            check(len(acts) == self.transitions and len(events) == self.restarts, "durable-trail",
                  f"{p}: {len(acts)} transition activities and {len(events)} restart events after "
                  f"{self.transitions} transitions and {self.restarts} restarts")
            if events:
                payload = events[-1].payload
                check(set(payload) == {"projectId", "isolationMode", "reason"} and payload["projectId"] == p
                      and payload["isolationMode"] == self.state.value and payload["reason"], "durable-trail",
                      f"{p}: the last restart event is {payload!r}")


def machine(runtime: type[NodeRuntime] = NodeRuntime, spec: str = "memory:") -> type[TransitionMachine]:
    return type("TransitionMachine", (TransitionMachine,), {"runtime_class": runtime, "spec": spec,
                                                            "__module__": __name__})


@pytest.mark.parametrize("spec", SPECS)
def test_the_transition_path_holds_every_rule(spec):
    run_state_machine_as_test(machine(spec=spec), settings=SETTINGS)


# -- broken variants: each must fail naming the rule it breaks ---------------------------------------

class UserPausing(NodeRuntime):
    """Marks force-paused tasks userPaused (the user's path, not the engine's)."""

    def _pause_for_transition(self, task):
        return replace(task, status="paused", paused_by="user", user_paused=True)


class RollbackAnyway(NodeRuntime):
    """Rolls back to single-project mode whoever else is registered."""

    def _rollback_allowed(self, others):
        return True


class ResumesWithoutRevalidation(NodeRuntime):
    """Resumes paused tasks without checking owner and epoch against the claim store."""

    def _revalidate(self, task):
        return None


class HotSwaps(NodeRuntime):
    """Applies the new state at the request instead of at the restart."""

    def request_transition(self, target, **kw):
        pending = super().request_transition(target, **kw)
        self._state = pending.target
        return pending


class NoTrail(NodeRuntime):
    """Writes no transition activity."""

    def restart(self, reason=None):
        record = self.core.record
        self.core.record = lambda kind, name, *a: None if name == ACTIVITY_TRANSITION else record(kind, name, *a)
        try:
            return super().restart(reason)
        finally:
            self.core.record = record


@pytest.mark.parametrize("runtime, rule", [
    (UserPausing, "force-engine-pause"),
    (RollbackAnyway, "rollback-sole-node"),
    (ResumesWithoutRevalidation, "resume-revalidated"),
    (HotSwaps, "restart-bound"),
    (NoTrail, "durable-trail"),
])
def test_the_machine_fails_a_broken_runtime_naming_the_rule(runtime, rule):
    with pytest.raises(AssertionError) as info:
        run_state_machine_as_test(machine(runtime), settings=SETTINGS)
    assert str(info.value).startswith(f"[{rule}]"), str(info.value)


# -- a few direct cases ------------------------------------------------------------------------------

@pytest.fixture
def node(tmp_path):
    clock = FakeClock()
    target = resolve_claims("memory:")
    core = CentralCore(str(tmp_path / "core.db"))
    rt = NodeRuntime("n1", lambda: target.open(str(tmp_path), TTL_MS, clock=clock), core, ["p1"], clock=clock)
    yield rt, core, clock
    rt.close()
    core.close()


def test_rollback_with_two_nodes_is_an_actionable_harness_error(node):
    rt, core, _ = node
    rt.request_transition(RuntimeState.MULTI_PROJECT_CHILD_PROCESS, reason="scale out")
    rt.restart()
    core.register("n2")
    with pytest.raises(RollbackRefusedError) as info:
        rt.request_transition("single-project/in-process")
    assert isinstance(info.value, HarnessError) and isinstance(info.value, ValueError)
    assert "n2" in str(info.value) and "unregister" in str(info.value)
    core.unregister("n2")
    rt.request_transition(SINGLE, reason="roll back")
    assert rt.restart().state is SINGLE


def test_a_forced_transition_pauses_then_resumes_after_revalidation(node):
    rt, core, clock = node
    rt.start_task("p1", "t1")
    rt.record_progress("p1", "t1", 3)
    with pytest.raises(TransitionRefusedError, match="force=True"):
        rt.request_transition(RuntimeState.MULTI_PROJECT_IN_PROCESS)
    rt.request_transition(RuntimeState.MULTI_PROJECT_IN_PROCESS, force=True, reason="go multi")
    task = rt.tasks[("p1", "t1")]
    assert (task.status, task.paused_by, task.user_paused) == ("paused", "engine", False)
    assert rt.state is SINGLE  # not hot-swapped
    report = rt.restart()
    assert report.resumed == (("p1", "t1"),) and rt.state is RuntimeState.MULTI_PROJECT_IN_PROCESS
    events = [e for e in core.trail("p1") if e.name == EVENT_RESTARTED]
    assert events[-1].payload == {"projectId": "p1", "isolationMode": "multi-project/in-process",
                                  "reason": "go multi"}
    assert [e.name for e in core.trail("p1")].count(ACTIVITY_TRANSITION) == 1
    assert rt.store.task("p1", "t1").step == 3


def test_a_stolen_paused_task_is_aborted_before_any_write(node):
    rt, _, clock = node
    rt.start_task("p1", "t1")
    rt.request_transition(RuntimeState.MULTI_PROJECT_IN_PROCESS, force=True)
    epoch = rt.store.get("p1", "t1").lease_epoch
    clock.advance(2.0)
    thief = Claimant("n2", "agent")
    rt.store.recover("p1", "t1", epoch, thief, "unreachable")
    rt.store.claim("p1", "t1", thief)
    report = rt.restart()
    assert report.resumed == () and report.aborted[0][:2] == ("p1", "t1") and "n2/agent" in report.aborted[0][2]
    claim = rt.store.get("p1", "t1")
    assert claim.owner == thief and claim.lease_epoch == epoch + 1 and ("p1", "t1") not in rt.tasks


def test_unknown_states_name_the_choices():
    with pytest.raises(TransitionError, match="multi-project/child-process"):
        RuntimeState.parse("multi/child")
