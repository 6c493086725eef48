"""The checks, one function per clause (some record sub-checks under other clause ids), and their table.

Each check is fn(ctx) and records one or more sub-checks through `ctx.sub(...)`. Every store object a check
uses is opened by the thread that uses it (`ctx.open()` in the check's thread, `ctx.thread()` for another).
Where the contract leaves the store a choice, a check accepts either reading, reports which one it saw
(`ctx.observe`), and checks what that reading then requires.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from soak.conformance._atomic import check_atomic_fence
from soak.conformance._context import (
    CheckFailed,
    Ctx,
    Inconclusive,
    NotExercised,
    call,
    expect,
    fill,
    mutations,
    one_line,
    payload,
    refused,
    shares_state,
    snapshot,
    unchanged,
)
from soak.clauses import expired_choice
from soak.retry import BusyExhausted
from soak.spi import JournalEntry, JournalOrderError, Lease, LeaseHeldError, RunMeta, StoreError

__all__ = ["ALSO_COVERS", "CHECKS", "DELETE_CHOICE", "ENDS", "EXPIRED_CHOICE", "KEEPS", "LIVENESS"]

#: The choice keys of `ConformanceReport.choices` these checks observe.
DELETE_CHOICE, EXPIRED_CHOICE = "delete-ends-tenure", "expired-unsuperseded"
ENDS, KEEPS = "ends", "keeps"


# -- store choices: a fenced delete may end the caller's tenure or keep it ------------------------

def after_fenced_delete(ctx: Ctx, s: Any, run: str, lease: Lease, what: str, probe: Callable[[], Any]) -> Lease | None:
    """The first operation under `lease` after its fenced delete of `run` tells the store's choice: accepted,
    the delete kept the tenure; `LeaseHeldError`, it ended it, and then every later operation under the lease
    must be refused without mutating, and another owner must get the run at once with a higher epoch (that
    successor's lease is returned; None where the tenure was kept)."""
    try:
        probe()
    except (BusyExhausted, CheckFailed, Inconclusive, NotExercised):
        raise
    except LeaseHeldError:
        ctx.observe(DELETE_CHOICE, ENDS, f"{what} after the fenced delete was refused")
        return _tenure_ended(ctx, s, run, lease)
    except Exception as exc:
        raise CheckFailed(f"{what} after a fenced delete raised {type(exc).__name__} ({one_line(exc)}); expected it "
                          "accepted (the delete kept the tenure) or LeaseHeldError (the delete ended it)") from exc
    ctx.observe(DELETE_CHOICE, KEEPS, f"{what} after the fenced delete was accepted")
    return None


def _tenure_ended(ctx: Ctx, s: Any, run: str, lease: Lease) -> Lease:
    before = snapshot(s, [run])
    ops: dict[str, Callable[[], Any]] = {"renew": lambda: s.renew(lease), "release": lambda: s.release(lease)}
    for surface, fn in mutations(s).items():
        ops[surface] = lambda fn=fn: fn(run, lease)
    for name, fn in ops.items():
        refused(fn, f"{name} under {lease} after its fenced delete ended the tenure")
    unchanged(s, [run], before, "an operation under a tenure its fenced delete ended")
    succ = call(lambda: s.acquire(run, "after-delete"), "acquire by another owner right after a fenced delete "
                "ended the tenure (the tenure is neither live nor ended)")
    expect(succ.epoch > lease.epoch, f"acquire after a fenced delete got epoch {succ.epoch}, not above the deleting "
           f"tenure's {lease.epoch} (the epoch high-water mark did not survive the delete)")
    ctx.note("the fenced delete ended the tenure: every later operation under it refused, nothing mutated, "
             f"another owner got epoch {succ.epoch} at once")
    return succ


def check_lease_exclusive(ctx: Ctx) -> None:
    s = ctx.open()
    a: Lease | None = None
    with ctx.sub("exclusive-acquire"):
        a = call(lambda: s.acquire("r", "a"), "acquire r by a")
        expect(a.epoch == 1, f"first acquire of a run got epoch {a.epoch}, expected 1")
        err = refused(lambda: s.acquire("r", "b"), "acquire r by b while a holds a live lease")
        holder = getattr(err, "holder", None)
        expect(holder in (None, a), f"LeaseHeldError.holder is {holder}, expected {a} or None")
        refused(lambda: s.acquire("r", "a"), "acquire r again by its own live holder")
        other = call(lambda: s.acquire("r2", "b"), "acquire of another run r2")
        expect(other.epoch == 1, f"acquire of fresh run r2 got epoch {other.epoch}, expected 1")
        ctx.note("a live tenure refuses every other acquire of its run, its own holder's too")
    with ctx.sub("exclusive-after-renew"):
        a = ctx.needs(a, "exclusive-acquire")
        ctx.advance(ctx.ttl * 0.5)
        call(lambda: s.renew(a), "renew by the live holder")
        ctx.advance(ctx.ttl * 0.6)  # past the original expiry, inside the renewed one
        refused(lambda: s.acquire("r", "b"), "acquire r by b after a renewed")
        ctx.note("a second acquire is refused while a tenure is live, before and after renew")


def check_stale_lease_ops(ctx: Ctx) -> None:
    s = ctx.open()
    for op in ("renew", "release"):
        with ctx.sub(f"stale-{op}"):
            run = f"r-{op}"
            a = call(lambda: s.acquire(run, "a"), "acquire by a")
            ctx.advance(ctx.ttl * 1.2)
            b = call(lambda: s.acquire(run, "b"), "acquire by b after a expired")
            expect(b.epoch > a.epoch, f"successor epoch {b.epoch} is not above {a.epoch}")
            refused(lambda: getattr(s, op)(a), f"{op} under superseded epoch {a.epoch}")
            # The successor's tenure is untouched: still live, still b's, expiry not moved.
            refused(lambda: s.acquire(run, "c"), f"acquire by c right after the stale {op}")
            call(lambda: s.append(run, JournalEntry(1, b"b"), b), "append by the successor")
            if ctx.clock is not None:
                ctx.advance(ctx.ttl * 1.05)  # past b's expiry unless the stale renew extended it
                c = call(lambda: s.acquire(run, "c"), f"acquire by c after b expired (stale {op} moved b's expiry?)")
                expect(c.epoch == b.epoch + 1, f"epoch after b is {c.epoch}, expected {b.epoch + 1}")
            ctx.note(f"stale {op} refused; successor kept owner, epoch and expiry")
    with ctx.sub("release-fences"):
        a = call(lambda: s.acquire("rf", "a"), "acquire rf by a")
        call(lambda: s.release(a), "release by a")
        refused(lambda: s.renew(a), "renew after release")
        refused(lambda: s.release(a), "second release of the same tenure")
        refused(lambda: s.append("rf", JournalEntry(1, b"x"), a), "append under a released lease")
        b = call(lambda: s.acquire("rf", "b"), "acquire after release")
        refused(lambda: s.release(a), "release of a's old tenure after b acquired")
        call(lambda: s.renew(b), "renew by b (a's stale release must not end b's tenure)")
        ctx.note("a released tenure can no longer renew, release or write")


def check_stale_rejected(ctx: Ctx) -> None:
    s = ctx.open()
    for surface in mutations(s):
        with ctx.sub(f"stale-{surface}"):
            for how in ("superseded", "released", "forged"):
                run = f"r-{surface}-{how}"
                a = call(lambda: s.acquire(run, "a"), "acquire by a")
                fill(s, run, a)
                presented = {how: a}
                if how == "superseded":
                    ctx.advance(ctx.ttl * 1.2)
                    b = call(lambda: s.acquire(run, "b"), "acquire by b after a expired")
                    holder_lease = b
                elif how == "released":
                    call(lambda: s.release(a), "release by a")
                    holder_lease = None
                else:  # a's tenure live: its epoch under another owner, its owner with an epoch never issued
                    presented = {"an impostor": Lease(run, "b", a.epoch),
                                 "a never-issued": Lease(run, "a", a.epoch + 1)}
                    holder_lease = a
                for what, lease in presented.items():
                    before = snapshot(s, [run])
                    article = "" if how == "forged" else "a "
                    refused(lambda: mutations(s)[surface](run, lease), f"{surface} under {article}{what} lease {lease}")
                    unchanged(s, [run], before, f"{surface} under {article}{what} lease")
                if holder_lease is not None:
                    call(lambda: s.release(holder_lease), "release by the holder")
            ctx.note(f"{surface} under a superseded, released, impostor or never-issued lease refused, nothing mutated")


def check_run_match(ctx: Ctx) -> None:
    s = ctx.open()
    groups = {
        "journal": ["append"],
        "meta": ["put_meta"],
        "delete": ["delete"],
        "blobs": ["blob-put", "blob-delete"],
    }
    for group, surfaces in groups.items():
        with ctx.sub(f"run-match-{group}"):
            own, other = f"own-{group}", f"other-{group}"
            a = call(lambda: s.acquire(own, "a"), "acquire own run")
            fill(s, other, None)
            for surface in surfaces:
                for held in (False, True):
                    if held:
                        b = call(lambda: s.acquire(other, "b"), "acquire other run by b")
                    before = snapshot(s, [own, other])
                    refused(lambda: mutations(s)[surface](other, a),
                             f"{surface} on run {other!r} under a live lease for {own!r}"
                             + (" (other run held by b)" if held else ""))
                    unchanged(s, [own, other], before, f"cross-run {surface}")
                    if held:
                        call(lambda: s.release(b), "release other run by b")
            call(lambda: s.release(a), "release own run")
            # A dead lease for another run is refused the same way.
            for surface in surfaces:
                before = snapshot(s, [own, other])
                refused(lambda: mutations(s)[surface](other, a), f"{surface} on {other!r} under a released lease for {own!r}")
                unchanged(s, [own, other], before, f"cross-run {surface} under a released lease")
            ctx.note(f"a lease for one run cannot {'/'.join(surfaces)} another run, live or released")


def check_epoch_monotonic(ctx: Ctx) -> None:
    s = ctx.open()
    with ctx.sub("epoch-after-release"):
        epochs = []
        for i in range(4):
            lease = call(lambda i=i: s.acquire("r", f"o{i}"), "acquire")
            epochs.append(lease.epoch)
            if i % 2:
                call(lambda: s.release(lease), "release")
            else:
                ctx.advance(ctx.ttl * 1.2)  # let it expire instead
        expect(epochs == sorted(set(epochs)), f"epochs across release/expiry are {epochs}, not strictly increasing")
        ctx.note(f"epochs {epochs}")
    with ctx.sub("epoch-tombstone"):
        a = call(lambda: s.acquire("t", "a"), "acquire")
        fill(s, "t", a)
        call(lambda: s.delete("t", a), "delete under the live lease")
        b = after_fenced_delete(ctx, s, "t", a, "release", lambda: s.release(a))
        if b is None:  # the delete kept the tenure, and the release ended it
            b = call(lambda: s.acquire("t", "b"), "acquire after delete and release")
        expect(b.epoch > a.epoch, f"epoch after delete is {b.epoch}, not above {a.epoch} (no tombstone)")
        call(lambda: s.delete("t", None), "unleased delete")
        ctx.advance(ctx.ttl * 1.2)
        c = call(lambda: s.acquire("t", "c"), "acquire after unleased delete and expiry")
        expect(c.epoch > b.epoch, f"epoch after a second delete is {c.epoch}, not above {b.epoch}")
        ctx.note(f"epochs {a.epoch} -> {b.epoch} -> {c.epoch} across delete")
    with ctx.sub("zombie-after-tombstone"):
        z = call(lambda: s.acquire("z", "zombie"), "acquire by the zombie")
        fill(s, "z", z)
        call(lambda: s.delete("z", z), "delete by the zombie")
        ctx.advance(ctx.ttl * 1.2)
        n = call(lambda: s.acquire("z", "new"), "acquire of the recreated run")
        expect(n.epoch > z.epoch, f"recreated run got epoch {n.epoch}, not above the zombie's {z.epoch}")
        call(lambda: s.append("z", JournalEntry(1, b"new"), n), "append by the new holder")
        before = snapshot(s, ["z"])
        for surface, fn in mutations(s).items():
            refused(lambda fn=fn: fn("z", z), f"zombie {surface} after the run was deleted and recreated")
        unchanged(s, ["z"], before, "zombie mutations")
        ctx.note("a lease from before a delete cannot touch the recreated run")


def check_store_clock(ctx: Ctx) -> None:
    if ctx.clock is None:
        ctx.not_exercised("store-clock", "the store declares no injectable clock, so the suite runs in real time, and "
                          "in one process real time cannot tell the store's clock from the caller's (the clock-skew "
                          "nemesis will)")
        return
    s = ctx.open()
    with ctx.sub("store-clock"):
        a = call(lambda: s.acquire("r", "a"), "acquire")
        time.sleep(ctx.ttl * 1.1)  # wall time passes the ttl; the store's clock does not
        refused(lambda: s.acquire("r", "b"), "acquire while the injected clock is still inside the ttl "
                "(the store judged expiry by wall time, not its clock)")
        ctx.clock.advance(ctx.ttl * 1.2)
        b = call(lambda: s.acquire("r", "b"), "acquire once the injected clock passed the ttl")
        expect(b.epoch == a.epoch + 1, f"takeover epoch {b.epoch}, expected {a.epoch + 1}")
        ctx.note("expiry follows the store's injected clock, not wall time")


#: Real-time attempts of the live-accepted sub-check when the harness itself was late (see `_LateHarness`).
_LIVE_TRIES = 3


class _LateHarness(Exception):
    """In real time, a call that had to land inside the ttl was refused after the harness had let more than the ttl
    pass since the tenure's last grant or renew (by its own clock): the harness was late, the store not wrong."""


def check_live_accepted(ctx: Ctx) -> None:
    s = ctx.open()
    near = 0.5 if ctx.clock is None else 0.95  # how deep into the ttl each call lands
    with ctx.sub("live-accepted"):
        kept, attempt = _tries(ctx, "live-accepted",
                               lambda n: _live_accepted(ctx, s, f"r{n}" if n > 1 else "r", near))
        ctx.note(f"every mutation, renew{' and release' if kept else ''} accepted {near:.2f} ttl after the last grant"
                 + _retried(attempt))


def _live_accepted(ctx: Ctx, s: Any, run: str, near: float) -> bool:
    """One pass of live-accepted on `run`; True when the fenced delete kept the tenure."""
    since = time.monotonic()  # the last grant or renew was invoked no earlier than this

    def live(fn: Callable[[], Any], what: str, renews: bool = False) -> Any:
        nonlocal since
        started = time.monotonic()
        try:
            out = call(fn, what)
        except CheckFailed as exc:
            late = time.monotonic() - since
            if ctx.clock is None and isinstance(exc.__cause__, LeaseHeldError) and late >= ctx.ttl:
                raise _LateHarness(f"{what} came {late / ctx.ttl:.2f} ttl after the last grant") from None
            raise
        if renews:
            since = started
        return out

    a = live(lambda: s.acquire(run, "a"), "acquire", renews=True)
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("append", lambda: s.append(run, JournalEntry(1, b"1"), a)),
        ("put_meta", lambda: s.put_meta(RunMeta(run, "running", 1), a)),
        ("blob put", lambda: s.transcripts.put(f"{run}/b", b"b", a)),
        ("blob delete", lambda: s.transcripts.delete(f"{run}/b", a)),
    ]
    for what, fn in steps:
        ctx.advance(ctx.ttl * near)
        live(fn, f"{what} {near:.2f} ttl after the last grant")
        live(lambda: s.renew(a), f"renew {near:.2f} ttl after the last grant", renews=True)
    ctx.advance(ctx.ttl * near)
    live(lambda: s.delete(run, a), f"delete {near:.2f} ttl after the last grant")
    # A fenced delete may end the tenure (then what must follow is checked) or keep it.
    kept = after_fenced_delete(ctx, s, run, a, "renew", lambda: s.renew(a)) is None
    if kept:
        ctx.advance(ctx.ttl * near)
        live(lambda: s.release(a), f"release {near:.2f} ttl after the last renew")
    return kept


