"""The contract clause ids every check, violation and certificate cites (CONTRACT section 1)."""

from __future__ import annotations

__all__ = ["BOOT_BOUND_S", "CALL_BOUND_FLOOR_S", "CALL_BOUND_TTLS", "CLAIM_CLAUSES", "CLAUSES", "CONTRACT_CHOICES", "LIVENESS_CLAUSES", "clause_title",
           "boot_bound_s", "default_call_bound_s", "expired_choice"]

#: clause id -> one-line statement of the promise.
CLAUSES: dict[str, str] = {
    "lease-exclusive": "at any instant a run has at most one live tenure",
    "stale-lease-ops": "renew or release under a superseded tenure is refused and leaves the successor untouched",
    "stale-rejected": "a mutation under a superseded or released tenure is refused and mutates nothing",
    "run-match": "a lease guards only its own run (for a blob, the run its ref names)",
    "atomic-fence": "the fence check and the mutation commit as one unit across processes",
    "epoch-monotonic": "issued epochs strictly increase per run, also across release and delete",
    "store-clock": "expiry is judged by the store's own clock",
    "live-accepted": "operations under the current live tenure are accepted",
    "ttl-honoured": "a tenure stays live for the ttl and can be taken over soon after it expires",
    "expired-unsuperseded": "an expired tenure nobody superseded may be accepted or refused",
    "unleased-passthrough": "a mutation without a lease is not fenced",
    "typed-refusal": "every refusal is a typed StoreError and mutates nothing",
    "concurrent-boot": "many processes opening one fresh location at once all come up",
    "journal-a1": "an append is atomic",
    "journal-a2": "entries load in append order",
    "journal-a3": "reads see the caller's own writes",
    "journal-a4": "payloads are stored unchanged, byte for byte",
    "journal-a5": "an append whose seq is not above the stored tail raises JournalOrderError",
    "meta-last-write": "one meta row per run, last write wins",
    "blob-semantics": "blobs are stored per ref, listed per run, deleted by ref",
    "delete-semantics": "delete removes the run's journal and meta",
    "call-returns": "every store call returns or raises within a bound",
    "no-crash": "a store never kills, aborts or exits the process that calls it",
}

#: The task claim clauses (CONTRACT section 2); claim stores are held to these, `concurrent-boot` (the bootstrap
#: migration) and the liveness clauses. clause id -> one-line statement.
CLAIM_CLAUSES: dict[str, str] = {
    "claim-epoch-once": "each epoch of a task is granted once, to one owner",
    "claim-epoch-step": "a task's epoch rises by exactly one per owner change, never on renewal, and never resets",
    "claim-atomic": "a claim's precondition check and its write commit as one transaction across processes",
    "conflict-holder": "a refused call raises CheckoutConflictError naming a holder that held the claim then",
    "claim-live-accepted": "claims, heartbeats, progress writes and releases of the current owner are accepted",
    "heartbeat-fenced": "a heartbeat or release from a superseded owner or epoch is refused and changes nothing",
    "progress-fenced": "a progress write is accepted only from the current owner and epoch",
    "claim-lease-protected": "a task stays owned while its owner is within its lease, unless the owner releases it",
    "progress-preserved": "step progress survives release and recovery",
    "recovery-audited": "every recovery writes exactly one task:auto-recover-node-unreachable audit event",
    "rows-reconciled": "task rows agree with their central rows once reconciled",
    "handoff-policy": "no task is recovered or dispatched where the handoff policy forbids it",
}

#: The liveness clauses: judged from how calls end (or never end), not from what they return.
LIVENESS_CLAUSES: tuple[str, ...] = ("call-returns", "no-crash")

#: Clauses whose outcome is a choice the contract leaves to the store: every reading of them is conformant, and
#: suites report which one the store made instead of a pass. clause -> the choices, as suites name them.
CONTRACT_CHOICES: dict[str, tuple[str, ...]] = {
    "expired-unsuperseded": ("accepts", "refuses", "mixed"),
    # not a clause of its own: a fenced delete may end the caller's tenure (delete-semantics holds either way)
    "delete-ends-tenure": ("ends", "keeps"),
}

def expired_choice(outcomes: dict[str, tuple[int, int]]) -> str | None:
    """The store's `expired-unsuperseded` choice from (accepted, refused) counts per surface: `accepts`,
    `refuses` or `mixed`, None when nothing was seen. Read off the mutations and renews: releasing one's own
    expired tenure ends only that tenure, and stores that refuse the rest commonly accept it (the reference stores
    do), so suites report the release beside the choice, not in it."""
    accepted = sum(a for surface, (a, _) in outcomes.items() if surface != "release")
    refused = sum(r for surface, (_, r) in outcomes.items() if surface != "release")
    if not accepted and not refused:
        return None
    return "accepts" if not refused else "refuses" if not accepted else "mixed"


#: `call-returns`: the default bound on one store call is this many ttls, and never less than the floor.
CALL_BOUND_TTLS = 20
CALL_BOUND_FLOOR_S = 2.0


def default_call_bound_s(lease_ttl_ms: int) -> float:
    """The default `call-returns` bound for a store opened with this ttl: 20 x ttl, at least 2 s.

    Long enough for a call that waits out a stopped lock holder (the nemesis holds one for at most about
    four ttls), short enough for a smoke storm to reach."""
    return max(CALL_BOUND_FLOOR_S, CALL_BOUND_TTLS * lease_ttl_ms / 1000.0)


#: `call-returns` of a boot (the store factory, or a wire store's child starting and answering its hello): a boot
#: connects, migrates and, over the wire, starts a runtime, so it has a bound of its own, this many seconds (the
#: bound `StoreTarget.open` and the wire client give a boot), never less than the call bound.
BOOT_BOUND_S = 60.0


def boot_bound_s(call_bound_s: float) -> float:
    """The `call-returns` bound of a boot, beside a store call's bound of `call_bound_s`."""
    return max(BOOT_BOUND_S, call_bound_s)


def clause_title(clause: str) -> str:
    return CLAUSES.get(clause) or CLAIM_CLAUSES.get(clause, clause)
