"""Fencing, judged per tenure and per refusal: `run-match` (a lease used on another run, found while folding),
`stale-rejected` and `stale-lease-ops` (anything accepted from a non-grantee, under an epoch before it was issued,
or invoked after the tenure was superseded or released), `typed-refusal` (an untyped answer to a stale operation,
unless the network fault nemesis cut the connection while it was in flight, or its host was cut off the store
meanwhile, a storm across hosts: then it is unknown), `live-accepted`
(a refusal under a tenure that was surely current and live, with no takeover attempted).
`unleased-passthrough` (an unleased mutation refused by the fence) is found while folding, like `run-match`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from soak.check.base import host_partitions, in_partition
from soak.check.verdict import Violation
from soak.workloads.runs.check.facts import Facts, _retired_grant
from soak.workloads.runs.check.ops import _LEASE_OPS, _NEVER, evidence
from soak.workloads.runs.check.summaries import _Tenure


def check_scan(facts: Facts) -> list[Violation]:
    """Findings made while streaming: accepted operations whose lease names another run."""
    return list(facts.scan_violations)


def check_grantees(facts: Facts, tenures: Iterable[_Tenure] | None = None) -> list[Violation]:
    """Every accepted mutation, renew or release carries a lease granted to its owner (of `tenures`, default all),
    and completed after that grant was invoked (earlier, the epoch had not been issued: a forged future lease)."""
    out: list[Violation] = []
    for t in facts.tenures.values() if tenures is None else tenures:
        if not t.users:
            continue
        granted_to = {g[2] for g in t.grants}
        grants = [evidence(g[3]) for g in t.grants] if t.grants else []
        if not granted_to:  # an operation under a retired tenure: granted to whom its residue says
            before = _retired_grant(facts, t)
            res = facts.retired.get(t.run)
            if before is None and res is not None and t.epoch <= res.mark:
                continue  # long retired: whose it was is not kept (fencing judges the operation)
            if before is not None:
                granted_to = res.owners(facts, t.epoch)
                if granted_to is None:
                    continue
                grants = [before[1]]
        for owner, op in t.users.items():
            if owner in granted_to:
                if t.grants:
                    first = t.grant_invoke()
                    ev = evidence(op)
                    if ev.complete_ns is not None and ev.complete_ns < first:  # a never-issued epoch, granted later
                        clause = "stale-lease-ops" if ev.f in _LEASE_OPS else "stale-rejected"
                        out.append(Violation(clause, f"{ev.f} under epoch {t.epoch} of run {t.run} accepted "
                                             f"{(first - ev.complete_ns) / 1e6:.1f} ms before that epoch's grant was "
                                             f"invoked: it had never been issued", (ev, *grants)))
                continue
            ev = evidence(op)
            clause = "stale-lease-ops" if ev.f in _LEASE_OPS else "stale-rejected"
            if not granted_to:
                why = f"epoch {t.epoch} of run {t.run} was never granted"
            else:
                why = f"epoch {t.epoch} of run {t.run} was granted to {', '.join(sorted(granted_to))}, not {owner}"
            out.append(Violation(clause, f"{ev.f} accepted from a non-grantee: {why}", (ev, *grants)))
    return out


def check_fencing(facts: Facts, tenures: Iterable[_Tenure] | None = None) -> list[Violation]:
    """Real time: nothing accepted under a tenure (of `tenures`, default all) invoked after it was superseded or released."""
    out: list[Violation] = []
    cuts: dict[str, list[int]] | None = None
    cut_off: dict[str, list[tuple[float, float]]] = {}
    for t in facts.tenures.values() if tenures is None else tenures:
        if t.mut is None and t.lop is None and t.unt is None:
            continue
        when, proof = facts.stale_at(t.run, t.epoch)
        if when == _NEVER:
            continue
        if max(t.mut_inv, t.lop_inv, t.unt_inv) <= when:
            continue
        pev = evidence(proof) if proof is not None else None
        cite = (pev,) if pev is not None else ()
        how = "released" if pev is not None and pev.f == "release" else f"superseded by epoch {pev.epoch if pev else '?'}"
        if t.mut is not None and t.mut_inv > when:
            ev = evidence(t.mut)
            out.append(Violation(
                "stale-rejected", f"{ev.f} under epoch {t.epoch} of run {t.run} accepted after the tenure was {how}",
                (ev, *cite),
            ))
        if t.lop is not None and t.lop_inv > when:
            ev = evidence(t.lop)
            out.append(Violation(
                "stale-lease-ops", f"{ev.f} under epoch {t.epoch} of run {t.run} accepted after the tenure was {how}",
                (ev, *cite),
            ))
        if t.unt is not None and t.unt_inv > when:
            ev = evidence(t.unt)
            if cuts is None:
                cuts, cut_off = net_cuts(facts), host_partitions(facts.events)
            if cut_in_flight(cuts, ev) or in_partition(cut_off, ev.process, ev.invoke_ns, ev.complete_ns,
                                                       facts.margin_ns):
                # the answer is the network's, not the store's (a cut of its connection, or its host cut off the
                # store: soak.cluster): unknown, as the contract says
                continue
            out.append(Violation(
                "typed-refusal",
                f"{ev.f} under stale epoch {t.epoch} of run {t.run} raised untyped {ev.error} instead of LeaseHeldError",
                (ev, *cite),
            ))
    return out


def net_cuts(facts: Facts) -> dict[str, list[int]]:
    """Worker -> the instants (monotonic ns) the network fault nemesis cut one of its connections (`net-cut`)."""
    cuts: dict[str, list[int]] = {}
    for e in facts.events:
        if getattr(e, "kind", None) == "net-cut" and isinstance(e.value.get("at_ns"), int):
            cuts.setdefault(e.value.get("target"), []).append(e.value["at_ns"])
    for v in cuts.values():
        v.sort()
    return cuts


def cut_in_flight(cuts: dict[str, list[int]], ev: Any) -> bool:
    """True where a cut of the operation's worker landed between its invocation and its completion."""
    at = cuts.get(ev.process)
    if not at or ev.complete_ns is None:
        return False
    i = bisect.bisect_left(at, ev.invoke_ns)
    return i < len(at) and at[i] <= ev.complete_ns


