"""Store certification: every suite soak has, run against one store, summed up per clause.

`certify(spec, profile=..., out_dir=...)` runs the conformance suite, the Hypothesis model,
the boot storm and the `certify` storm preset (`quick=True`: the smoke preset and fewer
examples and rounds), renders the storm's report, and writes `certificate.json` and
`certificate.html` next to the storm's run directory. Each contract clause gets one result,
`pass`, `fail` or `not-applicable`, from the sources that exercised it; a clause the profile
requires that no source exercised is a `fail` with that reason, never a skip. The certificate
says what was observed ("no violations observed"), not that the store is correct.

`verify_certificate(path)` re-hashes every file the certificate lists and the installed soak
suite, so a stored certificate can be checked later (`soak certify --verify`).
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import platform
import re
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from soak.clauses import CLAUSES
from soak.errors import HarnessError, StoreSpecError
from soak.stores import StoreTarget, redact, resolve

__all__ = [
    "CERTIFICATE_FILE",
    "CERTIFICATE_HTML",
    "CertifyError",
    "ClauseResult",
    "PROFILES",
    "STORM_DIR",
    "VerifyResult",
    "certify",
    "clause_requirements",
    "configure_parser",
    "environment_manifest",
    "file_digests",
    "render_html",
    "run_cli",
    "suite_digest",
    "verify_certificate",
]

CERTIFICATE_FILE = "certificate.json"
CERTIFICATE_HTML = "certificate.html"
#: the storm's run directory, relative to the certificate
STORM_DIR = "storm"
FORMAT = "soak-certificate/1"

#: The profiles a store may claim.
PROFILES: tuple[str, ...] = ("fenced", "single-writer")

#: What a single-writer store promises: data semantics, unleased writes and a safe bootstrap.
_SINGLE_WRITER_REQUIRED = frozenset({
    "journal-a1", "journal-a2", "journal-a3", "journal-a4", "journal-a5",
    "meta-last-write", "blob-semantics", "delete-semantics",
    "unleased-passthrough", "concurrent-boot",
})

#: Conformance sub-checks that expect lease refusals although filed under a data clause.
_FENCING_SUBCHECKS = frozenset({"fenced-transcripts"})

#: Clauses the model can observe (one process, so no cross-process atomicity or bootstrap).
MODEL_CLAUSES = frozenset(CLAUSES) - {"atomic-fence", "concurrent-boot"}
#: Clauses the storm's checker judges from a recorded history and the final state.
STORM_CLAUSES = frozenset({
    "lease-exclusive", "stale-lease-ops", "stale-rejected", "run-match", "epoch-monotonic",
    "live-accepted", "ttl-honoured", "typed-refusal", "journal-a1", "journal-a2", "journal-a4",
    "journal-a5", "meta-last-write", "blob-semantics", "delete-semantics",
})

PASS, FAIL, NA = "pass", "fail", "not-applicable"
REQUIRED, OPTIONAL = "required", "optional"


class CertifyError(HarnessError, ValueError):
    """A certify invocation that cannot run (bad arguments, a certificate that cannot be read)."""

    exit_code = 2


def clause_requirements(profile: str) -> dict[str, str]:
    """clause id -> `required` or `optional` under `profile` (optional clauses are not exercised)."""
    if profile == "fenced":
        return {c: REQUIRED for c in CLAUSES}
    if profile == "single-writer":
        return {c: REQUIRED if c in _SINGLE_WRITER_REQUIRED else OPTIONAL for c in CLAUSES}
    raise CertifyError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}")


@dataclass
class ClauseResult:
    """One clause's result and what each source saw of it."""

    clause: str
    requirement: str
    result: str = PASS
    sources: list[dict[str, str]] = field(default_factory=list)

    def add(self, source: str, result: str, detail: str) -> None:
        self.sources.append({"source": source, "result": result, "detail": detail})
        if result in (FAIL, "not-exercised", "error"):
            self.result = FAIL

    @property
    def violated(self) -> bool:
        """True when some suite saw the clause broken (not merely unexercised)."""
        return any(src["result"] in (FAIL, "error") for src in self.sources)

    def to_json(self) -> dict[str, Any]:
        return {"title": CLAUSES.get(self.clause, self.clause), "requirement": self.requirement,
                "result": self.result, "sources": self.sources}


# -- digests ----------------------------------------------------------------------------------