def _refused_in_time(ctx: Ctx, fn: Callable[[], Any], what: str, since: float) -> None:
    """`fn` must be refused (`LeaseHeldError`) because the tenure it meets was granted or renewed by a call invoked at
    `since` (monotonic) and is live for the ttl. In real time, an acceptance that completed the ttl or more after
    `since` proves nothing: the harness (descheduled, or waiting on a loaded child) let the tenure lapse."""
    try:
        refused(fn, what)
    except CheckFailed as exc:
        late = time.monotonic() - since
        if ctx.clock is None and exc.__cause__ is None and late >= ctx.ttl:
            raise _LateHarness(f"{what} completed {late / ctx.ttl:.2f} ttl after the grant or renew") from None
        raise


def _accepted_in_time(ctx: Ctx, fn: Callable[[], Any], what: str, since: float) -> Any:
    """`fn` (a renew) must be accepted because the tenure was granted or renewed by a call invoked at `since` and is
    live for the ttl; in real time a refusal that completed the ttl or more after `since` proves nothing."""
    try:
        return call(fn, what)
    except CheckFailed as exc:
        late = time.monotonic() - since
        if ctx.clock is None and isinstance(exc.__cause__, LeaseHeldError) and late >= ctx.ttl:
            raise _LateHarness(f"{what} completed {late / ctx.ttl:.2f} ttl after the last grant or renew") from None
        raise


