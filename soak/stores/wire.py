"""`exec:COMMAND ...` — a store in any language, run as a child process speaking the wire protocol (docs/wire.md).

Each store object starts its own child (stdin/stdout pipes, JSON lines), says hello, and turns every call into one
request and one response. The child dies with its opener: it gets SIGKILL as its parent-death signal, stdin EOF
ends it, and it stays in the opener's process group, so the nemesis's pause, resume and kill of a storm worker's
group reach it. A child that dies, garbles its answer or does not answer within the client's bound makes the call
in flight indeterminate (`WireStoreError`); the client kills it and the next call starts a fresh child over the
same location, as a driver reconnects after a dropped connection. The child's stderr is kept in the run directory
(`wire/<process>-<pid>.stderr`), beside the location where there is none.

Strikes reach the child (`strike_next`): a kernel-mode strike stops the child at a random instant after the request
is written, a step-mode strike asks the child to stop itself at a step of its own handling (`"strike"` in the
request); either way the worker then stops itself, so the nemesis finds and holds it the way it holds any struck
worker, and its resume of the worker's group continues both.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from soak._procstat import proc_state
from soak.clauses import BOOT_BOUND_S, default_call_bound_s  # a hello is a boot: it has a boot's bound
from soak.errors import StoreBootError, StoreSpecError
from soak.stores._wire_codec import CLAIM_CALLS, PROTOCOL_VERSION, RUN_CALLS, decode, encode, typed_error
from soak.stores import StoreTarget

__all__ = ["WireClaimStore", "WireStore", "WireStoreError", "call_timeout_s", "exec_target"]

_PR_SET_PDEATHSIG = 1
#: the environment variable that overrides the client's own bound on one call (seconds)
TIMEOUT_ENV = "SOAK_WIRE_CALL_TIMEOUT_S"
_STRIKE_POLL_S = 0.001  # how often a struck call looks whether the child has stopped itself
_FENCE_REFUSALS = ("LeaseHeldError", "CheckoutConflictError")  # refusals by a fence (a run's, a claim's)


class WireStoreError(Exception):
    """An untyped (indeterminate) failure of a call over the wire: the child raised an error the contract does not
    type, died, closed its stdout, wrote a line that is not its response, or did not answer within the bound."""


def call_timeout_s(lease_ttl_ms: int) -> float:
    """The client's own bound on one call: well past the `call-returns` bound, so the harness's watchdog judges
    slow calls and this bound only keeps a hung child from hanging its caller forever (`SOAK_WIRE_CALL_TIMEOUT_S`
    overrides it)."""
    env = os.environ.get(TIMEOUT_ENV, "").strip()
    if env:
        try:
            value = float(env)
        except ValueError:
            value = 0.0
        if value > 0:
            return value
    return max(30.0, 3 * default_call_bound_s(lease_ttl_ms))


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _process_name() -> str:
    for name in ("multiprocess", "multiprocessing"):
        mod = sys.modules.get(name)
        if mod is not None:
            current = mod.current_process().name
            if current != "MainProcess":
                return current
    return "main"


def _stderr_dir(location: str) -> tuple[Path, bool]:
    """Where children's stderr goes: `<run dir>/wire/` for a storm's location (`<run dir>/store`), else a
    directory beside the location. The flag says whether it is a run directory's (kept even when empty)."""
    loc = Path(location).resolve()
    if loc.name == "store" and (loc.parent / "history").is_dir():
        return loc.parent / "wire", True
    return loc.parent / f"{loc.name}.wire", False


def _wait_stopped(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while proc_state(pid) not in (b"T", b"t", b""):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)
    return True


