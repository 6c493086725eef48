"""Operation tuples as the history reader yields them (`soak.history.operation_tuples`, `Operation`'s field order),
their compact form (`_lite`, what summaries keep), and the `Evidence` a violation cites (`evidence`). The
surfaces and their kinds, as the fold tells them apart.
"""

from __future__ import annotations

import sys
from operator import itemgetter
from typing import Any

from soak.history import Operation
from soak.check.verdict import Evidence


_MUTATIONS = frozenset(("append", "put_meta", "delete", "blob_put", "blob_delete"))


#: Mutations whose payload names them (their tag can turn up in a read or the final state).
_TAGGED = frozenset(("append", "put_meta", "blob_put"))


#: Reads that record the tenure they were made under: checked against the serial history.
_READS = frozenset(("load", "get_meta", "blob_get"))


_LEASE_OPS = frozenset(("renew", "release"))




#: Typed refusals of the contract (and their root).
_TYPED = frozenset(("StoreError", "LeaseHeldError", "JournalOrderError", "StoreBusyError"))


_NEVER = float("inf")


#: The per-run caches' entry for a run without a granted tenure, which also marks them built: a tuple, which no run
#: id read from JSON can equal (an empty string could).
_NO_RUN = ("no run",)


_first, _second = itemgetter(0), itemgetter(1)


_intern = sys.intern


def default_margin_ns(lease_ttl_ms: int) -> int:
    """Slack for "surely live": a tenth of the ttl, at least 5 ms (store and history clocks differ)."""
    return max(5_000_000, lease_ttl_ms * 100_000)


#: Field positions of an operation tuple (`Operation`'s field order, as `soak.history.operation_tuples` yields).
_P, _I, _F, _RUN, _LEASE, _INTENT, _ARGS, _OUT, _RES, _ERR, _MSG, _INV, _COMP = range(13)


_RAW_LEN = 13


def _raw(op: Operation) -> tuple[Any, ...]:
    """An `Operation` as the tuple the scan folds."""
    return (op.process, op.index, op.f, op.run, op.lease, op.intent, op.args, op.outcome, op.result, op.error,
            op.message, op.invoke_ns, op.complete_ns)


def _ev(op: tuple[Any, ...]) -> Evidence:
    """Evidence of an operation tuple."""
    lease = op[_LEASE]
    if lease is not None:
        epoch = lease.epoch
    elif op[_F] == "acquire" and op[_OUT] == "ok":
        epoch = op[_RES].get("epoch")
    else:
        epoch = None
    return Evidence(
        op[_P], op[_I], op[_F], op[_RUN], epoch, op[_ARGS].get("c"), op[_OUT], op[_INV], op[_COMP],
        f"{op[_P]}#{op[_I]}", op[_ERR],
    )


def _lite(op: tuple[Any, ...]) -> tuple[Any, ...]:
    """A compact stand-in for `_ev(op)` (a plain tuple is several times cheaper to build)."""
    lease = op[_LEASE]
    error = op[_ERR]
    return (_intern(op[_P]), op[_I], _intern(op[_F]), _intern(op[_RUN]),
            lease.epoch if lease is not None else op[_RES].get("epoch"),
            op[_ARGS].get("c"), _intern(op[_OUT]), op[_INV], op[_COMP],
            None if error is None else _intern(error))


def _lite_of(op: tuple[Any, ...], memo: dict[int, tuple[Any, Any]]) -> tuple[Any, ...]:
    """`_lite(op)`, one tuple per operation however many summaries hold it (`memo` keeps `op` alive meanwhile)."""
    hit = memo.get(id(op))
    if hit is None:
        hit = memo[id(op)] = (op, _lite(op))
    return hit[1]


def _op_fields(x: Any) -> tuple[str, int, str, int | None, int | None, int, int | None]:
    """(process, index, f, epoch, counter, invocation, completion) of an operation in any form `evidence` takes."""
    if type(x) is tuple and len(x) != _RAW_LEN:  # compact (`_lite`), the usual case
        return x[0], x[1], x[2], x[4], x[5], x[7], x[8]
    ev = evidence(x)
    return ev.process, ev.index, ev.f, ev.epoch, ev.counter, ev.invoke_ns, ev.complete_ns


def evidence(x: Evidence | Operation | tuple[Any, ...]) -> Evidence:
    """Evidence from an operation, its tuple or compact tuple, or evidence itself."""
    if type(x) is tuple:
        if len(x) == _RAW_LEN:
            return _ev(x)
        return Evidence(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], f"{x[0]}#{x[1]}", x[9])
    if type(x) is Evidence:
        return x
    return _ev(_raw(x))
