"""Tests marked `postgres` or `redis` need that server: skipped where it is missing, failed instead when
`SOAK_REQUIRE_SERVICES=1` (set by .ci/run, so CI never passes by skipping them). The servers are the
ones the networked mutants default to (`SOAK_POSTGRES_URL`, `SOAK_REDIS_URL`)."""

from __future__ import annotations

import functools
import os

import pytest


@functools.cache
def _unreachable(backend: str) -> str | None:
    """Why the backend's server cannot be used here, or None."""
    from soak.stores.net_mutants import default_url

    url = default_url(backend)
    try:
        if backend == "postgres":
            import psycopg

            psycopg.connect(url, connect_timeout=3).close()
        else:
            import redis

            redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except Exception as exc:  # noqa: BLE001 - any failure means the server cannot be used
        return f"{backend} server {url} unavailable: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    for backend in ("postgres", "redis"):
        if item.get_closest_marker(backend) is None:
            continue
        why = _unreachable(backend)
        if why is None:
            continue
        if os.environ.get("SOAK_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{why}; SOAK_REQUIRE_SERVICES=1 says it must be there (start it, as .ci/run does)",
                        pytrace=False)
        pytest.skip(why)
