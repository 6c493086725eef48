"""The `soak` command line: exit codes for every kind of failure, and start-up that imports only what it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import soak.check
import soak.check.cli
import soak.cli
from soak.cli import SUBCOMMANDS, build_parser, main
from soak.errors import TRACEBACK_FILE, RunDirError, ScenarioError

from .check.histories import RUNS, clean_history, write_run_dir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a crash without a directory of its own writes reports/ in the working directory


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    h = clean_history()
    return write_run_dir(tmp_path / "run", h, h.state(RUNS))


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _raiser(exc: BaseException):
    def run(*_args, **_kwargs):
        raise exc
    return run


def _argv(command: str, tmp_path: Path, run_dir: Path) -> list[str]:
    """A valid command line for `command` that writes below `tmp_path`."""
    return {
        "storm": ["storm", "--quiet", "--out", str(tmp_path / "storm-out")],
        "check": ["check", str(run_dir)],
        "conformance": ["conformance", "--store", "memory:"],
        "boot": ["boot", "--store", "memory:"],
        "model": ["model", "--store", "memory:"],
        "report": ["report", str(run_dir)],
        "trend": ["trend", str(tmp_path)],
        "certify": ["certify", "--store", "sqlite:", "--out", str(tmp_path / "certify-out")],
        "selftest": ["selftest", "--out", str(tmp_path / "selftest-out")],
    }[command]


#: where each command's crash leaves its traceback, given `_argv`
_CRASH_HOME = {"storm": "storm-out", "certify": "certify-out", "selftest": "selftest-out", "check": "run",
               "report": "run", "trend": "."}


def test_every_command_has_a_crash_case():
    assert set(SUBCOMMANDS) == {"storm", "check", "conformance", "boot", "model", "report", "trend", "certify",
                                "selftest"}


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_an_unexpected_exception_is_exit_3_one_line_and_the_traceback_saved(command, tmp_path, run_dir,
                                                                            monkeypatch, capsys):
    import importlib

    module = importlib.import_module(SUBCOMMANDS[command][0])
    monkeypatch.setattr(module, "run_cli", _raiser(ValueError("boom in the harness\nsecond line")))
    monkeypatch.chdir(tmp_path)  # a command without a directory of its own falls back to reports/ here
    assert main(_argv(command, tmp_path, run_dir)) == 3
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    if command in _CRASH_HOME:
        saved = tmp_path / _CRASH_HOME[command] / TRACEBACK_FILE
        named = str(saved)
    else:  # nothing in its arguments names a directory it writes
        saved = tmp_path / "reports" / TRACEBACK_FILE
        named = str(Path("reports") / TRACEBACK_FILE)
    assert line.startswith(f"soak: {command} failed unexpectedly: ValueError: boom in the harness second line")
    assert f"traceback in {named};" in line and line.endswith("nothing was concluded (inconclusive)")
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and "ValueError: boom in the harness" in text
    assert f"--- {command}, " in text


def test_storm_without_out_saves_under_reports_and_makes_it(tmp_path, monkeypatch, capsys):
    import soak.storm.cli

    monkeypatch.setattr(soak.storm.cli, "run_cli", _raiser(KeyError("k")))
    monkeypatch.chdir(tmp_path)
    assert main(["storm", "--quiet"]) == 3
    line = _one_line(capsys.readouterr().err)
    assert "KeyError: 'k'" in line and f"traceback in {Path('reports') / TRACEBACK_FILE}" in line
    assert "KeyError" in (tmp_path / "reports" / TRACEBACK_FILE).read_text()


def test_storm_out_that_cannot_be_made_falls_back_to_reports(tmp_path, monkeypatch, capsys):
    import soak.storm.cli

    monkeypatch.setattr(soak.storm.cli, "run_cli", _raiser(RuntimeError("x")))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    assert main(["storm", "--quiet", "--out", str(tmp_path / "a-file" / "run")]) == 3
    _one_line(capsys.readouterr().err)
    assert (tmp_path / "reports" / TRACEBACK_FILE).is_file()


def test_check_whose_checker_raises_outside_the_judge_is_inconclusive(run_dir, monkeypatch, capsys):
    boom = _raiser(MemoryError("the fold ran out of memory"))
    monkeypatch.setattr(soak.check, "check_run", boom)
    monkeypatch.setattr(soak.check.cli, "check_run", boom, raising=False)  # the name `soak check` calls today
    assert main(["check", str(run_dir)]) == 3
    line = _one_line(capsys.readouterr().err)
    assert "MemoryError: the fold ran out of memory" in line and str(run_dir / TRACEBACK_FILE) in line
    assert "MemoryError" in (run_dir / TRACEBACK_FILE).read_text()


def test_check_that_cannot_write_its_verdict_is_inconclusive_not_fail(run_dir, capsys):
    (run_dir / "verdict.json").mkdir()  # writing the verdict, outside the judge, raises IsADirectoryError
    assert main(["check", str(run_dir)]) == 3
    line = _one_line(capsys.readouterr().err)
    assert "IsADirectoryError" in line and str(run_dir / TRACEBACK_FILE) in line
    assert "write_json" in (run_dir / TRACEBACK_FILE).read_text()


def test_harness_errors_keep_their_exit_code_and_save_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["check", str(tmp_path / "nowhere")]) == RunDirError.exit_code == 2
    assert "not a soak run directory" in _one_line(capsys.readouterr().err)
    assert main(["storm", "--quiet", "--out", str(tmp_path / "run"), "--set", "wokers=3"]) == ScenarioError.exit_code
    assert "unknown key 'wokers'" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "reports").exists() and not (tmp_path / "run" / TRACEBACK_FILE).exists()


def test_usage_errors_are_exit_2_on_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["storm", "--workers", "many"])
    assert exited.value.code == 2
    assert "invalid int value: 'many'" in _one_line(capsys.readouterr().err)
    with pytest.raises(SystemExit) as exited:
        main(["no-such-command"])
    assert exited.value.code == 2
    assert "invalid choice: 'no-such-command'" in _one_line(capsys.readouterr().err)
    assert main([]) == 2  # no command: the help, and a usage exit
    assert "storm" in capsys.readouterr().out


def test_ctrl_c_stays_130(run_dir, monkeypatch, capsys):
    monkeypatch.setattr(soak.check.cli, "run_cli", _raiser(KeyboardInterrupt()))
    assert main(["check", str(run_dir)]) == 130
    assert _one_line(capsys.readouterr().err) == "soak: interrupted"
    assert not (run_dir / TRACEBACK_FILE).exists()


def test_a_broken_pipe_that_is_not_stdout_is_a_crash(run_dir, monkeypatch, capsys):
    monkeypatch.setattr(soak.check.cli, "run_cli", _raiser(BrokenPipeError(32, "Broken pipe")))
    assert main(["check", str(run_dir)]) == 3
    assert "BrokenPipeError" in _one_line(capsys.readouterr().err)
    assert (run_dir / TRACEBACK_FILE).is_file()


def _run_closed_stdout(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter whose stdout is a pipe closed before it writes (`soak ... | head`)."""
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return subprocess.CompletedProcess(proc.args, proc.wait(timeout=60), "", err)


