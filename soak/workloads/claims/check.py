"""The claims workload's checkers: the claim clauses (CONTRACT section 2), from the history and the final state.

An operation tuple is `(process, index, f, key, lease, intent, args, outcome, result, error, message, invoke_ns,
complete_ns)`; a lease is `[key, node, agent, epoch]`. `_Tenures` reads the history once into what every checker
shares: per task, who was seen holding each epoch (accepted claims and heartbeats return the central row), the
calls that could have ended a tenure (releases and recoveries, accepted or unknown) and the claims of unknown
outcome (they may have granted an epoch nobody saw). Each checker then states one clause:

- `claim-epoch-once`: an epoch seen held by two owners; `claim-atomic` where the two claims that granted it ran
  at the same time (both saw the row free: the check and the write were not one transaction);
- `claim-epoch-step`: an epoch below one already granted (a reset), an epoch skipped with no unknown claim to
  account for it, a renewal that changed the epoch while the tenure was live;
- `claim-lease-protected`: the next epoch granted with no release or recovery of the previous one, or a recovery
  accepted before the owner's lease could have expired (measured from the latest renewal's invoke);
- `conflict-holder`: a refused claim naming no holder, the claimant itself, or a tenure that was never seen, was
  another owner's, or had ended (released, recovered or superseded) before the refused call began;
- `claim-live-accepted`: a call of the current owner refused while nothing could have ended its tenure;
- `heartbeat-fenced` / `progress-fenced`: a heartbeat, release or progress write accepted under a tenure that had
  certainly ended (released, recovered or superseded) before the call began;
- `progress-preserved`: a read of a task's step (at a claim, or the final state) below a step accepted before it;
- `recovery-audited`: an accepted recovery without exactly one audit event, or an event with no recovery;
- `rows-reconciled`: a task row that disagrees with its central row after the final reconcile;
- `handoff-policy`: a recovery the policy did not allow (block, or an owner that was not unreachable), or a
  post-recovery dispatch to a node other than the one the policy named.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

from soak.check.verdict import Violation
from soak.claims import RECOVER_EVENT

__all__ = ["CHECKERS", "exercised"]

_P, _I, _F, _KEY, _LEASE, _INTENT, _ARGS, _OUT, _RES, _ERR, _MSG, _INV, _DONE = range(13)
_NEVER = float("inf")
_CONFLICT = "CheckoutConflictError"
#: slack (ns) for comparing the store's clock with the records' monotonic clock
_SLACK_NS = 2_000_000


def _done(op: tuple[Any, ...]) -> float:
    return op[_DONE] if op[_DONE] is not None else _NEVER


def _owner(claim: dict[str, Any] | None) -> tuple[str, str] | None:
    if not claim or not claim.get("owner"):
        return None
    o = claim["owner"]
    return (o[0], o[1])


class _Tenures:
    """What the checkers share, read from the operations once."""

    def __init__(self, facts: Any) -> None:
        self.facts = facts
        self.ops = facts.ops
        # (key, epoch) -> owner -> ops that showed it holding that epoch (accepted claims and heartbeats)
        self.seen: dict[tuple[str, int], dict[tuple[str, str], list[tuple]]] = defaultdict(lambda: defaultdict(list))
        # (key, epoch) -> releases and recoveries of it, accepted or unknown
        self.enders: dict[tuple[str, int], list[tuple]] = defaultdict(list)
        # key -> claims of unknown outcome; key -> accepted claims in completion order
        self.unknown_claims: dict[str, list[tuple]] = defaultdict(list)
        self.claims: dict[str, list[tuple]] = defaultdict(list)
        for op in self.ops:
            f, key, out = op[_F], op[_KEY], op[_OUT]
            if f in ("claim", "heartbeat") and out == "ok":
                claim = (op[_RES] or {}).get("claim")
                owner = _owner(claim)
                if owner is not None:
                    self.seen[(key, claim["epoch"])][owner].append(op)
                if f == "claim":
                    self.claims[key].append(op)
            elif f == "claim" and out == "info":
                self.unknown_claims[key].append(op)
            if f in ("release", "recover") and out != "fail" and op[_LEASE]:
                self.enders[(key, op[_LEASE][3])].append(op)
        for key in self.claims:
            self.claims[key].sort(key=_done)
        # key -> (epochs seen, ascending; per position, the two earliest ops of that epoch or any later one, by
        # completion and by invocation): "a later epoch seen held before t" in O(log n)
        self._later: dict[str, tuple[list[int], list[list[tuple]], list[list[tuple]]]] = {}
        per_key: dict[str, dict[int, list[tuple]]] = defaultdict(dict)
        for (key, epoch), owners in self.seen.items():
            per_key[key][epoch] = [op for ops in owners.values() for op in ops]
        for key, by_epoch in per_key.items():
            epochs = sorted(by_epoch)
            done_best: list[list[tuple]] = [[] for _ in epochs]
            inv_best: list[list[tuple]] = [[] for _ in epochs]
            run_done: list[tuple] = []
            run_inv: list[tuple] = []
            for k in range(len(epochs) - 1, -1, -1):
                ops = by_epoch[epochs[k]]
                run_done = sorted(run_done + sorted(ops, key=_done)[:2], key=_done)[:2]
                run_inv = sorted(run_inv + sorted(ops, key=lambda o: o[_INV])[:2], key=lambda o: o[_INV])[:2]
                done_best[k], inv_best[k] = run_done, run_inv
            self._later[key] = (epochs, done_best, inv_best)
        # process -> when the nemesis killed it: a call it never finished cannot write after that
        self.death: dict[str, float] = {}
        for ev in getattr(facts, "events", ()):
            if getattr(ev, "process", "") == "nemesis" and getattr(ev, "kind", "") in ("kill", "timeout-kill"):
                target = (ev.value or {}).get("target")
                if target:
                    self.death[target] = min(self.death.get(target, _NEVER), ev.time)
        self.first_unknown: dict[str, list[tuple]] = {
            key: sorted(ops, key=lambda o: o[_INV])[:2] for key, ops in self.unknown_claims.items()}

    def ended_before(self, key: str, epoch: int, t: float, *, certain: bool, besides: tuple | None = None
                     ) -> tuple | None:
        """A call that ended tenure `epoch` of `key` before `t`: with `certain`, an accepted release or recovery
        that completed before `t`, or a later epoch seen held before `t`; else any release or recovery (accepted
        or unknown) invoked before `t`, or a later epoch's claim invoked before `t`."""
        for op in self.enders.get((key, epoch), ()):
            if certain and op[_OUT] == "ok" and _done(op) < t:
                return op
            if not certain and op[_INV] < t:
                return op
        later = self._later.get(key)
        if later is not None:
            epochs, done_best, inv_best = later
            k = bisect.bisect_right(epochs, epoch)
            if k < len(epochs):
                op = next((o for o in (done_best if certain else inv_best)[k] if o is not besides), None)
                if op is not None and (_done(op) if certain else op[_INV]) < t:
                    return op
        if not certain:
            op = next((o for o in self.first_unknown.get(key, ()) if o is not besides), None)
            if op is not None and op[_INV] < t:
                return op
        return None

    def end(self, op: tuple) -> float:
        """When a call was over: its completion, else its process's death, else never."""
        return op[_DONE] if op[_DONE] is not None else self.death.get(op[_P], _NEVER)

    def ev(self, *ops: tuple) -> tuple:
        return tuple(self.facts.evidence(op) for op in ops)


