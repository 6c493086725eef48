"""The blob store of a run store that keeps blobs itself (`store.transcripts`): one fencing domain."""

from __future__ import annotations

from typing import Any

from soak.spi import Lease, ref_run

__all__ = ["SharedBlobs"]


class SharedBlobs:
    """`transcripts` of a networked store: every call is its run store's, fenced by the run the ref names."""

    fenced_writes = True

    def __init__(self, store: Any) -> None:
        self._store = store

    def put(self, ref: str, blob: bytes, lease: Lease | None = None) -> None:
        self._store._blob_put(ref_run(ref), ref, bytes(blob), lease)

    def get(self, ref: str) -> bytes | None:
        return self._store._blob_get(ref_run(ref), ref)

    def list(self, run_id: str) -> list[str]:
        return self._store._blob_list(run_id)

    def delete(self, ref: str, lease: Lease | None = None) -> None:
        self._store._blob_delete(ref_run(ref), ref, lease)
