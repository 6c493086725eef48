"""`soak model`: the command line over `check_model` (`--workload runs`, the default) and
`soak.claims.model.run_claims_model` (`--workload claims`, a claim store spec)."""

from __future__ import annotations

import argparse
import sys
import time

from soak.model._profiles import PROFILES, model_settings
from soak.model._runner import ModelOutcome, check_model
from soak.stores import resolve

__all__ = ["configure_parser", "run_cli"]


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", choices=("runs", "claims"), default="runs",
                   help="runs: the fenced run store model (default); claims: the task claim store model")
    p.add_argument("--store", default="sqlite:", metavar="SPEC",
                   help="store spec, a claim store spec under --workload claims (default: sqlite:)")
    p.add_argument("--seed", type=int, default=None, metavar="N",
                   help="Hypothesis seed (--workload claims; default: the profile's)")
    p.add_argument("--examples", type=int, default=None, metavar="N", help="programs to run (default: the profile's)")
    p.add_argument("--profile", choices=sorted(PROFILES), default=None,
                   help="Hypothesis profile (default: ci under CI, else dev)")
    p.add_argument("--clock", choices=("auto", "fake", "real"), default="auto",
                   help="auto: a fake clock where the store declares injectable_clock = True, else real time; "
                        "fake: insist on it (a usage error for a store that does not declare it); real: real time")


def _facts(outcome: ModelOutcome) -> list[str]:
    """What every outcome reports: the clock, busy retries, the slowest call and the store's choices."""
    lines = [f"clock: {outcome.clock_reason} (ttl {outcome.lease_ttl_ms} ms)",
             f"busy: {outcome.busy_retries} StoreBusyError answer(s) retried",
             f"slowest store call: {outcome.slowest_call_s * 1000:.1f} ms ({outcome.slowest_call or 'none'}); "
             f"call-returns bound {outcome.call_bound_s:g} s"]
    for name in ("expired-unsuperseded", "delete-ends-tenure"):
        choice = outcome.choices.get(name, "not observed")
        detail = outcome.choice_detail.get(name)
        lines.append(f"choice {name}: {choice}" + (f" ({detail})" if detail else ""))
    return lines


def run_cli(args: argparse.Namespace) -> int:
    """`soak model`: 0 when the machine passes, 1 with the minimal failing program, 3 when inconclusive."""
    if getattr(args, "workload", "runs") == "claims":
        return _run_claims(args)
    target = resolve(args.store)
    chosen = model_settings(args.profile, max_examples=args.examples)
    started = time.monotonic()
    outcome = check_model(target, settings=chosen, clock=args.clock)
    took = time.monotonic() - started
    return _print_outcome(outcome, target.spec, took, "".join(f"\n  {line}" for line in _facts(outcome)),
                          f"{chosen.max_examples} programs of up to {chosen.stateful_step_count} steps")


def _print_outcome(outcome: object, spec: str, took: float, facts: str, what: str) -> int:
    """Print a model run's outcome (pass, inconclusive, or the failure with its minimal program); its exit code."""
    if outcome.passed:
        print(f"soak model: pass: {what} against {spec} in {took:.1f} s{facts}")
        return 0
    if outcome.inconclusive:
        print(f"soak model: INCONCLUSIVE against {spec} ({took:.1f} s): {outcome.reason}{facts}")
        sys.stdout.flush()
        return 3
    print(f"soak model: FAIL against {spec} ({took:.1f} s): {outcome.error}{facts}")
    if outcome.program:
        print("minimal failing program:")
        for line in outcome.program:
            print("    " + line)
    sys.stdout.flush()
    return 1


def _run_claims(args: argparse.Namespace) -> int:
    from soak.claims import resolve_claims
    from soak.claims.model import run_claims_model

    target = resolve_claims(args.store)
    chosen = model_settings(args.profile, max_examples=args.examples)
    started = time.monotonic()
    outcome = run_claims_model(target, settings=chosen, clock=args.clock, seed=args.seed)
    took = time.monotonic() - started
    facts = (f"\n  clock: {outcome.clock_reason} (ttl {outcome.lease_ttl_ms} ms)"
             f"\n  busy: {outcome.busy_retries} StoreBusyError answer(s) retried")
    return _print_outcome(outcome, target.spec, took, facts,
                          f"{chosen.max_examples} claim programs of up to {chosen.stateful_step_count} steps")
