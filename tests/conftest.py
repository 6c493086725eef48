"""Tests marked `postgres` or `redis` need that server: skipped where it is missing, failed instead when
`SOAK_REQUIRE_SERVICES=1` (set by .ci/run, so CI never passes by skipping them). The servers are the
ones the networked mutants default to (`SOAK_POSTGRES_URL`, `SOAK_REDIS_URL`). Tests marked `node` need
Node 20 or later and the JavaScript shim's packages (`npm ci --prefix adapters/js`), the same way."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

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


JS_ADAPTER = Path(__file__).resolve().parent.parent / "adapters" / "js"


@functools.cache
def _node_missing() -> str | None:
    """Why the JavaScript shim's tests cannot run here (no Node 20+, or its packages not installed), or None."""
    node = shutil.which("node")
    if node is None:
        return "node is not on PATH: install Node 20 or later"
    probe = ("const [major] = process.versions.node.split('.').map(Number);"
             "if (major < 20) { console.error('node ' + process.versions.node + ' is older than 20'); process.exit(3); }"
             "require('better-sqlite3')(':memory:').close();")
    try:
        done = subprocess.run([node, "-e", probe], cwd=JS_ADAPTER, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"node could not run: {exc}"
    if done.returncode == 3:
        return f"{done.stderr.strip()}: install Node 20 or later"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["no output"]
        last = next((ln for ln in lines if "Error" in ln), lines[-1]).strip()[:200]
        return f"the JavaScript shim's packages do not load ({last}): run `npm ci --prefix adapters/js` (make setup does)"
    return None


def _needs(item: pytest.Item, what: str) -> str | None:
    if item.get_closest_marker(what) is None:
        return None
    return _node_missing() if what == "node" else _unreachable(what)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for backend in ("postgres", "redis", "node"):
        why = _needs(item, backend)
        if why is None:
            continue
        if os.environ.get("SOAK_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{why}; SOAK_REQUIRE_SERVICES=1 says it must be there (.ci/run starts or installs it)",
                        pytrace=False)
        pytest.skip(why)
