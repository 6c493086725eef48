"""Each suite run against the store for a certification, and what it adds to the certificate.

Each returns the suite's `components` entry (what it ran, how it ended, the busy answers it
retried) with its sources and choices (`soak.certify._sources`), and the model and the storm their
seeds. `probe_clock` is certify's own look at the store's injectable-clock declaration.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soak.certify._files import STORM_DIR
from soak.certify._plan import FAIL, INCONCLUSIVE, PASS, ClaimsPlan, Plan
from soak.certify._sources import (
    FENCING_SUBCHECKS,
    boot_sources,
    conformance_sources,
    model_sources,
    one_line,
    storm_sources,
)
from soak.errors import StoreBootError
from soak.retry import BusyCount, BusyExhausted, retry_busy
from soak.spi import StoreBusyError
from soak.stores import StoreTarget

__all__ = ["boot", "busy_line", "claims_conformance", "claims_model", "conformance", "model", "probe_clock", "storm"]


def busy_line(busy: Any) -> str:
    """A suite's busy count as one line (`soak.retry.BusyCount`, a number, or not reported)."""
    if busy is None:
        return "not reported"
    if isinstance(busy, BusyCount):
        return busy.summary()
    if isinstance(busy, int):
        return f"{busy} StoreBusyError answer(s) retried"
    return one_line(busy, 200)


def probe_clock(target: StoreTarget, busy: BusyCount) -> tuple[bool | None, str]:
    """Does the store object declare `injectable_clock = True`? One store opened (busy boots retried)."""
    location = tempfile.mkdtemp(prefix="soak-certify-probe-")

    def attempt() -> bool:
        try:
            return target.probe_injectable_clock(location, 250)
        except StoreBootError as exc:
            if isinstance(exc.__cause__, StoreBusyError):
                raise exc.__cause__ from exc
            raise

    try:
        declared = retry_busy(attempt, "opening the store to read its injectable_clock declaration", count=busy)
    except BusyExhausted as exc:
        return None, f"unknown: {exc}"
    finally:
        target.cleanup(location)
        shutil.rmtree(location, ignore_errors=True)
    if declared:
        return True, "declared (injectable_clock = True): conformance and the model drive the store's clock"
    return False, ("not declared: conformance and the model run in real time, and store-clock is exercised only "
                   "where a suite can drive the store's clock apart from wall time")


def conformance(target: StoreTarget, plan: Plan, profile: str, claimed: list[str], declared: bool | None,
                say: Callable[[str], None]) -> tuple[dict[str, Any], Any, Any]:
    """The conformance suite over the profile's clauses: one or more checks per clause."""
    from soak.conformance import run_conformance

    say("conformance suite ...")
    t0 = time.monotonic()
    conf = run_conformance(target, clauses=claimed, boot_processes=plan.conformance_boot[0],
                           boot_rounds=plan.conformance_boot[1])
    sources, choices = conformance_sources(conf, profile=profile, clauses=claimed, injectable_clock=declared)
    judged = [r for r in conf.results if profile == "fenced" or r.check not in FENCING_SUBCHECKS]
    failed = sum(r.status in (FAIL, "error") for r in judged)
    undecided = sum(r.status not in (PASS, FAIL, "error") for r in judged)
    say(f"conformance: {len(judged)} checks, {failed} failed, {undecided} not decided "
        f"({time.monotonic() - t0:.1f} s)")
    component = {
        "result": FAIL if failed else INCONCLUSIVE if undecided or not judged else PASS,
        "checks": len(judged), "failed": failed, "undecided": undecided,
        "not_judged": sorted({r.check for r in conf.results} - {r.check for r in judged}),
        "timing": conf.timing, "lease_ttl_ms": conf.lease_ttl_ms, "elapsed_s": round(time.monotonic() - t0, 2),
        "boot": {"processes": plan.conformance_boot[0], "rounds": plan.conformance_boot[1]},
        "busy": busy_line(getattr(conf, "busy", None)),
        "choices": dict(getattr(conf, "choices", None) or {}),
    }
    return component, sources, choices


