"""The conformance suite: each broken store fails the clause it breaks, by id; correct stores pass whichever
choice the contract leaves them; busy answers, hangs and crashes are named by the right clause and the suite
goes on; the CLI's exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from soak.cli import main
from soak.clauses import CLAUSES
from soak.clock import FakeClock
from soak.conformance import STATUSES, ConformanceReport, list_checks, run_conformance
from soak.conformance._atomic import _NOT_STORE_C
from soak.conformance._watch import HARNESS_FILES, Board, Watch
from soak.errors import HarnessError, StoreBootError, StoreSpecError
from soak.retry import BusyCount
from soak.spi import JournalEntry, RunMeta
from soak.stores.memory import open_memory
from soak.stores.sqlite import SqliteStore
from tests.broken_stores import BROKEN
from tests.contract_stores import HangingPutMeta, NoClockSqlite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _why(report: ConformanceReport) -> list[tuple[str, str, str, str]]:
    return [(r.clause, r.check, r.status, r.detail) for r in report.results if r.status not in ("pass",)]


def _cli_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["conformance", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


# -- broken stores fail their own clause ------------------------------------------------------------

@pytest.mark.parametrize("name, clause", sorted(BROKEN.items()))
def test_broken_store_fails_its_clause_by_id(name, clause):
    report = run_conformance(f"tests.broken_stores:{name}", clauses=[clause])
    assert not report.passed
    assert clause in report.failed_clauses(), [(r.check, r.status, r.detail) for r in report.results]
    assert report.clause_status()[clause] in ("fail", "error")
    assert {r.clause for r in report.results} == {clause}  # the filter ran only that clause


@pytest.mark.parametrize("clause", sorted(set(BROKEN.values())))
def test_reference_store_passes_each_clause_the_broken_ones_fail(clause):
    report = run_conformance("sqlite:", clauses=[clause])
    assert report.passed, [(r.check, r.detail) for r in report.failed]


def test_two_transaction_fence_breaks_only_atomic_fence():
    # Everything else about it is the reference store: only the real race exposes it.
    clauses = [c for c in CLAUSES if c != "concurrent-boot"]
    report = run_conformance("tests.broken_stores:open_two_transaction_fence", clauses=clauses)
    assert report.failed_clauses() == {"atomic-fence"}
    surfaces = {r.check for r in report.failed}
    assert {"atomic-append", "atomic-put_meta", "atomic-delete", "atomic-blob-put", "atomic-blob-delete"} <= surfaces
    assert all("after the successor's grant" in r.detail or "successor's later" in r.detail for r in report.failed)


@pytest.mark.parametrize("spec", ["mutant:split-fence", "mutant:check-then-write"])
def test_atomic_fence_still_catches_the_catalogue_fence_mutants(spec):
    report = run_conformance(spec, clauses=["atomic-fence"])
    failed = {r.check for r in report.results if r.status == "fail"}
    assert {"atomic-append", "atomic-put_meta", "atomic-delete", "atomic-blob-put", "atomic-blob-delete"} <= failed
    assert all("takeover at return point" in r.detail for r in report.results if r.status == "fail")


def _bare_return_points() -> int:
    """The return points of a fenced append on a bare reference store (no watch, no proxy), counted by the rules
    the atomic-fence check uses: from the first clock read, every return of a non-harness function and of a C
    method of a non-builtin object."""
    import tempfile

    clock = FakeClock()
    points = [-1]
    victim = threading.get_ident()

    def profiler(frame, event, arg):
        if event == "c_return":
            owner = getattr(arg, "__self__", None)
            if owner is None or type(owner).__module__ in _NOT_STORE_C:
                return
        elif event != "return":
            return
        if frame.f_code.co_filename in HARNESS_FILES | {__file__} or threading.get_ident() != victim:
            return
        points[0] += 1

    def hook():
        if points[0] < 0:
            points[0] = 0
            sys.setprofile(profiler)

    with tempfile.TemporaryDirectory() as loc:
        store = SqliteStore(os.path.join(loc, "store.db"), 200, clock=clock)
        lease = store.acquire("r", "victim")
        clock.hook = hook
        try:
            (lambda: store.append("r", JournalEntry(2, b"victim"), lease))()
        finally:
            sys.setprofile(None)
            clock.hook = None
            store.close()
    return points[0] + 1


def test_the_watch_proxy_adds_and_hides_no_return_points():
    report = run_conformance("sqlite:", clauses=["atomic-fence"])
    append = next(r for r in report.results if r.check == "atomic-append")
    through_suite = int(append.detail.split("takeover tried at each of ")[1].split()[0])
    assert through_suite == _bare_return_points(), append.detail


def test_read_then_write_fence_fails_atomic_fence():
    report = run_conformance("tests.broken_stores:open_read_then_write", clauses=["atomic-fence"])
    assert "atomic-append" in {r.check for r in report.failed}


def test_an_unexpected_exception_is_never_a_pass():
    report = run_conformance("tests.broken_stores:open_crashing_load", clauses=["journal-a2", "journal-a4"])
    assert not report.passed
    for r in report.results:
        assert r.status in ("fail", "error")
        assert "RuntimeError" in r.detail


def test_every_clause_has_a_check_and_sub_checks_are_named():
    assert {c for c, _ in list_checks()} | {f"journal-a{i}" for i in range(1, 6)} >= set(CLAUSES)
    report = run_conformance("memory:", clauses=["stale-rejected", "atomic-fence"])
    names = {r.check for r in report.results}
    for surface in ("append", "put_meta", "delete", "blob-put", "blob-delete"):
        assert f"stale-{surface}" in names and f"atomic-{surface}" in names
    assert {"atomic-renew", "atomic-release"} <= names
    assert isinstance(report, ConformanceReport) and report.passed
    assert all("[injected clock]" in r.detail for r in report.results)
    # memory: objects over one location share it, so the thieves contend through objects of their own
    assert all(r.status == "pass" and "own store object" in r.detail for r in report.results if r.clause == "atomic-fence")


def test_memory_objects_over_one_location_share_it_until_the_last_closes(tmp_path):
    a = open_memory(str(tmp_path / "x"), lease_ttl_ms=200)
    b = open_memory(str(tmp_path / "x"), lease_ttl_ms=10_000)
    other = open_memory(str(tmp_path / "y"), lease_ttl_ms=200)
    a.put_meta(RunMeta("r", "running", 0))
    assert b.get_meta("r") == RunMeta("r", "running", 0) and other.get_meta("r") is None
    lease = b.acquire("r", "b")
    assert a.renew(lease) == lease  # one fencing domain: a lease is good through any object over it
    a.close()
    a.close()  # idempotent: b still holds the location
    assert b.get_meta("r") is not None
    b.close()
    fresh = open_memory(str(tmp_path / "x"), lease_ttl_ms=200)
    assert fresh.get_meta("r") is None and fresh.acquire("r", "c").epoch == 1  # freed with the last object
    for store in (fresh, other):
        store.close()
    assert list(tmp_path.iterdir()) == []


# -- statuses, busy, the clock declaration ------------------------------------------------------------

def test_statuses_and_the_verdict():
    assert STATUSES == ("pass", "fail", "error", "inconclusive", "not-exercised")
    from soak.conformance import CheckResult

    def report(*statuses):
        return ConformanceReport("s", 200, "real time", [CheckResult(f"c{i}", "x", s, "") for i, s in enumerate(statuses)])

    assert report("pass", "not-exercised").verdict == "pass" and report("pass", "not-exercised").passed
    assert report("not-exercised").verdict == "inconclusive"  # nothing passed: nothing was shown
    assert report("pass", "inconclusive").verdict == "inconclusive"
    assert report("pass", "inconclusive", "fail").verdict == "fail"
    assert report("error").verdict == "fail" and report().verdict == "inconclusive"
    two = ConformanceReport("s", 200, "x", [CheckResult("c", "a", "pass", ""), CheckResult("c", "b", "not-exercised", ""),
                                            CheckResult("d", "a", "inconclusive", ""), CheckResult("d", "b", "fail", ""),
                                            CheckResult("e", "a", "fail", ""), CheckResult("e", "b", "error", "")])
    assert two.clause_status() == {"c": "pass", "d": "fail", "e": "error"}
    assert two.failed_clauses() == {"d", "e"}


def test_fail_fast_busy_sqlite_passes_and_its_retries_are_counted(capsys):
    code, data = _cli_json(capsys, "--store", "sqlite:?busy_timeout_ms=0")
    assert code == 0, [r for r in data["results"] if r["status"] != "pass"]
    assert data["verdict"] == "pass" and data["store"] == "sqlite:?busy_timeout_ms=0"
    # thieves blocked behind a victim holding the write lock are answered busy at once, and retried
    assert data["busy"]["retries"] > 0 and data["busy"]["exhausted"] == 0
    assert {r["clause"] for r in data["results"]} == set(CLAUSES)


def test_a_factory_that_answers_busy_is_retried_and_passes(capsys):
    code, data = _cli_json(capsys, "--store", "tests.contract_stores:open_busy_at_boot")
    assert code == 0, [r for r in data["results"] if r["status"] != "pass"]
    assert data["busy"]["retries"] > 0 and data["busy"]["exhausted"] == 0


def test_a_store_that_only_answers_busy_is_inconclusive_never_failed(capsys):
    t0 = time.monotonic()
    code, data = _cli_json(capsys, "--store", "tests.contract_stores:open_always_busy")
    assert code == 3 and data["verdict"] == "inconclusive"
    statuses = {r["status"] for r in data["results"]}
    assert not statuses & {"fail", "error"}, [r for r in data["results"] if r["status"] in ("fail", "error")]
    busy = [r for r in data["results"] if r["status"] == "inconclusive"]
    assert len(busy) > 30 and all("StoreBusyError" in r["detail"] or "builds on" in r["detail"] for r in busy)
    assert data["busy"]["exhausted"] > 0
    assert time.monotonic() - t0 < 120  # undecided in seconds per check, not minutes


def test_without_the_clock_declaration_the_suite_runs_in_real_time_and_says_so():
    clauses = ["ttl-honoured", "store-clock", "live-accepted", "stale-lease-ops", "atomic-fence"]
    report = run_conformance("tests.contract_stores:open_no_clock", clauses=clauses)
    assert report.timing == "real time"
    assert report.passed, _why(report)
    assert all("[real time]" in r.detail for r in report.results)
    assert all("real-time expiry" in r.detail for r in report.results if r.clause == "atomic-fence")
    clock = [r for r in report.results if r.clause == "store-clock"]
    assert [r.status for r in clock] == ["not-exercised"] and "injectable clock" in clock[0].detail


def test_in_real_time_a_correct_store_whose_answers_come_late_is_undecided_never_failed():
    # a loaded machine (a storm beside it, a child process starved of CPU) hands the harness each tenure after it
    # lapsed: the timing-sensitive checks retry, then say they could not decide
    report = run_conformance("tests.contract_stores:open_late_answers", clauses=["ttl-honoured", "live-accepted"])
    assert report.timing == "real time"
    statuses = {r.check: r.status for r in report.results}
    assert not {"fail", "error"} & set(statuses.values()), _why(report)
    assert statuses["ttl-live"] == statuses["renew-cadence"] == statuses["live-accepted"] == "inconclusive"
    assert all("the harness was late" not in r.detail and "ttl after the" in r.detail
               for r in report.results if r.check in ("ttl-live", "renew-cadence"))


def test_in_real_time_a_setup_write_later_than_the_short_tenure_is_undecided_never_failed():
    # atomic-fence's real-time trials give the victim a 60 ms tenure; a loaded machine can take longer than that to
    # get the trial's setup write in, and the store then rightly refuses it
    report = run_conformance("tests.contract_stores:open_slow_blob_put", clauses=["atomic-fence"])
    statuses = {r.check: r.status for r in report.results}
    assert not {"fail", "error"} & set(statuses.values()), _why(report)
    lapsed = [r for r in report.results if r.check == "atomic-blob-delete"]
    assert [r.status for r in lapsed] == ["inconclusive"] and "tenure lapsed" in lapsed[0].detail, _why(report)


@pytest.mark.parametrize("mutant, check", [("short-ttl", "ttl-live"), ("long-ttl", "takeover-bound")])
def test_in_real_time_a_store_with_the_wrong_ttl_still_fails(mutant, check):
    report = run_conformance(f"tests.contract_stores:open_no_clock_mutant?mutant={mutant}", clauses=["ttl-honoured"])
    assert report.timing == "real time"
    assert check in {r.check for r in report.results if r.status == "fail"}, _why(report)


def test_without_the_clock_declaration_a_split_fence_still_fails():
    report = run_conformance("tests.contract_stores:open_no_clock_split_fence", clauses=["atomic-fence"])
    assert report.timing == "real time"
    assert "atomic-append" in {r.check for r in report.results if r.status == "fail"}, _why(report)


def test_a_store_declaring_the_clock_whose_factory_refuses_it_is_a_boot_error():
    with pytest.raises(StoreBootError, match="declares injectable_clock = True but its factory refused clock="):
        run_conformance("tests.contract_stores:open_misdeclared_clock", clauses=["journal-a2"])


# -- store choices ----------------------------------------------------------------------------------

def test_a_fenced_delete_that_ends_the_tenure_passes_and_is_named(capsys):
    code, data = _cli_json(capsys, "--store", "tests.contract_stores:open_delete_ends_tenure")
    assert code == 0, [r for r in data["results"] if r["status"] != "pass"]
    assert data["choices"]["delete-ends-tenure"] == "ends"
    ended = {r["check"]: r for r in data["results"] if "ended the tenure" in r["detail"]}
    assert set(ended) == {"epoch-tombstone", "live-accepted", "fenced-delete"}
    assert all("every later operation under it refused" in r["detail"] and "another owner got epoch" in r["detail"]
               for r in ended.values())
    choice = next(r for r in data["results"] if r["check"] == "delete-choice")
    assert choice["status"] == "pass" and "a fenced delete ends the caller's tenure" in choice["detail"]


def test_the_reference_store_keeps_the_tenure_and_names_its_choices(capsys):
    code, data = _cli_json(capsys, "--store", "sqlite:", "--clause", "delete-semantics", "--clause", "live-accepted",
                           "--clause", "epoch-monotonic", "--clause", "expired-unsuperseded")
    assert code == 0
    # sqlite: refuses mutations and renew under a lapsed tenure (the choice); it lets it be released, which is
    # reported beside the choice (soak.clauses.expired_choice)
    assert data["choices"] == {"delete-ends-tenure": "keeps", "expired-unsuperseded": "refuses"}
    choice = next(r for r in data["results"] if r["check"] == "delete-choice")
    assert choice["status"] == "pass" and "all 3 fenced deletes" in choice["detail"]
    main(["conformance", "--store", "sqlite:", "--clause", "expired-unsuperseded"])
    out = capsys.readouterr().out
    assert "store choices (where the contract allows either): expired-unsuperseded refuses" in out


def test_a_store_that_makes_the_delete_choice_both_ways_fails_naming_both():
    report = run_conformance("tests.contract_stores:open_mixed_delete",
                             clauses=["delete-semantics", "live-accepted", "epoch-monotonic"])
    assert report.failed_clauses() == {"delete-semantics"}, _why(report)
    choice = next(r for r in report.results if r.check == "delete-choice")
    assert choice.status == "fail" and "epoch-tombstone" in choice.detail and "fenced-delete" in choice.detail
    assert report.choices["delete-ends-tenure"] == "mixed"


# -- a store written from the contract alone ----------------------------------------------------------

def test_a_vendor_store_over_plain_sqlite3_passes_in_real_time():
    report = run_conformance("tests.contract_stores:open_store")
    assert report.passed, _why(report)
    assert report.timing == "real time" and report.isolation == "child process"
    assert [r.status for r in report.results if r.clause == "store-clock"] == ["not-exercised"]
    assert report.choices == {"delete-ends-tenure": "keeps", "expired-unsuperseded": "refuses"}
    assert {r.clause for r in report.results} == set(CLAUSES)


def open_in_this_module(location: str, *, lease_ttl_ms: int) -> NoClockSqlite:
    """A factory a vendor defines in its own test module."""
    return NoClockSqlite(os.path.join(location, "store.db"), lease_ttl_ms)


def test_a_factory_from_a_test_module_runs_in_a_child():
    report = run_conformance(open_in_this_module, clauses=["journal-a2", "no-crash"])
    assert report.passed and report.isolation == "child process", _why(report)
    assert [r.status for r in report.results if r.clause == "no-crash"] == ["pass"]


def _unpicklable(cls):
    gen = (i for i in range(1))  # dill cannot pickle a generator, so neither this factory

    def factory(location, *, lease_ttl_ms, clock=None):
        next(gen, None)
        return cls(os.path.join(location, "store.db"), lease_ttl_ms, clock=clock or time.time)

    return factory


def test_a_target_that_cannot_go_to_a_child_runs_here_and_says_what_is_not_exercised():
    report = run_conformance(_unpicklable(SqliteStore), clauses=["journal-a2", "call-returns", "no-crash"])
    assert report.passed, _why(report)
    assert report.isolation.startswith("in-process: the store target cannot be sent to a child process")
    by_clause = {r.clause: r for r in report.results}
    assert by_clause["call-returns"].status == "pass"
    assert by_clause["no-crash"].status == "not-exercised" and "generator" in by_clause["no-crash"].detail


def test_in_process_a_hung_call_is_given_up_on_and_the_suite_goes_on():
    t0 = time.monotonic()
    report = run_conformance(_unpicklable(HangingPutMeta), clauses=["meta-last-write", "lease-exclusive"],
                             call_bound_s=1)
    assert time.monotonic() - t0 < 20
    hung = [r for r in report.results if r.clause == "call-returns"]
    assert len(hung) == 1 and hung[0].status == "fail" and "put_meta" in hung[0].detail
    assert "the thread running the checks was abandoned" in hung[0].detail
    assert report.clause_status()["lease-exclusive"] == "pass"


# -- liveness: hangs and crashes ----------------------------------------------------------------------

def test_liveness_passes_say_what_was_measured():
    report = run_conformance("sqlite:", clauses=["journal-a2", "call-returns", "no-crash"])
    assert report.passed and report.call_bound_s == 4.0
    calls = next(r for r in report.results if r.clause == "call-returns")
    assert calls.status == "pass" and "store calls" in calls.detail and "slowest" in calls.detail
    assert "bound 4 s" in calls.detail
    crash = next(r for r in report.results if r.clause == "no-crash")
    assert crash.status == "pass" and "1 child process" in crash.detail


def test_a_hanging_call_fails_call_returns_and_the_suite_goes_on():
    t0 = time.monotonic()
    report = run_conformance("tests.contract_stores:open_hanging_put_meta", call_bound_s=1,
                             clauses=["lease-exclusive", "journal-a2", "meta-last-write"])
    elapsed = time.monotonic() - t0
    hung = [r for r in report.results if r.clause == "call-returns"]
    assert {r.check for r in hung} == {"journal", "meta"}  # each check that called put_meta, in a fresh child
    assert all(r.status == "fail" and "put_meta(" in r.detail and "1 s bound" in r.detail for r in hung)
    status = report.clause_status()
    assert status["lease-exclusive"] == "pass"
    assert status["journal-a2"] == status["meta-last-write"] == "inconclusive"  # cut short, never a pass
    assert report.failed_clauses() == {"call-returns"}
    assert elapsed < 25, elapsed


def test_a_rare_hang_costs_about_the_bound():
    report = run_conformance("tests.contract_stores:open_hanging_cancelled_meta", call_bound_s=2)
    hung = [r for r in report.results if r.clause == "call-returns"]
    assert len(hung) == 1 and hung[0].check == "meta" and "put_meta(meta f cancelled" in hung[0].detail
    assert "2 s bound" in hung[0].detail
    cut = next(r for r in report.results if r.check == "fenced-meta")
    assert cut.status == "inconclusive" and 1.9 <= cut.elapsed_s < 4.0  # the bound, then a kill
    others = {c: s for c, s in report.clause_status().items() if c not in ("call-returns", "meta-last-write")}
    assert set(others.values()) == {"pass"}, _why(report)
    assert set(others) | {"call-returns", "meta-last-write"} == set(CLAUSES)  # every other check finished


@pytest.mark.parametrize("spec, call, how", [
    ("tests.contract_stores:open_segfault_on_blob_delete", "transcripts.delete(", "signal 11 (SIGSEGV)"),
    ("tests.contract_stores:open_exit_on_renew", "renew(", "exit status 3"),
])
def test_a_store_that_ends_its_process_fails_no_crash_and_the_suite_goes_on(spec, call, how):
    report = run_conformance(spec, clauses=["lease-exclusive", "journal-a2", "blob-semantics", "delete-semantics"])
    crashed = [r for r in report.results if r.clause == "no-crash"]
    assert crashed and all(r.status == "fail" and call in r.detail and how in r.detail for r in crashed), _why(report)
    status = report.clause_status()
    assert status["journal-a2"] == status["delete-semantics"] == "pass"  # checks after a crash ran in a fresh child
    assert report.failed_clauses() == {"no-crash"}
    assert not any(r.status == "error" for r in report.results)


def test_the_watch_times_calls_and_does_not_charge_harness_pauses():
    board = Board(bytearray(Board.size()))
    watch = Watch(board, 0.15, BusyCount())
    watch.where = "t/sub"
    watch.call(lambda run: time.sleep(0.2), "slow", "r")
    assert watch.late and watch.late[0][:2] == ("t/sub", "slow('r')") and watch.late[0][2] >= 0.2
    seen = []
    started = threading.Event()

    def paused_call():
        started.set()
        time.sleep(0.4)

    t = threading.Thread(target=lambda: watch.call(paused_call, "paused"))
    t.start()
    started.wait()
    watch.pause_begin()  # the harness holds the call up (as atomic-fence pauses a victim) for 0.35 s
    time.sleep(0.35)
    seen.extend(board.in_flight())
    watch.pause_end()
    t.join()
    assert [name for _, _, name, _ in seen] == ["t/sub: paused()"]
    assert seen[0][3] < 0.1  # the pause so far is not charged to the call
    calls, opens, slowest_ns, slowest = board.totals()
    assert calls == 2 and opens == 0 and slowest == "t/sub: slow('r')" and 0.2 <= slowest_ns / 1e9 < 0.35
    assert len(watch.late) == 1  # 0.4 s in the call, 0.35 s of them the harness's: within the 0.15 s bound
    assert board.in_flight() == []


# -- housekeeping and the command line ------------------------------------------------------------------

def test_the_suite_removes_the_locations_it_made(tmp_path):
    run_conformance("sqlite:", clauses=["journal-a2"], location=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_are_harness_errors():
    with pytest.raises(StoreSpecError, match="unknown clause id 'bogus'"):
        run_conformance("memory:", clauses=["bogus"])
    with pytest.raises(StoreSpecError, match="fresh location per check"):
        run_conformance("sqlite:///tmp/fixed.db")
    with pytest.raises(HarnessError, match="too short"):
        run_conformance("memory:", lease_ttl_ms=5)
    with pytest.raises(HarnessError, match="bounds no call"):
        run_conformance("memory:", call_bound_s=0)


def test_cli_passes_a_reference_store(capsys):
    assert main(["conformance", "--store", "memory:", "--clause", "lease-exclusive", "--clause", "journal-a5"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"PASS +lease-exclusive", out) and re.search(r"PASS +journal-a5", out)
    assert "call bound 4 s  (child process)" in out.splitlines()[0]
    assert "busy: 0 StoreBusyError answer(s) retried" in out
    assert out.strip().splitlines()[-1].endswith("PASS")


def test_cli_fails_a_broken_store_and_names_the_clause(capsys):
    code = main(["conformance", "--store", "tests.broken_stores:open_acquire_while_live", "--clause", "lease-exclusive"])
    assert code == 1
    out = capsys.readouterr().out
    assert re.search(r"FAIL +lease-exclusive +exclusive-acquire", out) and "FAIL (lease-exclusive)" in out
    # the sub-check after it still runs on the lease the first one got, and catches the same defect
    assert re.search(r"FAIL +lease-exclusive +exclusive-after-renew", out)


def test_cli_json(capsys):
    code, data = _cli_json(capsys, "--store", "memory:", "--clause", "journal-a4", "--call-bound", "2.5")
    assert code == 0
    assert data["passed"] is True and data["verdict"] == "pass" and data["store"] == "memory:"
    assert data["call_bound_s"] == 2.5 and data["isolation"] == "child process" and data["choices"] == {}
    assert [r["clause"] for r in data["results"]] == ["journal-a4"]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--store", "nosuch:"], "unknown store scheme 'nosuch:'"),
        (["--store", "not.a.module:f"], "cannot import module 'not.a.module'"),
        (["--store", "memory:", "--clause", "bogus"], "unknown clause id 'bogus'"),
    ],
)
def test_cli_usage_errors_exit_2_with_one_line(capsys, argv, fragment):
    assert main(["conformance", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and lines[0].startswith("soak: ")


@pytest.mark.parametrize("spec", ["nosuch:", "not.a.module:f", "tests.contract_stores:open_misdeclared_clock"])
def test_cli_process_exit_code_for_bad_specs(spec):
    proc = subprocess.run(
        [sys.executable, "-m", "soak.cli", "conformance", "--store", spec],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