def _tries(ctx: Ctx, what: str, attempt: Callable[[int], Any]) -> tuple[Any, int]:
    """Run a real-time sub-check up to `_LIVE_TRIES` times while the harness was late (`_LateHarness`), each on a
    fresh run; still late every time: inconclusive, never a fail (nothing the store did was wrong)."""
    for n in range(1, _LIVE_TRIES + 1):
        try:
            return attempt(n), n
        except _LateHarness as late:
            if n == _LIVE_TRIES:
                raise Inconclusive(f"not decided: {late} in each of {_LIVE_TRIES} attempts ({what})") from None
    raise AssertionError("unreachable")


def check_ttl_honoured(ctx: Ctx) -> None:
    s = ctx.open()
    live_at = 0.99 if ctx.clock is not None else 0.5

    def ttl_live(n: int) -> None:
        run = "r" if n == 1 else f"r{n}"
        since = time.monotonic()
        call(lambda: s.acquire(run, "a"), "acquire")
        ctx.advance(ctx.ttl * live_at)
        _refused_in_time(ctx, lambda: s.acquire(run, "b"), f"acquire by b {live_at:.2f} ttl after a's grant", since)

    with ctx.sub("ttl-live"):
        _, n = _tries(ctx, "ttl-live", ttl_live)
        ctx.note(f"tenure still live {live_at:.2f} ttl after the grant" + _retried(n))
    a: Lease | None = None
    run = "c"
    renews = 12  # four ttls at ttl/3

    def cadence(n: int) -> Lease:
        nonlocal run
        run = "c" if n == 1 else f"c{n}"
        since = time.monotonic()
        lease = call(lambda: s.acquire(run, "a"), "acquire")
        for i in range(renews):
            ctx.advance(ctx.ttl / 3)
            began = time.monotonic()
            _accepted_in_time(ctx, lambda: s.renew(lease), f"renew #{i + 1} at ttl/3 cadence", since)
            since = began
            _refused_in_time(ctx, lambda: s.acquire(run, "b"), f"acquire by b after renew #{i + 1}", since)
        _accepted_in_time(ctx, lambda: s.append(run, JournalEntry(1, b"x"), lease),
                          "append after four ttls of renewals", since)
        return lease

    with ctx.sub("renew-cadence"):
        a, n = _tries(ctx, "renew-cadence", cadence)
        ctx.note(f"{renews} renewals at ttl/3 kept the tenure for {renews // 3} ttls" + _retried(n))
    with ctx.sub("takeover-bound"):
        a = ctx.needs(a, "renew-cadence")
        bound = 1.2 * ctx.ttl
        if ctx.clock is not None:
            ctx.advance(bound)
            b = call(lambda: s.acquire(run, "b"), "acquire by b 1.2 ttl after the last renew")
            expect(b.epoch == a.epoch + 1, f"takeover epoch {b.epoch}, expected {a.epoch + 1}")
            ctx.note("another owner acquired 1.2 ttl after the last renew")
        else:
            # The renew took effect by the time it returned (`renewed`); an acquire refused although it was sent more
            # than 1.2 ttl after that proves a tenure kept too long. One sent sooner proves nothing, however late the
            # harness is: it tries again.
            call(lambda: s.renew(a), "renew")
            renewed = time.monotonic()
            time.sleep(ctx.ttl)
            while True:
                sent = time.monotonic()
                try:
                    s.acquire(run, "b")  # busy answers are retried by the watch
                    break
                except LeaseHeldError:
                    if sent - renewed > bound:
                        raise CheckFailed(f"an acquire sent {1000 * (sent - renewed):.0f} ms after the last renew "
                                          f"returned was refused: no takeover within 1.2 ttl ({bound * 1000:.0f} ms)")
                    time.sleep(0.002)
            ctx.note(f"takeover {1000 * (time.monotonic() - renewed):.0f} ms after the last renew returned")