def check_refusals(facts: Facts, refusals: Iterable[tuple[str, int, str, Any]] | None = None) -> list[Violation]:
    """A LeaseHeldError under a tenure that was surely current and live is a spurious refusal (of `refusals`, default
    the facts' own)."""
    out: list[Violation] = []
    ttl, margin = facts.ttl_ns, facts.margin_ns
    sorted_acq: dict[str, list[int]] = {}
    for run, epoch, owner, op in facts.refusals if refusals is None else refusals:
        t = facts.tenures.get((run, epoch))
        ev = evidence(op)
        if t is None or not t.granted_to(owner) or ev.complete_ns is None:
            continue
        done = ev.complete_ns
        if t.rel_inv < done + facts.clock_ns:
            continue
        grant_inv = t.grant_invoke()
        ra = facts.run_acc.get(run)
        if ra is not None:
            acq = sorted_acq.get(run)
            if acq is None:
                acq = sorted_acq[run] = sorted(ra.acq_invokes)
            if bisect.bisect_left(acq, done) - bisect.bisect_right(acq, grant_inv) > 0:
                continue  # another acquire was attempted meanwhile: the tenure may have been taken
            if any(inv < done and comp > grant_inv and inv != grant_inv for inv, comp in ra.acq_unknown):
                continue
        last = t.live_since(ev.invoke_ns)
        if last is not None and done < last + ttl - margin:
            out.append(Violation(
                "live-accepted",
                f"{ev.f} under epoch {epoch} of run {run} refused {(done - last) / 1e6:.1f} ms after its last grant "
                f"or renewal (ttl {facts.lease_ttl_ms} ms), with no takeover attempted",
                (ev, evidence(t.grants[0][3])),
            ))
    return out
