"""The runs workload's final state: every run's journal, meta and blobs read back after the storm, and a probe.

Read through the public store API only (`read_snapshot`), so it works for every store; saved in the run
directory as `final_state.json` (`save_snapshot`, `load_snapshot`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
import os

from soak.errors import RunDirError
from soak.rundir import FINAL_STATE, write_json
from soak.spi import FencedRunStore, JournalEntry, RunMeta

__all__ = ["Snapshot", "load_snapshot", "read_snapshot", "save_snapshot"]


@dataclass(slots=True)
class Snapshot:
    """The store's final state for a set of runs, as read back through the store API.

    `probe` holds, per run, the epoch a fresh `acquire` got after every worker had stopped and
    1.2 x ttl had passed (or the error it raised): the epoch high-water and `ttl-honoured`
    seen from outside.
    """

    journals: dict[str, list[JournalEntry]]
    metas: dict[str, RunMeta | None]
    blobs: dict[str, dict[str, bytes]]  # run -> ref -> bytes
    listed_runs: list[str]
    probe: dict[str, dict[str, Any]]
    read_errors: list[str]


def read_snapshot(store: FencedRunStore, run_ids: list[str], *, probe: bool = True) -> Snapshot:
    """Read every run's journal, meta and blobs, then probe each run's epoch with an acquire.

    `StoreBusyError` is retried (`soak.retry`): busy means nothing happened. Any other error is recorded in
    `read_errors` (the checker cannot diff what it could not read) rather than raised.
    """
    from soak.retry import retry_busy

    journals: dict[str, list[JournalEntry]] = {}
    metas: dict[str, RunMeta | None] = {}
    blobs: dict[str, dict[str, bytes]] = {}
    errors: list[str] = []
    listed: list[str] = []
    for run in run_ids:
        try:
            journals[run] = list(retry_busy(lambda: store.load(run), f"load({run!r})"))
            metas[run] = retry_busy(lambda: store.get_meta(run), f"get_meta({run!r})")
            refs = retry_busy(lambda: store.transcripts.list(run), f"transcripts.list({run!r})")
            blobs[run] = {}
            for ref in refs:
                data = retry_busy(lambda: store.transcripts.get(ref), f"transcripts.get({ref!r})")
                if data is not None:
                    blobs[run][ref] = bytes(data)
        except Exception as exc:  # a store that cannot be read is itself evidence
            journals.pop(run, None)
            errors.append(f"reading run {run}: {type(exc).__name__}: {exc}")
    try:
        listed = sorted(m.run_id for m in retry_busy(store.list_runs, "list_runs()"))
    except Exception as exc:
        errors.append(f"list_runs: {type(exc).__name__}: {exc}")
    probes: dict[str, dict[str, Any]] = {}
    if probe:
        time.sleep(store.lease_ttl_ms * 1.2 / 1000.0)
        for run in run_ids:
            try:
                lease = retry_busy(lambda: store.acquire(run, "soak-final-probe"), f"acquire({run!r})")
                probes[run] = {"epoch": lease.epoch}
                try:
                    retry_busy(lambda: store.release(lease), "release of the probe's lease")
                except Exception:  # noqa: BLE001 - the probe's own lease: its release proves nothing
                    pass
            except Exception as exc:
                probes[run] = {"error": type(exc).__name__, "message": str(exc)[:300]}
    return Snapshot(journals, metas, blobs, listed, probes, errors)


def _snapshot_to_json(snap: Snapshot) -> dict[str, Any]:
    return {
        "journals": {r: [[e.seq, e.payload.hex()] for e in es] for r, es in snap.journals.items()},
        "metas": {
            r: None if m is None else {"run_id": m.run_id, "status": m.status, "segments": m.segments,
                                       "payload": m.payload.hex()}
            for r, m in snap.metas.items()
        },
        "blobs": {r: {ref: b.hex() for ref, b in bs.items()} for r, bs in snap.blobs.items()},
        "listed_runs": snap.listed_runs,
        "probe": snap.probe,
        "read_errors": snap.read_errors,
    }


def save_snapshot(run_dir: str | os.PathLike[str], snap: Snapshot) -> None:
    write_json(Path(run_dir) / FINAL_STATE, _snapshot_to_json(snap))


def load_snapshot(run_dir: str | os.PathLike[str]) -> Snapshot:
    path = Path(run_dir) / FINAL_STATE
    if not path.is_file():
        raise RunDirError(f"{path} is missing: the storm did not read the final state back")
    try:
        obj = json.loads(path.read_text())
        return Snapshot(
            journals={r: [JournalEntry(int(s), bytes.fromhex(h)) for s, h in es] for r, es in obj["journals"].items()},
            metas={
                r: None if m is None else RunMeta(m["run_id"], m["status"], int(m["segments"]), bytes.fromhex(m["payload"]))
                for r, m in obj["metas"].items()
            },
            blobs={r: {ref: bytes.fromhex(h) for ref, h in bs.items()} for r, bs in obj["blobs"].items()},
            listed_runs=list(obj["listed_runs"]),
            probe=dict(obj["probe"]),
            read_errors=list(obj["read_errors"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise RunDirError(f"{path} is unreadable ({exc}); the run directory is damaged") from exc