class _Child:
    """One child process and its pipes; every failure is a `WireStoreError` and leaves the child killed."""

    def __init__(self, argv: list[str], name: str, location: str, lease_ttl_ms: int, options: dict[str, str],
                 kind: str) -> None:
        self.name, self.timeout_s = name, call_timeout_s(lease_ttl_ms)
        folder, self.keep_empty = _stderr_dir(location)
        folder.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SOAK_WIRE_VERSION": str(PROTOCOL_VERSION), "SOAK_WIRE_LOCATION": location,
               "SOAK_WIRE_LEASE_TTL_MS": str(lease_ttl_ms), "SOAK_WIRE_OPTIONS": json.dumps(options)}
        pending = folder / f"{_process_name()}-starting-{os.getpid()}-{time.monotonic_ns()}.stderr"
        with open(pending, "ab") as err:
            try:
                self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                             env=env, preexec_fn=_set_pdeathsig, close_fds=True, bufsize=0)
            except OSError as exc:
                pending.unlink(missing_ok=True)
                raise StoreBootError(f"store {name} failed to boot: cannot start {argv[0]!r}: {exc.strerror}; "
                                     "fix the command after exec:") from exc
        self.stderr_path = folder / f"{_process_name()}-{self.proc.pid}.stderr"
        os.replace(pending, self.stderr_path)
        self.out = self.proc.stdout.fileno()
        self.buf = b""
        self.next_id = 0
        self.dead: str | None = None

    # -- lines ------------------------------------------------------------------------------------

    def tail(self) -> str:
        """The last line the child wrote to stderr (empty when none)."""
        try:
            with open(self.stderr_path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(self.stderr_path) - 4096))
                lines = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1].strip()[:300] if lines else ""

    def fail(self, why: str) -> WireStoreError:
        """Kill the child, note why beside its stderr, and return the error for the call in flight."""
        self.kill()
        tail = self.tail()
        self.dead = why + (f" (its stderr ends: {tail})" if tail else f" (stderr: {self.stderr_path})")
        try:
            with open(self.stderr_path, "a") as fh:
                fh.write(f"soak: {why}\n")
        except OSError:
            pass
        return WireStoreError(f"store {self.name}: {self.dead}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for fh in (self.proc.stdin, self.proc.stdout):
            try:
                fh.close()
            except OSError:
                pass

    def send(self, request: dict[str, Any]) -> None:
        line = json.dumps(request, separators=(",", ":")).encode() + b"\n"
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self.proc.stdin.fileno(), view):]
        except OSError as exc:
            raise self.fail(f"the child could not be written to ({exc.strerror}) during {request['op']}: "
                            f"it exited with status {self.proc.poll()}") from None

    def readable(self, timeout_s: float) -> bool:
        if b"\n" in self.buf:
            return True
        ready, _, _ = select.select([self.out], [], [], max(0.0, timeout_s))
        return bool(ready)

    def receive(self, op: str, rid: int, deadline: float, bound_s: float = 0.0) -> dict[str, Any]:
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self.readable(left):
                raise self.fail(f"the child did not answer {op} within {max(self.timeout_s, bound_s):g} s "
                                f"({TIMEOUT_ENV} sets this bound)")
            chunk = os.read(self.out, 1 << 16)
            if not chunk:
                self.proc.poll()
                raise self.fail(f"the child closed its stdout during {op} (exit status {self.proc.wait(5)})")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        try:
            response = json.loads(line)
            if not isinstance(response, dict) or response.get("id") != rid or ("ok" in response) == ("error" in
                                                                                                  response):
                raise ValueError("not a response to this request")
        except ValueError:
            raise self.fail(f"the child answered {op} with a line that is not its response: {line[:200]!r}") from None
        return response


