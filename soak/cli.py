"""The `soak` command line.

Each subcommand lives in the module that owns its logic; that module provides
`configure_parser(parser)` and `run_cli(args) -> int`. This file only dispatches and turns
errors into one line and an exit code (0 pass, 1 fail, 2 usage, 3 inconclusive):

- a `HarnessError` keeps its own exit code (2 for usage and configuration errors);
- any other exception is soak's own failure: exit 3 (nothing was concluded), one line on
  stderr naming it, its traceback saved to `soak-traceback.txt` in the directory the command
  was writing (`--out`, the run directory of `soak check`, ...), else in `reports/`;
- Ctrl-C is 130, and a reader that closed stdout (`soak ... | head`) ends the command quietly
  with 141 (128 + SIGPIPE, what a shell reports for a command the broken pipe killed).

Only the module of the command being run is imported (`soak check --help` does not pay for
Hypothesis or matplotlib); `soak --help` lists every command from `SUBCOMMANDS` alone.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from soak.errors import HarnessError, crash

__all__ = ["main", "build_parser", "EXIT_PASS", "EXIT_FAIL", "EXIT_USAGE", "EXIT_INCONCLUSIVE"]

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141

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

#: subcommand -> (the argument naming the directory it writes, whether the command makes it): where a crash's
#: traceback is saved. A directory the command only reads from (`soak check RUN_DIR`) is used when it exists.
CRASH_DIRS: dict[str, tuple[str, bool]] = {
    "storm": ("out", True),
    "certify": ("out", True),
    "selftest": ("out", True),
    "check": ("run_dir", False),
    "report": ("run_dir", False),
    "trend": ("root", False),
}
#: where a crash's traceback goes when the command's own directory is not known from its arguments
DEFAULT_CRASH_DIR = "reports"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_USAGE, f"soak: {message} (see `{self.prog} --help`)\n")


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand argv names: its first word that is not an option (the top level has no option with a value)."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `soak` parser. Every command is listed; only the one `argv` names is configured (its module imported).

    With `argv=None` every command is configured (importing every command's module).
    """
    from soak import __version__

    wanted = set(SUBCOMMANDS) if argv is None else {_command_in(argv)}
    parser = _Parser(prog="soak", description="Adversarial verification and soak harness for lease-fenced stores.")
    parser.add_argument("--version", action="version", version=f"soak {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name in wanted:
            module = importlib.import_module(module_name)
            module.configure_parser(p)
            p.set_defaults(_run=module.run_cli)
    return parser


def _stdout_gone() -> bool:
    """True when stdout is a pipe or socket whose reader has gone (poll reports an error on it)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (captured, closed): not a broken pipe
        return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so what is still buffered for the reader that left is not an error at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_gone():
            raise
        _silence_stdout()


def crash_dir(command: str | None, args: argparse.Namespace | None) -> Path:
    """The directory a crash of `command` saves its traceback in (see `CRASH_DIRS`)."""
    attr, makes = CRASH_DIRS.get(command or "", (None, False))
    value = getattr(args, attr, None) if attr and args is not None else None
    if value:
        path = Path(value)
        if path.is_dir() and os.access(path, os.W_OK):
            return path
        if makes and not path.exists():
            try:
                path.mkdir(parents=True, exist_ok=True)
                return path
            except OSError:
                pass
    return Path(DEFAULT_CRASH_DIR)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(argv)
    args: argparse.Namespace | None = None
    try:
        parser = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit:  # --help, --version, a usage error: flush what argparse printed while we can
            _flush_stdout()
            raise
        if getattr(args, "_run", None) is None:
            parser.print_help()
            _flush_stdout()
            return EXIT_USAGE
        code = int(args._run(args))
        _flush_stdout()
        return code
    except HarnessError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("soak: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        if _stdout_gone():  # `soak ... | head`: the reader left; not a crash of soak
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        return _crashed(exc, command, args)
    except Exception as exc:  # noqa: BLE001 - soak's own failure: inconclusive, never fail or usage
        return _crashed(exc, command, args)


def _crashed(exc: Exception, command: str | None, args: argparse.Namespace | None) -> int:
    known = command if command in SUBCOMMANDS else None
    err = crash(exc, crash_dir(known, args), known or "soak")
    print(f"soak: {err}", file=sys.stderr)
    return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
