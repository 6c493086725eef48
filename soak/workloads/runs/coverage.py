"""Probe coverage derived from CONTRACT section 1: every fenced surface against every relation between the lease
presented and the store's state that the contract distinguishes, the clause each cell tests, its expected answer,
and how many recorded operations exercised it.

A cell is named `<surface>.<relation>`; its quorum item is `cover_<surface>_<relation>`. An operation falls in a
cell by what the worker recorded with it: its surface, its intent (the relation the worker set up, see
`soak.workloads.runs.worker`), whether its lease names another run than the one touched, and (for acquires and
the order guard) its outcome. Only decided operations count (accepted or refused; an unknown outcome exercised
nothing for certain). The checker never reads the intent: coverage counts what was asked, the checker judges
what the store answered. docs/coverage.md lists the cells with their clauses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CELLS", "COVER_KEYS", "Cell", "UNREACHABLE", "cell_of", "derived", "table"]

#: The mutations a lease fences, then the lease operations.
MUTATIONS: tuple[str, ...] = ("append", "put_meta", "delete", "blob_put", "blob_delete")
LEASE_OPS: tuple[str, ...] = ("renew", "release")


@dataclass(frozen=True)
class Cell:
    """One surface under one relation of the lease presented to the store's state."""

    surface: str
    relation: str
    clause: str
    expected: str
    #: the intents whose decided operations land here (cross: the lease names another run)
    intents: tuple[str, ...] = ()
    cross: bool = False
    #: only operations with this outcome ("ok", or the error class of a refusal) count; None: any decided one
    only: str | None = None

    @property
    def name(self) -> str:
        return f"{self.surface}.{self.relation}"

    @property
    def key(self) -> str:
        return f"cover_{self.surface}_{self.relation}"


def _fence_clause(surface: str) -> str:
    return "stale-lease-ops" if surface in LEASE_OPS else "stale-rejected"


#: relation -> (intents, cross, expected, what the relation is) for the mutations and the lease operations
_RELATIONS: dict[str, tuple[tuple[str, ...], bool, str, str]] = {
    "live": (("live", "side", "reacquire"), False, "accepted", "the current, unreleased tenure within its ttl"),
    "dead": (("stale",), False, "refused (either while expired and unsuperseded)",
             "the worker's lease after a stall, a struck write or a refusal: expired or superseded"),
    "superseded": (("superseded",), False, "refused", "an earlier tenure of the worker, superseded by its live one"),
    "released": (("released",), False, "refused", "a tenure its holder released a moment ago"),
    "released_superseded": (("released_superseded",), False, "refused",
                            "a released tenure, superseded since by its holder's own later grant"),
    "impostor": (("impostor",), False, "refused", "the live tenure's run and epoch, another owner"),
    "future": (("future",), False, "refused", "the live holder's owner with an epoch never issued"),
    "cross": (("cross",), True, "refused", "a live lease of another run (for a blob: of another run than the ref's)"),
    "cross_dead": (("stale",), True, "refused", "a dead lease of another run"),
    "unleased": (("unleased",), False, "accepted", "no lease, on a run nobody leases"),
    "renewed": (("renewed",), False, "accepted",
                "the live tenure renewed twice, past the first renew's ttl (within the latest's)"),
}
#: what each relation means, for the table
RELATION_MEANING: dict[str, str] = {rel: v[3] for rel, v in _RELATIONS.items()}
#: relation -> the clause it tests where not the fence's own (stale-rejected / stale-lease-ops)
_RELATION_CLAUSE = {"live": "live-accepted", "cross": "run-match", "cross_dead": "run-match",
                    "unleased": "unleased-passthrough", "renewed": "live-accepted"}


