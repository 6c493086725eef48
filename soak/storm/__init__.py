"""The storm: real worker processes, a nemesis that pauses and kills them, and the quorum.

`run_storm(scenario, target, out_dir)` is the entry point; `soak storm` is its command line.
"""

from __future__ import annotations

__all__ = ["run_storm"]


def __getattr__(name: str):
    # lazy: importing soak.storm (e.g. for soak.storm.boot) must not pull in the orchestrator
    if name == "run_storm":
        from soak.storm.orchestrator import run_storm

        return run_storm
    raise AttributeError(name)
