"""`soak certify`: certify a store (`--store`), or verify a stored certificate (`--verify`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from soak.certify._certificate import certify
from soak.certify._files import CERTIFICATE_FILE, CertifyError, verify_certificate
from soak.certify._plan import FAIL, INCONCLUSIVE, PASS, WORKLOADS, workload_named
from soak.certify._render import render_summary

__all__ = ["configure_parser", "run_cli"]

#: soak certify's exit codes: pass, fail, inconclusive (2 stays for usage errors)
_EXIT = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="SPEC", help="store spec: sqlite:, package.module:callable?k=v, an entry point name")
    p.add_argument("--workload", choices=tuple(WORKLOADS), default="runs",
                   help="which contract the store implements (default runs: CONTRACT section 1; claims: task "
                        "claims, section 2, with the claims conformance suite, model and storm)")
    p.add_argument("--profile", choices=sorted({n for w in WORKLOADS.values() for n in w.profiles}), default=None,
                   help="what the store claims (runs: fenced, the default, every clause; single-writer: data "
                        "semantics, unleased writes, concurrent boot and liveness; claims: claims, its only "
                        "profile); docs/certify.md lists what each requires")
    p.add_argument("--out", metavar="DIR", help="output directory (default: reports/<UTC timestamp>-certify-<profile>/)")
    p.add_argument("--quick", action="store_true",
                   help="smoke storm preset (claims: a smaller quorum), fewer model examples and boot or "
                        "conformance rounds (tests and CI)")
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
    profile = workload_named(args.workload).profile(args.profile).name  # a bad pair fails before anything runs
    if args.out:
        out = Path(args.out)
    else:
        from soak.storm.orchestrator import default_run_dir

        out = default_run_dir(f"certify-{profile}")
    live = sys.stderr.isatty() and not args.quiet
    with _Progress(live) as progress:
        cert = certify(args.store, workload=args.workload, profile=profile, out_dir=out, quick=args.quick, seed=args.seed,
                       time_bound_s=args.time_bound, log=progress.log, progress=live)
    print(render_summary(cert))
    print(f"certificate: {out / CERTIFICATE_FILE}")
    sys.stdout.flush()
    return _EXIT.get(cert["result"], 3)