_CACHE: list[Any] = [None, -1, None]  # the facts last read, their length, what was read (checkers run in turn)


def _tenures(facts: Any) -> _Tenures:
    if _CACHE[0] is not facts or _CACHE[1] != len(facts.ops):
        _CACHE[:] = [facts, len(facts.ops), _Tenures(facts)]
    return _CACHE[2]


#: violations a checker reports per clause; the last says how many more it found
_MAX_PER_CLAUSE = 100


def _capped(found: list[Violation]) -> list[Violation]:
    """At most `_MAX_PER_CLAUSE` violations per clause (a broken store floods a long storm with the same proof);
    the last kept one says how many more there were."""
    by: dict[str, list[Violation]] = defaultdict(list)
    for v in found:
        by[v.clause].append(v)
    out = []
    for clause, vs in by.items():
        if len(vs) > _MAX_PER_CLAUSE:
            last = vs[_MAX_PER_CLAUSE - 1]
            vs = vs[:_MAX_PER_CLAUSE - 1] + [Violation(clause, f"{last.statement} (and {len(vs) - _MAX_PER_CLAUSE} "
                                                               "more like it)", last.evidence)]
        out.extend(vs)
    return out


def _tag(op: tuple) -> str:
    return f"{op[_P]}#{op[_I]}"