def _retried(n: int) -> str:
    return f" (attempt {n}: the harness was late before)" if n > 1 else ""


def check_unleased_passthrough(ctx: Ctx) -> None:
    s = ctx.open()
    for held in (False, True):
        name = "unleased-while-held" if held else "unleased"
        with ctx.sub(name):
            run = f"u-{held}"
            if held:
                call(lambda: s.acquire(run, "a"), "acquire by a")
            fill(s, run, None)
            call(lambda: s.transcripts.delete(f"{run}/t1", None), "unleased blob delete")
            expect(s.transcripts.get(f"{run}/t1") is None, "unleased blob delete did not remove the blob")
            call(lambda: s.delete(run, None), "unleased delete")
            expect(s.load(run) == [] and s.get_meta(run) is None, "unleased delete left journal or meta")
            ctx.note("mutations with lease=None accepted" + (" while another owner holds the run" if held else ""))


def check_typed_refusal(ctx: Ctx) -> None:
    s = ctx.open()
    a = call(lambda: s.acquire("r", "a"), "acquire")
    fill(s, "r", a)

    def refusal(name: str, fn: Callable[[], Any], error: type[StoreError], runs: list[str]) -> None:
        with ctx.sub(name):
            before = snapshot(s, runs)
            exc = refused(fn, name, error)
            expect(isinstance(exc, StoreError), f"{name}: {type(exc).__name__} is not a StoreError")
            if isinstance(exc, LeaseHeldError):
                expect(getattr(exc, "run_id", None) == fn_run[name],
                       f"{name}: LeaseHeldError.run_id is {getattr(exc, 'run_id', None)!r}, expected {fn_run[name]!r}")
            unchanged(s, runs, before, name)
            ctx.note(f"{type(exc).__name__}, nothing mutated")

    fn_run = {"refuse-acquire": "r", "refuse-order": "r"}
    refusal("refuse-acquire", lambda: s.acquire("r", "b"), LeaseHeldError, ["r"])
    refusal("refuse-order", lambda: s.append("r", JournalEntry(2, b"dup"), a), JournalOrderError, ["r"])
    ctx.advance(ctx.ttl * 1.2)
    b = call(lambda: s.acquire("r", "b"), "takeover by b")
    for surface in ("append", "put_meta", "delete", "blob-put", "blob-delete"):
        fn_run[f"refuse-stale-{surface}"] = "r"
        refusal(f"refuse-stale-{surface}", lambda surface=surface: mutations(s)[surface]("r", a), LeaseHeldError, ["r"])
    fn_run["refuse-stale-renew"] = "r"
    refusal("refuse-stale-renew", lambda: s.renew(a), LeaseHeldError, ["r"])
    fn_run["refuse-foreign"] = "x"
    refusal("refuse-foreign", lambda: s.put_meta(RunMeta("x", "running", 0), b), LeaseHeldError, ["r", "x"])