class _Client:
    """The half of a wire store object both kinds share: the child, hello, one call at a time, strikes."""

    injectable_clock = False
    #: the store's code runs in another process: a pause of the caller's thread lands outside it
    code_in_child = True
    #: called as a call restarts a dead child: `on_boot(None)` as the boot begins, `on_boot(ns)` once it ended (booted
    #: or not), so the caller can judge the boot by a boot's bound and the call by its own (soak.storm.worker)
    on_boot: Callable[[int | None], None] | None = None

    def __init__(self, argv: list[str], spec: str, location: str, lease_ttl_ms: int, options: dict[str, str],
                 kind: str) -> None:
        self._argv, self._spec, self._location, self._options, self._kind = argv, spec, location, options, kind
        self._ttl = int(lease_ttl_ms)
        self._strike: tuple[Any, ...] | None = None
        self.strike_seen: int | None = None  # step mode: the boundaries the child counted in the struck call
        # step mode: the boundaries of that call that ended a wait (an exchange had returned), where the child says
        self.strike_waits: tuple[int, ...] = ()
        self.strike_landed = False  # the struck call stopped the child before it answered
        self.strike_refused = False  # the struck call was refused by the fence (a typed refusal naming a holder)
        self._closed = False
        self._child = self._start()
        self.hello: dict[str, Any] = self._hello_answer
        self.lease_ttl_ms = int(self.hello.get("lease_ttl_ms", lease_ttl_ms))

    def _start(self) -> _Child:
        child = _Child(self._argv, self._spec, self._location, self._ttl, self._options, self._kind)
        args = {"version": PROTOCOL_VERSION, "kind": self._kind, "location": self._location,
                "lease_ttl_ms": self._ttl, "options": self._options}
        try:
            child.send({"id": 0, "op": "hello", "args": args})
            response = child.receive("hello", 0, time.monotonic() + max(child.timeout_s, BOOT_BOUND_S),
                                     BOOT_BOUND_S)
        except WireStoreError as exc:
            raise StoreBootError(f"store {self._spec} failed to boot: {child.dead}; fix the store or its "
                                 "command") from exc
        child.next_id = 1
        if "error" in response:
            err = response["error"] if isinstance(response["error"], dict) else {"message": response["error"]}
            tail = child.tail()
            child.fail("its hello was refused")
            kind, message = err.get("type", "error"), " ".join(str(err.get("message")).split())[:400]
            seen = f" (stderr: {tail})" if tail and tail not in message else ""
            if kind in ("StoreBootError", "StoreSpecError"):  # soak's own server: the message names the fix
                message = message.split(" failed to boot: ", 1)[-1]
                raise StoreBootError(f"store {self._spec} failed to boot: {message}{seen}")
            fix = ("speak protocol version 1 (docs/wire.md)" if kind == "ProtocolVersionError"
                   else "fix the store or its options")
            raise StoreBootError(f"store {self._spec} failed to boot: {kind}: {message}{seen}; {fix}")
        answer = response["ok"]
        if not isinstance(answer, dict) or answer.get("protocol") != PROTOCOL_VERSION:
            child.fail("its hello answer is not protocol version 1")
            raise StoreBootError(f"store {self._spec} failed to boot: its hello answered {str(answer)[:200]}, not "
                                 f"protocol {PROTOCOL_VERSION}; speak protocol version 1 (docs/wire.md)")
        self._hello_answer = answer
        return child

    # -- strikes ----------------------------------------------------------------------------------

    def strike_next(self, mode: str | None, k: int = 0, delay_ns: int = 0) -> None:
        """Strike the next call in the child: `step` asks the child to stop itself at boundary `k` of its handling
        (`k` 0: only count the boundaries, never stop); `kernel` stops the child `delay_ns` after the request is
        written. Either way this process then stops itself, inside the call (soak.storm.nemesis holds it and
        continues its process group). None disarms."""
        self._strike = None if mode is None else (mode, k, delay_ns)
        self.strike_seen = None
        self.strike_waits = ()
        self.strike_landed = False
        self.strike_refused = False

    def _await_strike(self, child: _Child, strike: tuple[Any, ...], deadline: float) -> None:
        mode, _, delay_ns = strike
        if mode == "kernel":
            if child.readable(delay_ns / 1e9):
                # answered before the instant (or this process ran late, descheduled past it): a stop now would
                # land after the call, a miss
                return
            try:
                os.kill(child.proc.pid, signal.SIGSTOP)
            except ProcessLookupError:
                return
            _wait_stopped(child.proc.pid, 0.2)
            if child.readable(0):
                os.kill(child.proc.pid, signal.SIGCONT)  # it had answered: after the call, let it go
                return
            self.strike_landed = True
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        while time.monotonic() < deadline and not child.readable(_STRIKE_POLL_S):
            if proc_state(child.proc.pid) in (b"T", b"t"):
                self.strike_landed = True
                os.kill(os.getpid(), signal.SIGSTOP)
                return

    # -- calls ------------------------------------------------------------------------------------

    def _call(self, table: dict[str, Any], op: str, *values: Any) -> Any:
        if self._closed:
            raise WireStoreError(f"store {self._spec}: {op} after close")
        child = self._child
        if child.dead is not None:
            hook, began = self.on_boot, time.monotonic_ns()
            if hook is not None:
                hook(None)
            try:
                child = self._child = self._start()
            except StoreBootError as exc:
                raise WireStoreError(f"{exc} (restarting the child after: {child.dead})") from None
            finally:
                if hook is not None:
                    hook(max(1, time.monotonic_ns() - began))
        names, result = table[op]
        rid = child.next_id
        child.next_id += 1
        request: dict[str, Any] = {"id": rid, "op": op,
                                   "args": {name: encode(kind, v) for (name, kind), v in zip(names, values)}}
        strike, self._strike = self._strike, None
        if strike is not None and strike[0] == "step":
            request["strike"] = {"mode": "step", "k": strike[1]}
        deadline = time.monotonic() + child.timeout_s
        child.send(request)
        if strike is not None and (strike[0] == "kernel" or strike[1] > 0):
            self._await_strike(child, strike, deadline)
        response = child.receive(op, rid, deadline)
        if strike is not None and isinstance(response.get("strike"), dict):
            self.strike_seen = response["strike"].get("seen")
            waits = response["strike"].get("waits")
            if isinstance(waits, list):
                self.strike_waits = tuple(w for w in waits if isinstance(w, int) and w > 0)
        if "error" in response:
            error = response["error"] if isinstance(response["error"], dict) else {"message": response["error"]}
            typed = typed_error(error)
            if strike is not None:
                self.strike_refused = type(typed).__name__ in _FENCE_REFUSALS
            if typed is not None:
                raise typed
            raise WireStoreError(f"{error.get('type', 'error')}: {error.get('message', '')}")
        try:
            return decode(result, response["ok"])
        except (ValueError, TypeError, KeyError) as exc:
            raise WireStoreError(f"store {self._spec}: the child's answer to {op} is malformed ({exc}): "
                                 f"{str(response['ok'])[:200]}") from None

    def close(self) -> None:
        """Ask the child to close its store and exit (idempotent); a child that does not is killed."""
        if self._closed:
            return
        self._closed = True
        child = self._child
        if child.dead is None:
            try:
                child.send({"id": child.next_id, "op": "close", "args": {}})
                child.receive("close", child.next_id, time.monotonic() + min(child.timeout_s, 10.0))
            except WireStoreError:
                pass
            try:
                child.proc.stdin.close()
                child.proc.wait(0.2)  # its store is closed: what is left is its own exit, not worth a caller's wait
            except (OSError, subprocess.TimeoutExpired):
                pass
        child.kill()
        try:
            if not child.keep_empty and child.stderr_path.stat().st_size == 0:
                child.stderr_path.unlink()
                child.stderr_path.parent.rmdir()
        except OSError:
            pass

    def __del__(self) -> None:
        child = getattr(self, "_child", None)
        if child is not None and child.proc.poll() is None:
            try:
                child.proc.kill()
            except OSError:
                pass


