"""The `claims` workload's node loop: one storm worker is one node, with a few agents racing for a task pool.

Each node beats the node health registry (harness-owned, in the run directory) and watches the others' health;
each step one agent acts. An idle agent picks a task (the one the nemesis asks it to take over, or a random
one) and either claims it blind (contention: a held task must answer `CheckoutConflictError` naming its holder)
or dispatches it properly: reconcile the project (repair before dispatch), read the central row, claim it if free,
or, when it is held by another node past its lease, ask the handoff policy; where the policy recovers it, recover
it (one store transaction with its audit event) and dispatch it where the policy says (the local node: claim it
now). A working agent reads the task's progress at its claim, then heartbeats and records progress steps under
its epoch, now and then renews by claiming again, and releases after `task_steps` steps. A refused heartbeat or
progress write is a returning owner's abort: the agent drops the task and writes nothing more under that epoch.

The nemesis pauses whole nodes past the lease (their heartbeats stop, so they read offline and get recovered),
kills them (aimed inside mutations: between a claim's central commit and its task-row write a kill leaves a
split write), and strikes calls (a stop inside a heartbeat or progress write, held past the lease). Every store
call is one history record; the record's lease is `[task key, node, agent, epoch]`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from soak.claims import (
    CheckoutConflictError, Claimant, HandoffPolicy, NodeHealthMonitor, NodeRegistry, claim_json, decide_handoff,
    pre_dispatch, task_json,
)
from soak.workloads.context import Outcome, WorkerContext

__all__ = ["NODES_DIR", "node_of", "run_node"]

#: The node health registry's directory inside the run directory.
NODES_DIR = "nodes"


def node_of(process: str) -> str:
    """The node a worker process is: its slot (`w2.3` is node `n2`; a replacement is the node restarted)."""
    return "n" + process.partition(".")[0].lstrip("w")


def run_node(ctx: WorkerContext) -> None:
    """The claims workload's loop in one storm worker."""
    _Node(ctx).loop()


@dataclass
class _Agent:
    agent_id: str
    key: str | None = None
    epoch: int = 0
    step: int = 0
    steps_left: int = 0
    renewed: float = 0.0  # monotonic seconds of the last accepted claim or heartbeat


def _claim_value(claim: Any) -> dict[str, Any]:
    return {"claim": claim_json(claim)}


