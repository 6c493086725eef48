"""The final state's diff (`check_state`): per run, meta and blob ref, the last accepted write in serial `(epoch, c)`
order must be what the store holds, unless a later accepted or unknown delete explains its absence; journal
entries in serial order, payloads byte for byte (`journal-a1`..`a5`, `meta-last-write`, `blob-semantics`,
`delete-semantics`; a value written by a refused or stale operation names `typed-refusal` or `stale-rejected`).
`state_gaps`: what in the final state keeps the check from deciding.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from soak.history import payload_for, tag_of
from soak.check.verdict import Evidence, Violation
from soak.workloads.runs.check.facts import Facts
from soak.workloads.runs.check.folding import _unexplained
from soak.workloads.runs.check.ops import _LEASE, evidence


def check_state(facts: Facts) -> list[Violation]:
    """Diff the final state against the serial order of accepted writes (nothing to diff without a final state:
    `_undecidable` says why it is missing)."""
    out: list[Violation] = []
    snap = facts.snapshot
    if snap is None:
        return out
    seen = facts.seen

    def stale(ev: Evidence) -> bool:
        return ev.epoch is not None and ev.invoke_ns > facts.stale_at(ev.run, ev.epoch)[0]

    def refused_written(ev: Evidence, where: str) -> Violation:
        if stale(ev):
            return Violation("stale-rejected", f"a refused stale {ev.f} was written anyway ({where})", (ev,))
        return Violation("typed-refusal",
                         f"a refused {ev.f} ({ev.error}) was written anyway ({where}): a refusal mutates nothing", (ev,))

    def lookup(payload: bytes) -> tuple[str | None, tuple[Evidence, tuple[int, int], dict[str, Any]] | None]:
        tag = tag_of(payload)
        s = seen.get(tag) if tag is not None else None
        return tag, (None if s is None else (evidence(s[0]), s[1], s[2]))

    def foreign(tag: str, run: str, where: str) -> bool:
        """A value written under another run's lease: run-match, and outside this run's (epoch, c) order."""
        lease = seen[tag][0][_LEASE]
        if lease is None or lease.run_id == run:
            return False
        out.append(Violation("run-match", f"{where} was written by {tag} under a lease of run {lease.run_id}",
                             (evidence(seen[tag][0]),)))
        return True

    for run, entries in snap.journals.items():
        ra = facts.run_acc.get(run)
        del_ok = ra.del_ok if ra else None
        prev: tuple[Evidence, tuple[int, int], int] | None = None  # the previous entry: op, key, seq
        for pos, entry in enumerate(entries):
            where = f"journal of {run} at position {pos}, seq {entry.seq}"
            tag, s = lookup(entry.payload)
            if s is None:
                clause = "journal-a4" if tag is None else "journal-a1"
                out.append(Violation(clause, f"phantom entry {tag or entry.payload[:16]!r} matches no recorded append ({where})"))
                continue
            ev, key, args = s
            if ev.f != "append" or ev.run != run:
                out.append(Violation("journal-a1", f"entry written by a {ev.f} on run {ev.run} ({where})", (ev,)))
                continue
            if foreign(tag, run, where):
                continue
            if ev.outcome == "fail":
                out.append(refused_written(ev, where))
            if entry.payload != payload_for(tag):
                out.append(Violation("journal-a4", f"payload of {tag} altered ({where})", (ev,)))
            if args.get("seq") != entry.seq:
                out.append(Violation("journal-a1", f"{tag} appended seq {args.get('seq')} but the entry has seq {entry.seq}", (ev,)))
            if prev is not None:
                out.extend(_journal_pair(prev, (ev, key, entry.seq), where, stale))
            if del_ok is not None and key < del_ok[0]:
                out.append(Violation("delete-semantics", f"entry {tag} survived the later delete of run {run}",
                                     (ev, evidence(del_ok[1]))))
            prev = (ev, key, entry.seq)

    for run, ra in facts.run_acc.items():
        if run not in snap.journals:
            continue
        m = array("q", _unexplained(ra.missing, ra.del_any))
        for i in range(0, len(m), 6):
            epoch, c, pid, index, invoke, complete = m[i:i + 6]
            process = facts.procs[pid]
            ev = Evidence(process, index, "append", run, epoch, c, "ok", invoke, complete, f"{process}#{index}")
            out.append(Violation("journal-a1", f"lost write: accepted append {ev.tag} is missing from the journal "
                                 f"of {run} and no later delete explains it", (ev,)))

    for run, meta in snap.metas.items():
        ra = facts.run_acc.get(run)
        if meta is None:
            if ra is not None and ra.meta_ok is not None and (ra.del_any is None or ra.meta_ok[0] > ra.del_any):
                ev = evidence(ra.meta_ok[1])
                out.append(Violation("meta-last-write", f"lost write: accepted meta {ev.tag} of {run} is "
                                     f"missing and no later delete explains it", (ev,)))
            continue
        tag, s = lookup(meta.payload)
        if s is None:
            out.append(Violation("meta-last-write", f"phantom meta {tag or meta.payload[:16]!r} of {run} matches no recorded put_meta"))
            continue
        ev, key, args = s
        if ev.f != "put_meta" or ev.run != run:
            out.append(Violation("meta-last-write", f"meta of {run} written by a {ev.f} on run {ev.run}", (ev,)))
            continue
        if foreign(tag, run, f"meta of {run}"):
            continue
        if ev.outcome == "fail":
            out.append(refused_written(ev, f"meta of {run}"))
        if meta.payload != payload_for(tag):
            out.append(Violation("journal-a4", f"meta payload of {run} differs byte for byte from what {tag} wrote", (ev,)))
        if meta.run_id != run or meta.status != args.get("status") or meta.segments != args.get("segments"):
            out.append(Violation("meta-last-write", f"meta of {run} differs from what {tag} wrote", (ev,)))
        if ra is not None and ra.meta_ok is not None and ra.meta_ok[0] > key:
            later = evidence(ra.meta_ok[1])
            out.append(Violation("meta-last-write", f"lost write: the final meta of {run} is {tag}, not the later "
                                 f"accepted {later.tag}", (ev, later)))
        if ra is not None and ra.del_ok is not None and ra.del_ok[0] > key:
            out.append(Violation("delete-semantics", f"meta {tag} of {run} survived the later delete",
                                 (ev, evidence(ra.del_ok[1]))))

    listed = set(snap.listed_runs)
    for run, meta in snap.metas.items():
        if (meta is not None) != (run in listed):
            out.append(Violation("meta-last-write", f"list_runs {'omits' if meta is not None else 'lists'} run {run} "
                                 f"whose meta is {'present' if meta is not None else 'absent'}"))

    for run, blobs in snap.blobs.items():
        for ref, data in blobs.items():
            tag, s = lookup(data)
            if s is None:
                out.append(Violation("blob-semantics", f"phantom blob {ref} ({tag or data[:16]!r}) matches no recorded blob_put"))
                continue
            ev, key, args = s
            if ev.f != "blob_put" or args.get("ref") != ref:
                out.append(Violation("blob-semantics", f"blob {ref} holds what a {ev.f} of {args.get('ref', ev.run)} wrote", (ev,)))
                continue
            if foreign(tag, run, f"blob {ref}"):
                continue
            if ev.outcome == "fail":
                out.append(refused_written(ev, f"blob {ref}"))
            if data != payload_for(tag):  # the byte-for-byte promise, as for journal payloads
                out.append(Violation("journal-a4", f"blob {ref} differs byte for byte from what {tag} wrote", (ev,)))
            rf = facts.refs.get(ref)
            if rf is not None and rf.put_ok is not None and rf.put_ok[0] > key:
                later = evidence(rf.put_ok[1])
                out.append(Violation("blob-semantics", f"lost write: blob {ref} holds {tag}, not the later accepted "
                                     f"{later.tag}", (ev, later)))
            if rf is not None and rf.del_ok is not None and rf.del_ok[0] > key:
                ra = facts.run_acc.get(run)
                deleted = ra is not None and ra.del_ok is not None and ra.del_ok[0] > key
                out.append(Violation("blob-semantics", f"blob {ref} survived its accepted delete"
                                     + (f" and the deletion of run {run}" if deleted else ""), (ev, evidence(rf.del_ok[1]))))
    for ref, rf in facts.refs.items():
        if rf.run not in snap.blobs or ref in snap.blobs[rf.run] or rf.put_ok is None:
            continue
        if rf.del_any is None or rf.put_ok[0] > rf.del_any:
            ev = evidence(rf.put_ok[1])
            out.append(Violation("blob-semantics", f"lost write: accepted blob_put {ev.tag} of {ref} is missing "
                                 f"and no later blob_delete explains it", (ev,)))

    for run in facts.cross_runs:
        found = [e.payload for e in snap.journals.get(run, ())]
        if snap.metas.get(run) is not None:
            found.append(snap.metas[run].payload)
        found.extend(snap.blobs.get(run, {}).values())
        if found:
            cite = tuple(evidence(seen[t][0]) for t in (tag_of(p) for p in found) if t in seen)
            out.append(Violation("run-match", f"cross-run target {run} holds {len(found)} value(s); nobody may write it", cite))
    return out


def _journal_pair(prev: tuple[Evidence, tuple[int, int], int], cur: tuple[Evidence, tuple[int, int], int], where: str,
                  stale: Callable[[Evidence], bool]) -> list[Violation]:
    """Two adjacent loaded entries: load order must be both seq order and serial (epoch, c) order.

    Which clause a disagreement breaks depends on which orders agree: entries stored in serial
    order but with a seq not above the one before were accepted below the tail (A5); entries in
    seq order but not serial order come from a stale acceptance if the later one is provably
    stale, else from an append accepted below the tail that an earlier one had set (A5);
    entries in neither order load out of append order (A2).
    """
    (pev, pkey, pseq), (ev, key, seq) = prev, cur
    if key == pkey:
        return [Violation("journal-a1", f"two entries with the same (epoch, counter) {key} ({where})", (pev, ev))]
    if seq <= pseq:
        if key > pkey:
            return [Violation("journal-a5", f"{ev.tag} was accepted with seq {seq}, not above the tail {pseq} "
                                            f"({where})", (pev, ev))]
        return [Violation("journal-a2", f"entries load in neither seq nor append order ({where})", (pev, ev))]
    if key < pkey:
        if stale(ev):
            return [Violation("stale-rejected", f"epoch inversion: a stale entry of epoch {key[0]} follows one of "
                                                f"epoch {pkey[0]} ({where})", (pev, ev))]
        return [Violation("journal-a5", f"{pev.tag} was accepted with seq {pseq} below the tail {seq} that the "
                                        f"earlier {ev.tag} had set ({where})", (ev, pev))]
    return []


def state_gaps(facts: Facts) -> list[str]:
    """What in the final state keeps the checker from deciding: a final state that could not be read, read
    errors, probes that errored, a run it lacks."""
    snap = facts.snapshot
    if snap is None:
        return [f"final state not read ({facts.state_error}): the history was judged without it"]
    reasons = [f"final state unreadable: {e}" for e in snap.read_errors]
    for run, probe in snap.probe.items():
        if "epoch" not in probe and probe.get("error") != "LeaseHeldError":
            reasons.append(f"final probe of run {run} raised {probe.get('error')}: {probe.get('message', '')}")
    for run in facts.run_acc:
        if run in facts.runs and run not in snap.journals:
            reasons.append(f"final state lacks run {run}: its writes cannot be diffed")
    return reasons
