"""Store factories that fail or hang at boot, for the boot storm's tests."""

from __future__ import annotations

import time

from soak.stores.sqlite import open_sqlite


def open_refusing(location: str, *, lease_ttl_ms: int):
    """A networked store whose server is down."""
    raise ConnectionRefusedError("no server here")


def open_hanging_in_worker_1(location: str, *, lease_ttl_ms: int):
    """Hangs in the process whose boot run is boot-1; the others boot the reference store."""
    import multiprocess

    if multiprocess.current_process().name.endswith("-1"):
        time.sleep(3600)
    return open_sqlite(location, lease_ttl_ms=lease_ttl_ms)
