"""The model's Hypothesis settings profiles (`dev`, `ci`, `nightly`): registered here and nowhere else,
once, when `soak.model` is first imported."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, Phase, settings as Settings
from hypothesis.database import DirectoryBasedExampleDatabase

from soak.errors import ScenarioError

__all__ = ["PROFILES", "default_profile", "model_settings"]


#: our profile name -> Hypothesis profile name (namespaced so a vendor's own `ci` stays theirs)
PROFILES: dict[str, str] = {"dev": "soak-dev", "ci": "soak-ci", "nightly": "soak-nightly"}

_BASE = dict(
    # Store set-up (a fresh location per example) must never trip a deadline.
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    report_multiple_bugs=False,
    # The explain phase re-runs the shrunk program many times and adds nothing to a contract failure.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
Settings.register_profile(
    "soak-dev", Settings(Settings.get_profile("default"), max_examples=50, stateful_step_count=30, **_BASE)
)
Settings.register_profile(
    "soak-ci",
    Settings(
        Settings.get_profile("default"),
        max_examples=100,
        stateful_step_count=40,
        derandomize=True,
        database=None,
        print_blob=True,
        **_BASE,
    ),
)
Settings.register_profile(
    "soak-nightly",
    Settings(
        Settings.get_profile("default"),
        max_examples=1000,
        stateful_step_count=50,
        # Randomness on even where Hypothesis detects CI; failures kept for replay.
        derandomize=False,
        database=DirectoryBasedExampleDatabase(os.path.join(".hypothesis", "examples")),
        print_blob=True,
        **_BASE,
    ),
)


def default_profile() -> str:
    """`ci` where Hypothesis detects a CI environment, else `dev`."""
    try:
        from hypothesis._settings import is_in_ci
    except ImportError:  # a private helper: fall back to the common variable
        return "ci" if os.environ.get("CI") else "dev"
    return "ci" if is_in_ci() else "dev"


def model_settings(profile: str | None = None, *, max_examples: int | None = None, **overrides: Any) -> Settings:
    """The Hypothesis settings for one of `PROFILES` (default: `ci` under CI, else `dev`)."""
    name = profile or default_profile()
    if name not in PROFILES:
        raise ScenarioError(f"unknown model profile {name!r}; use one of {', '.join(PROFILES)}")
    if max_examples is not None:
        if max_examples < 1:
            raise ScenarioError(f"--examples must be at least 1, got {max_examples}")
        overrides["max_examples"] = max_examples
    return Settings(Settings.get_profile(PROFILES[name]), **overrides)