def check_epoch_once(facts: Any) -> list[Violation]:
    """claim-epoch-once, claim-atomic: one owner per epoch."""
    t = _tenures(facts)
    out = []
    for (key, epoch), owners in sorted(t.seen.items()):
        if len(owners) < 2:
            continue
        firsts = [min(ops, key=lambda op: op[_INV]) for ops in owners.values()]
        grants = [op for op in firsts if op[_F] == "claim"]
        a, b = (grants + firsts)[:2]
        overlap = len(grants) >= 2 and grants[0][_INV] < _done(grants[1]) and grants[1][_INV] < _done(grants[0])
        names = ", ".join(f"{o[0]}/{o[1]}" for o in sorted(owners))
        if overlap:
            out.append(Violation("claim-atomic", f"{key}: claims {_tag(a)} and {_tag(b)} ran at the same time and "
                                                 f"both were granted epoch {epoch} ({names}): the check and the write "
                                                 "were not one transaction", t.ev(a, b)))
        else:
            out.append(Violation("claim-epoch-once", f"{key}: epoch {epoch} was seen held by {names}",
                                 t.ev(a, b)))
    return _capped(out)


def check_epoch_step(facts: Any) -> list[Violation]:
    """claim-epoch-step: epochs rise by one per owner change, never on renewal, never reset."""
    t = _tenures(facts)
    out = []
    for key, claims in sorted(t.claims.items()):
        # claims by completion (`t.claims` keeps them so) with, per prefix, the claim of the highest epoch
        dones, tops, top = [], [], None
        for c in claims:
            if top is None or c[_RES]["claim"]["epoch"] > top[_RES]["claim"]["epoch"]:
                top = c
            dones.append(_done(c))
            tops.append(top)
        for op in claims:
            k = bisect.bisect_left(dones, op[_INV])
            if not k:
                continue
            before = tops[k - 1]
            epoch, high = op[_RES]["claim"]["epoch"], before[_RES]["claim"]["epoch"]
            if epoch < high:
                out.append(Violation("claim-epoch-step", f"{key}: claim {_tag(op)} was granted epoch {epoch} after "
                                                         f"epoch {high} had been granted ({_tag(before)}): the epoch "
                                                         "went back", t.ev(before, op)))
            elif epoch == high and _owner(op[_RES]["claim"]) != _owner(before[_RES]["claim"]):
                out.append(Violation("claim-epoch-step", f"{key}: claim {_tag(op)} made "
                                                         f"{'/'.join(_owner(op[_RES]['claim']))} the owner at epoch "
                                                         f"{epoch}, the epoch {_tag(before)} had already been granted "
                                                         "to another owner: an owner change must raise the epoch",
                                     t.ev(before, op)))
        for op in claims:
            renew = op[_ARGS].get("renew")
            epoch = op[_RES]["claim"]["epoch"]
            if op[_INTENT] == "renew" and renew is not None and epoch != renew \
                    and t.ended_before(key, renew, _done(op), certain=False, besides=op) is None:
                out.append(Violation("claim-epoch-step", f"{key}: renewal {_tag(op)} by the owner of epoch {renew} "
                                                         f"returned epoch {epoch}: a renewal must keep the epoch",
                                     t.ev(op)))
    epochs: dict[str, set[int]] = defaultdict(set)
    for key, epoch in t.seen:
        epochs[key].add(epoch)
    for key, seen in sorted(epochs.items()):
        missing = sorted(set(range(1, max(seen) + 1)) - seen)
        unknown = len(t.unknown_claims.get(key, ()))
        if len(missing) > unknown:
            first = t.claims[key][0] if t.claims.get(key) else None
            out.append(Violation("claim-epoch-step", f"{key}: epochs {missing[:5]} were never seen granted and only "
                                                     f"{unknown} claims of unknown outcome could have been granted "
                                                     "them: an owner change skipped an epoch",
                                 t.ev(first) if first else ()))
    return _capped(out)


