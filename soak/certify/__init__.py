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

`verify_certificate(path)` re-hashes every file the certificate lists and the installed soak
suite, so a stored certificate can be checked later (`soak certify --verify`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from soak.certify._files import (
    CERTIFICATE_FILE,
    CERTIFICATE_HTML,
    FORMAT,
    STORM_DIR,
    CertifyError,
    VerifyResult,
    body_digest,
    file_digests,
    suite_digest,
    verify_certificate,
)
from soak.certify._judge import (
    FAIL,
    FENCING_SUBCHECKS,
    INCONCLUSIVE,
    NOT_CLAIMED,
    PASS,
    PROFILE_CLAUSES,
    STORM_CLAUSES,
    SUITES,
    ClauseResult,
    Profile,
    boot_sources,
    conformance_sources,
    judge,
    model_sources,
    storm_sources,
)
from soak.certify._render import render_html, render_table
from soak.clauses import CLAUSES, LIVENESS_CLAUSES
from soak.errors import HarnessError, StoreBootError, StoreSpecError, save_traceback
from soak.retry import BusyCount, BusyExhausted, retry_busy
from soak.spi import StoreBusyError
from soak.stores import StoreTarget, redact, resolve

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

#: The profiles a store may claim (what each requires: `PROFILE_CLAUSES`, docs/certify.md).
PROFILES: tuple[str, ...] = tuple(PROFILE_CLAUSES)

#: soak certify's exit codes: pass, fail, inconclusive (2 stays for usage errors)
_EXIT = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}


def clause_requirements(profile: str) -> dict[str, str]:
    """clause id -> `required`, `optional` (judged where exercised, not required), `choice` (shown as
    the store's choice) or `not-claimed` under `profile`."""
    return {c: _profile(profile).requirement(c) for c in CLAUSES}


def _profile(name: str) -> Profile:
    try:
        return PROFILE_CLAUSES[name]
    except KeyError:
        raise CertifyError(f"unknown profile {name!r}; use one of {', '.join(PROFILES)}") from None


# -- environment ------------------------------------------------------------------------------

def _dist_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]


def _store_distribution(target: StoreTarget) -> str | None:
    module = getattr(target.factory, "__module__", "") or ""
    top = module.split(".")[0]
    if not top or top == "soak":
        return None
    names = metadata.packages_distributions().get(top)
    return names[0] if names else None


def environment_manifest(target: StoreTarget) -> dict[str, Any]:
    """Interpreter, platform, SQLite, CPUs and the versions of soak, its dependencies and the store's package."""
    packages: dict[str, str] = {}
    wanted = ["soak"]
    try:
        wanted += [_dist_name(r) for r in metadata.requires("soak") or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        pass
    store_dist = _store_distribution(target)
    if store_dist:
        wanted.append(store_dist)
    for name in wanted:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = "not installed"
    from soak import __version__

    packages.setdefault("soak", __version__)
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "sqlite": sqlite3.sqlite_version,
        "cpu_count": os.cpu_count(),
        "packages": packages,
        "store_module": getattr(target.factory, "__module__", None),
    }


# -- the runs ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Plan:
    """How hard each suite pushes; `quick` is for tests and CI, the full plan for a certificate to show."""

    scenario: str
    model_examples: int
    conformance_boot: tuple[int, int]
    boot: tuple[int, int]


_FULL = _Plan("certify", model_examples=200, conformance_boot=(8, 2), boot=(16, 20))
_QUICK = _Plan("smoke", model_examples=25, conformance_boot=(4, 1), boot=(4, 2))


