"""A store for the certify tests that makes no fencing claim (the single-writer profile).

Kept apart from the test module so the processes a certification spawns import only this.
"""

from __future__ import annotations

import os
import time

from soak.stores.sqlite import SqliteStore, _SqliteBlobs


class _UnleasedBlobs(_SqliteBlobs):
    fenced_writes = False

    def put(self, ref, blob, lease=None):
        super().put(ref, blob, None)

    def delete(self, ref, lease=None):
        super().delete(ref, None)


class _SingleWriterStore(SqliteStore):
    """A store that makes no fencing claim: every mutation ignores its lease."""

    fenced_writes = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.transcripts = _UnleasedBlobs(self)

    def append(self, run_id, entry, lease=None):
        super().append(run_id, entry, None)

    def put_meta(self, meta, lease=None):
        super().put_meta(meta, None)

    def delete(self, run_id, lease=None):
        super().delete(run_id, None)


def open_single_writer(location: str, *, lease_ttl_ms: int, clock=None) -> _SingleWriterStore:
    return _SingleWriterStore(os.path.join(location, "store.db"), lease_ttl_ms, clock=clock or time.time)
