"""What a certification asks of a store: the profiles it may claim, the suites it runs and how hard, and
the words a clause's result is given in.

A profile (`PROFILE_CLAUSES`) lists the clauses it requires exercised, the clauses it judges where a
suite exercised them, and the contract's choices it shows; every other clause is not claimed.
docs/certify.md explains what each profile requires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from soak.certify._files import CertifyError
from soak.clauses import CLAIM_CLAUSES, CLAUSES, CONTRACT_CHOICES, LIVENESS_CLAUSES

__all__ = ["CHOICES", "CLAIMS", "CLAIMS_CLAUSES", "CLAIMS_FULL", "CLAIMS_QUICK", "CLAIM_PROFILE_CLAUSES", "FULL", "PROFILES",
           "PROFILE_CLAUSES", "Plan", "Profile", "QUICK", "RUNS", "SUITES", "WORKLOADS", "ClaimsPlan",
           "WorkloadPlan", "clause_requirements", "profile_named", "workload_named"]

# Clause results (a certificate's) and the extra results a source may have.
PASS, FAIL, NOT_EXERCISED, NA, CHOICE = "pass", "fail", "not-exercised", "not-applicable", "choice"
ERROR, INCONCLUSIVE, INCOMPLETE = "error", "inconclusive", "incomplete"
# What a profile asks of a clause.
REQUIRED, OPTIONAL, CHOICE_REQ, NOT_CLAIMED = "required", "optional", "choice", "not-claimed"

#: The suites a certification runs, in the order the clause x suite table shows them.
SUITES: tuple[str, ...] = ("conformance", "model", "boot-storm", "storm")

#: The choices the contract leaves to the store: choice name -> the clause it belongs to, and its values.
CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "expired-unsuperseded": ("expired-unsuperseded",
                             CONTRACT_CHOICES.get("expired-unsuperseded", ("accepts", "refuses", "mixed"))),
    "delete-ends-tenure": ("delete-semantics", CONTRACT_CHOICES.get("delete-ends-tenure", ("ends", "keeps"))),
}


# -- profiles ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Profile:
    """What a store claims: the clauses it requires exercised and passed, the clauses judged where a
    suite exercised them (a violation still fails; not exercised is reported, not blocking), and
    the contract's choices it shows. Every other clause is not claimed (`not-applicable`)."""

    name: str
    summary: str
    required: tuple[str, ...]
    #: clause -> why it is not required exercised
    optional: Mapping[str, str] = field(default_factory=dict)
    choices: tuple[str, ...] = ()

    def requirement(self, clause: str) -> str:
        if clause in self.required:
            return REQUIRED
        if clause in self.optional:
            return OPTIONAL
        if clause in self.choices:
            return CHOICE_REQ
        return NOT_CLAIMED

    def claimed(self, clauses: Mapping[str, str] = CLAUSES) -> list[str]:
        return [c for c in clauses if self.requirement(c) != NOT_CLAIMED]


#: profile name -> Profile. The lists are written out so a reader sees exactly what each requires.
PROFILE_CLAUSES: dict[str, Profile] = {
    "fenced": Profile(
        "fenced",
        "a store declaring fenced_writes: every clause of CONTRACT section 1",
        required=(
            "lease-exclusive", "stale-lease-ops", "stale-rejected", "run-match", "atomic-fence",
            "epoch-monotonic", "live-accepted", "ttl-honoured", "unleased-passthrough", "typed-refusal",
            "concurrent-boot", "call-returns", "no-crash",
            "journal-a1", "journal-a2", "journal-a3", "journal-a4", "journal-a5",
            "meta-last-write", "blob-semantics", "delete-semantics",
        ),
        optional={
            "store-clock": "exercised only where the store declares injectable_clock = True (a suite then drives "
                           "its clock apart from wall time); without it nothing tells whose clock judged expiry, "
                           "until the clock-skew nemesis lands",
        },
        choices=("expired-unsuperseded",),
    ),
    "single-writer": Profile(
        "single-writer",
        "a store without fencing: data semantics, unleased writes, a safe bootstrap and liveness",
        required=(
            "journal-a1", "journal-a2", "journal-a3", "journal-a4", "journal-a5",
            "meta-last-write", "blob-semantics", "delete-semantics",
            "unleased-passthrough", "concurrent-boot", "call-returns", "no-crash",
        ),
    ),
}

#: The profiles a store may claim (what each requires: `PROFILE_CLAUSES`, docs/certify.md).
PROFILES: tuple[str, ...] = tuple(PROFILE_CLAUSES)