def check_expired_unsuperseded(ctx: Ctx) -> None:
    s = ctx.open()
    with ctx.sub("expired-unsuperseded"):
        outcomes: dict[str, bool] = {}
        surfaces: dict[str, Callable[[str, Lease], Any]] = {
            name: mutations(s)[name] for name in ("append", "put_meta", "blob-put")}
        surfaces["renew"] = lambda run, lease: s.renew(lease)
        surfaces["release"] = lambda run, lease: s.release(lease)
        for surface, fn in surfaces.items():
            run = f"e-{surface}"
            a = call(lambda: s.acquire(run, "a"), "acquire")
            fill(s, run, a)
            ctx.advance(ctx.ttl * 1.2)
            before = snapshot(s, [run])
            try:
                fn(run, a)
                outcomes[surface] = True
            except (BusyExhausted, CheckFailed):
                raise
            except LeaseHeldError:
                unchanged(s, [run], before, f"{surface} under an expired lease")
                outcomes[surface] = False
            except Exception as exc:
                raise CheckFailed(f"{surface} under an expired lease nobody superseded raised {type(exc).__name__} "
                                  f"({one_line(exc)}), expected acceptance or LeaseHeldError") from exc
        accepted = [k for k, v in outcomes.items() if v]
        refused_ = [k for k, v in outcomes.items() if not v]
        choice = expired_choice({k: (int(v), int(not v)) for k, v in outcomes.items()})
        ctx.observe(EXPIRED_CHOICE, choice, (f"accepted {', '.join(accepted)}" if accepted else "")
                    + ("; " if accepted and refused_ else "") + (f"refused {', '.join(refused_)}" if refused_ else ""))
        ctx.note(f"the store {choice} operations under an expired tenure nobody superseded ("
                 + ", ".join(f"{k} {'accepted' if v else 'refused'}" for k, v in outcomes.items())
                 + "; both conformant, refusals mutated nothing)")


