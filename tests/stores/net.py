"""What the PostgreSQL and Redis store tests share: the spec of each server, and a fresh location whose
namespace is removed afterwards (every test leaves the server as it found it)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator

from soak.stores import StoreTarget, resolve
from soak.stores.net_mutants import default_url

PG = default_url("postgres")
REDIS = default_url("redis")


@contextlib.contextmanager
def location(target: StoreTarget) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="soak-nettest-")
    try:
        yield path
    finally:
        target.cleanup(path)
        shutil.rmtree(path, ignore_errors=True)


def target(spec: str) -> StoreTarget:
    return resolve(spec)
