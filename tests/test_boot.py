"""The boot storm: many real processes opening one fresh store location at once."""

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