def _cells() -> tuple[Cell, ...]:
    out: list[Cell] = []
    for surface in (*MUTATIONS, *LEASE_OPS):
        for rel, (intents, cross, expected, _) in _RELATIONS.items():
            if surface in LEASE_OPS and rel in ("cross", "cross_dead", "unleased"):
                continue  # a lease operation names no run but its lease's, and needs a lease
            if rel == "renewed" and surface in ("delete", "release"):
                continue  # main runs are never deleted; a release ends the tenure the probe goes on with
            if surface == "delete" and rel == "live":
                intents = ("side",)  # main runs are never deleted; side runs are, in every deletion cycle
            out.append(Cell(surface, rel, _RELATION_CLAUSE.get(rel, _fence_clause(surface)), expected, intents, cross))
    out.append(Cell("append", "order", "journal-a5", "refused (JournalOrderError)", ("order",), False,
                    "JournalOrderError"))
    out.append(Cell("delete", "live_empty", "live-accepted",
                    "accepted; the epoch mark survives (the next grant is above it: acquire.after_delete)",
                    ("side_empty",)))
    out.append(Cell("blob_delete", "unleased_held", "unleased-passthrough", "accepted (a missing ref: a no-op)",
                    ("unleased_held",)))
    out += [
        Cell("acquire", "free", "epoch-monotonic", "granted, epoch above every one issued", ("live", "side"), False,
             "ok"),
        Cell("acquire", "held", "lease-exclusive", "refused (LeaseHeldError)", ("live", "side"), False,
             "LeaseHeldError"),
        Cell("acquire", "held_self", "lease-exclusive", "refused, whoever holds it (its own holder too)",
             ("reentrant",)),
        Cell("acquire", "after_release", "ttl-honoured", "granted at once, a higher epoch", ("reacquire",), False,
             "ok"),
        Cell("acquire", "after_delete", "epoch-monotonic", "granted above the high-water mark", ("after_delete",),
             False, "ok"),
        Cell("acquire", "after_expiry", "ttl-honoured", "granted within 1.2 x ttl of the expiry (a takeover)"),
        Cell("acquire", "fresh", "epoch-monotonic", "granted epoch 1"),
    ]
    return tuple(out)


#: Every cell the storm reaches, in table order.
CELLS: tuple[Cell, ...] = _cells()
#: Their quorum items.
COVER_KEYS: tuple[str, ...] = tuple(c.key for c in CELLS)
#: Cells of the contract the storm cannot reach: (surface, relation, clause, expected, why).
UNREACHABLE: tuple[tuple[str, str, str, str, str], ...] = (
    ("any", "expired", "expired-unsuperseded", "either; a refusal typed and mutating nothing",
     "a worker cannot know that no successor was issued when it uses its expired lease: the storm's `dead` cells "
     "hold expired and superseded leases together and the checker judges each by the grants it recorded; "
     "conformance drives it with the store's clock (expired-unsuperseded)"),
    ("mutations", "unleased_held", "unleased-passthrough", "accepted",
     "unleased writes are ordered by no tenure, so a run mixing them with fenced writes has no decidable final "
     "state; conformance checks it (unleased-while-held); the storm presents only the one that changes nothing, an "
     "unleased delete of a blob never written (blob_delete.unleased_held)"),
    ("any", "store_clock", "store-clock", "expiry by the store's clock",
     "the storm runs on one machine's clock; conformance checks it with an injectable clock"),
)

_BY_KEY: dict[tuple[str, str, bool], list[Cell]] = {}
for _c in CELLS:
    for _i in _c.intents:
        _BY_KEY.setdefault((_c.surface, _i, _c.cross), []).append(_c)


def cell_of(key: tuple[Any, ...]) -> Cell | None:
    """The cell of one kind of recorded operation, `(surface, intent, outcome, error class, lease of another run)`
    (None: it falls in no cell, e.g. a read, or its outcome is unknown)."""
    f, intent, t, err, cross = key
    if t not in ("ok", "fail"):
        return None
    for c in _BY_KEY.get((f, intent, bool(cross)), ()):
        if c.only is None or c.only == (t if t == "ok" else err):
            return c
    return None


def derived(counts: dict[str, int], granted: dict[str, set[int]]) -> dict[str, int]:
    """The cells counted from the grants rather than from operation kinds: takeovers after an expiry, and the
    runs whose first epoch was granted."""
    return {"cover_acquire_after_expiry": counts.get("takeovers", 0),
            "cover_acquire_fresh": sum(1 for eps in granted.values() if 1 in eps)}


def table(counts: dict[str, int]) -> list[dict[str, Any]]:
    """The coverage table: one row per cell (cell, clause, expected, exercised), then the unreachable ones (with
    `why`, and exercised None)."""
    rows: list[dict[str, Any]] = [
        {"cell": c.name, "clause": c.clause, "expected": c.expected, "exercised": int(counts.get(c.key, 0))}
        for c in CELLS
    ]
    rows += [{"cell": f"{s}.{r}", "clause": clause, "expected": exp, "exercised": None, "why": why}
             for s, r, clause, exp, why in UNREACHABLE]
    return rows