#: The claims workload's clauses in the order a certificate lists them: CONTRACT section 2, the bootstrap
#: migration and the liveness clauses.
CLAIMS_CLAUSES: dict[str, str] = {
    **CLAIM_CLAUSES,
    "concurrent-boot": CLAUSES["concurrent-boot"],
    **{c: CLAUSES[c] for c in LIVENESS_CLAUSES},
}

#: The claims workload's one profile: every clause required. A clause a suite cannot reach for some store (the
#: storm's for a single-process store) stays required, so that certificate says not-exercised, never pass.
CLAIM_PROFILE_CLAUSES: dict[str, Profile] = {
    "claims": Profile(
        "claims",
        "a claim store: every clause of CONTRACT section 2, a safe bootstrap and liveness",
        required=tuple(CLAIMS_CLAUSES),
    ),
}


def clause_requirements(profile: str, workload: str = "runs") -> dict[str, str]:
    """clause id -> `required`, `optional` (judged where exercised, not required), `choice` (shown as
    the store's choice) or `not-claimed` under `profile` of `workload`."""
    plan = workload_named(workload)
    return {c: plan.profile(profile).requirement(c) for c in plan.clauses}


def profile_named(name: str, workload: str = "runs") -> Profile:
    """The profile called `name` of `workload`; a usage error naming its profiles for any other name."""
    return workload_named(workload).profile(name)


# -- how hard each suite pushes ---------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """How hard each suite pushes; `quick` is for tests and CI, the full plan for a certificate to show."""

    scenario: str
    model_examples: int
    conformance_boot: tuple[int, int]
    boot: tuple[int, int]


FULL = Plan("certify", model_examples=200, conformance_boot=(8, 2), boot=(16, 20))
QUICK = Plan("smoke", model_examples=25, conformance_boot=(4, 1), boot=(4, 2))


@dataclass(frozen=True)
class ClaimsPlan:
    """How hard each claims suite pushes: conformance rounds, model programs and the storm's quorum."""

    scenario: str
    model_examples: int
    conformance_rounds: int
    conformance_processes: int
    conformance_boot: int
    #: `load_scenario` overrides on top of the preset (a smaller quorum for `quick`)
    storm_overrides: Mapping[str, int] = field(default_factory=dict)


CLAIMS_FULL = ClaimsPlan("claims", model_examples=200, conformance_rounds=300, conformance_processes=8,
                         conformance_boot=16)
CLAIMS_QUICK = ClaimsPlan("claims", model_examples=25, conformance_rounds=60, conformance_processes=4,
                          conformance_boot=8,
                          storm_overrides={"quorum.claims_won": 20, "quorum.conflicts": 20, "quorum.progress": 50,
                                           "quorum.recoveries": 3, "quorum.aborts": 3, "quorum.probes": 5,
                                           "quorum.pauses": 3, "quorum.kills": 2})


# -- workloads --------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkloadPlan:
    """What certifying a store of one workload means: its clauses (in table order), its suites (the
    table's columns), its profiles and the plans for a full and a quick run."""

    name: str
    clauses: Mapping[str, str]
    suites: tuple[str, ...]
    profiles: Mapping[str, Profile]
    default_profile: str
    full: Plan | ClaimsPlan
    quick: Plan | ClaimsPlan

    def profile(self, name: str | None) -> Profile:
        """The profile called `name` (None: the default); a usage error naming the profiles for any other."""
        try:
            return self.profiles[name or self.default_profile]
        except KeyError:
            raise CertifyError(f"unknown profile {name!r}; use one of {', '.join(self.profiles)}") from None


RUNS = WorkloadPlan("runs", CLAUSES, SUITES, PROFILE_CLAUSES, "fenced", FULL, QUICK)
CLAIMS = WorkloadPlan("claims", CLAIMS_CLAUSES, ("conformance", "model", "storm"), CLAIM_PROFILE_CLAUSES, "claims",
                      CLAIMS_FULL, CLAIMS_QUICK)
#: workload name -> what certifying one of its stores means
WORKLOADS: dict[str, WorkloadPlan] = {"runs": RUNS, "claims": CLAIMS}


def workload_named(name: str) -> WorkloadPlan:
    """The workload called `name`; a usage error naming the workloads for any other name."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise CertifyError(f"unknown workload {name!r}; use one of {', '.join(WORKLOADS)}") from None