def check_lease_protected(facts: Any) -> list[Violation]:
    """claim-lease-protected: owner changes only through a release or a recovery, recoveries only past the lease."""
    t = _tenures(facts)
    out = []
    for (key, epoch), owners in sorted(t.seen.items()):
        nxt = t.seen.get((key, epoch + 1))
        if not nxt:
            continue
        grant = min((op for ops in nxt.values() for op in ops if op[_F] == "claim"), key=_done, default=None)
        if grant is None:
            continue
        if t.ended_before(key, epoch, _done(grant), certain=False, besides=grant) is None:
            prev = min((op for ops in owners.values() for op in ops), key=_done)
            out.append(Violation("claim-lease-protected", f"{key}: claim {_tag(grant)} took epoch {epoch + 1} while "
                                                          f"epoch {epoch} ({_tag(prev)}) was never released or "
                                                          "recovered", t.ev(prev, grant)))
    ttl = facts.ttl_ns
    for op in t.ops:
        if op[_F] != "recover" or op[_OUT] != "ok":
            continue
        key, epoch = op[_KEY], op[_LEASE][3]
        renewals = [r for ops in t.seen.get((key, epoch), {}).values() for r in ops if r[_INV] < _done(op)]
        if not renewals:
            continue
        last = max(renewals, key=lambda r: r[_INV])
        if _done(op) + _SLACK_NS < last[_INV] + ttl:
            out.append(Violation("claim-lease-protected", f"{key}: recovery {_tag(op)} of epoch {epoch} completed "
                                                          f"{(_done(op) - last[_INV]) / 1e6:.1f} ms after renewal "
                                                          f"{_tag(last)} began, within the {ttl / 1e6:.0f} ms lease",
                                 t.ev(last, op)))
    return _capped(out)


def check_conflict_holder(facts: Any) -> list[Violation]:
    """conflict-holder: a refused call names a holder that held the claim then."""
    t = _tenures(facts)
    out = []
    for op in t.ops:
        if op[_OUT] != "fail" or op[_ERR] != _CONFLICT or op[_F] not in ("claim", "heartbeat", "release",
                                                                          "record_progress", "recover"):
            continue
        key = op[_KEY]
        holder = (op[_RES] or {}).get("holder")
        who = _owner(holder)
        me = (op[_ARGS].get("node"), op[_ARGS].get("agent")) if op[_F] == "claim" else None
        if op[_F] == "claim" and op[_INTENT] == "claim" and who is None:
            out.append(Violation("conflict-holder", f"{key}: claim {_tag(op)} was refused naming no holder",
                                 t.ev(op)))
            continue
        if who is None:
            continue
        epoch = holder["epoch"]
        if me is not None and who == me:
            out.append(Violation("conflict-holder", f"{key}: claim {_tag(op)} by {me[0]}/{me[1]} was refused naming "
                                                    "the claimant itself as holder (its own claim is a renewal)",
                                 t.ev(op)))
            continue
        owners = t.seen.get((key, epoch), {})
        if owners and who not in owners:
            other = next(iter(owners.values()))[0]
            out.append(Violation("conflict-holder", f"{key}: {op[_F]} {_tag(op)} was refused naming {who[0]}/{who[1]} "
                                                    f"at epoch {epoch}, but epoch {epoch} was held by "
                                                    f"{'/'.join(next(iter(owners)))}", t.ev(other, op)))
            continue
        if not owners and not any(u[_ARGS].get("node") == who[0] and u[_ARGS].get("agent") == who[1]
                                  for u in t.unknown_claims.get(key, ())):
            out.append(Violation("conflict-holder", f"{key}: {op[_F]} {_tag(op)} was refused naming {who[0]}/{who[1]} "
                                                    f"at epoch {epoch}, which no claim was seen granting", t.ev(op)))
            continue
        ended = t.ended_before(key, epoch, op[_INV], certain=True)
        if ended is not None:
            out.append(Violation("conflict-holder", f"{key}: {op[_F]} {_tag(op)} was refused naming {who[0]}/{who[1]} "
                                                    f"at epoch {epoch}, whose tenure had ended ({ended[_F]} "
                                                    f"{_tag(ended)}) before the call began", t.ev(ended, op)))
    return _capped(out)