def test_a_reader_that_leaves_stdout_ends_quietly(tmp_path):
    code = textwrap.dedent("""
        import sys
        import soak.cli, soak.report.trend

        def run(args):
            for _ in range(20000):  # more than a pipe holds: the write fails once the reader is gone
                print("x" * 100)
            return 0

        soak.report.trend.run_cli = run
        sys.exit(soak.cli.main(["trend", "."]))
    """)
    done = _run_closed_stdout(code, tmp_path)
    assert done.returncode == soak.cli.EXIT_BROKEN_PIPE == 141, done.stderr
    assert done.stderr == ""
    assert not (tmp_path / TRACEBACK_FILE).exists() and not (tmp_path / "reports").exists()


def test_help_to_a_closed_pipe_is_quiet(tmp_path):
    done = _run_closed_stdout("import sys, soak.cli; sys.exit(soak.cli.main(['certify', '--help']))", tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr


# -- start-up ---------------------------------------------------------------------------------

_IMPORTS = textwrap.dedent("""
    import json, sys
    import soak.cli

    try:
        code = soak.cli.main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    heavy = sorted(m for m in ("hypothesis", "matplotlib", "numpy") if m in sys.modules)
    soak_modules = sorted(m for m in sys.modules if m.startswith("soak."))
    print(json.dumps({"code": code, "heavy": heavy, "soak": soak_modules}), file=sys.stderr)
""")


def _imports(*argv: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _IMPORTS, *argv], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["storm", "--help"], ["check", "--help"], ["--version"], ["--help"],
                                  ["report", "--help"], ["trend", "--help"]])
