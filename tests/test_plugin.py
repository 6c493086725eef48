"""The pytest plugin: namespaced options (`--soak-store`, `--soak-profile`) that leave a project's `--store` alone."""

from __future__ import annotations

from pathlib import Path

import pytest

import soak.model  # noqa: F401 - imported once here: pytester drops modules an in-process run imports

pytest_plugins = ["pytester"]

MODELS_CONFTEST = Path(__file__).resolve().parents[1] / "models" / "conftest.py"

# a test that reports what the plugin resolved, and proves the plugin is the installed one
_PROBE = """
def test_probe(request, soak_store, soak_profile):
    assert request.config.pluginmanager.hasplugin("soak")
    print(f"SOAK-STORE={soak_store.spec} PROFILE={soak_profile}")
"""


def _probe_lines(result: pytest.RunResult) -> str:
    lines = [line for line in result.outlines if "SOAK-STORE=" in line]
    assert len(lines) == 1, result.outlines
    return lines[0][lines[0].index("SOAK-STORE="):]


def test_soak_store_reaches_the_fixture(pytester: pytest.Pytester):
    pytester.makepyfile(test_probe=_PROBE)
    result = pytester.runpytest("-s", "--soak-store", "memory:", "--soak-profile", "ci")
    result.assert_outcomes(passed=1)
    assert _probe_lines(result) == "SOAK-STORE=memory: PROFILE=ci"


def test_default_store_is_sqlite(pytester: pytest.Pytester):
    pytester.makepyfile(test_probe=_PROBE)
    result = pytester.runpytest("-s", "--soak-profile", "dev")
    result.assert_outcomes(passed=1)
    assert _probe_lines(result) == "SOAK-STORE=sqlite: PROFILE=dev"


def test_a_projects_own_store_option_keeps_working(pytester: pytest.Pytester):
    pytester.makeconftest("""
        def pytest_addoption(parser):
            parser.addoption("--store", default="vendor-default", help="the vendor's own store option")
    """)
    pytester.makepyfile(test_vendor="""
        def test_vendor(request, soak_store):
            assert request.config.getoption("--store") == "postgres://vendor/db"
            assert request.config.getoption("store") == "postgres://vendor/db"
            assert soak_store.spec == "memory:"
    """)
    result = pytester.runpytest("--store", "postgres://vendor/db", "--soak-store", "memory:")
    result.assert_outcomes(passed=1)
    assert "already added" not in result.stdout.str() + result.stderr.str()


def test_a_bad_soak_store_is_a_usage_error_before_any_test(pytester: pytest.Pytester):
    pytester.makepyfile(test_probe=_PROBE)
    result = pytester.runpytest("--soak-store", "nosuch:")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--soak-store: unknown store scheme 'nosuch:'*"])


def test_soak_examples_sets_the_budget_of_the_chosen_profile(pytester: pytest.Pytester):
    pytester.makepyfile(test_budget="""
        def test_budget(soak_settings):
            print(f"BUDGET={soak_settings.max_examples} DERANDOMIZE={soak_settings.derandomize}")
    """)
    result = pytester.runpytest("-s", "--soak-profile", "ci", "--soak-examples", "7")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*BUDGET=7 DERANDOMIZE=True*"])
    result = pytester.runpytest("-s", "--soak-profile", "ci")
    result.stdout.fnmatch_lines(["*BUDGET=100 DERANDOMIZE=True*"])
    result = pytester.runpytest("--soak-examples", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--soak-examples: must be at least 1, got 0*"])


@pytest.mark.parametrize("option", ["--store", "--soak-store"])
def test_the_models_suite_keeps_store_as_an_alias(pytester: pytest.Pytester, option: str):
    pytester.makeconftest(MODELS_CONFTEST.read_text())
    pytester.makepyfile(test_probe=_PROBE)
    result = pytester.runpytest("-s", option, "memory:", "--soak-profile", "ci")
    result.assert_outcomes(passed=1)
    assert _probe_lines(result) == "SOAK-STORE=memory: PROFILE=ci"


def test_the_models_alias_without_a_value_keeps_the_default(pytester: pytest.Pytester):
    pytester.makeconftest(MODELS_CONFTEST.read_text())
    pytester.makepyfile(test_probe=_PROBE)
    result = pytester.runpytest("-s", "--soak-profile", "ci")
    result.assert_outcomes(passed=1)
    assert _probe_lines(result) == "SOAK-STORE=sqlite: PROFILE=ci"


def test_the_models_alias_checks_the_spec_too(pytester: pytest.Pytester):
    pytester.makeconftest(MODELS_CONFTEST.read_text())
    pytester.makepyfile(test_probe=_PROBE)
    result = pytester.runpytest("--store", "nosuch:")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown store scheme 'nosuch:'*"])