def check_journal(ctx: Ctx) -> None:
    s = ctx.open()
    with ctx.sub("a1-atomic-append", clause="journal-a1"):
        big = bytes(range(256)) * 4096  # 1 MiB
        call(lambda: s.append("j1", JournalEntry(1, big), None), "append of a 1 MiB entry")
        got = s.load("j1")
        expect(len(got) == 1 and got[0].payload == big, f"1 MiB append loaded as {len(got)} entries, not whole")
        with contextlib.suppress(JournalOrderError):
            s.append("j1", JournalEntry(1, b"dup" * 1000), None)
        expect(s.load("j1") == got, "a refused append left a partial write")
        ctx.note("an append lands whole or not at all")
    with ctx.sub("a1-contended-appends", clause="journal-a1"):
        peer = ctx.open()
        if not shares_state(s, peer):
            raise NotExercised("store objects over one location share no state, so appends cannot contend through "
                               "separate objects (a store object is used only by the thread that opened it)")
        writers = [ctx.thread(name=f"journal-writer-{i}") for i in range(4)]
        for w in writers:
            w.ready()
        # Lock-step rounds: the writers contend for every append, and none is starved by the others across rounds
        # (SQLite's busy handler, for one, is not fair).
        rounds = threading.Barrier(len(writers), timeout=60)

        def writer(i: int) -> Callable[[Any], tuple[list[int], str]]:
            def job(store: Any) -> tuple[list[int], str]:
                accepted: list[int] = []
                try:
                    for q in range(1, 101):
                        try:
                            rounds.wait()
                        except threading.BrokenBarrierError:
                            return accepted, ""  # another writer stopped; it says why
                        try:
                            store.append(f"j1-w{i}", JournalEntry(q, payload(q)), None)
                        except BusyExhausted:
                            raise
                        except Exception as exc:  # noqa: BLE001 - a contended append must not fail
                            return accepted, f"writer {i} append {q} raised {type(exc).__name__}: {one_line(exc)}"
                        accepted.append(q)
                    return accepted, ""
                finally:
                    if len(accepted) < 100:
                        rounds.abort()
            return job

        futures = [w.submit(writer(i)) for i, w in enumerate(writers)]
        outcomes = [f.result() for f in futures]
        lost = [why for _, why in outcomes if why]
        expect(not lost, "; ".join(lost[:2]))
        for i, (accepted, _) in enumerate(outcomes):
            got_seqs = [e.seq for e in s.load(f"j1-w{i}")]
            expect(got_seqs == accepted,
                   f"writer {i}: {len(accepted)} accepted appends under contention, {len(got_seqs)} loaded"
                   f" (missing {sorted(set(accepted) - set(got_seqs))[:5]})")
        ctx.note(f"{sum(len(a) for a, _ in outcomes)} contended appends from {len(writers)} writers (each on its own "
                 "store object in its own thread) all landed")
    with ctx.sub("a2-append-order", clause="journal-a2"):
        seqs = [1, 2, 5, 9, 10, 100]
        for q in seqs:
            call(lambda q=q: s.append("j2", JournalEntry(q, payload(q)), None), f"append seq {q}")
        got = [e.seq for e in s.load("j2")]
        expect(got == seqs, f"entries loaded as {got}, appended as {seqs}")
        ctx.note("entries load in append order, gaps kept")
    with ctx.sub("a3-read-your-writes", clause="journal-a3"):
        a = call(lambda: s.acquire("j3", "a"), "acquire")
        for q in range(1, 6):
            call(lambda q=q: s.append("j3", JournalEntry(q, payload(q)), a), f"append seq {q}")
            got = s.load("j3")
            expect(got and got[-1] == JournalEntry(q, payload(q)), f"load right after appending seq {q} returned {got[-1:] }")
        ctx.note("each append visible to the next load")
    with ctx.sub("a4-payload-bytes", clause="journal-a4"):
        payloads = [b"", b"\x00", b"a\x00b", b"trailing\x00\x00", b"\xff\xfe\x80not-utf8", b" padded ",
                    b"\r\n", bytes(range(256)), os.urandom(65536)]
        for q, p in enumerate(payloads, start=1):
            call(lambda q=q, p=p: s.append("j4", JournalEntry(q, p), None), f"append payload #{q}")
        got = s.load("j4")
        for q, p in enumerate(payloads, start=1):
            stored = got[q - 1].payload if len(got) >= q else None
            expect(stored == p and type(stored) is bytes,
                   f"payload #{q} ({len(p)} bytes, {p[:12]!r}) came back as {stored[:12] if stored is not None else None!r}"
                   f" ({len(stored) if stored is not None else 0} bytes, {type(stored).__name__})")
        for q, p in enumerate(payloads, start=1):
            call(lambda q=q, p=p: s.transcripts.put(f"j4/b{q}", p, None), f"blob put #{q}")
            stored = s.transcripts.get(f"j4/b{q}")
            expect(stored == p, f"blob #{q} ({len(p)} bytes, {p[:12]!r}) came back as "
                   f"{stored[:12] if stored is not None else None!r} ({len(stored) if stored is not None else 0} bytes)")
        for p in payloads[:-1]:
            call(lambda p=p: s.put_meta(RunMeta("j4", "running", 1, p), None), "put_meta")
            got_meta = s.get_meta("j4")
            expect(got_meta is not None and got_meta.payload == p,
                   f"meta payload {p[:12]!r} came back as {got_meta.payload[:12] if got_meta else None!r}")
        ctx.note(f"{len(payloads)} payloads (empty, NULs, non-UTF-8, 64 KiB random) byte for byte "
                 "in journal, blobs and meta")
    with ctx.sub("a5-order-guard", clause="journal-a5"):
        call(lambda: s.append("j5", JournalEntry(3, b"3"), None), "append seq 3")
        for q in (3, 2, 0, -1):
            before = s.load("j5")
            refused(lambda q=q: s.append("j5", JournalEntry(q, b"bad"), None), f"append seq {q} after tail 3", JournalOrderError)
            expect(s.load("j5") == before, f"refused append seq {q} changed the journal")
        a = call(lambda: s.acquire("j5", "a"), "acquire")
        refused(lambda: s.append("j5", JournalEntry(3, b"bad"), a), "leased append at the tail", JournalOrderError)
        call(lambda: s.append("j5", JournalEntry(4, b"4"), a), "leased append above the tail")
        ctx.note("seq at or below the tail raises JournalOrderError, nothing written")


