"""The harness's own error root (stores raise `soak.spi.StoreError`, the harness this)."""

from __future__ import annotations

__all__ = ["HarnessCrash", "HarnessError", "RunDirError", "ScenarioError", "StoreBootError", "StoreSpecError",
           "TRACEBACK_FILE", "crash", "save_traceback"]

import time
import traceback
from pathlib import Path

#: Where a command that crashed leaves its traceback, inside the directory it was writing (a run directory).
TRACEBACK_FILE = "soak-traceback.txt"


class HarnessError(Exception):
    """Root of every error the harness raises on purpose. Its message is one line naming the fix.

    Exit code 2 (usage or configuration) unless a subclass says otherwise: a deliberate harness error is never a
    verdict, so it never exits 1 (fail) or 0."""

    exit_code = 2


class StoreSpecError(HarnessError, ValueError):
    """A store spec string that cannot be resolved to a store factory."""

    exit_code = 2


class StoreBootError(HarnessError):
    """A store factory that raised, hung or returned something that is not a store."""

    exit_code = 2


class ScenarioError(HarnessError, ValueError):
    """A scenario file or option that is malformed: names the key and what it accepts."""

    exit_code = 2


class RunDirError(HarnessError, ValueError):
    """A run directory that is missing or not a soak run."""

    exit_code = 2


class HarnessCrash(HarnessError):
    """soak itself failed unexpectedly: nothing can be concluded (exit 3, inconclusive). The message is one line
    naming the exception and the file its traceback was saved to."""

    exit_code = 3


def save_traceback(directory: str | Path, exc: BaseException, what: str = "soak") -> Path:
    """Append `exc`'s traceback to `directory/soak-traceback.txt` (made if needed) and return the file's path."""
    path = Path(directory) / TRACEBACK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"--- {what}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        fh.write("".join(traceback.format_exception(exc)))
    return path


def crash(exc: BaseException, directory: str | Path, what: str = "soak") -> HarnessCrash:
    """The `HarnessCrash` for an unexpected `exc`, its traceback saved under `directory` (raise it `from exc`)."""
    try:
        where = f"traceback in {save_traceback(directory, exc, what)}"
    except OSError as err:
        where = f"traceback not saved ({err.strerror or err})"
    text = " ".join(str(exc).split())[:300] or "(no message)"
    return HarnessCrash(f"{what} failed unexpectedly: {type(exc).__name__}: {text}; {where}; this is a soak bug "
                        "or an environment problem, and nothing was concluded (inconclusive)")
