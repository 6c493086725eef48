"""Hypothesis state machines that drive a real store and the pure model in lockstep.

`FencedStoreMachine` runs random programs of lease and data operations (acquire, renew,
release, appends at the right and wrong seq, meta writes, blob puts and deletes, run deletes)
against a store and against `soak.oracle.Oracle`, with live, superseded, foreign and absent
leases. Every outcome is compared by type, the full observable state after every step, and
a failure names the contract clause it breaks (`soak.clauses`).

Time: where the store object declares `injectable_clock = True` (CONTRACT section 1, read by
`StoreTarget.probe_injectable_clock`, never inferred from the factory's signature), store and
model share a `soak.clock.FakeClock` that a rule advances; otherwise a rule sleeps past a short
ttl and every outcome near an expiry boundary is allowed either way (as `expired-unsuperseded`
is), the model following the store. The outcome says which clock was used and why.

Busy: a `StoreBusyError` wrote nothing, so the call is retried (`soak.retry`, bounded) and the
retries are counted; a call busy on every attempt ends the run `inconclusive`, never a pass.

Choices the contract leaves to the store are accepted both ways and reported: whether an
expired, unsuperseded lease is accepted (`expired-unsuperseded`), and whether a fenced delete
ends the deleting holder's tenure (`delete-ends-tenure`). The delete choice is probed once,
before the first program, and every program holds the store to it; a store that answers both ways
breaks `delete-semantics`.

Replay: what a rule draws never depends on a store's answer (in real time an answer can depend on
call latency), so Hypothesis sees the same draws when it replays a program.

Liveness: each store call is timed, and one that takes longer than the `call-returns` bound
(`soak.clauses.default_call_bound_s(ttl)`) fails that clause. A call that never returns hangs
the model with it, and a store that kills its process kills the model: those are for
conformance and the storm, which run calls where a hang or a crash can be seen (`no-crash` is
never exercised here).

A vendor runs it from its own tests in one line::

    TestMyStore = soak.model.machine_test_case("mypkg.store:open_store")

or calls `run_model(spec, max_examples=..., profile=...)`; `soak model --store SPEC` is the CLI.

The package by concern: `_machine` (the rules and the state invariant), `_driver` (what they stand on:
the store's set-up, timed and retried calls, where a lease stood, failing a clause), `_profiles` (the
Hypothesis settings profiles, registered once on import), `_runner` (binding the machine to a store,
running it, reading its outcome) and `_cli` (`soak model`).
"""

from soak.clock import FakeClock
from soak.model._cli import configure_parser, run_cli
from soak.model._driver import FAKE_TTL_MS, REAL_TTL_MS, ContractViolation, ModelInconclusive  # noqa: F401
from soak.model._machine import BLOB_NAMES, MODEL_NEVER_EXERCISES, OWNERS, RUNS, FencedStoreMachine  # noqa: F401
from soak.model._profiles import PROFILES, default_profile, model_settings
from soak.model._runner import ModelOutcome, check_model, machine_for, machine_test_case, run_model

# Also importable from here, outside __all__: the two ttls and the runs, owners and blob names of the programs.
__all__ = [
    "ContractViolation",
    "FakeClock",
    "FencedStoreMachine",
    "MODEL_NEVER_EXERCISES",
    "ModelInconclusive",
    "ModelOutcome",
    "PROFILES",
    "check_model",
    "configure_parser",
    "default_profile",
    "machine_for",
    "machine_test_case",
    "model_settings",
    "run_cli",
    "run_model",
]
