"""pytest plugin (entry point `soak`): `--soak-store SPEC`, `--soak-profile` and `--soak-examples` for the model suites.

A thin layer over `soak.model`: the `soak_store` fixture is the resolved store target and
`soak_settings` the Hypothesis settings of the chosen profile, so `pytest --soak-store memory:`
runs the same machine as `soak model --store memory:`. Every option is namespaced `--soak-*`, so a
project's own `--store` option keeps working with the plugin installed; soak's own model suite
adds `--store` as an alias in `models/conftest.py` (`pytest models --store memory:`).
"""

from __future__ import annotations

import pytest

DEFAULT_STORE = "sqlite:"
#: the option destination of `--soak-store` (an alias such as the models suite's `--store` uses the same)
STORE_DEST = "soak_store"
_PROFILES = ("ci", "dev", "nightly")  # mirrors soak.model.PROFILES; kept here so loading stays cheap


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soak", "soak store models")
    group.addoption(
        "--soak-store",
        dest=STORE_DEST,
        default=DEFAULT_STORE,
        metavar="SPEC",
        help=f"store spec the soak model suites run against (default: {DEFAULT_STORE})",
    )
    group.addoption(
        "--soak-profile",
        dest="soak_profile",
        default=None,
        choices=_PROFILES,
        help="Hypothesis profile for the soak models: dev, ci or nightly (default: ci under CI, else dev)",
    )
    group.addoption(
        "--soak-examples",
        dest="soak_examples",
        default=None,
        type=int,
        metavar="N",
        help="programs per soak model run (default: the profile's); a smaller budget for a slow store",
    )


def pytest_configure(config: pytest.Config) -> None:
    examples = config.getoption("soak_examples", None)
    if examples is not None and examples < 1:
        raise pytest.UsageError(f"--soak-examples: must be at least 1, got {examples}")
    spec = config.getoption(STORE_DEST, DEFAULT_STORE)
    if spec != DEFAULT_STORE:  # a bad spec is a one-line usage error, before any test runs
        from soak.errors import HarnessError
        from soak.stores import resolve

        try:
            resolve(spec)
        except HarnessError as exc:
            raise pytest.UsageError(f"--soak-store: {exc}") from None


@pytest.fixture(scope="session")
def soak_store(pytestconfig: pytest.Config):
    """The `soak.stores.StoreTarget` named by `--soak-store`."""
    from soak.stores import resolve

    return resolve(pytestconfig.getoption(STORE_DEST))


@pytest.fixture(scope="session")
def soak_profile(pytestconfig: pytest.Config) -> str:
    """The model profile named by `--soak-profile` (default: `ci` under CI, else `dev`)."""
    from soak.model import default_profile

    return pytestconfig.getoption("soak_profile") or default_profile()


@pytest.fixture(scope="session")
def soak_settings(pytestconfig: pytest.Config, soak_profile: str):
    """Hypothesis settings of the chosen model profile (`--soak-examples` programs, if given)."""
    from soak.model import model_settings

    return model_settings(soak_profile, max_examples=pytestconfig.getoption("soak_examples"))
