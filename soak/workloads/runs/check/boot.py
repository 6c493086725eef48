"""Boots are evidence (`concurrent-boot`): every worker's store boot is an operation (`open`); one that answered
with any error while others came up breaks the clause, unless the nemesis had cut its host off the store then (a
storm across hosts). A boot without a completion (cut short) is the liveness
checker's (`soak.check.liveness`).
"""

from __future__ import annotations


from soak.check.base import host_partitions, in_partition
from soak.check.verdict import Violation
from soak.workloads.runs.check.facts import Facts
from soak.workloads.runs.check.ops import evidence


def check_boot(facts: Facts) -> list[Violation]:
    """Every store boot (`open`) comes up; one the harness did not cut short that fails breaks concurrent-boot."""
    out = []
    cut = host_partitions(facts.events) if facts.boot_failures else {}
    for op in facts.boot_failures:
        ev = evidence(op)
        if in_partition(cut, ev.process, ev.invoke_ns, ev.complete_ns, facts.margin_ns):
            continue  # its host was cut off the store by the nemesis: the network's answer, not the store's
        how = "refused typed" if ev.outcome == "fail" else "failed untyped"
        out.append(Violation("concurrent-boot", f"{ev.process} opening the store {how} ({ev.error}): every process "
                             f"opening one location must come up", (ev,)))
    return out
