"""soak's own model suite: `--store SPEC` as an alias of the plugin's `--soak-store` (same destination).

The plugin namespaces its options so a vendor's own `--store` keeps working; this suite is soak's
own, so `pytest models --store memory:` (the Makefile and CI) keeps its short spelling.
"""

from __future__ import annotations

import pytest

from soak.pytest_plugin import DEFAULT_STORE, STORE_DEST


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("soak").addoption(
        "--store",
        dest=STORE_DEST,
        default=DEFAULT_STORE,
        metavar="SPEC",
        help="soak's model suite: the same as --soak-store",
    )