def check_meta(ctx: Ctx) -> None:
    s = ctx.open()
    with ctx.sub("meta-last-write"):
        expect(s.get_meta("m") is None, "get_meta of an unknown run is not None")
        for i, status in enumerate(("running", "suspended", "completed"), start=1):
            call(lambda i=i, status=status: s.put_meta(RunMeta("m", status, i, bytes([i]) * i), None), "put_meta")
        expect(s.get_meta("m") == RunMeta("m", "completed", 3, b"\x03\x03\x03"), f"get_meta returned {s.get_meta('m')}")
        call(lambda: s.put_meta(RunMeta("n", "failed", 0, b"\x00"), None), "put_meta n")
        runs = s.list_runs()
        expect(sorted(m.run_id for m in runs) == ["m", "n"], f"list_runs gave {[m.run_id for m in runs]}, expected m and n once each")
        expect(RunMeta("m", "completed", 3, b"\x03\x03\x03") in runs, "list_runs does not show the last write")
        ctx.note("one meta row per run, last write wins")
    with ctx.sub("fenced-meta"):
        a = call(lambda: s.acquire("f", "a"), "acquire")
        call(lambda: s.put_meta(RunMeta("f", "running", 1), a), "put_meta under the live lease")
        call(lambda: s.put_meta(RunMeta("f", "cancelled", 2), a), "second put_meta under the live lease")
        expect(s.get_meta("f") == RunMeta("f", "cancelled", 2), f"fenced meta reads back {s.get_meta('f')}")
        ctx.note("fenced put_meta accepted and last write wins")


def check_blobs(ctx: Ctx) -> None:
    s = ctx.open()
    b = s.transcripts
    with ctx.sub("blob-basics"):
        expect(b.get("r1/x") is None, "get of a missing blob is not None")
        call(lambda: b.put("r1/x", b"one", None), "put r1/x")
        call(lambda: b.put("r1/x", b"two", None), "overwrite r1/x")
        call(lambda: b.put("r1/y", b"\x00\xff\xfe", None), "put r1/y")
        call(lambda: b.put("r10/x", b"ten", None), "put r10/x")
        expect(b.get("r1/x") == b"two", f"overwritten blob reads {b.get('r1/x')!r}")
        expect(b.get("r1/y") == b"\x00\xff\xfe", f"binary blob reads {b.get('r1/y')!r}")
        listed = sorted(b.list("r1"))
        expect(listed == ["r1/x", "r1/y"], f"list('r1') gave {listed}, expected r1/x and r1/y only")
        call(lambda: b.delete("r1/x", None), "delete r1/x")
        call(lambda: b.delete("r1/missing", None), "delete of a missing ref (a no-op)")
        expect(b.get("r1/x") is None and sorted(b.list("r1")) == ["r1/y"], "delete by ref did not remove exactly that blob")
        expect(b.get("r10/x") == b"ten", "another run's blob changed")
        ctx.note("put/overwrite/get/list per run/delete by ref; missing delete is a no-op")
    with ctx.sub("fenced-transcripts"):
        a = call(lambda: s.acquire("t", "a"), "acquire t")
        call(lambda: b.put("t/1", b"x", a), "fenced blob put")
        call(lambda: b.delete("t/1", a), "fenced blob delete")
        call(lambda: b.delete("t/never", a), "fenced delete of a missing ref")
        call(lambda: b.put("t/2", b"y", a), "fenced blob put")
        ctx.advance(ctx.ttl * 1.2)
        call(lambda: s.acquire("t", "b"), "takeover by b")
        refused(lambda: b.put("t/2", b"stale", a), "stale blob put")
        refused(lambda: b.delete("t/2", a), "stale blob delete")
        refused(lambda: b.put("u/1", b"cross", a), "blob put on another run's ref")
        expect(b.get("t/2") == b"y" and b.get("u/1") is None, "refused blob writes changed blobs")
        ctx.note("blob writes fenced by the run their ref names")


