"""The fenced run store model against the store named by `--store` (default `sqlite:`).

Run: `pytest models --store memory:` (or `sqlite:`, `package.module:callable`, ...), with
`--soak-profile dev|ci|nightly` to choose how hard Hypothesis looks. A store that answers
`StoreBusyError` on every attempt of a call leaves the run inconclusive: the test is skipped
(`soak.model.ModelInconclusive`), never passed.
"""

from soak.model import run_model


def test_fenced_store_model(soak_store, soak_settings):
    """Random programs of lease and data operations agree with the pure model, step by step."""
    run_model(soak_store, settings=soak_settings)
