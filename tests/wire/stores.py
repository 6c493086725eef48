"""Stores the wire tests serve with the Python wire server (`exec:python -m soak.stores.wire_server
tests.wire.stores:NAME?n=N`): the reference SQLite store, except at its n-th fenced append in each child process
(or that fails to boot, or prints to stdout)."""

from __future__ import annotations

import os
import sys
import time

from soak.stores.sqlite import open_sqlite


def _at_nth_append(location: str, lease_ttl_ms: int, n: str, then):
    store = open_sqlite(location, lease_ttl_ms=lease_ttl_ms)
    append, count = store.append, [0]

    def patched(run_id, entry, lease=None):
        if lease is not None:
            count[0] += 1
            if count[0] == int(n):
                return then(append, run_id, entry, lease)
        return append(run_id, entry, lease)

    store.append = patched
    return store


def dies_after_nth_append(location: str, *, lease_ttl_ms: int, n: str = "5"):
    """The child commits its n-th accepted fenced append and dies before answering: applied, and unknown to the
    caller (a child answers at most n - 1 accepted appends)."""
    store = open_sqlite(location, lease_ttl_ms=lease_ttl_ms)
    append, accepted = store.append, [0]

    def patched(run_id, entry, lease=None):
        append(run_id, entry, lease)
        if lease is not None:
            accepted[0] += 1
            if accepted[0] == int(n):
                print(f"dying after append {entry.seq} of {run_id}", file=sys.stderr, flush=True)
                os._exit(9)

    store.append = patched
    return store


def hangs_at_nth_append(location: str, *, lease_ttl_ms: int, n: str = "5"):
    """The child's n-th fenced append never returns."""

    def hang(append, run_id, entry, lease):
        time.sleep(3600)

    return _at_nth_append(location, lease_ttl_ms, n, hang)


def boot_fails(location: str, *, lease_ttl_ms: int):
    print("connecting to the vendor database", file=sys.stderr, flush=True)
    raise RuntimeError("vendor database refused the connection")


def chatty(location: str, *, lease_ttl_ms: int):
    """A store that prints to stdout: the server must keep the protocol clean."""
    print("hello from a store that prints")
    return open_sqlite(location, lease_ttl_ms=lease_ttl_ms)


def boots_slowly_and_dies_after_nth_append(location: str, *, lease_ttl_ms: int, n: str = "3", boot_s: str = "3"):
    """`dies_after_nth_append` whose every child takes `boot_s` seconds to boot: the first boot is the worker's
    `open`, every later one a restart inside the call after a death."""
    time.sleep(float(boot_s))
    return dies_after_nth_append(location, lease_ttl_ms=lease_ttl_ms, n=n)
