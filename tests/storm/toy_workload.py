"""A second workload, defined only here: a register (one run's meta, written unleased) that workers write and read.

Its checker: every read saw nothing yet, or a value some write had been invoked for before the read completed;
the final register holds a value some write wrote. It plugs into the same orchestrator, tailer, run directory,
checker and report as the runs workload, named `tests.storm.toy_workload:Register` (spawned workers import it).
"""

from __future__ import annotations

from soak.check.verdict import Violation
from soak.history import tag_of
from soak.spi import RunMeta
from soak.workloads.simple import SimpleWorkload

REG = "reg"


def _tag(meta):
    return {"tag": None if meta is None else tag_of(meta.payload)}


def check_register(facts):
    """Each read saw a value written (invoked) before it completed, or none; so does the final register."""
    written, out = {}, []
    for op in facts.ops:  # (process, index, f, run, lease, intent, args, outcome, result, error, msg, inv, done)
        if op[2] == "put_meta" and op[7] != "fail":
            written[op[6]["tag"]] = op[11]
    for op in facts.ops:
        seen = op[8].get("tag") if op[2] == "get_meta" and op[7] == "ok" else None
        if seen is not None and not written.get(seen, float("inf")) < op[12]:
            out.append(Violation("meta-last-write", f"read {op[0]}#{op[1]} saw {seen}, which no write made",
                                 (facts.evidence(op),)))
    final = (facts.state or {}).get("tag")
    if final is not None and final not in written:
        out.append(Violation("meta-last-write", f"the final register holds {final}, which no write made"))
    return out


class Register(SimpleWorkload):
    name = "tests.storm.toy_workload:Register"
    surfaces = ("put_meta", "get_meta")
    mutations = frozenset({"put_meta"})
    quorum_keys = ("writes", "reads")
    checkers = (("register", check_register),)

    def worker_loop(self, ctx):
        while not ctx.should_stop():
            tag = ctx.next_tag()
            ctx.op("put_meta", REG, None, "live", {"tag": tag},
                   lambda: ctx.store.put_meta(RunMeta(REG, "running", 0, tag.encode() + b"|x")))
            ctx.op("get_meta", REG, None, "live", {}, lambda: ctx.store.get_meta(REG), ok_value=_tag)

    def count(self, f, outcome):
        return {"put_meta": "writes", "get_meta": "reads"}.get(f) if outcome == "ok" else None

    def read_final_state(self, store, scenario):
        return _tag(store.get_meta(REG))