def check_live_accepted(facts: Any) -> list[Violation]:
    """claim-live-accepted: the current owner's calls are accepted."""
    t = _tenures(facts)
    out = []
    for op in t.ops:
        if op[_OUT] != "fail" or op[_ERR] != _CONFLICT or not op[_LEASE] or op[_F] == "recover":
            continue
        key, node, agent, epoch = op[_LEASE]
        if t.ended_before(key, epoch, _done(op), certain=False) is None:
            out.append(Violation("claim-live-accepted", f"{key}: {op[_F]} {_tag(op)} by {node}/{agent} at epoch {epoch} "
                                                        "was refused while nothing could have ended its tenure",
                                 t.ev(op)))
    return _capped(out)


def check_fenced(facts: Any) -> list[Violation]:
    """heartbeat-fenced, progress-fenced: nothing is accepted under an ended tenure."""
    t = _tenures(facts)
    out = []
    for op in t.ops:
        if op[_OUT] != "ok" or op[_F] not in ("heartbeat", "release", "record_progress") or not op[_LEASE]:
            continue
        key, node, agent, epoch = op[_LEASE]
        ended = t.ended_before(key, epoch, op[_INV], certain=True)
        if ended is None or ended is op:
            continue
        clause = "progress-fenced" if op[_F] == "record_progress" else "heartbeat-fenced"
        out.append(Violation(clause, f"{key}: {op[_F]} {_tag(op)} by {node}/{agent} at epoch {epoch} was accepted "
                                     f"after its tenure had ended ({ended[_F]} {_tag(ended)})", t.ev(ended, op)))
    return _capped(out)


def check_progress_preserved(facts: Any) -> list[Violation]:
    """progress-preserved: a read of a task's step is at least every step accepted before it."""
    t = _tenures(facts)
    writes: dict[str, list[tuple]] = defaultdict(list)
    for op in t.ops:
        if op[_F] == "record_progress" and op[_OUT] == "ok":
            writes[op[_KEY]].append(op)
    # per task: completions in order, and the write of the highest step among those completed so far
    best: dict[str, tuple[list[float], list[tuple]]] = {}
    for key, ops in writes.items():
        ops.sort(key=_done)
        dones, tops, top = [], [], None
        for w in ops:
            if top is None or w[_ARGS]["step"] > top[_ARGS]["step"]:
                top = w
            dones.append(_done(w))
            tops.append(top)
        best[key] = (dones, tops)
    out = []
    for op in t.ops:
        if op[_F] != "task" or op[_OUT] != "ok" or op[_KEY] not in best:
            continue
        row = (op[_RES] or {}).get("task")
        step = row["step"] if row else 0
        dones, tops = best[op[_KEY]]
        k = bisect.bisect_left(dones, op[_INV])
        top = tops[k - 1] if k else None
        if top is not None and step < top[_ARGS]["step"]:
            out.append(Violation("progress-preserved", f"{op[_KEY]}: read {_tag(op)} saw step {step} after step "
                                                       f"{top[_ARGS]['step']} was accepted ({_tag(top)})",
                                 t.ev(top, op)))
    for project, state in sorted((facts.state or {}).items()):
        for task, row in sorted(state.get("tasks", {}).items()):
            key = f"{project}/{task}"
            top = best[key][1][-1] if key in best else None
            if top is not None and row["step"] < top[_ARGS]["step"]:
                out.append(Violation("progress-preserved", f"{key}: the final task row holds step {row['step']}, "
                                                           f"below step {top[_ARGS]['step']} accepted by "
                                                           f"{_tag(top)}", t.ev(top)))
    return _capped(out)