def test_help_and_version_import_neither_hypothesis_nor_matplotlib(argv):
    seen = _imports(*argv)
    assert seen["code"] == 0
    assert seen["heavy"] == [], f"soak {' '.join(argv)} imported {seen['heavy']}"


def test_only_the_named_command_module_is_imported(tmp_path, monkeypatch, capsys):
    import types

    monkeypatch.chdir(tmp_path)  # the crash below saves its traceback under reports/ here
    fake = types.ModuleType("soak_fake_command")
    fake.configure_parser = lambda p: p.add_argument("word")
    fake.run_cli = lambda args: len(args.word)
    monkeypatch.setitem(sys.modules, "soak_fake_command", fake)
    monkeypatch.setattr(soak.cli, "SUBCOMMANDS", {
        "fake": ("soak_fake_command", "a command that works"),
        "absent": ("soak_no_such_module_anywhere", "a command whose module would fail to import"),
    })
    assert main(["fake", "abcd"]) == 4  # ran, without importing the other command's module
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0 and "absent" in capsys.readouterr().out  # listed, not imported
    with pytest.raises(ModuleNotFoundError):
        build_parser()  # the control: building every command does import it
    assert main(["absent"]) == 3  # and a command whose module cannot be imported is soak's failure, not usage
    assert "ModuleNotFoundError" in _one_line(capsys.readouterr().err)
    assert (tmp_path / "reports" / TRACEBACK_FILE).is_file()


def test_full_parser_configures_every_command():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == set(SUBCOMMANDS)
    for name, p in sub.choices.items():
        assert callable(p.get_default("_run")), name
    lazy = build_parser(["check", str(REPO)])
    lazy_sub = next(a for a in lazy._actions if a.dest == "command")
    assert set(lazy_sub.choices) == set(SUBCOMMANDS)  # every command is listed ...
    assert lazy_sub.choices["check"].get_default("_run") is soak.check.cli.run_cli
    assert lazy_sub.choices["storm"].get_default("_run") is None  # ... but only the named one is built


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for name, (_module, help_text) in SUBCOMMANDS.items():
        assert name in out and help_text[:30] in out


def test_selftest_json_to_a_missing_directory_is_refused_before_any_storm(tmp_path, monkeypatch, capsys):
    import soak.selftest

    monkeypatch.setattr(soak.selftest, "selftest", _raiser(AssertionError("no storm may run")))
    assert main(["selftest", "--json", str(tmp_path / "no-such-dir" / "report.json")]) == 2
    assert "no directory" in _one_line(capsys.readouterr().err)


def test_selftest_json_that_cannot_be_written_is_a_usage_error_not_a_fail(tmp_path, monkeypatch, capsys):
    import soak.selftest

    report = soak.selftest.SelftestReport(1, "smoke", str(tmp_path))
    assert report.exit_code == 0
    monkeypatch.setattr(soak.selftest, "selftest", lambda **_kw: report)
    (tmp_path / "taken").mkdir()
    assert main(["selftest", "--json", str(tmp_path / "taken")]) == 2
    assert f"cannot write {tmp_path / 'taken'}" in _one_line(capsys.readouterr().err)