def model(target: StoreTarget, plan: Plan, claimed: list[str],
          say: Callable[[str], None]) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
    """The Hypothesis model, derandomized so the same store and soak replay the same programs."""
    from soak.model import MODEL_NEVER_EXERCISES, check_model

    def extra(outcome: Any) -> dict[str, Any]:
        return {"choices": dict(outcome.choices), "choice_detail": dict(outcome.choice_detail),
                "slowest_call_s": outcome.slowest_call_s, "call_bound_s": outcome.call_bound_s}

    return _model_suite("model", lambda settings: check_model(target, settings=settings), MODEL_NEVER_EXERCISES,
                        "result", extra, plan, claimed, say)


def _model_suite(name: str, run: Callable[[Any], Any], never: Any, verdict: str, extra: Callable[[Any], dict],
                 plan: Any, claimed: list[str], say: Callable[[str], None]
                 ) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
    """Run a workload's model (`run(settings)` -> its outcome, whose verdict is the attribute `verdict`) with the
    plan's examples, derandomized; its component, sources, choices and seed."""
    from hypothesis import __version__ as hypothesis_version

    from soak.model import model_settings

    say(f"{name}: {plan.model_examples} programs ...")
    t0 = time.monotonic()
    chosen = model_settings("ci", max_examples=plan.model_examples)
    outcome = run(chosen)
    sources, choices = model_sources(outcome, clauses=claimed, never=never)
    result = getattr(outcome, verdict)
    if result == FAIL and outcome.clause not in claimed:
        result = "incomplete"  # a violation of a clause the profile does not claim
    say(f"{name}: {result} ({time.monotonic() - t0:.1f} s)")
    component = {
        "result": result, "clause": outcome.clause,
        "error": one_line(outcome.error, 1200) if outcome.error else "",
        "reason": outcome.reason, "program": list(outcome.program),
        "max_examples": chosen.max_examples, "stateful_step_count": chosen.stateful_step_count,
        "clock": outcome.clock, "clock_reason": outcome.clock_reason, "lease_ttl_ms": outcome.lease_ttl_ms,
        "busy": busy_line(outcome.busy_retries), "exercised": dict(outcome.exercised),
        **extra(outcome),
        "elapsed_s": round(time.monotonic() - t0, 2),
    }
    seed = {"derandomize": True, "hypothesis": hypothesis_version,
            "note": "Hypothesis derives the seed from the store spec, clock mode and ttl"}
    return component, sources, choices, seed


def boot(target: StoreTarget, plan: Plan, say: Callable[[str], None]) -> tuple[dict[str, Any], Any]:
    """The boot storm: many processes open one fresh location at once, round after round."""
    from soak.storm.boot import boot_storm

    n, rounds = plan.boot
    say(f"boot storm: {n} processes x {rounds} rounds ...")
    boot = boot_storm(target, processes=n, rounds=rounds)
    say(f"boot storm: {boot.failures} of {boot.attempts} failed ({boot.elapsed_s:.1f} s)")
    component = {"result": PASS if boot.ok else FAIL, "processes": n, "rounds": rounds, "attempts": boot.attempts,
                 "failures": boot.failures, "by_type": boot.by_type(), "worst_boot_s": round(boot.worst_boot_s, 4),
                 "elapsed_s": round(boot.elapsed_s, 2), "busy": busy_line(getattr(boot, "busy", None))}
    return component, boot_sources(boot)


def _storm_coverage(storm_dir: Path) -> list[dict[str, Any]]:
    """The storm's probe coverage table from its `storm.json` (empty: the workload keeps none, or it is unreadable)."""
    try:
        rows = json.loads((storm_dir / "storm.json").read_text(encoding="utf-8")).get("coverage")
    except (OSError, ValueError):
        return []
    return rows if isinstance(rows, list) else []


