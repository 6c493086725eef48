"""Certifying one store: every suite run, the clauses judged, and the certificate written.

`certify` runs the suites (`soak.certify._suites`) in order, a crashing one leaving its clauses
inconclusive; judges every clause under the profile (`soak.certify._judge`); and writes the
certificate's body (what was run and seen, the environment, the digests of what it covers and its
own) as `certificate.json` and `certificate.html` (`soak.certify._files`, `soak.certify._render`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import sqlite3
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from soak.certify import _suites
from soak.certify._files import (
    CERTIFICATE_FILE,
    CERTIFICATE_HTML,
    FORMAT,
    STORM_DIR,
    CertifyError,
    body_digest,
    file_digests,
    suite_digest,
)
from soak.certify._judge import ClauseResult, judge
from soak.certify._plan import INCONCLUSIVE, NA, NOT_CLAIMED, NOT_EXERCISED, PASS, workload_named
from soak.certify._render import render_html
from soak.certify._sources import STORM_CLAUSES, one_line
from soak.clauses import CLAIM_CLAUSES, LIVENESS_CLAUSES
from soak.errors import HarnessError, StoreSpecError, save_traceback
from soak.retry import BusyCount
from soak.stores import StoreTarget, redact, resolve

__all__ = ["certify", "environment_manifest"]


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


# -- the certification ------------------------------------------------------------------------

def certify(
    store: str | StoreTarget,
    *,
    profile: str | None = None,
    workload: str = "runs",
    out_dir: str | os.PathLike[str],
    quick: bool = False,
    seed: int | None = None,
    time_bound_s: float | None = None,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Certify one store of `workload` (`runs`: CONTRACT section 1, `claims`: section 2) under `profile`
    (default the workload's first); write the certificate into `out_dir` and return it.

    The returned dict is what `certificate.json` holds; its `result` is `pass` only when every
    clause the profile requires was exercised and passed, and no claimed clause failed.
    `seed` and `time_bound_s` override the storm preset's.
    """
    from soak import __version__

    say = log or (lambda _msg: None)
    work = workload_named(workload)
    chosen = work.profile(profile)
    profile = chosen.name
    target = store if isinstance(store, StoreTarget) else resolve(store, kind=work.name)
    if target.kind != work.name:
        raise StoreSpecError(f"{redact(target.spec)} is a {target.kind} store target; certifying the {work.name} "
                             f"workload needs resolve(spec, kind={work.name!r})")
    if target.single_process and work.name == "runs":
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
    plan = work.quick if quick else work.full
    claimed = chosen.claimed(work.clauses)
    started = time.monotonic()
    probe_busy = BusyCount()
    if work.name == "runs":
        declared, clock_detail = _suites.probe_clock(target, probe_busy)
    else:  # the claims suites read the store's clock declaration themselves (shown once they have run)
        declared, clock_detail = None, ""
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
            why = f"{suite} crashed: {type(exc).__name__}: {one_line(exc, 200)} (traceback in {saved})"
            say(why)
            components[key] = {"result": INCONCLUSIVE, "crash": why, "elapsed_s": round(time.monotonic() - t0, 2)}
            sources[suite] = {c: [(INCONCLUSIVE, why, None)] for c in speaks_of}
            return None

    storm_dir = out / STORM_DIR
    if work.name == "claims":
        clock_detail = _certify_claims(run, target, plan, claimed, storm_dir, seed, time_bound_s, say, progress,
                                       components, sources, choices, seeds)
    else:
        _certify_runs(run, target, plan, profile, claimed, declared, storm_dir, seed, time_bound_s, say, progress,
                      components, sources, choices, seeds)

    verdict = judge(chosen, sources, choices, clauses=work.clauses, suites=work.suites)
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
    }
    if work.name != "runs":  # a run-store certificate stays as it always was
        cert["workload"] = work.name
    cert.update({
        "profile_clauses": {"summary": chosen.summary, "required": list(chosen.required),
                            "optional": dict(chosen.optional), "choices": list(chosen.choices),
                            "not_claimed": [c for c in work.clauses if chosen.requirement(c) == NOT_CLAIMED]},
        "mode": "quick" if quick else "full",
        "store": redact(target.spec),
        "store_description": target.description,
        "injectable_clock": {"declared": declared, "detail": clock_detail, "busy": _suites.busy_line(probe_busy) if work.name == "runs"
                             else "not run (the claims suites read the store's clock declaration themselves)"},
        "soak_version": __version__,
        "suite_sha256": digest,
        "suite_files": n_files,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "elapsed_s": round(time.monotonic() - started, 2),
        "clauses": {c: results[c].to_json() for c in work.clauses},
        "choices": verdict["choices"],
        "components": components,
        "seeds": seeds,
        "environment": environment_manifest(target),
        "run_dir": STORM_DIR if storm_dir.is_dir() else None,
        "digests": file_digests(out, STORM_DIR) if storm_dir.is_dir() else {},
    })
    cert["certificate_sha256"] = body_digest(cert)
    (out / CERTIFICATE_FILE).write_text(json.dumps(cert, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    (out / CERTIFICATE_HTML).write_text(render_html(cert), encoding="utf-8")
    return cert


def _certify_runs(run: Callable[..., Any], target: StoreTarget, plan: Any, profile: str, claimed: list[str],
                  declared: bool | None, storm_dir: Path, seed: int | None, time_bound_s: float | None,
                  say: Callable[[str], None], progress: bool, components: dict[str, Any], sources: dict[str, Any],
                  choices: dict[str, Any], seeds: dict[str, Any]) -> None:
    """The runs workload's suites: conformance, the model and the boot storm, then the storm with its
    checker and report."""
    got = run("conformance", "conformance", claimed,
              lambda: _suites.conformance(target, plan, profile, claimed, declared, say))
    if got:
        components["conformance"], sources["conformance"], choices["conformance"] = got
    got = run("model", "model", claimed, lambda: _suites.model(target, plan, claimed, say))
    if got:
        components["model"], sources["model"], choices["model"], seeds["model"] = got
    got = run("boot-storm", "boot", ["concurrent-boot", "no-crash"], lambda: _suites.boot(target, plan, say))
    if got:
        components["boot"], sources["boot-storm"] = got

    # The storm's workload is takeovers under fencing, which the single-writer profile does not
    # claim: there the storm is not run, and the certificate says why.
    if profile == "fenced":
        storm_claims = [c for c in claimed if c in STORM_CLAUSES or c in LIVENESS_CLAUSES]
        got = run("storm", "storm", storm_claims,
                  lambda: _suites.storm(target, plan, storm_dir, seed, time_bound_s, claimed, say, progress))
        if got:
            components["storm"], sources["storm"], choices["storm"], seeds["storm"] = got
    else:
        components["storm"] = {"result": "not-applicable",
                               "detail": "the storm's workload exercises fencing under takeovers, which the "
                                         "single-writer profile does not claim"}


def _certify_claims(run: Callable[..., Any], target: StoreTarget, plan: Any, claimed: list[str], storm_dir: Path,
                    seed: int | None, time_bound_s: float | None, say: Callable[[str], None], progress: bool,
                    components: dict[str, Any], sources: dict[str, Any], choices: dict[str, Any],
                    seeds: dict[str, Any]) -> str:
    """The claims workload's suites: claims conformance, the claims model and the `claims` storm with its
    checker and report. A single-process store cannot be stormed: the storm's clauses are then not exercised
    by it, and the certificate says why. Returns how the suites judged the store's clock."""
    got = run("conformance", "conformance", claimed, lambda: _suites.claims_conformance(target, plan, claimed, say))
    if got:
        components["conformance"], sources["conformance"], choices["conformance"] = got
    got = run("model", "model", claimed, lambda: _suites.claims_model(target, plan, claimed, say))
    if got:
        components["model"], sources["model"], choices["model"], seeds["model"] = got
    storm_claims = [c for c in claimed if c in CLAIM_CLAUSES]
    if target.single_process:
        why = (f"{redact(target.spec)} lives inside one process, so it cannot be stormed (the storm opens one "
               "location from many processes)")
        components["storm"] = {"result": NA, "detail": why}
        sources["storm"] = {c: [(NOT_EXERCISED, why, None)] for c in storm_claims}
    else:
        got = run("storm", "storm", storm_claims,
                  lambda: _suites.storm(target, plan, storm_dir, seed, time_bound_s, storm_claims, say, progress,
                                        expected=storm_claims))
        if got:
            components["storm"], sources["storm"], choices["storm"], seeds["storm"] = got
    conf, model = components.get("conformance", {}), components.get("model", {})
    return (f"claims conformance ran in {conf.get('timing') or 'unknown timing'}; the claims model ran on a "
            f"{model.get('clock_reason') or 'clock not reported'}")