class _WireBlobs:
    """`transcripts` of a wire store: the child's blob calls."""

    def __init__(self, store: WireStore, fenced: bool) -> None:
        self._store = store
        self.fenced_writes = fenced

    def put(self, ref: str, blob: bytes, lease: Any = None) -> None:
        self._store._call(RUN_CALLS, "blob_put", ref, blob, lease)

    def get(self, ref: str) -> bytes | None:
        return self._store._call(RUN_CALLS, "blob_get", ref)

    def list(self, run_id: str) -> list[str]:
        return self._store._call(RUN_CALLS, "blob_list", run_id)

    def delete(self, ref: str, lease: Any = None) -> None:
        self._store._call(RUN_CALLS, "blob_delete", ref, lease)


class WireStore(_Client):
    """A fenced run store (CONTRACT section 1) served by a child process over the wire protocol."""

    def __init__(self, argv: list[str], spec: str, location: str, lease_ttl_ms: int, options: dict[str, str]):
        super().__init__(argv, spec, location, lease_ttl_ms, options, "runs")
        self.fenced_writes = bool(self.hello.get("fenced_writes", False))
        self.transcripts = _WireBlobs(self, bool(self.hello.get("blob_fenced_writes", self.fenced_writes)))

    def acquire(self, run_id, owner):
        return self._call(RUN_CALLS, "acquire", run_id, owner)

    def renew(self, lease):
        return self._call(RUN_CALLS, "renew", lease)

    def release(self, lease):
        self._call(RUN_CALLS, "release", lease)

    def append(self, run_id, entry, lease=None):
        self._call(RUN_CALLS, "append", run_id, entry, lease)

    def load(self, run_id):
        return self._call(RUN_CALLS, "load", run_id)

    def put_meta(self, meta, lease=None):
        self._call(RUN_CALLS, "put_meta", meta, lease)

    def get_meta(self, run_id):
        return self._call(RUN_CALLS, "get_meta", run_id)

    def list_runs(self):
        return self._call(RUN_CALLS, "list_runs")

    def delete(self, run_id, lease=None):
        self._call(RUN_CALLS, "delete", run_id, lease)


