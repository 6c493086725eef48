"""The harness's own error root (stores raise `soak.spi.StoreError`, the harness this)."""

from __future__ import annotations

__all__ = ["HarnessError", "StoreSpecError", "StoreBootError", "ScenarioError", "RunDirError"]


class HarnessError(Exception):
    """Root of every error the harness raises on purpose. Its message is one line naming the fix."""

    exit_code = 1


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