def check_recovery_audited(facts: Any) -> list[Violation]:
    """recovery-audited: one audit event per accepted recovery, none without one."""
    t = _tenures(facts)
    if facts.state is None:
        return []
    recs: dict[tuple[str, int], list[tuple]] = defaultdict(list)
    for op in t.ops:
        if op[_F] == "recover" and op[_OUT] != "fail":
            recs[(op[_KEY], op[_LEASE][3])].append(op)
    events: dict[tuple[str, int], int] = defaultdict(int)
    for project, state in facts.state.items():
        for e in state.get("audit", ()):
            if e["kind"] == RECOVER_EVENT:
                events[(f"{project}/{e['task']}", e["epoch"])] += 1
    out = []
    for (key, epoch), ops in sorted(recs.items()):
        n = events.get((key, epoch), 0)
        accepted = [op for op in ops if op[_OUT] == "ok"]
        if accepted and n != 1:
            out.append(Violation("recovery-audited", f"{key}: recovery {_tag(accepted[0])} of epoch {epoch} left {n} "
                                                     f"{RECOVER_EVENT} events (one is required)", t.ev(accepted[0])))
        elif n > 1:
            out.append(Violation("recovery-audited", f"{key}: {n} {RECOVER_EVENT} events for epoch {epoch}",
                                 t.ev(ops[0])))
    for (key, epoch), n in sorted(events.items()):
        if (key, epoch) not in recs:
            out.append(Violation("recovery-audited", f"{key}: a {RECOVER_EVENT} event for epoch {epoch} with no "
                                                     "recovery of it invoked"))
    return _capped(out)


def _mirrors(row: dict[str, Any] | None, claim: dict[str, Any] | None) -> bool:
    owner = (claim or {}).get("owner")
    if row is None:
        return owner is None
    if owner is None:
        return row["by"] is None and row["node"] is None and row["status"] == "todo"
    return (row["by"] == owner[1] and row["node"] == owner[0] and row["run"] == owner[2]
            and row["epoch"] == claim["epoch"] and row["status"] == "in-progress")


def check_rows_reconciled(facts: Any) -> list[Violation]:
    """rows-reconciled: a claim leaves its task row mirroring it (the seed's "same logical operation", and the
    repair before dispatch), and after the final reconcile every task row mirrors its central row.

    The first is judged on the owner's read of its task row after its claim returned, where no other call that
    writes the row (a claim, release or recovery by anyone, accepted or of unknown outcome, or a reconcile that
    says it repaired the row or whose outcome is unknown) ran in between: a row a concurrent call was still
    writing may lag, and the reconciler repairs it later."""
    t = _tenures(facts)
    out = []
    writers: dict[str, list[tuple]] = defaultdict(list)
    for op in t.ops:
        if op[_OUT] == "fail":
            continue
        if op[_F] in ("claim", "release", "recover"):
            writers[op[_KEY]].append(op)
        elif op[_F] == "reconcile":
            if op[_OUT] == "info":
                writers[f"{op[_KEY]}/"].append(op)  # may have repaired any row of the project
            for task in (op[_RES] or {}).get("repaired") or ():
                writers[f"{op[_KEY]}/{task}"].append(op)  # it says it rewrote this row
    # per task: the writers of its row by invocation, and, per prefix, the two latest completions among them
    spans: dict[str, tuple[list[int], list[list[tuple]]]] = {}
    for key in {op[_KEY] for op in t.ops if op[_F] == "task"}:
        ws = sorted((*writers.get(key, ()), *writers.get(f"{key.partition('/')[0]}/", ())), key=lambda w: w[_INV])
        invs, latest, run = [], [], []
        for w in ws:
            run = sorted([*run, w], key=t.end, reverse=True)[:2]
            invs.append(w[_INV])
            latest.append(run)
        spans[key] = (invs, latest)
    grants: Any = defaultdict(list)  # (key, node, agent, epoch) -> its claims by completion
    for key, claims in t.claims.items():
        for c in claims:
            owner = _owner(c[_RES]["claim"])
            if owner is not None:
                grants[(key, *owner, c[_RES]["claim"]["epoch"])].append(c)
    grants = {g: ([_done(c) for c in cs], cs) for g, cs in grants.items()}  # claims come by completion
    for op in t.ops:
        if op[_F] != "task" or op[_OUT] != "ok" or not op[_LEASE]:
            continue
        key, node, agent, epoch = op[_LEASE]
        mine = grants.get((key, node, agent, epoch))
        if not mine:
            continue
        k = bisect.bisect_left(mine[0], op[_INV])
        if not k:
            continue
        claim = mine[1][k - 1]
        start, end = claim[_INV], _done(op)
        invs, latest = spans[key]
        j = bisect.bisect_left(invs, end)
        busy = j > 0 and any(w is not claim and t.end(w) > start for w in latest[j - 1])
        row = (op[_RES] or {}).get("task")
        if not busy and not _mirrors(row, claim[_RES]["claim"]):
            out.append(Violation("rows-reconciled", f"{key}: read {_tag(op)} after claim {_tag(claim)} returned saw "
                                                    f"the task row {row}, which does not mirror the claim "
                                                    f"{claim[_RES]['claim']} (nothing else wrote the row meanwhile)",
                                 t.ev(claim, op)))
    for project, state in sorted((facts.state or {}).items()):
        claims, rows = state.get("claims", {}), state.get("tasks", {})
        for task in sorted(set(claims) | set(rows)):
            if not _mirrors(rows.get(task), claims.get(task)):
                out.append(Violation("rows-reconciled", f"{project}/{task}: after reconcile the task row "
                                                        f"{rows.get(task)} disagrees with the central row "
                                                        f"{claims.get(task)}"))
    return _capped(out)