def check_delete(ctx: Ctx) -> None:
    s = ctx.open()
    with ctx.sub("delete-semantics"):
        fill(s, "d", None, n=3)
        fill(s, "keep", None, n=2)
        call(lambda: s.delete("d", None), "delete d")
        expect(s.load("d") == [], f"journal of a deleted run still loads {len(s.load('d'))} entries")
        expect(s.get_meta("d") is None, "meta of a deleted run still present")
        expect([m.run_id for m in s.list_runs()] == ["keep"], f"list_runs after delete: {[m.run_id for m in s.list_runs()]}")
        expect(len(s.load("keep")) == 2 and s.get_meta("keep") is not None, "delete touched another run")
        call(lambda: s.delete("never-existed", None), "delete of an unknown run")
        call(lambda: s.append("d", JournalEntry(1, b"again"), None), "append seq 1 to a deleted run")
        ctx.note("delete removes journal and meta of that run only")
    with ctx.sub("fenced-delete"):
        a = call(lambda: s.acquire("fd", "a"), "acquire")
        fill(s, "fd", a)
        call(lambda: s.delete("fd", a), "delete under the live lease")
        expect(s.load("fd") == [] and s.get_meta("fd") is None, "fenced delete left journal or meta")
        kept = after_fenced_delete(ctx, s, "fd", a, "append", lambda: s.append("fd", JournalEntry(1, b"x"), a)) is None
        if kept:
            expect(s.load("fd") == [JournalEntry(1, b"x")], f"append after the fenced delete was accepted but the "
                   f"journal reads {s.load('fd')}")
            ctx.note("fenced delete accepted under the live lease, which it kept (the next append landed)")
        else:
            ctx.note("fenced delete accepted under the live lease")


def check_concurrent_boot(ctx: Ctx) -> None:
    from soak.storm.boot import boot_storm

    settings = ctx.suite.settings
    n, rounds = settings.boot_processes, settings.boot_rounds
    with ctx.sub(f"concurrent-boot-{n}x{rounds}"):
        if ctx.suite.target.single_process:
            ctx.note("single-process store: each process boots its own instance")
        report = boot_storm(ctx.suite.target, processes=n, rounds=rounds, lease_ttl_ms=ctx.ttl_ms,
                            timeout_s=60, root=ctx.location)
        ctx.suite.busy.retries += report.busy.retries
        ctx.suite.busy.exhausted += report.busy.exhausted
        expect(not report.failures, f"{report.failures} of {report.attempts} process boots failed: {report.summary()}")
        if report.undecided:
            raise Inconclusive(f"{len(report.undecided)} of {report.attempts} round trips after a successful open "
                               f"answered StoreBusyError on every attempt: {report.undecided[0].message}")
        ctx.note(f"{n} processes x {rounds} rounds all came up, worst boot {report.worst_boot_s * 1000:.0f} ms, "
                 f"{report.busy.retries} busy answer(s) retried")


# -- the table --------------------------------------------------------------------------------

#: (clause, check name, function), in run order. A function may record sub-checks under other clause ids.
CHECKS: list[tuple[str, str, Callable[[Ctx], None]]] = [
    ("lease-exclusive", "lease-exclusive", check_lease_exclusive),
    ("stale-lease-ops", "stale-lease-ops", check_stale_lease_ops),
    ("stale-rejected", "stale-rejected", check_stale_rejected),
    ("run-match", "run-match", check_run_match),
    ("atomic-fence", "atomic-fence", check_atomic_fence),
    ("epoch-monotonic", "epoch-monotonic", check_epoch_monotonic),
    ("store-clock", "store-clock", check_store_clock),
    ("live-accepted", "live-accepted", check_live_accepted),
    ("ttl-honoured", "ttl-honoured", check_ttl_honoured),
    ("expired-unsuperseded", "expired-unsuperseded", check_expired_unsuperseded),
    ("unleased-passthrough", "unleased-passthrough", check_unleased_passthrough),
    ("typed-refusal", "typed-refusal", check_typed_refusal),
    ("concurrent-boot", "concurrent-boot", check_concurrent_boot),
    ("journal-a1", "journal", check_journal),
    ("meta-last-write", "meta", check_meta),
    ("blob-semantics", "blobs", check_blobs),
    ("delete-semantics", "delete", check_delete),
]

#: Checks that record clauses besides their own: they run when any of them is asked for. The fenced deletes of
#: epoch-monotonic and live-accepted also tell the delete-semantics choice.
ALSO_COVERS: dict[str, set[str]] = {
    "journal": {"journal-a1", "journal-a2", "journal-a3", "journal-a4", "journal-a5"},
}

#: The liveness clauses are judged over every store call the other checks make, by the watchdog.
LIVENESS: list[tuple[str, str]] = [("call-returns", "call-returns"), ("no-crash", "no-crash")]
