"""Store certification: every suite soak has, run against one store, summed up per clause.

`certify(spec, profile=..., out_dir=...)` runs the conformance suite, the Hypothesis model,
the boot storm and the `certify` storm preset (`quick=True`: the smoke preset and fewer
examples and rounds), renders the storm's report, and writes `certificate.json` and
`certificate.html` next to the storm's run directory.

Certificates say what was tested. Each clause's result is `pass` (at least one suite exercised it
and none saw it fail), `fail`, `not-exercised` (with the reason), `choice` for a clause the
contract leaves to the store (shown as the store's choice, never as a pass), or `not-applicable`
for a clause the profile does not claim. A profile (`PROFILE_CLAUSES`) lists the clauses it
requires exercised: the certificate is `fail` when a claimed clause failed, else `inconclusive`
when a required clause was not exercised, else `pass`. Each clause records what every suite saw
of it, so the certificate (and `soak certify`) shows which suite exercised which clause. The
certificate says what was observed ("no violations observed"), not that the store is correct.
docs/certify.md explains how to read one.

`certify(spec, workload="claims", ...)` certifies a task claim store (CONTRACT section 2) the same
way over the claim clauses, with the claims conformance suite, the claims model and the `claims`
storm preset; each workload's clauses, suites and profiles are its plan (`_plan.WORKLOADS`).

`verify_certificate(path)` re-hashes every file the certificate lists and the installed soak
suite, so a stored certificate can be checked later (`soak certify --verify`).

The package follows the data: `_plan` (the profiles and how hard each suite pushes), `_suites`
(running each suite), `_sources` (what each suite's output says of each clause), `_judge` (a
clause's result and the certificate's), `_certificate` (`certify`: the run and the certificate's
body), `_files` (its digests and `verify_certificate`), `_render` (its page, table and summary)
and `_cli` (`soak certify`).
"""

from soak.certify._certificate import certify, environment_manifest
from soak.certify._cli import configure_parser, run_cli
from soak.certify._files import (
    CERTIFICATE_FILE,
    CERTIFICATE_HTML,
    STORM_DIR,
    CertifyError,
    VerifyResult,
    file_digests,
    suite_digest,
    verify_certificate,
)
from soak.certify._judge import ClauseResult
from soak.certify._plan import PROFILE_CLAUSES, PROFILES, SUITES, Profile, clause_requirements
from soak.certify._render import render_html, render_table
from soak.certify._sources import STORM_CLAUSES

__all__ = [
    "CERTIFICATE_FILE",
    "CERTIFICATE_HTML",
    "CertifyError",
    "ClauseResult",
    "PROFILES",
    "PROFILE_CLAUSES",
    "Profile",
    "STORM_CLAUSES",
    "STORM_DIR",
    "SUITES",
    "VerifyResult",
    "certify",
    "clause_requirements",
    "configure_parser",
    "environment_manifest",
    "file_digests",
    "render_html",
    "render_table",
    "run_cli",
    "suite_digest",
    "verify_certificate",
]