def storm(target: StoreTarget, plan: Plan | ClaimsPlan, storm_dir: Path, seed: int | None, time_bound_s: float | None,
          claimed: list[str], say: Callable[[str], None],
          progress: bool, expected: list[str] | None = None) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
    """The storm preset (with the plan's overrides), then its checker (one that crashes is inconclusive)
    and its report. `expected`: the clauses the workload's storm sets out to exercise."""
    from soak.check import check_run
    from soak.report import build_report
    from soak.scenario import load_scenario
    from soak.storm.orchestrator import run_storm

    overrides: dict[str, Any] = dict(getattr(plan, "storm_overrides", {}))
    if seed:
        overrides["seed"] = seed
    if time_bound_s is not None:
        overrides["time_bound_s"] = time_bound_s
    scenario = load_scenario(plan.scenario, overrides)
    say(f"storm: {scenario.name} preset, {scenario.workers} workers, time bound {scenario.time_bound_s:g} s ...")
    t0 = time.monotonic()
    info = run_storm(scenario, target, storm_dir, progress=progress)
    try:
        verdict_json = check_run(storm_dir).to_json()
    except Exception as exc:  # a checker that crashes is inconclusive, never pass
        verdict_json = {"result": INCONCLUSIVE, "violations": [],
                        "reasons": [f"the checker raised {type(exc).__name__}: {one_line(exc)}"]}
    report_error = ""
    try:
        build_report(storm_dir)
    except Exception as exc:  # the certificate stands without the pictures; say why they are missing
        report_error = f"report.html not rendered: {type(exc).__name__}: {one_line(exc)}"
    vresult = verdict_json.get("result", INCONCLUSIVE)
    sources, choices = storm_sources(verdict_json, status=info.status, seed=info.seed, clauses=claimed,
                                     expected=expected)
    stats = verdict_json.get("stats") or {}
    violated = sorted({v.get("clause", "?") for v in verdict_json.get("violations", [])})
    component = {
        "result": vresult, "status": info.status, "scenario": scenario.name, "workers": info.workers,
        "lease_ttl_ms": info.lease_ttl_ms, "quorum_target": info.quorum_target,
        "quorum_reached": info.quorum_reached, "violations": len(verdict_json.get("violations", [])),
        "violated_clauses": violated, "reasons": list(verdict_json.get("reasons", [])),
        "exercised": dict(stats.get("exercised") or {}),
        "exercised_reported": "exercised" in stats,
        "report": f"{STORM_DIR}/report.html" if (storm_dir / "report.html").is_file() else None,
        "report_error": report_error, "elapsed_s": round(time.monotonic() - t0, 2),
    }
    coverage = _storm_coverage(storm_dir)
    if coverage:
        component["coverage"] = coverage
    if "busy" in stats:
        component["busy"] = busy_line(stats["busy"])
    say(f"storm: {info.status}, verdict {vresult} ({time.monotonic() - t0:.1f} s)")
    return component, sources, choices, {"storm": info.seed, "workers": dict(info.worker_seeds)}


# -- the claims workload's suites -------------------------------------------------------------

def claims_conformance(target: StoreTarget, plan: ClaimsPlan, claimed: list[str],
                       say: Callable[[str], None]) -> tuple[dict[str, Any], Any, Any]:
    """The claims conformance suite (`soak.claims.conformance`): one or more checks per claim clause."""
    from soak.claims.conformance import run_claims_conformance

    say("claims conformance suite ...")
    t0 = time.monotonic()
    conf = run_claims_conformance(target, rounds=plan.conformance_rounds, processes=plan.conformance_processes,
                                  boot_processes=plan.conformance_boot)
    sources, choices = conformance_sources(conf, profile="claims", clauses=claimed, injectable_clock=None)
    failed = sum(r.status in (FAIL, "error") for r in conf.results)
    undecided = sum(r.status not in (PASS, FAIL, "error") for r in conf.results)
    say(f"claims conformance: {len(conf.results)} checks, {failed} failed, {undecided} not decided "
        f"({time.monotonic() - t0:.1f} s)")
    component = {
        "result": conf.verdict, "checks": len(conf.results), "failed": failed, "undecided": undecided,
        "failed_clauses": sorted(conf.failed_clauses()),
        "timing": conf.timing, "lease_ttl_ms": conf.lease_ttl_ms, "call_bound_s": conf.call_bound_s,
        "isolation": conf.isolation, "elapsed_s": round(time.monotonic() - t0, 2),
        "rounds": plan.conformance_rounds, "processes": plan.conformance_processes,
        "boot": {"processes": plan.conformance_boot},
        "busy": busy_line(conf.busy),
    }
    return component, sources, choices


def claims_model(target: StoreTarget, plan: ClaimsPlan, claimed: list[str],
                 say: Callable[[str], None]) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
    """The claims Hypothesis model (`soak.claims.model`), derandomized like the runs model."""
    from soak.claims.model import CLAIMS_MODEL_NEVER_EXERCISES, run_claims_model

    return _model_suite("claims model", lambda settings: run_claims_model(target, settings=settings),
                        CLAIMS_MODEL_NEVER_EXERCISES, "verdict", lambda outcome: {}, plan, claimed, say)
