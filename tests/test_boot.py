"""The boot storm: many real processes opening one fresh store location at once; busy answers and lapsed
tenures after a successful open are retried, never counted as failed boots."""

from __future__ import annotations

import time

import pytest

from soak.cli import main
from soak.storm.boot import boot_storm


def test_sixteen_processes_open_one_fresh_sqlite_file_twenty_times():
    t0 = time.monotonic()
    report = boot_storm("sqlite:", processes=16, rounds=20, lease_ttl_ms=250, timeout_s=60)
    elapsed = time.monotonic() - t0
    assert report.attempts == 16 * 20
    assert report.failures == 0, report.summary()
    assert report.ok
    assert len(report.boot_times_s) == 320
    print(f"boot storm 16x20: {elapsed:.1f} s, worst boot {report.worst_boot_s * 1000:.0f} ms")


def test_a_fail_fast_store_boots_sixteen_processes_twenty_times(capsys):
    # busy_timeout_ms=0: every lock held by another process is answered StoreBusyError at once, and retried
    assert main(["boot", "--store", "sqlite:?busy_timeout_ms=0", "-n", "16"]) == 0
    out = capsys.readouterr().out
    assert "soak boot: sqlite:?busy_timeout_ms=0  16 processes x 20 rounds" in out
    assert "attempts 320, failures 0" in out and "StoreBusyError answer(s) retried" in out
    assert out.strip().splitlines()[-1] == "PASS"


def test_a_factory_that_answers_busy_is_retried(capsys):
    assert main(["boot", "--store", "tests.contract_stores:open_busy_at_boot", "-n", "4"]) == 0
    out = capsys.readouterr().out
    assert "failures 0" in out and "StoreBusyError answer(s) retried" in out


def test_a_vendor_store_over_plain_sqlite3_boots():
    report = boot_storm("tests.contract_stores:open_store", processes=16, rounds=5)
    assert report.ok and report.verdict == "pass", report.summary() + str(report.undecided[:1])
    assert report.attempts == 80 and len(report.boot_times_s) == 80


def test_a_store_whose_fenced_delete_ends_the_tenure_boots():
    report = boot_storm("tests.contract_stores:open_delete_ends_tenure", processes=4, rounds=2)
    assert report.ok and report.attempts == 8, report.summary()


def test_a_round_trip_whose_tenure_lapsed_is_made_again():
    # Each process's first append waits out twice the ttl, and the store refuses the lapsed tenure (as it may).
    report = boot_storm("tests.contract_stores:open_slow_first_append", processes=2, rounds=1, lease_ttl_ms=100)
    assert report.ok, report.summary()
    assert report.lapsed == 2 and report.failures == 0


def test_a_refusal_within_the_ttl_is_a_failed_round_trip():
    report = boot_storm("tests.contract_stores:open_refuses_live_append", processes=2, rounds=1, lease_ttl_ms=10_000)
    assert report.verdict == "fail" and report.by_type() == {"LeaseHeldError": 2}
    assert "refused for no reason" in report.failures_list[0].message


def test_a_store_that_only_answers_busy_is_undecided_not_failed(capsys):
    assert main(["boot", "--store", "tests.contract_stores:open_always_busy", "-n", "2", "--rounds", "1"]) == 3
    out = capsys.readouterr().out
    assert "failures 0" in out and "undecided: 2 round trip(s)" in out and "BusyExhausted" in out
    assert out.strip().splitlines()[-1] == "INCONCLUSIVE"
    report = boot_storm("tests.contract_stores:open_always_busy", processes=1, rounds=1)
    assert report.verdict == "inconclusive" and not report.ok and report.failures == 0
    assert report.busy.exhausted == 1 and report.busy.retries > 0


def test_failures_are_recorded_with_their_exception_type(tmp_path):
    report = boot_storm("tests.broken_stores:open_refusing", processes=3, rounds=2, timeout_s=20)
    assert not report.ok
    assert report.attempts == 6
    assert report.by_type() == {"ConnectionRefusedError": 6}
    assert "no server here" in report.failures_list[0].message


def test_a_hung_process_is_killed_and_counted():
    t0 = time.monotonic()
    report = boot_storm("tests.broken_stores:open_hanging_in_worker_1", processes=2, rounds=2, timeout_s=3)
    assert time.monotonic() - t0 < 40
    kinds = [f.kind for f in report.failures_list]
    assert kinds.count("hung") == 2, report.summary()  # worker 1 hangs in both rounds, is replaced
    assert report.attempts == 4
    assert len(report.boot_times_s) == 2  # worker 0 came up in each round


def test_boot_cli_exit_codes(capsys):
    assert main(["boot", "--store", "sqlite:", "-n", "4", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "4 processes x 2 rounds" in out and "failures 0" in out and "PASS" in out
    assert main(["boot", "--store", "tests.broken_stores:open_refusing", "-n", "2", "--rounds", "1"]) == 1
    out = capsys.readouterr().out
    assert "ConnectionRefusedError: 2" in out and "FAIL" in out


def test_boot_cli_bad_store_is_a_usage_error(capsys):
    assert main(["boot", "--store", "nosuch:", "-n", "2", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unknown store scheme" in err


@pytest.mark.parametrize("n, rounds", [(0, 1), (2, 0)])
def test_boot_rejects_empty_storms(n, rounds):
    from soak.errors import HarnessError

    with pytest.raises(HarnessError, match="at least 1 process"):
        boot_storm("sqlite:", processes=n, rounds=rounds)
