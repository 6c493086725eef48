"""What the PostgreSQL and Redis store tests share: the spec of each server, and a fresh location whose
namespace is removed afterwards (every test leaves the server as it found it)."""

from __future__ import annotations

import contextlib
import os
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


@contextlib.contextmanager
def one_at_a_time(what: str) -> Iterator[None]:
    """Across pytest-xdist workers, one holder at a time: a PostgreSQL conformance run opens about 52
    connections (48 atomic-fence thieves), and two at once would pass the server's default 100."""
    import fcntl

    with open(os.path.join(tempfile.gettempdir(), f"soak-tests-{what}.lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
