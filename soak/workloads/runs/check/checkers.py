"""The runs workload's clause checkers, by name: what `check` and settling run (each one's failure is reported
under its name), and which of them need the whole history.

Where each clause is checked (`grep` a clause id to find its module):

| module | clauses |
|---|---|
| `leases` | lease-exclusive, epoch-monotonic, ttl-honoured |
| `fencing` | run-match, stale-rejected, stale-lease-ops, typed-refusal, live-accepted, unleased-passthrough |
| `state` | journal-a1..a5, meta-last-write, blob-semantics, delete-semantics (the final state's diff) |
| `reads` | what reads made under a live tenure saw (stale-rejected, run-match, journal-a3, ...) |
| `boot` | concurrent-boot |
| `soak.check.liveness` | call-returns, no-crash (every workload's) |
"""

from __future__ import annotations

from soak.check.judge import Checker
from soak.workloads.runs.check.boot import check_boot
from soak.workloads.runs.check.fencing import check_fencing, check_grantees, check_refusals, check_scan
from soak.workloads.runs.check.leases import check_grants, check_probe, check_takeovers
from soak.workloads.runs.check.reads import check_reads
from soak.workloads.runs.check.state import check_state

__all__ = ["CHECKERS", "WHOLE_HISTORY"]

#: The runs checkers, in the order they run (the generic liveness checker runs after them).
CHECKERS: tuple[tuple[str, Checker], ...] = (
    ("run-match", check_scan),
    ("grants", check_grants),
    ("grantees", check_grantees),
    ("fencing", check_fencing),
    ("refusals", check_refusals),
    ("state", check_state),
    ("reads", check_reads),
    ("boot", check_boot),
    ("takeovers", check_takeovers),
    ("probe", check_probe),
)

#: Checkers whose findings are proofs only over a whole history: a worker whose history is missing may have made
#: the write, delete, acquire or renewal that explains them (a "phantom" value, a lost write, a refusal, a read).
#: With a worker's history missing, their findings are set aside and the verdict is inconclusive; the others
#: (two grants of one epoch, an operation accepted after a recorded successor's grant, a lease used on another
#: run, a failed boot, a call that never returned) prove their violation from recorded operations alone.
WHOLE_HISTORY = frozenset({"state", "reads", "refusals", "takeovers", "probe"})
