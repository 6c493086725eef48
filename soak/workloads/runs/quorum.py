"""What the runs workload's quorum counts, the tailer's suspect rules, and what its storms exercise of each clause.

Counters: takeovers, accepted writes and typed stale refusals per surface, deletion cycles, cross-run refusals
(and the stalls its workers record), and one per cell of the probe coverage table (`cover_<cell>`,
`soak.workloads.runs.coverage`). Suspects: operations the worker believed stale or cross-run (intent `stale`
or `cross`) that the store nevertheless accepted, or answered with an untyped error. A suspect is a hint, never a
verdict. A lease accepted on another run counts at once. An operation under a lease of its own run counts only
once the tailer has seen a later epoch of that run granted (completed) before the operation was invoked, the
checker's own test of staleness: a merely expired, unsuperseded lease may be accepted or refused either way. An
acquire refused (`LeaseHeldError`) naming as holder a tenure whose grant and every renew of it had completed more
than twice the ttl before the acquire was invoked, with no renew of it in flight and no release, is a suspect too
(`ttl-honoured`: an expired tenure still blocks), unless a renew of that tenure ended unknown (`info`): a request
the network held may reach the store after its caller gave up (a cut, a stalled direction), so its effect has no
upper bound in time; nor when an acquire of the run ended unknown since the grant (it may have granted meanwhile,
and the checker skips such a refusal too). With the scenario's `stop_on_suspect` the storm ends at the
first one and the checker judges.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from soak.workloads.runs.coverage import cell_of, derived
from soak.workloads.runs.load import is_load_run
from soak.workloads.runs.options import ACCEPT_SURFACES, STALE_SURFACES

__all__ = ["RunsCounter", "SUSPECT_INTENTS", "exercised", "takeover_rates"]

#: Intents under which the worker expects a typed refusal (the forged and dead leases of the coverage probes).
SUSPECT_INTENTS = frozenset({"stale", "cross", "superseded", "released", "released_superseded", "impostor",
                             "future"})
#: How long (monotonic ns) an accepted stale operation waits for a grant line that supersedes it.
_CANDIDATE_WINDOW_NS = 5_000_000_000
#: How far past a refused acquire the tailer reads before judging it (renews invoked before it are seen).
_SETTLE_NS = 500_000_000


class RunsCounter:
    """Quorum counters of the runs workload, from operations: raw history lines while a storm runs (`feed`, which
    also notes suspects), or the checker's per-kind counts (`add`) when it recounts the quorum from the history
    it checked."""

    def __init__(self, lease_ttl_ms: int | None = None) -> None:
        self.c: dict[str, int] = defaultdict(int)
        self.granted: dict[str, set[int]] = defaultdict(set)
        self.released: dict[str, set[int]] = defaultdict(set)
        self.suspects: list[dict[str, Any]] = []
        self._grants: dict[str, list[tuple[int, int]]] = defaultdict(list)  # run -> (complete ts, epoch)
        # (invoke, how it ended): stale ops accepted or answered untyped, not yet known to be superseded
        self._candidates: list[tuple[dict[str, Any], str]] = []
        self._latest_ts = 0
        self._pending: list[dict[str, Any]] = []
        # ttl-honoured: (run, epoch) -> latest completion of its grant or a renew; released tenures;
        # refused acquires naming a holder, not yet judged
        self._ttl_ns = None if lease_ttl_ms is None else lease_ttl_ms * 1_000_000
        self._touched: dict[tuple[str, int], int] = {}
        self._released: set[tuple[str, int]] = set()
        self._unbounded: set[tuple[str, int]] = set()  # tenures a renew of unknown outcome may have extended any time
        self._acq_unknown: dict[str, list[tuple[int, int]]] = defaultdict(list)  # run -> acquires of unknown outcome
        self._held_refusals: list[tuple[dict[str, Any], tuple[str, int]]] = []

    def feed(self, inv: dict[str, Any], done: dict[str, Any] | None) -> None:
        self._suspect(inv, done)
        t = done.get("t") if done else "info"
        f = inv.get("f", "")
        run = inv.get("run", "")
        lease = inv.get("lease")
        self.add((f, inv.get("intent", ""), t, done.get("err") if done else None, bool(lease) and lease[0] != run))
        if t == "ok":
            if f == "acquire":
                epoch = (done.get("v") or {}).get("epoch")
                if isinstance(epoch, int):
                    self.granted[run].add(epoch)
            elif f == "release" and lease and lease[0] == run:
                self.released[run].add(int(lease[2]))

    def add(self, key: tuple[str, str, str, str | None, bool], n: int = 1) -> None:
        """`n` operations of one kind: (surface, intent, outcome, error class, lease of another run)."""
        f, intent, t, err, cross = key
        cell = cell_of(key)
        if cell is not None:
            self.c[cell.key] += n
        if t == "ok":
            if f == "acquire":
                self.c["grants"] += n
            if intent in ("live", "renewed") and f in ACCEPT_SURFACES:
                self.c[f"accepted_{f}"] += n
            elif intent in ("side", "side_empty") and f == "delete":
                self.c["deletion_cycles"] += n
        elif t == "fail" and err == "LeaseHeldError":
            if intent == "stale":
                surface = "cross" if cross else f
                if surface in STALE_SURFACES:
                    self.c["stale_refusals"] += n
                    self.c[f"stale_{surface}"] += n
            elif intent == "cross":
                self.c["cross_refusals"] += n

    # -- suspects ---------------------------------------------------------------------------

    def _suspect(self, inv: dict[str, Any], done: dict[str, Any] | None) -> None:
        """Note grants, and stale or cross-run operations accepted or answered untyped."""
        t = done.get("t") if done else None
        f = inv.get("f")
        lease = inv.get("lease")
        if t == "ok" and f == "acquire":
            epoch = (done.get("v") or {}).get("epoch")
            if isinstance(epoch, int):
                self._grants[inv.get("run", "")].append((int(done.get("ts", 0)), epoch))
                self._touch((inv.get("run", ""), epoch), int(done.get("ts", 0)))
            return
        if done is not None and self._ttl_ns is not None:
            if f == "renew" and lease:  # its completion bounds when it took effect, unless it ended unknown
                self._touch((lease[0], int(lease[2])), int(done.get("ts", 0)))
                if t == "info":
                    self._unbounded.add((lease[0], int(lease[2])))
            elif f == "release" and lease and t == "ok":
                self._released.add((lease[0], int(lease[2])))
            elif f == "acquire" and t == "info":  # it may have granted, at any point of its call
                self._acq_unknown[inv.get("run", "")].append((int(inv.get("ts", 0)), int(done.get("ts", 0))))
            elif f == "acquire" and t == "fail" and done.get("err") == "LeaseHeldError":
                holder = (done.get("v") or {}).get("holder")
                if isinstance(holder, list) and len(holder) == 3 and isinstance(holder[2], int):
                    self._held_refusals.append((inv, (holder[0], holder[2])))
        if inv.get("intent") not in SUSPECT_INTENTS or not lease or done is None:
            return
        if t == "ok" and lease[0] != inv.get("run", ""):
            self._add_suspect(inv, f"lease for run {lease[0]} accepted on run {inv.get('run')}")
        elif t == "ok":
            self._candidates.append((inv, "accepted"))
        elif t == "info" and done.get("err"):
            self._candidates.append((inv, f"answered with untyped {done.get('err')}"))

    def _touch(self, tenure: tuple[str, int], ts: int) -> None:
        if ts > self._touched.get(tenure, 0):
            self._touched[tenure] = ts

    def settle(self, latest_ts: int, pending: list[dict[str, Any]]) -> None:
        """After a poll: judge the candidates whose evidence has arrived (see the module's docstring)."""
        self._latest_ts, self._pending = latest_ts, pending
        keep = []
        for inv, how in self._candidates:
            run, epoch, ts = inv["lease"][0], int(inv["lease"][2]), int(inv.get("ts", 0))
            later = next((e for done_ts, e in self._grants.get(run, ()) if e > epoch and done_ts < ts), None)
            if later is not None:
                self._add_suspect(inv, f"{inv.get('f')} under epoch {epoch} of run {run} {how} after epoch "
                                       f"{later} was granted")
            elif self._latest_ts - ts < _CANDIDATE_WINDOW_NS:
                keep.append((inv, how))
        self._candidates = keep
        if self._ttl_ns is not None:
            self._settle_held_refusals()

    def _settle_held_refusals(self) -> None:
        """Refused acquires whose named holder had surely expired become `ttl-honoured` suspects.

        Judged once the tailer has read half a second past the acquire, so a renew invoked before it has been
        seen: completed (its completion counts) or still in flight (no judgement)."""
        keep = []
        for inv, tenure in self._held_refusals:
            ts = int(inv.get("ts", 0))
            if self._latest_ts - ts < _SETTLE_NS:
                keep.append((inv, tenure))
                continue
            last = self._touched.get(tenure)
            if last is None or tenure in self._released or tenure in self._unbounded or ts - last <= 2 * self._ttl_ns:
                continue
            granted = min((g for g, e in self._grants.get(tenure[0], ()) if e == tenure[1]), default=last)
            since = granted - 20 * self._ttl_ns  # a grant's call began at most a call bound before it completed
            if any(u < ts and c > since for u, c in self._acq_unknown.get(tenure[0], ())):
                continue  # an acquire of unknown outcome may have granted meanwhile (the checker skips it too)
            if any(p.get("f") == "renew" and p.get("lease") and (p["lease"][0], p["lease"][2]) == tenure
                   for p in self._pending):
                continue
            self._add_suspect(inv, f"acquire of run {tenure[0]} refused for epoch {tenure[1]}, whose grant and "
                                   f"renewals had all completed {(ts - last) / 1e6:.0f} ms before (ttl "
                                   f"{self._ttl_ns / 1e6:.0f} ms)")
        self._held_refusals = keep

    def _add_suspect(self, inv: dict[str, Any], reason: str) -> None:
        self.suspects.append({"process": inv.get("p"), "index": inv.get("i"), "f": inv.get("f"),
                              "run": inv.get("run"), "intent": inv.get("intent"), "lease": inv.get("lease"),
                              "ts": inv.get("ts"), "reason": reason})

    # -- counts -------------------------------------------------------------------------------

    def takeovers(self) -> int:
        """Epochs granted while the previous epoch was granted and never released (a load worker's regrant of its own
        run is none: nobody took it over)."""
        return sum(
            1 for run, eps in self.granted.items() if not is_load_run(run) for e in eps
            if (e - 1) in eps and (e - 1) not in self.released[run]
        )

    def counts(self) -> dict[str, int]:
        out = dict(self.c)
        out["takeovers"] = self.takeovers()
        out.update(derived(out, self.granted))
        return out


#: The intents of a lease the store must refuse on its own run (a dead, superseded, released or forged one).
_FORGED = ("stale", "superseded", "released", "released_superseded", "impostor", "future")
#: clause -> the kinds of operation that exercise it in this workload's storms: (surface, intent, outcome,
#: error class, lease of another run) with None for any value. A clause is exercised by the storm when some
#: recorded operation matches (`exercised`); the certificate shows the counts.
_EXERCISES: dict[str, tuple[tuple[Any, ...], ...]] = {
    "lease-exclusive": (("acquire", None, "ok", None, None), ("acquire", None, "fail", "LeaseHeldError", None)),
    "stale-lease-ops": tuple((f, i, None, None, False) for f in ("renew", "release") for i in _FORGED),
    "stale-rejected": tuple((f, i, None, None, False) for f in ("append", "put_meta", "delete", "blob_put",
                                                                 "blob_delete") for i in _FORGED),
    "run-match": ((None, "cross", None, None, True), (None, "stale", None, None, True)),
    "epoch-monotonic": (("acquire", None, "ok", None, None),),
    "live-accepted": tuple((f, "live", "ok", None, False) for f in ("append", "put_meta", "blob_put", "blob_delete",
                                                                     "renew", "release")),
    "ttl-honoured": (("acquire", None, "ok", None, None),),
    "unleased-passthrough": ((None, "unleased", "ok", None, False),),
    "typed-refusal": ((None, None, "fail", None, None),),
    "concurrent-boot": (("open", None, None, None, None),),
    "journal-a1": (("append", None, "ok", None, False),),
    "journal-a2": (("load", None, "ok", None, None),),
    "journal-a3": (("load", "live", "ok", None, None),),
    "journal-a4": (("append", None, "ok", None, False), ("put_meta", None, "ok", None, False),
                   ("blob_put", None, "ok", None, False)),
    "journal-a5": (("append", "order", "fail", "JournalOrderError", False),
                   ("append", "live", "fail", "JournalOrderError", False)),  # order probes recorded before `order`
    "meta-last-write": (("put_meta", None, "ok", None, False),),
    "blob-semantics": (("blob_put", None, "ok", None, False), ("blob_delete", None, "ok", None, False)),
    "delete-semantics": (("delete", "side", "ok", None, False),),
    "call-returns": ((None, None, None, None, None),),
    "no-crash": ((None, None, None, None, None),),
}


def exercised(hist: dict[tuple[Any, ...], int], strikes_held: int = 0) -> dict[str, int]:
    """clause -> how many recorded operations exercised it (`atomic-fence`: the strikes held inside a call).

    The storm judges expiry only by real time (`store-clock`) and leaves `expired-unsuperseded` to the store's
    choice: those are not exercised here (`soak.workloads.runs.coverage.UNREACHABLE` says why)."""
    out: dict[str, int] = {}
    for clause, patterns in _EXERCISES.items():
        n = 0
        for key, count in hist.items():
            if any(all(p is None or p == k for p, k in zip(pattern, key)) for pattern in patterns):
                n += count
        out[clause] = n
    out["atomic-fence"] = strikes_held
    return out


def takeover_rates(takeovers: int, running_s: float, runs: int, lease_ttl_ms: int) -> dict[str, float]:
    """`takeovers_per_s`, and `takeovers_per_s_over_R_T`: that over R/T, the most takeovers per second that expiry
    allows with `runs` main runs and a ttl T (1.0: every run taken over the instant each tenure expires)."""
    per_s = takeovers / running_s if running_s > 0 else 0.0
    limit = runs / (lease_ttl_ms / 1000.0)
    return {"takeovers_per_s": round(per_s, 3), "takeovers_per_s_over_R_T": round(per_s / limit, 3)}