class _Node:
    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx, self.store, self.rng, self.sc = ctx, ctx.store, ctx.rng, ctx.scenario
        self.opt = ctx.scenario.options
        self.node = node_of(ctx.process)
        self.keys = self.opt.keys()
        self.policy = HandoffPolicy.parse(self.opt.policy)
        self.ttl = self.sc.lease_ttl_ms / 1000.0
        self.agents = [_Agent(f"a{k}") for k in range(self.opt.agents)]
        workdir = ctx.workdir or "."
        self.monitor = NodeHealthMonitor(NodeRegistry(os.path.join(workdir, NODES_DIR)),
                                         self.opt.offline_after_s(self.sc.lease_ttl_ms))
        self.last_beat = self.last_sweep = self.last_strike = 0.0
        self.last_split = time.monotonic()

    # -- the loop -------------------------------------------------------------------------

    def loop(self) -> None:
        self.beat()
        self.resume_own()
        while not self.ctx.should_stop():
            self.beat()
            wanted = self.ctx.wanted()
            idle = [a for a in self.agents if a.key is None]
            if wanted is not None and idle:
                self.dispatch(idle[0], wanted, look=True)
                continue
            agent = self.rng.choice(self.agents)
            if agent.key is None:
                self.pick(agent)
            else:
                self.work(agent)

    def resume_own(self) -> None:
        """A restarted node takes back what its previous incarnation held: each claim owned by one of its agents
        is claimed again (a renewal: same owner, same epoch) and worked on from its recorded progress."""
        for key in self.keys:
            if self.ctx.should_stop():
                return
            project, task = key.split("/")
            out = self.ctx.retrying("get", key, None, "resume", {}, lambda: self.store.get(project, task),
                                    ok_value=_claim_value)
            owner = out.result.owner if out.ok and out.result is not None else None
            if owner is None or owner.node_id != self.node:
                continue
            agent = next((a for a in self.agents if a.agent_id == owner.agent_id and a.key is None), None)
            if agent is not None:
                agent.key, agent.epoch = key, out.result.lease_epoch
                if self.reclaim(agent, resume=True):
                    self.read_step(agent)

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_beat >= self.ttl / 5:
            self.monitor.beat(self.node)
            self.last_beat = now
        if now - self.last_sweep >= self.ttl / 3:
            self.last_sweep = now
            for change in self.monitor.sweep():
                if change.node_id != self.node:
                    self.ctx.writer.event("health", {"node": change.node_id, "from": change.old.value,
                                                     "to": change.new.value, "seen_by": self.node})

    def claimant(self, agent: _Agent) -> Claimant:
        return Claimant(self.node, agent.agent_id, f"{self.ctx.process}:{agent.agent_id}")

    def lease(self, agent: _Agent) -> list[Any]:
        return [agent.key, self.node, agent.agent_id, agent.epoch]

    def publish(self, agent: _Agent) -> None:
        """Tell the nemesis which claim the next call is made under and the latest it can expire."""
        if agent.key is None:
            self.ctx.publish_tenure(None)
        else:
            self.ctx.publish_tenure(agent.key, agent.epoch, int((agent.renewed + self.ttl) * 1e9))

    # -- idle agents ------------------------------------------------------------------------

    def pick(self, agent: _Agent) -> None:
        key = self.rng.choice(self.keys)
        self.dispatch(agent, key, look=self.rng.random() >= self.opt.contend_prob)

    def dispatch(self, agent: _Agent, key: str, *, look: bool, after: dict[str, Any] | None = None) -> None:
        """Claim `key` for `agent`: blind, or after reconciling the project and reading the central row (and, for
        a task held by an unreachable node past its lease, after the handoff policy recovered it)."""
        self.ctx.publish_tenure(None)
        project, task = key.split("/")
        if look and after is None:
            if self.rng.random() < 0.2:
                self.ctx.retrying("reconcile", project, None, "dispatch", {},
                                  lambda: self.store.reconcile(project), ok_value=lambda ids: {"repaired": list(ids)})
            out = self.ctx.retrying("get", key, None, "dispatch", {}, lambda: self.store.get(project, task),
                                    ok_value=_claim_value)
            if not out.ok:
                return
            held = out.result
            if held is not None and held.owner is not None:
                if held.owner.node_id != self.node:
                    self.handoff(agent, key, held)
                return
        me = self.claimant(agent)
        value = {"node": me.node_id, "agent": me.agent_id, "run": me.run_id, "look": look, "dispatch": after}
        self.maybe_split()
        started = time.monotonic()
        out = self.ctx.retrying("claim", key, None, "claim", value,
                                lambda: self.store.claim(project, task, me), ok_value=_claim_value)
        if not out.ok:
            if not out.refused(CheckoutConflictError):
                self.sleep(self.rng.uniform(0.001, 0.004))
            return
        claim = out.result
        agent.key, agent.epoch, agent.renewed = key, claim.lease_epoch, started
        self.read_step(agent)

    def read_step(self, agent: _Agent) -> None:
        """Read the task's recorded progress: the owner goes on from there (or lets the task go)."""
        self.publish(agent)
        project, task = agent.key.split("/")
        read = self.ctx.retrying("task", agent.key, self.lease(agent), "claimed", {},
                                 lambda: self.store.task(project, task), ok_value=lambda row: {"task": task_json(row)})
        if not read.ok:
            self.release(agent)
            return
        agent.step = read.result.step if read.result is not None else 0
        agent.steps_left = self.rng.randint(1, self.opt.task_steps)

    def handoff(self, agent: _Agent, key: str, held: Any) -> None:
        """A task held by another node: recover it where the policy says the owner is unreachable."""
        expired = time.time() - held.renewed_at > self.ttl
        health = self.monitor.health(held.owner.node_id)
        decision = decide_handoff(self.policy, health, expired)
        probe = not decision.recovers and not expired and self.rng.random() < self.opt.probe_prob
        if not decision.recovers and not probe:
            return
        project, task = key.split("/")
        me = self.claimant(agent)
        lease = [key, held.owner.node_id, held.owner.agent_id, held.lease_epoch]
        value = {"by": self.node, "policy": self.policy.value, "owner_health": health.value,
                 "decision": "probe" if probe else decision.action, "renewed_at": held.renewed_at}
        # a probe asks the store to recover a claim its owner renewed within the lease: the store must refuse it
        out = self.ctx.retrying("recover", key, lease, "probe" if probe else "recover", value,
                                lambda: self.store.recover(project, task, held.lease_epoch, me, decision.reason),
                                ok_value=lambda row: {"task": task_json(row)})
        if not out.ok or probe:
            return
        health_now = {n: h.value for n, h in self.monitor.snapshot().items()}
        # this node is alive: it is acting (a pause before the snapshot must not make it read offline to itself);
        # the policy decides among the others
        health_now[self.node] = "online"
        if decision.dispatch_to == "local":
            to = self.node
        else:
            to = pre_dispatch(self.policy, held.owner.node_id, health_now, self.node).node
        if to == self.node:
            self.dispatch(agent, key, look=False, after={"recovered": held.lease_epoch, "policy": self.policy.value,
                                                         "to": to})

    # -- working agents -------------------------------------------------------------------------

    def work(self, agent: _Agent) -> None:
        self.publish(agent)
        now = time.monotonic()
        # a struck call is held past the lease, and one inside a fenced write holds the store's lock meanwhile:
        # at most one strike per node every 8 ttls, so the others are not starved past the call-returns bound
        if now - self.last_strike > 8 * self.ttl and self.rng.random() < self.opt.strike_prob:
            self.last_strike = now
            self.ctx.strike_next_call()
        since = time.monotonic() - agent.renewed
        roll = self.rng.random()
        if agent.steps_left <= 0:
            self.release(agent)
        elif (since > self.ttl / 3 and roll < 0.5) or roll < 0.1:
            # past a third of the lease the agent heartbeats, or half the time writes first (a progress write
            # racing the heartbeat timer: after a pause it is a stale owner's write, which the store must refuse)
            self.heartbeat(agent)
        elif roll < 0.2:
            self.reclaim(agent)
        else:
            self.progress(agent)

    def _abort(self, agent: _Agent, out: Outcome) -> bool:
        """A refused call under the agent's epoch: it is no longer the owner; drop the task, write nothing more.

        Most of the time the harness then sweeps the dead epoch over the fenced calls first (a progress write,
        a heartbeat, a release, marked `stale`): a node obeying the protocol never makes them, so each is a
        probe of the store's fence, which must refuse it."""
        if not out.refused(CheckoutConflictError):
            return False
        if self.rng.random() < 0.7:
            project, task = agent.key.split("/")
            me, epoch, lease = self.claimant(agent), agent.epoch, self.lease(agent)
            step = agent.step + 1
            self.ctx.retrying("record_progress", agent.key, lease, "stale", {"step": step},
                              lambda: self.store.record_progress(project, task, me, epoch, step))
            self.ctx.retrying("heartbeat", agent.key, lease, "stale", {},
                              lambda: self.store.heartbeat(project, task, me, epoch), ok_value=_claim_value)
            self.ctx.retrying("release", agent.key, lease, "stale", {},
                              lambda: self.store.release(project, task, me, epoch))
        agent.key = None
        self.ctx.publish_tenure(None)
        return True

    def heartbeat(self, agent: _Agent) -> None:
        project, task = agent.key.split("/")
        me, epoch = self.claimant(agent), agent.epoch
        started = time.monotonic()
        out = self.ctx.retrying("heartbeat", agent.key, self.lease(agent), "live", {},
                                lambda: self.store.heartbeat(project, task, me, epoch), ok_value=_claim_value)
        if out.ok:
            agent.renewed = started
        else:
            self._abort(agent, out)

    def reclaim(self, agent: _Agent, resume: bool = False) -> bool:
        """Claim one's own task again: a renewal (same epoch). `resume`: a restarted node taking back its previous
        incarnation's claim."""
        project, task = agent.key.split("/")
        me = self.claimant(agent)
        started = time.monotonic()
        value = {"node": me.node_id, "agent": me.agent_id, "run": me.run_id, "look": True, "dispatch": None,
                 "renew": agent.epoch, "resume": resume}
        out = self.ctx.retrying("claim", agent.key, self.lease(agent), "renew", value,
                                lambda: self.store.claim(project, task, me), ok_value=_claim_value)
        if out.ok:
            agent.renewed = started
            if out.result.lease_epoch != agent.epoch:
                # a new tenure (the task was released or recovered meanwhile and this claim took it afresh; the
                # checker names a renewal that changed the epoch): go on from the progress recorded since
                agent.epoch = out.result.lease_epoch
                if not resume:
                    self.read_step(agent)
            return True
        if not self._abort(agent, out):
            agent.key = None if resume else agent.key
        return False

    def progress(self, agent: _Agent) -> None:
        project, task = agent.key.split("/")
        me, epoch, step = self.claimant(agent), agent.epoch, agent.step + 1
        out = self.ctx.retrying("record_progress", agent.key, self.lease(agent), "live", {"step": step},
                                lambda: self.store.record_progress(project, task, me, epoch, step))
        if out.ok:
            agent.step, agent.steps_left = step, agent.steps_left - 1
        else:
            self._abort(agent, out)

    def release(self, agent: _Agent) -> None:
        project, task = agent.key.split("/")
        me, epoch = self.claimant(agent), agent.epoch
        self.maybe_split()
        self.ctx.retrying("release", agent.key, self.lease(agent), "live", {},
                          lambda: self.store.release(project, task, me, epoch))
        agent.key = None  # released, refused or unknown: the agent lets the task go either way
        self.ctx.publish_tenure(None)

    def maybe_split(self) -> None:
        """Now and then (`split_kill_interval_s`) have the next call, which commits the central row and then the
        task row, crashed at a random step inside it: between the two commits it leaves a split write."""
        every = self.opt.split_kill_interval_s
        now = time.monotonic()
        if every > 0 and now - self.last_split > every * self.rng.uniform(0.5, 1.5):
            self.last_split = now
            self.ctx.strike_next_call(kill=True)

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.ctx.should_stop() and time.monotonic() < end:
            time.sleep(min(0.005, max(0.0, end - time.monotonic())))