class WireClaimStore(_Client):
    """A task claim store (CONTRACT section 2) served by a child process over the wire protocol."""

    def __init__(self, argv: list[str], spec: str, location: str, lease_ttl_ms: int, options: dict[str, str]):
        super().__init__(argv, spec, location, lease_ttl_ms, options, "claims")

    def claim(self, project_id, task_id, claimant):
        return self._call(CLAIM_CALLS, "claim", project_id, task_id, claimant)

    def heartbeat(self, project_id, task_id, claimant, epoch):
        return self._call(CLAIM_CALLS, "heartbeat", project_id, task_id, claimant, epoch)

    def release(self, project_id, task_id, claimant, epoch):
        self._call(CLAIM_CALLS, "release", project_id, task_id, claimant, epoch)

    def get(self, project_id, task_id):
        return self._call(CLAIM_CALLS, "get", project_id, task_id)

    def record_progress(self, project_id, task_id, claimant, epoch, step):
        self._call(CLAIM_CALLS, "record_progress", project_id, task_id, claimant, epoch, step)

    def recover(self, project_id, task_id, epoch, by, reason):
        return self._call(CLAIM_CALLS, "recover", project_id, task_id, epoch, by, reason)

    def task(self, project_id, task_id):
        return self._call(CLAIM_CALLS, "task", project_id, task_id)

    def tasks(self, project_id):
        return self._call(CLAIM_CALLS, "tasks", project_id)

    def claims(self, project_id):
        return self._call(CLAIM_CALLS, "claims", project_id)

    def audit(self, project_id):
        return self._call(CLAIM_CALLS, "audit", project_id)

    def reconcile(self, project_id):
        return self._call(CLAIM_CALLS, "reconcile", project_id)


class _WireFactory:
    """The factory of an `exec:` target (picklable: a worker process opens its own child from it)."""

    def __init__(self, argv: list[str], spec: str, kind: str) -> None:
        self.argv, self.spec, self.kind = argv, spec, kind

    def __call__(self, location: str, *, lease_ttl_ms: int, **options: str) -> _Client:
        cls = WireStore if self.kind == "runs" else WireClaimStore
        return cls(self.argv, self.spec, os.path.abspath(location), lease_ttl_ms, {k: str(v) for k, v in
                                                                                   options.items()})


_SERVER = "soak.stores.wire_server"
_PYTHON = re.compile(r"python(3(\.\d+)?)?")


def _remove_inner(inner: StoreTarget, root: str, options: dict[str, Any]) -> Any:
    return inner.remove(root, {**inner.options, **options})


def exec_target(rest: str, options: dict[str, str], kind: str = "runs") -> StoreTarget:
    """The `StoreTarget` of `exec:COMMAND ARG ...` (the command shlex-split; options go to the hello)."""
    try:
        argv = shlex.split(rest)
    except ValueError as exc:
        raise StoreSpecError(f"exec: command {rest!r} does not split like a shell command line ({exc}); "
                             "fix its quoting") from None
    if not argv:
        raise StoreSpecError("exec: names no command; use exec:COMMAND ARG ..., e.g. "
                             "'exec:python -m soak.stores.wire_server sqlite:'")
    spec = "exec:" + rest
    single, remove = False, None
    if _SERVER in argv and argv.index(_SERVER) > 1 and argv[argv.index(_SERVER) - 1] == "-m" \
            and _PYTHON.fullmatch(os.path.basename(argv[0])):
        # soak's own server is soak's code: it runs in soak's interpreter, whatever `python` the PATH names (a
        # PATH without soak's environment ran another Python, which imported soak from the working directory and
        # died at its first strike for want of soak's dependencies)
        argv = [sys.executable, *argv[1:]]
    if _SERVER in argv and argv.index(_SERVER) + 1 < len(argv):  # soak's own server: what it serves matters here
        from soak.stores import resolve

        inner = resolve(argv[-1], kind=kind)
        single = inner.single_process
        if inner.remove is not None:
            remove = functools.partial(_remove_inner, inner)
    return StoreTarget(spec, _WireFactory(argv, spec, kind), options, single_process=single,
                       description=f"a child process speaking the wire protocol: {rest}", kind=kind, remove=remove)
