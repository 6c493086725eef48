"""Contract checks a store vendor calls from its own tests (`soak conformance --store SPEC` on the command line).

`run_conformance(store)` runs one or more checks per clause id of `soak.clauses` against fresh store objects over
a fresh location each (a temp directory the suite owns and removes), and returns a `ConformanceReport`. Each
check ends `pass`, `fail`, `error` (an unexpected exception), `inconclusive` (the suite could not decide: a call
busy on every attempt, a takeover that could not be positioned) or `not-exercised` (a capability the check
needs is absent). `StoreBusyError` is retried everywhere (`soak.retry`, bounded and counted); where the contract
leaves the store a choice, both readings pass and the report names the one the store made.

The checks run in a child process under a watchdog that bounds every store call (`call-returns`) and survives a
store that kills its process (`no-crash`): see `soak.conformance._runner`. A store object is only ever used by
the thread that opened it. Time is driven by an injected clock only where the store object declares
`injectable_clock = True`; otherwise the checks run in real time and every result line says so.

The child is started with spawn: a script calling `run_conformance` must do so under
`if __name__ == "__main__":`, as with any spawn-based multiprocessing. A target that cannot be sent to a child
(a factory dill cannot pickle) runs in a thread of the calling process instead; the report says so, and
`no-crash` is then not exercised. `docs/conformance.md` describes the whole suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

from soak.clauses import CLAUSES, default_call_bound_s
from soak.conformance._report import (
    CHOICE_KEYS,
    ERROR,
    FAIL,
    INCONCLUSIVE,
    NOT_EXERCISED,
    PASS,
    STATUSES,
    CheckResult,
    ConformanceReport,
    render,
)
from soak.errors import HarnessError, StoreSpecError
from soak.spi import FencedRunStore
from soak.stores import StoreTarget, redact, resolve

__all__ = [
    "CHOICE_KEYS",
    "CheckResult",
    "ConformanceReport",
    "ERROR",
    "FAIL",
    "INCONCLUSIVE",
    "NOT_EXERCISED",
    "PASS",
    "STATUSES",
    "configure_parser",
    "list_checks",
    "run_cli",
    "run_conformance",
]


def list_checks() -> list[tuple[str, str]]:
    """(clause id, check name) of every check, in run order; the liveness clauses last (they are judged over
    every store call the other checks make)."""
    from soak.conformance._checks import CHECKS, LIVENESS

    return [(clause, name) for clause, name, _ in CHECKS] + list(LIVENESS)


def _as_target(store: str | StoreTarget | Callable[..., FencedRunStore]) -> StoreTarget:
    if isinstance(store, StoreTarget):
        return store
    return resolve(store)


def run_conformance(
    store: str | StoreTarget | Callable[..., FencedRunStore],
    *,
    lease_ttl_ms: int = 200,
    clauses: list[str] | None = None,
    location: str | None = None,
    boot_processes: int = 8,
    boot_rounds: int = 2,
    call_bound_s: float | None = None,
) -> ConformanceReport:
    """Run the conformance checks against `store` and return per-check results.

    `store` is a spec string, a `StoreTarget` or a factory `(location, *, lease_ttl_ms, **options)`.
    `clauses` limits the run to those clause ids (`call-returns` and `no-crash` are judged over the checks that
    run). `location` is a parent directory for the fresh per-check locations (default: a temp directory); the
    suite removes what it creates. `call_bound_s` bounds every store call (default: 20 x ttl, at least 2 s).
    """
    from soak.conformance._context import Settings
    from soak.conformance._runner import run_suite, selected_checks

    target = _as_target(store)
    if "path" in target.options:
        raise StoreSpecError(
            f"conformance needs a fresh location per check, but {redact(target.spec)} names one fixed file; "
            "use the plain scheme (e.g. sqlite:)"
        )
    if lease_ttl_ms < 20:
        raise HarnessError(f"--ttl-ms {lease_ttl_ms} is too short to time reliably; use 20 or more")
    bound = default_call_bound_s(int(lease_ttl_ms)) if call_bound_s is None else float(call_bound_s)
    if not bound > 0:
        raise HarnessError(f"--call-bound {call_bound_s} bounds no call; use a number of seconds above 0")
    wanted = set(clauses or CLAUSES)
    unknown = sorted(wanted - set(CLAUSES))
    if unknown:
        raise StoreSpecError(f"unknown clause id {unknown[0]!r}; use one of {', '.join(CLAUSES)}")
    if location is not None:
        os.makedirs(location, exist_ok=True)
    root = tempfile.mkdtemp(prefix="soak-conformance-", dir=location)
    settings = Settings(int(lease_ttl_ms), root, None, boot_processes, boot_rounds, bound, [])
    name = redact(store.strip()) if isinstance(store, str) else redact(target.spec)  # with its ?options
    report = ConformanceReport(name, int(lease_ttl_ms), "", call_bound_s=bound)
    t0 = time.monotonic()
    try:
        run_suite(target, settings, selected_checks(wanted), wanted, report)
    finally:
        target.cleanup(root)
        shutil.rmtree(root, ignore_errors=True)
    report.elapsed_s = time.monotonic() - t0
    return report


# -- command line ---------------------------------------------------------------------------

EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, metavar="SPEC", help="store spec: memory:, sqlite:, package.module:callable, ...")
    p.add_argument("--ttl-ms", type=int, default=200, help="lease ttl the stores are opened with (default 200)")
    p.add_argument("--clause", action="append", metavar="ID", help=f"run only this clause (repeatable): {', '.join(CLAUSES)}")
    p.add_argument("--call-bound", type=float, default=None, metavar="S",
                   help="seconds a store call may take before it fails call-returns (default: 20 x ttl, at least 2)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--workload", choices=("runs", "claims"), default="runs",
                   help="which contract to check: runs (the fenced run store, default) or claims (the task claim "
                        "store, soak.claims.conformance)")


def run_cli(args: argparse.Namespace) -> int:
    """Exit 0 when every check passed (or was not exercised), 1 on any fail or error, 3 when nothing failed but
    something could not be decided."""
    if getattr(args, "workload", "runs") == "claims":
        from soak.claims.conformance import run_claims_cli

        if args.clause:
            raise HarnessError("--clause selects run store clauses; claims conformance runs every claim check "
                               "(drop --clause, or use --workload runs)")
        return run_claims_cli(args)
    report = run_conformance(args.store, lease_ttl_ms=args.ttl_ms, clauses=args.clause, call_bound_s=args.call_bound)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(render(report))
    sys.stdout.flush()
    return EXIT_CODES[report.verdict]
