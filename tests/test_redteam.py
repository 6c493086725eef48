"""The outsider red team (issue 18): does the smoke storm catch stores broken from the CONTRACT alone?

Two tiers:
- fast: each store of `tests.redteam_stores` really breaks its cell. A short program (injected
  clock) shows the broken behaviour on the red-team store and not on the `sqlite:` reference it is
  built from, so an xfail below can never stand for a store that is accidentally correct.
- slow: one smoke storm per store must fail naming the store's clause. Stores the storm of the
  current main does not catch are strict xfails naming the cell it does not reach: once the storm
  catches one, its test turns red and the mark is to be removed (benchmarks/redteam.py measures
  the rates behind these marks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from soak.clauses import CLAUSES
from soak.spi import JournalEntry, Lease, LeaseHeldError, RunMeta, StoreBusyError, StoreError
from soak.stores.sqlite import SqliteStore
from tests import redteam_stores
from tests.redteam_stores import REDTEAM

ROOT = Path(__file__).resolve().parents[1]
TTL_MS = 1000


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, ttls: float) -> None:
        self.now += ttls * TTL_MS / 1000.0


def _entry(seq: int) -> JournalEntry:
    return JournalEntry(seq, b"p%d" % seq)


def _meta(run_id: str, payload: bytes = b"") -> RunMeta:
    return RunMeta(run_id, "running", 1, payload)


def _accepted(call: Callable[[], object]) -> bool:
    """True when the call returned; False when the store refused it with LeaseHeldError."""
    try:
        call()
    except LeaseHeldError:
        return False
    return True


def _superseded(s, clock) -> tuple[Lease, Lease]:
    old = s.acquire("r", "a")
    clock.advance(2)
    return old, s.acquire("r", "b")


# One program per store: True when the store shows the broken behaviour of its cell.
def _append_superseded(s, clock):
    old, _ = _superseded(s, clock)
    return _accepted(lambda: s.append("r", _entry(1), old)) and s.load("r") == [_entry(1)]


def _meta_released(s, clock):
    a = s.acquire("r", "a")
    s.release(a)
    return _accepted(lambda: s.put_meta(_meta("r"), a)) and s.get_meta("r") is not None


def _delete_released_superseded(s, clock):
    a = s.acquire("r", "a")
    s.append("r", _entry(1))
    s.release(a)
    s.acquire("r", "b")
    return _accepted(lambda: s.delete("r", a)) and s.load("r") == []


def _blob_put_superseded(s, clock):
    old, _ = _superseded(s, clock)
    return _accepted(lambda: s.transcripts.put("r/x", b"1", old)) and s.transcripts.get("r/x") == b"1"


def _blob_delete_released(s, clock):
    a = s.acquire("r", "a")
    s.transcripts.put("r/x", b"1", a)
    s.release(a)
    return _accepted(lambda: s.transcripts.delete("r/x", a)) and s.transcripts.get("r/x") is None


def _blob_delete_other_owner(s, clock):
    a = s.acquire("r", "a")
    s.transcripts.put("r/x", b"1", a)
    forged = Lease("r", "mallory", a.epoch)
    return _accepted(lambda: s.transcripts.delete("r/x", forged)) and s.transcripts.get("r/x") is None


def _append_never_issued(s, clock):
    a = s.acquire("r", "a")
    future = Lease("r", "a", a.epoch + 5)
    return _accepted(lambda: s.append("r", _entry(1), future)) and s.load("r") == [_entry(1)]


def _release_keeps_expiry(s, clock):
    a = s.acquire("r", "a")
    s.release(a)
    return _accepted(lambda: s.append("r", _entry(1), a)) and s.load("r") == [_entry(1)]


def _meta_other_run(s, clock):
    a = s.acquire("r1", "a")
    return _accepted(lambda: s.put_meta(_meta("r2"), a)) and s.get_meta("r2") is not None


def _blob_put_ref_other_run(s, clock):
    a = s.acquire("r1", "a")
    return _accepted(lambda: s.transcripts.put("r2/x", b"1", a)) and s.transcripts.get("r2/x") == b"1"


def _append_epoch_only(s, clock):
    a = s.acquire("r1", "a")
    s.acquire("r2", "b")  # epoch 1 too
    return _accepted(lambda: s.append("r2", _entry(1), a)) and s.load("r2") == [_entry(1)]


def _renew_superseded(s, clock):
    old, _ = _superseded(s, clock)
    return _accepted(lambda: s.renew(old))


def _release_superseded(s, clock):
    old, _ = _superseded(s, clock)
    return _accepted(lambda: s.release(old)) and _accepted(lambda: s.acquire("r", "c"))


def _release_other_owner(s, clock):
    a = s.acquire("r", "a")
    return _accepted(lambda: s.release(Lease("r", "mallory", a.epoch))) and _accepted(lambda: s.acquire("r", "c"))


def _acquire_reentrant(s, clock):
    s.acquire("r", "a")
    return _accepted(lambda: s.acquire("r", "a"))


def _epoch_reuse_after_release(s, clock):
    a = s.acquire("r", "a")
    s.release(a)
    return s.acquire("r", "b").epoch <= a.epoch


def _epoch_lost_on_empty_delete(s, clock):
    s.release(s.acquire("r", "a"))
    b = s.acquire("r", "b")
    s.delete("r", b)
    clock.advance(2)
    return s.acquire("r", "c").epoch <= b.epoch


def _renew_from_old_expiry(s, clock):
    a = s.acquire("r", "a")
    clock.advance(0.1)
    s.renew(a)
    clock.advance(1.25)  # 1.25 ttl after the renew: past the 1.2 ttl takeover bound
    return not _accepted(lambda: s.acquire("r", "b"))


def _ttl_triple(s, clock):
    s.acquire("r", "a")
    clock.advance(1.25)
    return not _accepted(lambda: s.acquire("r", "b"))


def _meta_acquire_clock(s, clock):
    a = s.acquire("r", "a")
    clock.advance(0.8)
    s.renew(a)
    clock.advance(0.4)  # 0.4 ttl after the renew: live
    return not _accepted(lambda: s.put_meta(_meta("r"), a))


def _blob_put_refusal_mutates(s, clock):
    a = s.acquire("r", "a")
    clock.advance(2)  # expired, nobody superseded it: refusing is conformant, writing anyway is not
    return not _accepted(lambda: s.transcripts.put("r/x", b"1", a)) and s.transcripts.get("r/x") == b"1"


def _renew_untyped_refusal(s, clock):
    old, _ = _superseded(s, clock)
    try:
        s.renew(old)
    except StoreError:
        return False
    except Exception:
        return True
    return False


def _append_busy_after_write(s, clock):
    a = s.acquire("r", "a")
    for seq in range(1, 60):
        try:
            s.append("r", _entry(seq), a)
        except StoreBusyError:
            if _entry(seq) in s.load("r"):
                return True
    return False


def _blob_delete_unleased_refused(s, clock):
    s.acquire("r", "a")
    s.transcripts.put("r/x", b"1")
    return not _accepted(lambda: s.transcripts.delete("r/x"))


def _load_cached(s, clock):
    a = s.acquire("r", "a")
    s.load("r")
    s.append("r", _entry(1), a)
    return s.load("r") == []


def _meta_keeps_first_payload(s, clock):
    a = s.acquire("r", "a")
    s.put_meta(_meta("r", b"first"), a)
    s.put_meta(_meta("r", b"second"), a)
    return s.get_meta("r").payload == b"first"


PROGRAMS: dict[str, Callable] = {
    "AppendSuperseded": _append_superseded,
    "MetaReleased": _meta_released,
    "DeleteReleasedSuperseded": _delete_released_superseded,
    "BlobPutSuperseded": _blob_put_superseded,
    "BlobDeleteReleased": _blob_delete_released,
    "BlobDeleteOtherOwner": _blob_delete_other_owner,
    "AppendNeverIssued": _append_never_issued,
    "ReleaseKeepsExpiry": _release_keeps_expiry,
    "MetaOtherRun": _meta_other_run,
    "BlobPutRefOtherRun": _blob_put_ref_other_run,
    "AppendEpochOnly": _append_epoch_only,
    "RenewSuperseded": _renew_superseded,
    "ReleaseSuperseded": _release_superseded,
    "ReleaseOtherOwner": _release_other_owner,
    "AcquireReentrant": _acquire_reentrant,
    "EpochReuseAfterRelease": _epoch_reuse_after_release,
    "EpochLostOnEmptyDelete": _epoch_lost_on_empty_delete,
    "RenewFromOldExpiry": _renew_from_old_expiry,
    "TtlTriple": _ttl_triple,
    "MetaAcquireClock": _meta_acquire_clock,
    "BlobPutRefusalMutates": _blob_put_refusal_mutates,
    "RenewUntypedRefusal": _renew_untyped_refusal,
    "AppendBusyAfterWrite": _append_busy_after_write,
    "BlobDeleteUnleasedRefused": _blob_delete_unleased_refused,
    "LoadCached": _load_cached,
    "MetaKeepsFirstPayload": _meta_keeps_first_payload,
}


def test_every_store_has_a_program_and_a_real_clause():
    assert set(PROGRAMS) == set(REDTEAM)
    assert len(REDTEAM) >= 16
    for name, (spec, clause, cell) in REDTEAM.items():
        assert clause in CLAUSES, (name, clause)
        assert spec == f"tests.redteam_stores:open_{name}"
        assert cell.startswith("(") and cell.endswith(")"), (name, cell)


@pytest.mark.parametrize("name", sorted(REDTEAM))
def test_store_breaks_its_cell_where_the_reference_does_not(name, tmp_path):
    program = PROGRAMS[name]
    for broken in (True, False):
        clock = _Clock()
        location = tmp_path / ("broken" if broken else "reference")
        location.mkdir()
        if broken:
            store = getattr(redteam_stores, f"open_{name}")(str(location), lease_ttl_ms=TTL_MS, clock=clock)
        else:
            store = SqliteStore(str(location / "store.db"), TTL_MS, clock=clock)
        try:
            assert program(store, clock) is broken, f"{name} on the {location.name} store"
        finally:
            store.close()


# -- slow: the smoke storm against each store ----------------------------------------------------

# What the smoke storm does not catch (benchmarks/redteam.py; 3 storms each before the coverage probes, 2 each
# after them, which caught 7 of the 11 listed then): the reason names the cell the storm does not reach.
NOT_CAUGHT: dict[str, str] = {}  # every store is caught since the renewed, empty-delete and unleased-held probes
# Caught but misnamed: none since a refused write seen by a read is typed-refusal even when the final state no longer
# holds it (BlobPutRefusalMutates was named stale-rejected in 3 storms of 10).
MISNAMED: dict[str, str] = {}


def _storm_params():
    for name in sorted(REDTEAM):
        marks = []
        if name in NOT_CAUGHT:
            marks.append(pytest.mark.xfail(strict=True, reason=NOT_CAUGHT[name]))
        elif name in MISNAMED:
            marks.append(pytest.mark.xfail(strict=False, reason=MISNAMED[name]))
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_storm_params()))
def test_smoke_storm_fails_naming_the_clause(name, tmp_path):
    spec, clause, cell = REDTEAM[name]
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the red-team stores live in this checkout's tests package
    done = subprocess.run([sys.executable, "-m", "soak.cli", "storm", "--store", spec, "--quiet", "--no-report",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    named = {v["clause"] for v in verdict["violations"]}
    assert verdict["result"] == "fail" and clause in named, (
        f"{name} breaks {clause} on {cell}; the storm said {verdict['result']} naming {sorted(named)}"
    )
