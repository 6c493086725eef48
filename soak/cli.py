"""The `soak` command line.

Each subcommand lives in the module that owns its logic; that module provides
`configure_parser(parser)` and `run_cli(args) -> int`. This file only dispatches and turns
harness errors into one line and an exit code (0 pass, 1 fail, 2 usage, 3 inconclusive).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from soak.errors import HarnessError

__all__ = ["main", "EXIT_PASS", "EXIT_FAIL", "EXIT_USAGE", "EXIT_INCONCLUSIVE"]

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3

#: subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "storm": ("soak.storm.cli", "storm one store location with real processes, then check it"),
    "check": ("soak.check.cli", "re-check a stored run directory offline"),
    "conformance": ("soak.conformance", "single-process contract checks, one per clause"),
    "boot": ("soak.storm.boot", "open one fresh store location from many processes at once"),
    "model": ("soak.model", "run the Hypothesis state machine against a store"),
    "report": ("soak.report", "rebuild report.html, plots and junit.xml of a stored run"),
    "trend": ("soak.report.trend", "plot verdicts, storm length and throughput across many runs"),
    "certify": ("soak.certify", "certify a store: every suite, one certificate with per-clause results"),
    "selftest": ("soak.selftest", "storm every mutant and the reference stores: what soak catches, and false alarms"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_USAGE, f"soak: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from soak import __version__

    parser = _Parser(prog="soak", description="Adversarial verification and soak harness for lease-fenced stores.")
    parser.add_argument("--version", action="version", version=f"soak {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue  # a subcommand whose module is not built yet is simply absent
            raise
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.configure_parser(p)
        p.set_defaults(_run=module.run_cli)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args._run(args))
    except HarnessError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("soak: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
