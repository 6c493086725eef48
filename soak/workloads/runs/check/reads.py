"""Reads are evidence: a read made while its tenure was surely live must see what the epoch-ordered serial history
allows (its own tenure's last accepted write, or else the serially last accepted write of an earlier epoch, or
any unknown write after it). A superseded holder's write that landed late shows up here even when a later write
hides it in the final state (`stale-rejected`; `run-match` through another run's lease; `journal-a3`,
`meta-last-write`, `blob-semantics` for a lost write).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from soak.check.verdict import Evidence, Violation
from soak.workloads.runs.check.facts import Facts
from soak.workloads.runs.check.folding import _tag_info
from soak.workloads.runs.check.ops import evidence
from soak.workloads.runs.check.summaries import _EMPTY_JOURNAL, _Read, _Tenure, _read_evidence


_OBJECT_CLAUSE = {"journal": "journal-a3", "meta": "meta-last-write", "blob": "blob-semantics"}


_OBJECT_WRITER = {"journal": "append", "meta": "put_meta", "blob": "blob_put"}


def _surely_held(facts: Facts) -> Callable[[_Read], _Tenure | None]:
    """The "surely live" test of `check_refusals`, for reads: the tenure when nothing can have ended it.

    The read must have completed within ttl - margin of a grant or renewal that completed before
    it was invoked, with the tenure unreleased and no grant of another epoch (nor an acquire of
    unknown outcome) that could have landed before the read completed. Refused acquires change
    nothing (a refusal mutates nothing), so, unlike for refusals, they do not disqualify a read.
    """
    ttl, margin = facts.ttl_ns, facts.margin_ns
    ungranted = (None, 0, 0.0, ())
    tenure_info: dict[tuple[str, int], tuple[Any, ...]] = {}

    def info(run: str, epoch: int) -> tuple[Any, ...]:
        """(tenure, its grant's invocation, the deadline, the run's unknown acquires) of a granted tenure."""
        t = facts.tenures.get((run, epoch))
        if t is None or not t.grants:
            tenure_info[(run, epoch)] = ungranted
            return ungranted
        grant_inv = t.grant_invoke()
        ra = facts.run_acc.get(run)
        found = tenure_info[(run, epoch)] = (t, grant_inv, facts.next_grant(run, epoch, grant_inv),
                                             ra.acq_unknown if ra is not None else ())
        return found

    def held(rd: _Read) -> _Tenure | None:
        _, run, epoch, owner, _, _, _, _, inv, done, _ = rd
        t, grant_inv, first, unknown = tenure_info.get((run, epoch)) or info(run, epoch)
        if t is None or done is None or first < done or t.rel_inv < done + facts.clock_ns or not t.granted_to(owner):
            return None  # (first < done: another grant, or a later epoch's, was invoked meanwhile)
        if unknown and any(i < done and c > grant_inv for i, c in unknown):
            return None
        last = t.live_since(inv)
        if last is None or done >= last + ttl - margin:
            return None
        return t

    return held


def check_reads(facts: Facts, reads: Sequence[_Read] | None = None) -> list[Violation]:
    """A read under a surely-live tenure sees what the epoch-ordered serial history allows.

    Its own last accepted write of the object (or an own write of unknown outcome after it);
    if it has not written the object yet, the serially-last accepted write of the epochs below
    (a run delete empties journal and meta, a blob delete the blob), any unknown write after it,
    or the state before those unknown writes. Anything else is a write the fence let in late
    (`stale-rejected`), one under another run's lease (`run-match`), or a lost write.
    Judges `reads` (default: the facts' own); the statistics count every read judged so far.
    """
    out: list[Violation] = []
    final = reads is None
    if final:
        reads = facts.reads
    if reads:
        out = _judge_reads(facts, reads)
    if final and facts.read_counts[0]:
        facts.stats["reads"], facts.stats["reads_judged"] = facts.read_counts
    return out


def _judge_reads(facts: Facts, reads: Sequence[_Read]) -> list[Violation]:
    """`check_reads` of `reads`, counting them in `facts.read_counts`."""
    out: list[Violation] = []
    held = _surely_held(facts)
    epochs_of: dict[tuple[str, str], list[int]] = {}

    def before(obj: tuple[str, str], epoch: int) -> tuple[dict[Any, Any], Any]:
        """Values the serial history allows just before `epoch` (value -> op or None), and the last accepted op."""
        allowed: dict[Any, Any] = {}
        per = facts.objects.get(obj, {})
        eps = epochs_of.get(obj)
        if eps is None:
            eps = epochs_of[obj] = sorted(per)
        for k in range(bisect.bisect_left(eps, epoch) - 1, -1, -1):  # downwards, without copying the epochs
            ok_c, ok_val, ok_op, unk = per[eps[k]]
            for _, v, op in unk:
                allowed.setdefault(v, op)
            if ok_c is not None:
                allowed.setdefault(ok_val, ok_op)
                return allowed, ok_op
        floor = floors.get(obj)  # the retired epochs, all below `epoch` (reads at or below them are not judged)
        if floor is not None:
            for v, op in floor[0]:
                allowed.setdefault(v, op)
            if floor[1] is not None:
                allowed.setdefault(floor[1][0], floor[1][1])
                return allowed, floor[1][1]
        allowed.setdefault(_EMPTY_JOURNAL if obj[0] == "journal" else None, None)
        return allowed, None

    judged = 0
    unordered, floors, retired = facts.unordered, facts.floors, facts.retired
    for rd in reads:
        obj, run, epoch, _, seen, _, _, _, _, _, own = rd
        if obj in unordered:
            continue  # unleased writes are not ordered by epochs
        if retired and run in retired and epoch <= retired[run].floor:
            continue  # under a retired epoch (reused, by a store that resets epochs): its floor is not below it
        t = held(rd)
        if t is None:
            continue
        judged += 1
        # allowed: its own last accepted write if it made one, else what the epochs below allow; and the
        # values of its own writes of unknown outcome after that
        own_wrote = own is not None and own[0] is not None
        if own_wrote:
            if seen == own[1]:
                continue
        elif seen in before(obj, epoch)[0]:
            continue
        if own is not None and any(seen == v for _, v, _ in own[3]):
            continue
        out.append(_misread(facts, rd, t, own_wrote, before))
    facts.read_counts[0] += len(reads)
    facts.read_counts[1] += judged
    return out


def _misread(facts: Facts, rd: _Read, t: _Tenure, own_wrote: bool,
             before: Callable[[tuple[str, str], int], tuple[dict[Any, Any], Any]]) -> Violation:
    """Name the clause a disallowed read breaks, citing the read and the writes involved."""
    obj, run, epoch, _, seen, _, _, _, _, _, own = rd
    kind, name = obj
    what = f"the journal tail of {name}" if kind == "journal" else f"the meta of {name}" if kind == "meta" else f"blob {name}"
    rev = _read_evidence(rd)
    seen_tag = seen[1] if kind == "journal" else seen
    shown = "nothing" if seen_tag is None and seen in (None, _EMPTY_JOURNAL) else (
        f"{seen_tag}" + (f" at seq {seen[0]}" if kind == "journal" else ""))
    head = f"{rev.tag} read {what} under epoch {epoch} while it was surely live and saw {shown}"
    grant_inv = t.grant_invoke()
    lost = _OBJECT_CLAUSE[kind]
    if own_wrote:
        mine = evidence(own[2])
        expect = f"; its own tenure last wrote {mine.tag}"
        cite: tuple[Evidence, ...] = (rev, mine)
    else:
        _, last = before(obj, epoch)
        mine = evidence(last) if last is not None else None
        expect = (f"; the serially-last accepted write before epoch {epoch} is {mine.tag} (epoch {mine.epoch})"
                  if mine is not None else f"; nothing was accepted before epoch {epoch}")
        cite = (rev,) if mine is None else (rev, mine)
    info = _tag_info(facts, seen_tag) if seen_tag is not None else None
    if info is not None:
        lease_run, ep, outcome = info
        hit = facts.seen.get(seen_tag)
        sev = evidence(hit[0]) if hit is not None else Evidence(
            seen_tag.rpartition("#")[0], int(seen_tag.rpartition("#")[2]), _OBJECT_WRITER[kind], run, ep, None,
            outcome, 0, None, seen_tag)
        cite = (*cite, sev)
        if lease_run != run:
            return Violation("run-match", f"{head}, written under a lease of run {lease_run}{expect}", cite)
        if ep < epoch:
            if outcome == "fail":
                # a refusal mutates nothing: stale-rejected when the lease was already superseded at the call,
                # typed-refusal when it was refused before then (an expired, unsuperseded lease, the order guard)
                # (its invocation unknown, since the final state no longer holds it: typed-refusal is certain, a
                # refusal that took effect breaks it whenever it was made; stale-rejected only maybe)
                if hit is None or sev.invoke_ns < facts.stale_at(run, ep)[0]:
                    when = "before its tenure was superseded" if hit is not None else "(a refusal mutates nothing)"
                    return Violation("typed-refusal", f"{head}: {seen_tag} of epoch {ep} was refused "
                                     f"({sev.error or 'refused'}) {when}, yet took effect{expect}", cite)
                return Violation("stale-rejected", f"{head}: a refused write of superseded epoch {ep} took effect"
                                 f"{expect}", cite)
            if own_wrote:
                prior = before(obj, epoch)[0].get(seen, False)
                landed_late = prior is False or prior is None or prior[8] is None or prior[8] > grant_inv
                if not landed_late:
                    return Violation(lost, f"{head}, the value from before its own write: lost write{expect}", cite)
                return Violation("stale-rejected", f"{head}: a write of superseded epoch {ep} took effect after the "
                                 f"successor's own write{expect}", cite)
            wrote = _written_by(facts, obj, ep, seen_tag)
            if wrote is not None and wrote[8] is not None and wrote[8] > facts.stale_at(run, ep)[0]:
                return Violation("stale-rejected", f"{head}: {seen_tag} of epoch {ep} completed after its tenure was "
                                 f"superseded and took effect over later writes{expect}", cite)
            if mine is not None and mine.epoch is not None and mine.epoch < epoch and (
                    mine.complete_ns is None or mine.complete_ns > grant_inv):
                return Violation("stale-rejected", f"{head}, an older write of superseded epoch {ep}: {mine.tag} was "
                                 f"still in flight when epoch {epoch} was granted and took effect late or never"
                                 f"{expect}", cite)
            return Violation(lost, f"{head}, an older write of epoch {ep}: lost write{expect}", cite)
        if ep == epoch and outcome == "fail":  # its own tenure's write, refused (busy: nothing written), took effect
            return Violation("typed-refusal", f"{head}: {seen_tag}, a write of its own epoch {ep}, was refused "
                             f"({sev.error or 'refused'}), yet took effect{expect}", cite)
        return Violation(lost, f"{head}, a write of epoch {ep} the serial history does not allow here{expect}", cite)
    if own_wrote:
        return Violation(lost, f"{head}: its own write is lost{expect}", cite)
    if mine is not None and (mine.complete_ns is None or mine.complete_ns > grant_inv):
        return Violation("stale-rejected", f"{head}: {mine.tag} of superseded epoch {mine.epoch} was still in flight "
                         f"when epoch {epoch} was granted and took effect late or never{expect}", cite)
    return Violation(lost, f"{head}: lost write{expect}", cite)


def _written_by(facts: Facts, obj: tuple[str, str], epoch: int, tag: str) -> Any:
    """The compact record of the write `tag` if the summary of (obj, epoch) still holds it (last accepted or unknown)."""
    o = facts.objects.get(obj, {}).get(epoch)
    if o is not None:
        ops: Iterable[Any] = (o[2], *(u[2] for u in o[3]))
    else:  # a retired epoch: its last accepted write may stand in its object's floor
        floor = facts.floors.get(obj)
        if floor is None:
            return None
        ops = (*(u[1] for u in floor[0]), floor[1][1] if floor[1] is not None else None, *floor[2])
    for op in ops:
        if op is not None and f"{op[0]}#{op[1]}" == tag:
            return op
    return None