def _one_line(text: Any, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _busy_line(busy: Any) -> str:
    """A suite's busy count as one line (`soak.retry.BusyCount`, a number, or not reported)."""
    if busy is None:
        return "not reported"
    if isinstance(busy, BusyCount):
        return busy.summary()
    if isinstance(busy, int):
        return f"{busy} StoreBusyError answer(s) retried"
    return _one_line(busy, 200)


def _probe_clock(target: StoreTarget, busy: BusyCount) -> tuple[bool | None, str]:
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
        shutil.rmtree(location, ignore_errors=True)
    if declared:
        return True, "declared (injectable_clock = True): conformance and the model drive the store's clock"
    return False, ("not declared: conformance and the model run in real time, and store-clock is exercised only "
                   "where a suite can drive the store's clock apart from wall time")


def certify(
    store: str | StoreTarget,
    *,
    profile: str = "fenced",
    out_dir: str | os.PathLike[str],
    quick: bool = False,
    seed: int | None = None,
    time_bound_s: float | None = None,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Certify one store under `profile`; write the certificate into `out_dir` and return it.

    The returned dict is what `certificate.json` holds; its `result` is `pass` only when every
    clause the profile requires was exercised and passed, and no claimed clause failed.
    `seed` and `time_bound_s` override the storm preset's.
    """
    from soak import __version__

    say = log or (lambda _msg: None)
    chosen = _profile(profile)
    target = store if isinstance(store, StoreTarget) else resolve(store)
    if target.single_process:
        raise StoreSpecError(
            f"store {target.spec} lives inside one process; certification needs a store that many "
            "processes open over one location: use sqlite: or your own package.module:callable"
        )
    if "path" in target.options:
        raise StoreSpecError(
            f"{redact(target.spec)} names one fixed file, but certification opens many fresh locations; "
            "use the plain scheme (e.g. sqlite:)"
        )
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise CertifyError(f"output directory {out} already exists and is not empty; pass a new --out DIR")
    out.mkdir(parents=True, exist_ok=True)
    plan = _QUICK if quick else _FULL
    claimed = chosen.claimed()
    started = time.monotonic()
    probe_busy = BusyCount()
    declared, clock_detail = _probe_clock(target, probe_busy)
    components: dict[str, Any] = {}
    seeds: dict[str, Any] = {}
    sources: dict[str, Any] = {}
    choices: dict[str, Any] = {}

    def run(suite: str, key: str, speaks_of: list[str], fn: Callable[[], tuple]) -> tuple:
        """One suite; one that crashes leaves its clauses inconclusive (never a pass), the traceback kept."""
        t0 = time.monotonic()
        try:
            return fn()
        except HarnessError:
            raise
        except Exception as exc:  # noqa: BLE001 - a suite that crashed concludes nothing
            saved = save_traceback(out, exc, f"soak certify: {suite}")
            why = f"{suite} crashed: {type(exc).__name__}: {_one_line(exc, 200)} (traceback in {saved})"
            say(why)
            components[key] = {"result": INCONCLUSIVE, "crash": why, "elapsed_s": round(time.monotonic() - t0, 2)}
            sources[suite] = {c: [(INCONCLUSIVE, why, None)] for c in speaks_of}
            return None

    # Conformance, the model and the boot storm, then the storm with its checker and report.
    got = run("conformance", "conformance", claimed,
              lambda: _run_conformance(target, plan, profile, claimed, declared, say))
    if got:
        components["conformance"], sources["conformance"], choices["conformance"] = got
    got = run("model", "model", claimed, lambda: _run_model(target, plan, claimed, say))
    if got:
        components["model"], sources["model"], choices["model"], seeds["model"] = got
    got = run("boot-storm", "boot", ["concurrent-boot", "no-crash"], lambda: _run_boot(target, plan, say))
    if got:
        components["boot"], sources["boot-storm"] = got

    # The storm's workload is takeovers under fencing, which the single-writer profile does not
    # claim: there the storm is not run, and the certificate says why.
    storm_dir = out / STORM_DIR
    if profile == "fenced":
        storm_claims = [c for c in claimed if c in STORM_CLAUSES or c in LIVENESS_CLAUSES]
        got = run("storm", "storm", storm_claims,
                  lambda: _run_storm(target, plan, storm_dir, seed, time_bound_s, claimed, say, progress))
        if got:
            components["storm"], sources["storm"], choices["storm"], seeds["storm"] = got
    else:
        components["storm"] = {"result": "not-applicable",
                               "detail": "the storm's workload exercises fencing under takeovers, which the "
                                         "single-writer profile does not claim"}

    verdict = judge(chosen, sources, choices)
    results: dict[str, ClauseResult] = verdict["clauses"]
    digest, n_files = suite_digest()
    cert: dict[str, Any] = {
        "format": FORMAT,
        "result": verdict["result"],
        "statement": verdict["statement"],
        "violated": verdict["violated"],
        "not_exercised": verdict["not_exercised"],
        "optional_not_exercised": verdict["optional_not_exercised"],
        "required_failed": [c for c in chosen.required if results[c].result != PASS],
        "profile": profile,
        "profile_clauses": {"summary": chosen.summary, "required": list(chosen.required),
                            "optional": dict(chosen.optional), "choices": list(chosen.choices),
                            "not_claimed": [c for c in CLAUSES if chosen.requirement(c) == NOT_CLAIMED]},
        "mode": "quick" if quick else "full",
        "store": redact(target.spec),
        "store_description": target.description,
        "injectable_clock": {"declared": declared, "detail": clock_detail, "busy": _busy_line(probe_busy)},
        "soak_version": __version__,
        "suite_sha256": digest,
        "suite_files": n_files,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "elapsed_s": round(time.monotonic() - started, 2),
        "clauses": {c: results[c].to_json() for c in CLAUSES},
        "choices": verdict["choices"],
        "components": components,
        "seeds": seeds,
        "environment": environment_manifest(target),
        "run_dir": STORM_DIR if storm_dir.is_dir() else None,
        "digests": file_digests(out, STORM_DIR) if storm_dir.is_dir() else {},
    }
    cert["certificate_sha256"] = body_digest(cert)
    (out / CERTIFICATE_FILE).write_text(json.dumps(cert, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    (out / CERTIFICATE_HTML).write_text(render_html(cert), encoding="utf-8")
    return cert


def _run_conformance(target: StoreTarget, plan: _Plan, profile: str, claimed: list[str], declared: bool | None,
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
        "busy": _busy_line(getattr(conf, "busy", None)),
        "choices": dict(getattr(conf, "choices", None) or {}),
    }
    return component, sources, choices


def _run_model(target: StoreTarget, plan: _Plan, claimed: list[str],
               say: Callable[[str], None]) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
    """The Hypothesis model, derandomized so the same store and soak replay the same programs."""
    from hypothesis import __version__ as hypothesis_version

    from soak.model import MODEL_NEVER_EXERCISES, check_model, model_settings

    say(f"model: {plan.model_examples} programs ...")
    t0 = time.monotonic()
    chosen = model_settings("ci", max_examples=plan.model_examples)
    outcome = check_model(target, settings=chosen)
    sources, choices = model_sources(outcome, clauses=claimed, never=MODEL_NEVER_EXERCISES)
    result = outcome.result
    if result == FAIL and outcome.clause not in claimed:
        result = "incomplete"  # a violation of a clause the profile does not claim
    say(f"model: {result} ({time.monotonic() - t0:.1f} s)")
    component = {
        "result": result, "clause": outcome.clause,
        "error": _one_line(outcome.error, 1200) if outcome.error else "",
        "reason": outcome.reason, "program": list(outcome.program),
        "max_examples": chosen.max_examples, "stateful_step_count": chosen.stateful_step_count,
        "clock": outcome.clock, "clock_reason": outcome.clock_reason, "lease_ttl_ms": outcome.lease_ttl_ms,
        "busy": _busy_line(outcome.busy_retries), "exercised": dict(outcome.exercised),
        "choices": dict(outcome.choices), "choice_detail": dict(outcome.choice_detail),
        "slowest_call_s": outcome.slowest_call_s, "call_bound_s": outcome.call_bound_s,
        "elapsed_s": round(time.monotonic() - t0, 2),
    }
    seed = {"derandomize": True, "hypothesis": hypothesis_version,
            "note": "Hypothesis derives the seed from the store spec, clock mode and ttl"}
    return component, sources, choices, seed


def _run_boot(target: StoreTarget, plan: _Plan, say: Callable[[str], None]) -> tuple[dict[str, Any], Any]:
    """The boot storm: many processes open one fresh location at once, round after round."""
    from soak.storm.boot import boot_storm

    n, rounds = plan.boot
    say(f"boot storm: {n} processes x {rounds} rounds ...")
    boot = boot_storm(target, processes=n, rounds=rounds)
    say(f"boot storm: {boot.failures} of {boot.attempts} failed ({boot.elapsed_s:.1f} s)")
    component = {"result": PASS if boot.ok else FAIL, "processes": n, "rounds": rounds, "attempts": boot.attempts,
                 "failures": boot.failures, "by_type": boot.by_type(), "worst_boot_s": round(boot.worst_boot_s, 4),
                 "elapsed_s": round(boot.elapsed_s, 2), "busy": _busy_line(getattr(boot, "busy", None))}
    return component, boot_sources(boot)


def _run_storm(target: StoreTarget, plan: _Plan, storm_dir: Path, seed: int | None, time_bound_s: float | None,
               claimed: list[str], say: Callable[[str], None],
               progress: bool) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
    from soak.check import check_run
    from soak.report import build_report
    from soak.scenario import load_scenario
    from soak.storm.orchestrator import run_storm

    overrides: dict[str, Any] = {}
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
                        "reasons": [f"the checker raised {type(exc).__name__}: {_one_line(exc)}"]}
    report_error = ""
    try:
        build_report(storm_dir)
    except Exception as exc:  # the certificate stands without the pictures; say why they are missing
        report_error = f"report.html not rendered: {type(exc).__name__}: {_one_line(exc)}"
    vresult = verdict_json.get("result", INCONCLUSIVE)
    sources, choices = storm_sources(verdict_json, status=info.status, seed=info.seed, clauses=claimed)
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
    if "busy" in stats:
        component["busy"] = _busy_line(stats["busy"])
    say(f"storm: {info.status}, verdict {vresult} ({time.monotonic() - t0:.1f} s)")
    return component, sources, choices, {"storm": info.seed, "workers": dict(info.worker_seeds)}


# -- command line -----------------------------------------------------------------------------

def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="SPEC", help="store spec: sqlite:, package.module:callable?k=v, an entry point name")
    p.add_argument("--profile", choices=PROFILES, default="fenced",
                   help="what the store claims (default fenced: every clause; single-writer: data semantics, "
                        "unleased writes, concurrent boot and liveness); docs/certify.md lists what each requires")
    p.add_argument("--out", metavar="DIR", help="output directory (default: reports/<UTC timestamp>-certify-<profile>/)")
    p.add_argument("--quick", action="store_true",
                   help="smoke storm preset, fewer model examples and boot rounds (tests and CI)")
    p.add_argument("--seed", type=int, metavar="N", help="storm seed (default: random, recorded in the certificate)")
    p.add_argument("--time-bound", type=float, metavar="S",
                   help="seconds before an unfinished storm stops (default: the preset's); a storm cut short "
                        "exercises nothing it did not finish: a clause no other suite exercised is then not "
                        "exercised, and the certificate is not a pass")
    p.add_argument("--quiet", action="store_true", help="no live progress (it is off anyway when stderr is not a terminal)")
    p.add_argument("--verify", metavar="CERTIFICATE", help="re-check a certificate's digests and suite hash instead")


class _Progress:
    """Live progress on a terminal (rich): a spinner for the running suite, a line per finished one.

    Silent under `--quiet` or when stderr is not a terminal; the summary on stdout says it all.
    """

    def __init__(self, live: bool) -> None:
        self.live = live
        self.console: Any = None
        self.status: Any = None

    def __enter__(self) -> _Progress:
        if self.live:
            from rich.console import Console

            self.console = Console(stderr=True)
        return self

    def log(self, msg: str) -> None:
        if self.console is None:
            return
        if msg.endswith("..."):
            self._stop()
            if msg.startswith("storm:"):  # the storm draws its own progress bars
                self.console.print(f"certify: {msg}", markup=False, highlight=False)
            else:
                self.status = self.console.status(f"certify: {msg}")
                self.status.start()
        else:
            self._stop()
            self.console.print(f"certify: {msg}", markup=False, highlight=False)

    def _stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def __exit__(self, *exc: Any) -> None:
        self._stop()


def _summary(cert: dict[str, Any]) -> str:
    """What `soak certify` prints: the result, the store's choices, the clause x suite table, why any
    clause did not pass, and the busy answers each suite retried."""
    lines = [f"certify: {cert['result'].upper()} ({cert['store']}, profile {cert['profile']}, {cert['mode']} run): "
             f"{cert['statement']}"]
    lines.append(f"injectable clock: {cert['injectable_clock']['detail']}")
    for name, ch in cert["choices"].items():
        seen = ", ".join(f"{s['source']} {s['choice']}" for s in ch["sources"]) or "no suite observed it"
        lines.append(f"choice {name}: {ch['choice']} ({seen})")
    lines.append("which suite exercised which clause:")
    lines += ["  " + row for row in render_table(cert).splitlines()]
    for clause in cert["violated"]:
        bad = [s for s in cert["clauses"][clause]["sources"] if s["result"] in (FAIL, "error")]
        for s in bad[:2]:
            lines.append(f"  FAIL {clause}: {s['source']} {s['result']}: {_one_line(s['detail'], 300)}")
    for clause in cert["not_exercised"]:
        lines.append(f"  NOT EXERCISED {clause} (required): {_one_line(cert['clauses'][clause].get('reason', ''), 300)}")
    for clause in cert.get("optional_not_exercised", []):
        lines.append(f"  not exercised {clause} (not required): "
                     f"{_one_line(cert['clauses'][clause].get('reason', ''), 300)}")
    busy = [f"{name} {comp['busy']}" for name, comp in cert["components"].items() if comp.get("busy")]
    busy.append(f"certify's own probe {cert['injectable_clock']['busy']}")
    lines.append("busy: " + "; ".join(busy))
    return "\n".join(lines)


def run_cli(args: argparse.Namespace) -> int:
    """`soak certify`: 0 pass, 1 a claimed clause failed, 3 a required clause not exercised; with
    --verify, 0 when everything matched, 1 otherwise."""
    if args.verify:
        if args.store:
            raise CertifyError("--verify takes no --store; pass only the certificate")
        res = verify_certificate(args.verify)
        for line in res.differences:
            print(f"differs: {line}")
        if res.ok:
            print(f"certificate verified: {res.checked} file digests and the suite hash match ({res.path})")
            return 0
        print(f"certificate NOT verified: {len(res.differences)} difference(s) ({res.path})")
        return 1
    if not args.store:
        raise CertifyError("certify needs --store SPEC (or --verify CERTIFICATE)")
    if args.out:
        out = Path(args.out)
    else:
        from soak.storm.orchestrator import default_run_dir

        out = default_run_dir(f"certify-{args.profile}")
    live = sys.stderr.isatty() and not args.quiet
    with _Progress(live) as progress:
        cert = certify(args.store, profile=args.profile, out_dir=out, quick=args.quick, seed=args.seed,
                       time_bound_s=args.time_bound, log=progress.log, progress=live)
    print(_summary(cert))
    print(f"certificate: {out / CERTIFICATE_FILE}")
    sys.stdout.flush()
    return _EXIT.get(cert["result"], 3)
