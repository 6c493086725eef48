"""Storm scenarios: every knob of one storm, loaded from TOML presets and overridden from the CLI.

A scenario is a frozen `Scenario`: the storm's own knobs (workers, ttl, nemesis, time bound,
quorum) and the workload's (`Scenario.options`, validated by the workload's own schema). Both are
keys of one TOML file. `load_scenario("smoke")` reads the preset shipped inside the package
(`soak/scenarios/smoke.toml`, mirrored at the repo root as `scenarios/`); a path loads that file.
A file builds on a preset, named by its key `base` (default: its workload's root preset, `smoke`
for the runs workload): every key it omits, and every key of a table (`quorum`, `mix`) it omits,
is the preset's. The root preset builds on the `Scenario` defaults, which equal it, so
`Scenario()` is the smoke storm. A quorum threshold of 0 is no threshold. Unknown keys and bad
values raise `ScenarioError` naming the key and what it accepts. `dump_scenario` writes every key
back as TOML: the run directory keeps the scenario that ran, and it reloads to an equal `Scenario`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from soak.errors import ScenarioError

__all__ = [
    "BASE_KEY",
    "NEMESIS_QUORUM_KEYS",
    "Scenario",
    "dump_scenario",
    "int_key",
    "load_scenario",
    "number_key",
    "parse_override",
    "preset_names",
    "quorum_keys",
]

#: The quorum counters of the nemesis, which every workload's storm has (a workload adds its own).
NEMESIS_QUORUM_KEYS: tuple[str, ...] = ("pauses", "pauses_in_call", "strikes_held", "kills")


def _workload(name: str) -> Any:
    from soak.workloads import get_workload

    return get_workload(name)


def quorum_keys(workload: str = "runs") -> tuple[str, ...]:
    """Every quorum counter a scenario of `workload` may set a threshold on."""
    return (*_workload(workload).quorum_keys, *NEMESIS_QUORUM_KEYS)


@dataclass(frozen=True)
class Scenario:
    """Every knob of one storm. Times in seconds unless the name says `_ms`.

    The storm's own knobs are fields; the workload's (`soak.workloads.Workload.options`) are `options`, a frozen
    dataclass of the workload's. The defaults are the smoke preset's (`Scenario()` storms as
    `load_scenario("smoke")` does): `options` and `quorum` default to the workload's. `quorum` holds the
    thresholds above 0 (a threshold of 0 is none, and is dropped).
    """

    name: str = "custom"
    workload: str = "runs"
    store: str = "sqlite:"
    workers: int = 4
    # load workers beside them (`soak.workloads.runs.load`): each writes its own run as fast as the store takes
    # writes, every call recorded and checked; never the nemesis's target; 0 disables
    load_workers: int = 0
    lease_ttl_ms: int = 250
    seed: int = 0  # 0: pick one at random (the chosen seed is recorded in the run directory)
    time_bound_s: float = 90.0  # counted from the boot barrier (every first worker spawned and ready)
    # the `call-returns` bound on one store call; 0: derived from the ttl (20 x ttl, at least 2 s)
    call_timeout_s: float = 0.0
    grace_s: float = 2.0
    busy_retries: int = 3
    # real pauses (SIGSTOP ... SIGCONT); 0 disables
    pause_interval_s: float = 0.8
    pause_ms: int = 0  # 0: 1.6 x lease_ttl_ms
    pause_in_call_bias: float = 0.5
    # crashes (SIGKILL, then a fresh incarnation); 0 disables
    kill_interval_s: float = 2.5
    kill_in_call_bias: float = 0.5
    # clock skew (soak.storm.skew; networked stores only): a share of worker incarnations run with their wall
    # clock shifted by +-(1..2) x clock_skew_ms through libfaketime, monotonic clocks true; 0 disables
    clock_skew_ms: int = 0
    clock_skew_share: float = 0.5
    # network faults (soak.storm.netfault; networked stores only): each worker's connections pass a fault proxy
    # adding net_latency_ms +- net_jitter_ms per direction; every net_cut_interval_s a connection is cut inside
    # a call (before the request or after it reached the server); every net_stall_interval_s one direction of a
    # worker's connections stalls for net_stall_ms; 0 disables each
    net_latency_ms: float = 0.0
    net_jitter_ms: float = 0.0
    net_cut_interval_s: float = 0.0
    net_stall_interval_s: float = 0.0
    net_stall_ms: int = 0
    # host-level faults of a storm across hosts (`soak storm --hosts N` / `--cluster`; docs/cluster.md): every
    # host_kill_interval_s one whole host is killed (every process of it), every host_pause_interval_s every worker
    # of one host is paused for pause_ms, every host_partition_interval_s one host is cut off from the store for
    # host_partition_ms (a packet filter in its namespace); 0 disables each. host_partition_from: what a partition
    # cuts the host off, drawn afresh for each one: "store" (its workers' calls hang), "orchestrator" (its agent
    # cannot be reached while its workers go on), or both
    host_kill_interval_s: float = 0.0
    host_pause_interval_s: float = 0.0
    host_partition_interval_s: float = 0.0
    host_partition_ms: int = 0
    host_partition_from: tuple[str, ...] = ("store",)
    # end the storm at the first suspect operation (the workload's counter says which); the checker still judges
    stop_on_suspect: bool = False
    # judge the history while the storm runs and end the storm at the first proven violation (the checker still
    # judges the whole history); stop_on_suspect implies it
    stop_on_violation: bool = False
    quorum: dict[str, int] | None = None
    options: Any = None

    def __post_init__(self) -> None:
        workload = None
        if self.options is None or self.quorum is None:
            workload = _workload(self.workload)
        if self.options is None:
            object.__setattr__(self, "options", workload.options())
        quorum = workload.default_quorum() if self.quorum is None else self.quorum
        # one spelling per storm, so equal storms compare equal: no zero threshold
        object.__setattr__(self, "quorum", {k: v for k, v in quorum.items() if v})

    def replace(self, **changes: Any) -> Scenario:
        """A copy with `changes`: the storm's own keys and the workload's (`options`) alike, by name, as a scenario
        file names them (a table, e.g. the runs workload's `mix`, by the mapping of its keys to change)."""
        fields = {f.name for f in dataclasses.fields(self)}
        mine = {k: v for k, v in changes.items() if k in fields}
        theirs = {k: v for k, v in changes.items() if k not in fields}
        options = self.options
        if theirs:
            known = {f.name for f in dataclasses.fields(options)}
            unknown = sorted(set(theirs) - known)
            if unknown:
                raise ScenarioError(f"scenario has no key {unknown[0]!r}; known keys are "
                                    f"{', '.join(sorted(fields | known))}")
            options = dataclasses.replace(options, **theirs)
        return dataclasses.replace(self, options=options, **mine)

    @property
    def effective_pause_ms(self) -> int:
        """The pause length: `pause_ms`, or 1.6 x ttl when it is 0."""
        return self.pause_ms or int(self.lease_ttl_ms * 1.6)

    @property
    def call_bound_s(self) -> float:
        """The `call-returns` bound: `call_timeout_s`, or 20 x ttl (at least 2 s) when it is 0."""
        from soak.clauses import default_call_bound_s

        return self.call_timeout_s or default_call_bound_s(self.lease_ttl_ms)


# key -> (kind, check, what it accepts)
def int_key(lo: int, hi: int | None = None):
    """A key's (check, what it accepts): an integer in [lo, hi]."""
    def check(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)
    return check, f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")


def number_key(lo: float, hi: float | None = None, *, open_lo: bool = False):
    """A key's (check, what it accepts): a finite number in [lo, hi] (above lo with `open_lo`)."""
    def check(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        ok_lo = v > lo if open_lo else v >= lo
        return ok_lo and (hi is None or v <= hi)
    sign = ">" if open_lo else ">="
    return check, f"a number {sign} {lo}" + (f" and <= {hi}" if hi is not None else "")


#: what a host can be partitioned from (`host_partition_from`; soak.cluster.faults)
HOST_PARTITION_FROM = ("store", "orchestrator")


def _partition_from():
    def check(v: Any) -> bool:
        return (isinstance(v, (list, tuple)) and bool(v) and len(set(v)) == len(v)
                and all(isinstance(x, str) and x in HOST_PARTITION_FROM for x in v))
    return check, 'a non-empty list of distinct names out of "store" and "orchestrator", e.g. ["store", "orchestrator"]'


def _bool():
    return (lambda v: isinstance(v, bool)), "true or false"


def _str():
    return (lambda v: isinstance(v, str) and bool(v.strip())), "a non-empty string"


_FIELDS: dict[str, tuple[Any, str]] = {
    "name": _str(),
    "workload": _str(),
    "store": _str(),
    "workers": int_key(1, 256),
    "load_workers": int_key(0, 256),
    "lease_ttl_ms": int_key(10),
    "seed": int_key(0),
    "time_bound_s": number_key(0, open_lo=True),
    "call_timeout_s": number_key(0),
    "grace_s": number_key(0),
    "busy_retries": int_key(0),
    "pause_interval_s": number_key(0),
    "pause_ms": int_key(0),
    "pause_in_call_bias": number_key(0, 1),
    "kill_interval_s": number_key(0),
    "kill_in_call_bias": number_key(0, 1),
    "stop_on_suspect": _bool(),
    "stop_on_violation": _bool(),
    "clock_skew_ms": int_key(0),
    "clock_skew_share": number_key(0, 1),
    "net_latency_ms": number_key(0),
    "net_jitter_ms": number_key(0),
    "net_cut_interval_s": number_key(0),
    "net_stall_interval_s": number_key(0),
    "net_stall_ms": int_key(0),
    "host_kill_interval_s": number_key(0),
    "host_pause_interval_s": number_key(0),
    "host_partition_interval_s": number_key(0),
    "host_partition_ms": int_key(0),
    "host_partition_from": _partition_from(),
}
#: The storm's own table; a workload adds its own (`Workload.option_tables`, e.g. the runs workload's `mix`).
_QUORUM = "quorum"
#: The key naming the preset a scenario file builds on; not a `Scenario` field (the loaded scenario is complete).
BASE_KEY = "base"


def _tables(workload: Any) -> tuple[str, ...]:
    return (*workload.option_tables, _QUORUM)


def preset_names() -> list[str]:
    """The scenario presets shipped with soak."""
    return sorted(p.name[:-5] for p in resources.files("soak").joinpath("scenarios").iterdir()
                  if p.name.endswith(".toml"))


def _preset_text(name: str) -> str:
    return resources.files("soak").joinpath("scenarios", f"{name}.toml").read_text()


def _where(source: str) -> str:
    return f"scenario {source}"


def _known_keys(workload: Any) -> str:
    return ", ".join(sorted([*_FIELDS, *workload.option_schema, *_tables(workload), BASE_KEY]))


#: A quorum threshold's (check, what it accepts).
_THRESHOLD = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
              "an integer >= 0 (0: no threshold)")


def _table(data: dict[str, Any], table: str, values: dict[str, Any], keys: tuple[str, ...], check: Any,
           accepts: str, source: str, convert: Any) -> dict[str, Any]:
    """`values` (the base's) with the data's table `table` over them, each key known and each value checked."""
    raw = data.get(table, {})
    if not isinstance(raw, dict):
        raise ScenarioError(f"{_where(source)}: {table!r} must be a table ({', '.join(keys)})")
    for key, value in raw.items():
        if key not in keys:
            raise ScenarioError(f"{_where(source)}: unknown key '{table}.{key}'; {table} keys are {', '.join(keys)}")
        if not check(value):
            raise ScenarioError(f"{_where(source)}: key '{table}.{key}' must be {accepts}, got {value!r}")
        values[key] = convert(value)
    return values


def _build(data: dict[str, Any], source: str) -> Scenario:
    """Validate a parsed TOML mapping (its base and the overrides already merged in) into a `Scenario`.

    The storm's own keys are validated here, the workload's by its schema (`Workload.option_schema`,
    `option_tables`, `check_options`): every key the data (and its bases) left out is the workload's default.
    """
    name = data.get("workload", Scenario.workload)
    check, accepts = _FIELDS["workload"]
    if not check(name):
        raise ScenarioError(f"{_where(source)}: key 'workload' must be {accepts}, got {name!r}")
    workload = _workload(name)
    defaults = Scenario(workload=name)  # the root preset's values: every key the data (and its bases) left out
    base_options = defaults.options
    kwargs: dict[str, Any] = {}
    options: dict[str, Any] = {}
    tables = _tables(workload)
    for key, value in data.items():
        if key in tables:
            continue
        if key in _FIELDS:
            check, accepts = _FIELDS[key]
            target, default = kwargs, getattr(defaults, key)
        elif key in workload.option_schema:
            check, accepts = workload.option_schema[key]
            target, default = options, getattr(base_options, key)
        else:
            raise ScenarioError(f"{_where(source)}: unknown key {key!r}; known keys are {_known_keys(workload)}")
        if not check(value):
            raise ScenarioError(f"{_where(source)}: key {key!r} must be {accepts}, got {value!r}")
        target[key] = float(value) if isinstance(default, float) else tuple(value) if isinstance(default, tuple) \
            else value
    for table, (keys, check, accepts) in workload.option_tables.items():
        options[table] = _table(data, table, dict(getattr(base_options, table)), keys, check, accepts, source,
                                lambda v: float(v) if isinstance(v, int) else v)
    quorum = _table(data, _QUORUM, dict(defaults.quorum), quorum_keys(name), *_THRESHOLD, source, int)
    opts = dataclasses.replace(base_options, **options)
    workload.check_options(opts, source)
    scenario = dataclasses.replace(defaults, quorum=quorum, options=opts, **kwargs)
    if scenario.pause_ms and scenario.pause_ms <= scenario.lease_ttl_ms:
        raise ScenarioError(
            f"{_where(source)}: key 'pause_ms' ({scenario.pause_ms}) must exceed 'lease_ttl_ms' "
            f"({scenario.lease_ttl_ms}) so a paused holder loses its lease; or set it to 0 (1.6 x ttl)"
        )
    return scenario


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one `key=value` override; the value is read as TOML, else taken as a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ScenarioError(f"override {text!r} is not key=value; write e.g. --set workers=6 or quorum.takeovers=50")
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def _merge(data: dict[str, Any], overrides: dict[str, Any] | None, source: str) -> dict[str, Any]:
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    name = (overrides or {}).get("workload", data.get("workload", Scenario.workload))
    tables = _tables(_workload(name)) if isinstance(name, str) else (_QUORUM,)
    for key, value in (overrides or {}).items():
        head, dot, tail = key.partition(".")
        if key == BASE_KEY:
            raise ScenarioError(
                f"{_where(source)}: override {key!r} cannot change the preset a scenario builds on (the file's "
                "keys would still win over it); choose the preset itself, e.g. --scenario nightly"
            )
        if dot:
            if head not in tables:
                raise ScenarioError(
                    f"{_where(source)}: override {key!r} names no table; tables are {', '.join(tables)}"
                )
            table = merged.setdefault(head, {})
            if not isinstance(table, dict):
                raise ScenarioError(f"{_where(source)}: {head!r} must be a table, so {key!r} has nowhere to go")
            table[tail] = value
        else:
            merged[key] = value
    return merged


def _overlay(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `under`: a key of `over` wins; tables (`quorum`, a workload's `mix`) merge key by key."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in under.items()}
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def _on_base(data: dict[str, Any], source: str, preset: str | None, chain: tuple[str, ...] = ()) -> dict[str, Any]:
    """`data` merged over the preset it builds on (`base`, default its workload's root preset: `smoke` for the
    runs workload), and that over its own base.

    `preset` is the preset `data` was read from (None for a file): a workload's root preset without a `base`
    builds on the `Scenario` defaults, which `_build` starts from (they equal it).
    """
    own = {k: v for k, v in data.items() if k != BASE_KEY}
    base = data.get(BASE_KEY)
    if base is None:
        name = data.get("workload", Scenario.workload)
        root = _workload(name).root_preset if isinstance(name, str) else None
        if root is None or preset == root:
            return own  # `_build` names a workload it cannot load
        base = root
    names = preset_names()
    if not isinstance(base, str) or base not in names:
        raise ScenarioError(
            f"{_where(source)}: key 'base' must name the preset this scenario builds on, one of "
            f"{', '.join(names)}; got {base!r}"
        )
    here = (*chain, preset or source)
    if base in here:
        raise ScenarioError(f"{_where(source)}: presets build on each other in a circle: "
                            f"{' -> '.join([*here, base])}; give one of them another base")
    under = _on_base(_read_preset(base), base, base, here)
    under.pop("name", None)  # a scenario is named by its own file, never by its base
    return _overlay(under, own)


def _read_toml(path: Path, label: str) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario file {label}: {exc.strerror or exc}; pass an existing file") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message already says "(at line N, column M)"
        raise ScenarioError(f"scenario file {label} is not valid TOML: {exc}") from exc


def _read_preset(name: str) -> dict[str, Any]:
    try:
        return tomllib.loads(_preset_text(name))
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"scenario file {name} (soak/scenarios/{name}.toml) is not valid TOML: {exc}") from exc


def load_scenario(name_or_path: str | os.PathLike[str] = "smoke", overrides: dict[str, Any] | None = None) -> Scenario:
    """Load a preset by bare name (`smoke`, `nightly`, `certify`) or a TOML file by path.

    A file builds on the preset its key `base` names (default `smoke`): what it omits is the preset's.
    `overrides` maps keys (or `quorum.<key>` / `mix.<key>`) to values and wins over the file.
    """
    text = str(name_or_path)
    is_path = isinstance(name_or_path, os.PathLike) or "/" in text or text.endswith(".toml")
    preset: str | None = None
    if is_path:
        path = Path(text)
        data = _read_toml(path, str(path))
        default_name = path.stem
    else:
        if not text or not text.replace("-", "_").isidentifier():
            raise ScenarioError(f"scenario name {text!r} is not a preset name; use one of {', '.join(preset_names())}")
        if text not in preset_names():
            raise ScenarioError(
                f"no scenario preset {text!r}; use one of {', '.join(preset_names())} or a path to a .toml file"
            )
        data = _read_preset(text)
        default_name = preset = text
    data = _on_base(_merge(data, overrides, text), text, preset)
    data.setdefault("name", default_name)
    return _build(data, text)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def dump_scenario(scenario: Scenario) -> str:
    """The scenario as TOML text that `load_scenario` reads back to an equal `Scenario`.

    Every key is written, every mix weight and every quorum threshold (0 where it has none), so the
    preset it builds on contributes nothing: the file stays the storm that ran, whatever the presets say later.
    """
    workload = _workload(scenario.workload)
    lines = ["# soak storm scenario (as run): every key, so no preset's value applies"]
    for f in dataclasses.fields(scenario):
        if f.name not in (_QUORUM, "options"):
            lines.append(f"{f.name} = {_toml_value(getattr(scenario, f.name))}")
    tables: dict[str, dict[str, Any]] = {}
    for f in dataclasses.fields(scenario.options):
        value = getattr(scenario.options, f.name)
        if f.name in workload.option_tables:
            tables[f.name] = value
        else:
            lines.append(f"{f.name} = {_toml_value(value)}")
    tables[_QUORUM] = {**dict.fromkeys(quorum_keys(scenario.workload), 0), **scenario.quorum}
    for table, values in tables.items():
        lines.append("")
        lines.append(f"[{table}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"