def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def suite_digest() -> tuple[str, int]:
    """SHA-256 over the installed soak package's source files (.py, .toml), sorted by path; and their count."""
    import soak

    root = Path(soak.__file__).resolve().parent
    files = sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.suffix in (".py", ".toml") and "__pycache__" not in p.parts
    )
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + bytes.fromhex(_sha256_file(p)) + b"\n")
    return h.hexdigest(), len(files)


def file_digests(base: str | os.PathLike[str], subdir: str) -> dict[str, str]:
    """`subdir/relative/path` -> SHA-256 of every file under `base/subdir`, sorted."""
    base = Path(base)
    root = base / subdir
    return {
        p.relative_to(base).as_posix(): _sha256_file(p)
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def _body_digest(cert: dict[str, Any]) -> str:
    """SHA-256 of the certificate's canonical JSON without this field: an edit to the file shows."""
    body = {k: v for k, v in cert.items() if k != "certificate_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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
    clause the profile requires passed. `seed` and `time_bound_s` override the storm preset's.
    """
    from soak import __version__

    say = log or (lambda _msg: None)
    requirements = clause_requirements(profile)
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
    applicable = sorted(c for c, r in requirements.items() if r == REQUIRED)
    results = {c: ClauseResult(c, r) for c, r in requirements.items()}
    for c, r in results.items():
        if r.requirement == OPTIONAL:
            r.result = NA
            r.sources.append({"source": "profile", "result": NA, "detail": f"not claimed by the {profile} profile"})
    components: dict[str, Any] = {}
    seeds: dict[str, Any] = {}
    started = time.monotonic()

    # Conformance, the model and the boot storm, then the storm with its checker and report.
    components["conformance"] = _run_conformance(target, plan, profile, applicable, results, say)
    components["model"], seeds["model"] = _run_model(target, plan, applicable, results, say)
    components["boot"] = _run_boot(target, plan, results, say)

    # The storm's workload is takeovers under fencing, which the single-writer profile does not
    # claim: there the storm is not run, and the certificate says why.
    storm_dir = out / STORM_DIR
    if profile == "fenced":
        components["storm"], seeds["storm"] = _run_storm(target, plan, storm_dir, seed, time_bound_s, results,
                                                         say, progress)
    else:
        components["storm"] = {"result": NA, "detail": "the storm's workload exercises fencing under takeovers, "
                                                      "which the single-writer profile does not claim"}

    required_failed = sorted(c for c, r in results.items() if r.requirement == REQUIRED and r.result != PASS)
    violated = [c for c in required_failed if results[c].violated]
    not_exercised = [c for c in required_failed if not results[c].violated]
    result = PASS if not required_failed else FAIL
    if result == PASS:
        statement = (f"no violations observed: all {len(applicable)} clauses the {profile} profile requires passed "
                     f"in every suite that exercised them")
    else:
        parts = []
        if violated:
            parts.append(f"violations observed of {', '.join(violated)}")
        if not_exercised:
            parts.append(f"not exercised by every suite: {', '.join(not_exercised)}")
        statement = "; ".join(parts)
    digest, n_files = suite_digest()
    cert: dict[str, Any] = {
        "format": FORMAT,
        "result": result,
        "statement": statement,
        "required_failed": required_failed,
        "violated": violated,
        "not_exercised": not_exercised,
        "profile": profile,
        "mode": "quick" if quick else "full",
        "store": redact(target.spec),
        "store_description": target.description,
        "soak_version": __version__,
        "suite_sha256": digest,
        "suite_files": n_files,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "elapsed_s": round(time.monotonic() - started, 2),
        "clauses": {c: results[c].to_json() for c in CLAUSES},
        "components": components,
        "seeds": seeds,
        "environment": environment_manifest(target),
        "run_dir": STORM_DIR if storm_dir.is_dir() else None,
        "digests": file_digests(out, STORM_DIR) if storm_dir.is_dir() else {},
    }
    cert["certificate_sha256"] = _body_digest(cert)
    (out / CERTIFICATE_FILE).write_text(json.dumps(cert, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    (out / CERTIFICATE_HTML).write_text(render_html(cert), encoding="utf-8")
    return cert


def _run_conformance(target: StoreTarget, plan: _Plan, profile: str, applicable: list[str],
                     results: dict[str, ClauseResult], say: Callable[[str], None]) -> dict[str, Any]:
    """The conformance suite over the profile's clauses: one or more checks per clause."""
    from soak.conformance import run_conformance

    say("conformance suite ...")
    t0 = time.monotonic()
    conf = run_conformance(target, clauses=applicable, boot_processes=plan.conformance_boot[0],
                           boot_rounds=plan.conformance_boot[1])
    # Sub-checks that test refusals under a lease belong to fencing, whatever clause they sit under.
    judged = [r for r in conf.results if profile == "fenced" or r.check not in _FENCING_SUBCHECKS]
    for c in applicable:
        checks = [r for r in judged if r.clause == c]
        bad = [r for r in checks if not r.passed]
        if not checks:
            results[c].add("conformance", "not-exercised", "no conformance check recorded a result")
        elif not bad:
            results[c].add("conformance", PASS, f"{len(checks)} check(s) passed ({conf.timing})")
        else:
            results[c].add("conformance", FAIL if any(r.status == FAIL for r in bad) else "error",
                           "; ".join(_one_line(f"{r.check}: {r.detail}", 300) for r in bad[:3]))
    failed = sum(not r.passed for r in judged)
    say(f"conformance: {len(judged)} checks, {failed} not passed ({time.monotonic() - t0:.1f} s)")
    return {
        "result": PASS if judged and not failed else FAIL, "checks": len(judged), "failed": failed,
        "not_judged": sorted({r.check for r in conf.results} - {r.check for r in judged}),
        "timing": conf.timing, "lease_ttl_ms": conf.lease_ttl_ms, "elapsed_s": round(time.monotonic() - t0, 2),
        "boot": {"processes": plan.conformance_boot[0], "rounds": plan.conformance_boot[1]},
    }


def _run_model(target: StoreTarget, plan: _Plan, applicable: list[str], results: dict[str, ClauseResult],
               say: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Hypothesis model, derandomized so the same store and soak replay the same programs."""
    from hypothesis import __version__ as hypothesis_version

    from soak.model import check_model, model_settings

    say(f"model: {plan.model_examples} programs ...")
    t0 = time.monotonic()
    chosen = model_settings("ci", max_examples=plan.model_examples)
    outcome = check_model(target, settings=chosen)
    model_clauses = [c for c in applicable if c in MODEL_CLAUSES]
    if outcome.passed:
        what = f"{chosen.max_examples} programs of up to {chosen.stateful_step_count} steps"
        for c in model_clauses:
            results[c].add("model", PASS, f"no violations observed in {what}")
        model_result = PASS
    elif outcome.clause is None:
        for c in model_clauses:
            results[c].add("model", "not-exercised", f"the model ended with an error: {_one_line(outcome.error)}")
        model_result = "error"
    else:
        culprit = outcome.clause
        program = " | ".join(line.strip() for line in outcome.program if line.strip())
        claimed = culprit in applicable
        if claimed:
            results[culprit].add("model", FAIL, _one_line(f"{outcome.error} minimal program: {program}", 1200))
        for c in model_clauses:
            if c != culprit:
                results[c].add("model", "incomplete",
                               f"the model stopped at a violation of {culprit}; no violation of {c} seen before it")
        # A violation of a clause the profile does not claim leaves the model incomplete, not failed.
        model_result = FAIL if claimed else "incomplete"
    say(f"model: {model_result} ({time.monotonic() - t0:.1f} s)")
    component = {
        "result": model_result, "clause": outcome.clause,
        "error": _one_line(outcome.error, 1200) if outcome.error else "", "program": list(outcome.program),
        "max_examples": chosen.max_examples, "stateful_step_count": chosen.stateful_step_count,
        "elapsed_s": round(time.monotonic() - t0, 2),
    }
    seed = {"derandomize": True, "hypothesis": hypothesis_version,
            "note": "Hypothesis derives the seed from the store spec, clock mode and ttl"}
    return component, seed


def _run_boot(target: StoreTarget, plan: _Plan, results: dict[str, ClauseResult],
              say: Callable[[str], None]) -> dict[str, Any]:
    """The boot storm: many processes open one fresh location at once, round after round."""
    from soak.storm.boot import boot_storm

    n, rounds = plan.boot
    say(f"boot storm: {n} processes x {rounds} rounds ...")
    boot = boot_storm(target, processes=n, rounds=rounds)
    results["concurrent-boot"].add(
        "boot-storm", PASS if boot.ok else FAIL,
        f"{boot.attempts} boots, {boot.failures} failed; " + (
            f"worst boot {boot.worst_boot_s * 1000:.0f} ms" if boot.ok else _one_line(boot.summary())
        ),
    )
    say(f"boot storm: {boot.failures} of {boot.attempts} failed ({boot.elapsed_s:.1f} s)")
    return {"result": PASS if boot.ok else FAIL, "processes": n, "rounds": rounds, "attempts": boot.attempts,
            "failures": boot.failures, "by_type": boot.by_type(), "worst_boot_s": round(boot.worst_boot_s, 4),
            "elapsed_s": round(boot.elapsed_s, 2)}


def _run_storm(target: StoreTarget, plan: _Plan, storm_dir: Path, seed: int | None, time_bound_s: float | None,
               results: dict[str, ClauseResult], say: Callable[[str], None],
               progress: bool) -> tuple[dict[str, Any], dict[str, Any]]:
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
        verdict = check_run(storm_dir)
        verdict_json = verdict.to_json()
    except Exception as exc:  # a checker that crashes is inconclusive, never pass
        verdict_json = {"result": "inconclusive", "violations": [],
                        "reasons": [f"the checker raised {type(exc).__name__}: {_one_line(exc)}"]}
    report_error = ""
    try:
        build_report(storm_dir)
    except Exception as exc:  # the certificate stands without the pictures; say why they are missing
        report_error = f"report.html not rendered: {type(exc).__name__}: {_one_line(exc)}"
    vresult = verdict_json.get("result", "inconclusive")
    by_clause: dict[str, list[dict[str, Any]]] = {}
    for v in verdict_json.get("violations", []):
        by_clause.setdefault(v.get("clause", "?"), []).append(v)
    reasons = "; ".join(str(r) for r in verdict_json.get("reasons", [])) or f"storm ended {info.status}"
    for c, res in results.items():
        if res.requirement != REQUIRED or c not in STORM_CLAUSES:
            continue
        found = by_clause.get(c)
        if found:
            res.add("storm", FAIL, _one_line(f"{len(found)} violation(s); first: {found[0].get('statement', '')}", 600))
        elif vresult == "inconclusive":
            res.add("storm", "not-exercised", _one_line(f"the storm was inconclusive: {reasons}", 600))
        elif info.status != "quorum":
            res.add("storm", "not-exercised", f"no violation seen, but the storm ended {info.status} before its "
                                              f"quorum (seed {info.seed})")
        else:
            res.add("storm", PASS, f"no violations observed (quorum met, seed {info.seed})")
    # A violation of a clause outside STORM_CLAUSES still fails that clause.
    for c, found in by_clause.items():
        if c in results and c not in STORM_CLAUSES and results[c].requirement == REQUIRED:
            results[c].add("storm", FAIL, _one_line(f"{len(found)} violation(s); first: {found[0].get('statement', '')}", 600))
    component = {
        "result": vresult, "status": info.status, "scenario": scenario.name, "workers": info.workers,
        "lease_ttl_ms": info.lease_ttl_ms, "quorum_target": info.quorum_target,
        "quorum_reached": info.quorum_reached, "violations": len(verdict_json.get("violations", [])),
        "violated_clauses": sorted(by_clause), "reasons": list(verdict_json.get("reasons", [])),
        "report": f"{STORM_DIR}/report.html" if (storm_dir / "report.html").is_file() else None,
        "report_error": report_error, "elapsed_s": round(time.monotonic() - t0, 2),
    }
    say(f"storm: {info.status}, verdict {vresult} ({time.monotonic() - t0:.1f} s)")
    return component, {"storm": info.seed, "workers": dict(info.worker_seeds)}


# -- verification -----------------------------------------------------------------------------

@dataclass
class VerifyResult:
    """What `verify_certificate` found: every difference as one line; `ok` when there are none."""

    path: Path
    checked: int = 0
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def _load_certificate(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / CERTIFICATE_FILE
    try:
        cert = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CertifyError(f"no certificate at {path}; pass the certificate.json that soak certify wrote") from None
    except (OSError, ValueError) as exc:
        raise CertifyError(f"{path} is not readable JSON ({_one_line(exc, 200)}); pass a certificate.json") from exc
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        raise CertifyError(f"{path} is not a soak certificate (format {FORMAT!r}); pass a certificate.json")
    return cert


def verify_certificate(path: str | os.PathLike[str]) -> VerifyResult:
    """Re-hash the files a certificate lists, the certificate itself and the installed soak suite."""
    path = Path(path)
    if path.is_dir():
        path = path / CERTIFICATE_FILE
    cert = _load_certificate(path)
    base = path.parent
    out = VerifyResult(path)
    if cert.get("certificate_sha256") != _body_digest(cert):
        out.differences.append(f"{path.name}: edited after it was written (its own digest no longer matches)")
    digests: dict[str, str] = cert.get("digests") or {}
    for rel, want in sorted(digests.items()):
        p = base / rel
        out.checked += 1
        if not p.is_file():
            out.differences.append(f"{rel}: missing")
        elif _sha256_file(p) != want:
            out.differences.append(f"{rel}: changed (sha256 {_sha256_file(p)[:16]}…, certified {want[:16]}…)")
    run_dir = cert.get("run_dir")
    if run_dir and (base / run_dir).is_dir():
        for rel in file_digests(base, run_dir):
            if rel not in digests:
                out.differences.append(f"{rel}: added after certification")
    digest, _n = suite_digest()
    if digest != cert.get("suite_sha256"):
        out.differences.append(
            f"suite: the installed soak's source hash {digest[:16]}… differs from the certified "
            f"{str(cert.get('suite_sha256'))[:16]}… (soak {cert.get('soak_version')})"
        )
    return out


# -- HTML -------------------------------------------------------------------------------------

def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
.pass{color:#176d2c} .fail{color:#b00020} .na{color:#777}
table{border-collapse:collapse;margin:.5em 0 1.5em} td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;vertical-align:top}
th{background:#f3f3f3;text-align:left} code{background:#f6f6f6;padding:1px 3px}
.note{color:#555;font-size:13px}
"""


def _component_line(name: str, comp: dict[str, Any]) -> str:
    """One readable line per suite for the HTML (the JSON keeps every field)."""
    took = f" in {comp['elapsed_s']} s" if "elapsed_s" in comp else ""
    if name == "conformance":
        return f"{comp['checks']} checks, {comp['failed']} not passed ({comp['timing']}, ttl {comp['lease_ttl_ms']} ms){took}"
    if name == "model":
        line = f"{comp['max_examples']} programs of up to {comp['stateful_step_count']} steps{took}"
        if comp.get("error"):
            line += f"; stopped at {comp.get('clause') or 'an error'}: {comp['error']}"
        return line
    if name == "boot":
        return (f"{comp['processes']} processes x {comp['rounds']} rounds: {comp['failures']} of "
                f"{comp['attempts']} boots failed {comp['by_type'] or ''}; worst boot {comp['worst_boot_s'] * 1000:.0f} ms{took}")
    if name == "storm" and "status" in comp:
        short = [f"{k} {comp['quorum_reached'].get(k, 0)}/{v}" for k, v in comp["quorum_target"].items()
                 if comp["quorum_reached"].get(k, 0) < v]
        line = (f"{comp['scenario']} preset, {comp['workers']} workers, ttl {comp['lease_ttl_ms']} ms: ended "
                f"{comp['status']}, {comp['violations']} violation(s)")
        if comp["violated_clauses"]:
            line += f" of {', '.join(comp['violated_clauses'])}"
        if short:
            line += f"; short of quorum: {', '.join(short[:6])}"
        return line + took + (f"; {comp['report_error']}" if comp.get("report_error") else "")
    return str(comp.get("detail", ""))


def render_html(cert: dict[str, Any]) -> str:
    """The certificate as one self-contained page; every string from a store or error is escaped."""
    result = cert["result"]
    rows = []
    for clause, c in cert["clauses"].items():
        css = {"pass": "pass", "fail": "fail"}.get(c["result"], "na")
        srcs = "<br>".join(f"<b>{_esc(s['source'])}</b> {_esc(s['result'])}: {_esc(s['detail'])}" for s in c["sources"])
        rows.append(f"<tr><td><code>{_esc(clause)}</code><br><span class='note'>{_esc(c['title'])}</span></td>"
                    f"<td>{_esc(c['requirement'])}</td><td class='{css}'><b>{_esc(c['result'])}</b></td><td>{srcs}</td></tr>")
    comp_rows = "".join(
        f"<tr><th>{_esc(name)}</th><td>{_esc(comp.get('result'))}</td><td>{_esc(_component_line(name, comp))}</td></tr>"
        for name, comp in cert["components"].items()
    )
    env = cert["environment"]
    env_rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in env.items() if k != "packages")
    env_rows += "".join(f"<tr><th>package {_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in env.get("packages", {}).items())
    report = cert["components"].get("storm", {}).get("report")
    report_link = f'<p>Storm report: <a href="{_esc(report)}">{_esc(report)}</a></p>' if report else ""
    description = cert.get("store_description", "")
    description = "" if description in (cert["store"], cert["store"].split("?")[0]) else description
    headline = ("PASS: no violations observed" if result == PASS
                else "FAIL: " + (", ".join(cert["violated"]) or "clauses not exercised"))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>soak certificate: {_esc(result)}</title>
<style>{_CSS}</style></head><body>
<h1>Certificate: <span class="{'pass' if result == PASS else 'fail'}">{_esc(headline)}</span></h1>
<p>{_esc(cert['statement'])}.</p>
<p class="note">This certificate records what these runs observed. Passing means no violations were observed in
them; it does not establish that none exist.</p>
<table>
<tr><th>store</th><td><code>{_esc(cert['store'])}</code> {_esc(description)}</td></tr>
<tr><th>profile</th><td>{_esc(cert['profile'])} ({_esc(cert['mode'])} run)</td></tr>
<tr><th>soak</th><td>{_esc(cert['soak_version'])}, suite sha256 <code>{_esc(cert['suite_sha256'])}</code> ({_esc(cert['suite_files'])} files)</td></tr>
<tr><th>created</th><td>{_esc(cert['created'])}, {_esc(cert['elapsed_s'])} s</td></tr>
<tr><th>seeds</th><td><code>{_esc(json.dumps(cert['seeds']))}</code></td></tr>
<tr><th>files digested</th><td>{len(cert['digests'])} under <code>{_esc(cert.get('run_dir'))}</code>; re-check with
<code>soak certify --verify certificate.json</code></td></tr>
</table>
{report_link}
<h2>Clauses</h2>
<table><tr><th>clause</th><th>requirement</th><th>result</th><th>what each suite observed</th></tr>{''.join(rows)}</table>
<h2>Suites</h2>
<table><tr><th>suite</th><th>result</th><th>details</th></tr>{comp_rows}</table>
<h2>Environment</h2>
<table>{env_rows}</table>
</body></html>
"""


# -- command line -----------------------------------------------------------------------------

def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="SPEC", help="store spec: sqlite:, package.module:callable?k=v, an entry point name")
    p.add_argument("--profile", choices=PROFILES, default="fenced",
                   help="what the store claims (default fenced: every clause; single-writer: data semantics, "
                        "unleased writes, concurrent boot)")
    p.add_argument("--out", metavar="DIR", help="output directory (default: reports/<UTC timestamp>-certify-<profile>/)")
    p.add_argument("--quick", action="store_true",
                   help="smoke storm preset, fewer model examples and boot rounds (tests and CI)")
    p.add_argument("--seed", type=int, metavar="N", help="storm seed (default: random, recorded in the certificate)")
    p.add_argument("--time-bound", type=float, metavar="S",
                   help="seconds before an unfinished storm stops (default: the preset's); a storm cut short "
                        "without a violation leaves its clauses not exercised, so the certificate fails")
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


def run_cli(args: argparse.Namespace) -> int:
    """`soak certify`: 0 when every required clause passed (or --verify matched), 1 otherwise."""
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
    print(f"certify: {cert['result'].upper()} ({cert['store']}, profile {cert['profile']}, {cert['mode']} run): "
          f"{cert['statement']}")
    for clause in cert["violated"] + cert["not_exercised"]:
        c = cert["clauses"][clause]
        kinds = (FAIL, "error") if clause in cert["violated"] else ("not-exercised",)
        bad = [s for s in c["sources"] if s["result"] in kinds]
        first = bad[0] if bad else {"source": "?", "result": "?", "detail": ""}
        print(f"  FAIL {clause}: {first['source']} {first['result']}: {_one_line(first['detail'], 300)}")
    print(f"certificate: {out / CERTIFICATE_FILE}")
    sys.stdout.flush()
    return 0 if cert["result"] == PASS else 1
