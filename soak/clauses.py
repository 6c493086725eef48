"""The contract clause ids every check, violation and certificate cites (CONTRACT section 1)."""

from __future__ import annotations

__all__ = ["CLAUSES", "clause_title"]

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
}


def clause_title(clause: str) -> str:
    return CLAUSES.get(clause, clause)