def check_handoff(facts: Any) -> list[Violation]:
    """handoff-policy: recoveries and post-recovery dispatches only where the policy allows."""
    t = _tenures(facts)
    out = []
    for op in t.ops:
        a = op[_ARGS] or {}
        if op[_F] == "recover" and op[_OUT] == "ok" and op[_INTENT] != "probe":  # a probe tests the store's fence
            if a.get("policy") == "block" or a.get("owner_health") not in ("offline", "error"):
                out.append(Violation("handoff-policy", f"{op[_KEY]}: recovery {_tag(op)} under policy "
                                                       f"{a.get('policy')} of an owner reported "
                                                       f"{a.get('owner_health')}", t.ev(op)))
        elif op[_F] == "claim" and a.get("dispatch"):
            d = a["dispatch"]
            if d.get("to") != a.get("node"):
                out.append(Violation("handoff-policy", f"{op[_KEY]}: claim {_tag(op)} by {a.get('node')} dispatched a "
                                                       f"recovered task the policy sent to {d.get('to')}", t.ev(op)))
    return _capped(out)


CHECKERS: tuple[tuple[str, Any], ...] = (
    ("epoch-once", check_epoch_once),
    ("epoch-step", check_epoch_step),
    ("lease-protected", check_lease_protected),
    ("conflict-holder", check_conflict_holder),
    ("live-accepted", check_live_accepted),
    ("fenced", check_fenced),
    ("progress-preserved", check_progress_preserved),
    ("recovery-audited", check_recovery_audited),
    ("rows-reconciled", check_rows_reconciled),
    ("handoff-policy", check_handoff),
)


def exercised(facts: Any) -> dict[str, int]:
    """clause -> recorded operations that exercised it."""
    n: dict[str, int] = defaultdict(int)
    for op in facts.ops:
        f, out, err = op[_F], op[_OUT], op[_ERR]
        if f == "claim" and out == "ok":
            n["claim-epoch-once"] += 1
            n["claim-epoch-step"] += 1
            n["claim-atomic"] += 1
        if out == "fail" and err == _CONFLICT:
            n["conflict-holder"] += 1
            if f in ("heartbeat", "release"):
                n["heartbeat-fenced"] += 1
            if f == "record_progress":
                n["progress-fenced"] += 1
        if out == "ok" and f in ("heartbeat", "record_progress", "release"):
            n["claim-live-accepted"] += 1
        if f == "recover" and out == "ok":
            n["recovery-audited"] += 1
            n["claim-lease-protected"] += 1
            n["handoff-policy"] += 1
        if f == "task" and out == "ok":
            n["progress-preserved"] += 1
        if f == "reconcile" and out == "ok":
            n["rows-reconciled"] += 1
    return dict(n)
