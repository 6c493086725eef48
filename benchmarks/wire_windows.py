"""How often a stop of a wire store's child lands between its fence check and its commit, counted by the child.

The child is the Python wire server over `split-fence` (the fence checked in one transaction, the mutation committed
in the next), instrumented: each fenced call marks where it is (`check`: checking the fence; `window`: the check
passed and the mutation has not committed; `commit` after it), and a SIGCONT handler notes, for every stop the
child comes back from, where the stop had held it (the handler runs at the first bytecode boundary after the
continue, before the call moves on). Stops come from the worker's strikes (kernel mode: the worker stops the child
at a random instant after the request; step mode: the child stops itself at boundary k of its handling, and knows
it) and from the nemesis's pauses of the worker's process group. Also given per storm: the held strikes the verdict
cites as evidence (`strike_windows.py`, proved from the history alone) for the wire store and the direct one.

    .venv/bin/python benchmarks/wire_windows.py --storms 3
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent

__all__ = ["counted_split_fence", "main"]

_where = {"phase": "idle", "step": False}


def counted_split_fence(location: str, *, lease_ttl_ms: int):
    """`split-fence` with its phase marked and every continued stop logged to `<location>/../windows/<pid>.jsonl`."""
    from soak.stores.mutants import SplitFence

    out_dir = Path(location).resolve().parent / "windows"
    out_dir.mkdir(exist_ok=True)
    log = open(out_dir / f"{os.getpid()}.jsonl", "a")

    def on_cont(signum, frame):
        log.write(json.dumps({"phase": _where["phase"], "step": _where["step"]}) + "\n")
        log.flush()

    signal.signal(signal.SIGCONT, on_cont)

    class Counted(SplitFence):
        @contextmanager
        def _fenced(self, run_id, lease):
            if lease is None:
                with self._tx() as conn:
                    yield conn
                return
            _where["phase"] = "check"
            with self._tx() as conn:
                self._check(conn, run_id, lease, self._clock())
            _where["phase"] = "window"
            try:
                with self._tx() as conn:
                    yield conn
            finally:
                _where["phase"] = "idle"

    import time

    return Counted(os.path.join(location, "store.db"), lease_ttl_ms, clock=time.time)


def _served_step_flag() -> None:
    """Mark, in the served child, whether the request in hand carries a step-mode strike (wrapping `serve`'s
    timer): a stop then is the child's own."""
    from soak.storm import strike

    count_to, stop = strike.StrikeTimer.count_to, strike.StrikeTimer.stop_counting

    def counting(self, surface, k):
        _where["step"] = True
        count_to(self, surface, k)

    def stopped(self):
        _where["step"] = False
        return stop(self)

    strike.StrikeTimer.count_to, strike.StrikeTimer.stop_counting = counting, stopped


def _storm(spec: str, run_dir: Path, seed: int) -> dict:
    from strike_windows import strike_windows

    from soak.check import check_run
    from soak.scenario import load_scenario
    from soak.stores import resolve
    from soak.storm import run_storm

    sc = load_scenario("smoke", {"seed": seed, "time_bound_s": 60.0})
    info = run_storm(sc, resolve(spec), run_dir, progress=False)
    verdict = check_run(run_dir)
    stops = Counter()
    for path in (run_dir / "windows").glob("*.jsonl") if (run_dir / "windows").is_dir() else ():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            stops[("step" if rec["step"] else "other", rec["phase"])] += 1
    return {"status": info.status, "verdict": verdict.result, "clauses": verdict.clauses,
            "proved": strike_windows(run_dir), "stops": stops}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storms", type=int, default=3)
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    wire = (f"exec:{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} --serve")
    totals: dict[str, Counter] = {"wire": Counter(), "direct": Counter()}
    stops: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="soak-wire-windows-") as tmp:
        for i in range(args.storms):
            for name, spec in (("wire", wire), ("direct", "mutant:split-fence")):
                r = _storm(spec, Path(tmp) / f"{name}{i}", seed=1000 + i)
                totals[name].update(r["proved"])
                if name == "wire":
                    stops.update(r["stops"])
                print(f"{name} storm {i}: {r['status']}, {r['verdict']} {r['clauses']}; held strikes "
                      f"{r['proved']['held']}, cited by the verdict {r['proved']['landed']}", flush=True)
    print("\nstops of the child, by where they held it (counted by the child):")
    for who in ("step", "other"):
        inside = sum(v for (w, ph), v in stops.items() if w == who and ph != "idle")
        window = stops[(who, "window")]
        print(f"  {who:5}: {sum(v for (w, _), v in stops.items() if w == who)} stops, {inside} inside a fenced call, "
              f"{window} between fence check and commit ({window / inside:.0%} of those inside)" if inside else
              f"  {who:5}: {sum(v for (w, _), v in stops.items() if w == who)} stops, none inside a fenced call")
    for name, t in totals.items():
        print(f"{name}: held strikes {t['held']}, cited by the verdict {t['landed']} "
              f"(step mode {t['held_step']} / {t['landed_step']})")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:  # the child: the Python wire server over the counted store
        sys.path.insert(0, str(HERE))
        import wire_windows  # the module the store spec names, not this __main__ copy

        from soak.stores.wire_server import main as serve

        wire_windows._served_step_flag()
        sys.exit(serve(["wire_windows:counted_split_fence"]))
    sys.exit(main())
