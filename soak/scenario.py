"""Storm scenarios: every knob of one storm, loaded from TOML presets and overridden from the CLI.

A scenario is a frozen `Scenario`. `load_scenario("smoke")` reads the preset shipped inside the
package (`soak/scenarios/smoke.toml`, mirrored at the repo root as `scenarios/`); a path loads
that file. A file builds on a preset, named by its key `base` (default `smoke`): every key it
omits, and every `mix` and `quorum` key it omits, is the preset's. `smoke` is the root: it builds
on the `Scenario` defaults, which equal it, so `Scenario()` is the smoke storm. A quorum
threshold of 0 is no threshold. Unknown keys and bad values raise `ScenarioError` naming the key
and what it accepts. `dump_scenario` writes every key back as TOML: the run directory keeps the
scenario that ran, and it reloads to an equal `Scenario`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from soak.errors import ScenarioError

__all__ = [
    "ACCEPT_SURFACES",
    "BASE_KEY",
    "MIX_KEYS",
    "QUORUM_KEYS",
    "ROOT_PRESET",
    "STALE_SURFACES",
    "Scenario",
    "dump_scenario",
    "load_scenario",
    "parse_override",
    "preset_names",
]

#: Surfaces a stale sweep probes; each has its own `stale_<surface>` counter.
STALE_SURFACES: tuple[str, ...] = (
    "append", "put_meta", "blob_put", "blob_delete", "delete", "renew", "release", "cross",
)
#: Surfaces a live tenure writes; each has its own `accepted_<surface>` counter.
ACCEPT_SURFACES: tuple[str, ...] = ("append", "put_meta", "blob_put", "blob_delete", "renew")

#: Every quorum counter a scenario may set a threshold on.
QUORUM_KEYS: tuple[str, ...] = (
    "grants",
    "takeovers",
    "stale_refusals",
    *(f"stale_{s}" for s in STALE_SURFACES),
    *(f"accepted_{s}" for s in ACCEPT_SURFACES),
    "deletion_cycles",
    "cross_refusals",
    "stalls",
    "pauses",
    "pauses_in_call",
    "kills",
)

#: The weights of one live tenure's operation mix.
#: `order_probe` is an append at or below the fresh tail under the live lease: the order guard
#: (JournalOrderError) must refuse it, which appends at tail + 1 alone never exercise.
#: `read` reads back the journal tail, meta and a blob of the run mid-tenure (evidence for the checker).
MIX_KEYS: tuple[str, ...] = (
    "append", "put_meta", "blob_put", "blob_delete", "renew", "side_cycle", "cross", "order_probe", "read",
    "edge",
)
#: The preset every other builds on (a file without `base` builds on it); it builds on the `Scenario` defaults.
ROOT_PRESET = "smoke"

# The smoke preset's tables, the `Scenario` defaults (soak/scenarios/smoke.toml spells the same; a test holds them equal)
_DEFAULT_MIX = {"append": 30.0, "put_meta": 20.0, "blob_put": 15.0, "blob_delete": 10.0, "renew": 8.0,
                "side_cycle": 10.0, "cross": 7.0, "order_probe": 3.0, "read": 10.0, "edge": 8.0}
_DEFAULT_QUORUM = {
    "takeovers": 40, "stale_refusals": 100,
    "stale_append": 10, "stale_put_meta": 10, "stale_blob_put": 10, "stale_blob_delete": 10, "stale_delete": 10,
    "stale_renew": 10, "stale_release": 10, "stale_cross": 10,
    "accepted_append": 50, "accepted_put_meta": 30, "accepted_blob_put": 20, "accepted_blob_delete": 10,
    "accepted_renew": 10,
    "deletion_cycles": 10, "cross_refusals": 10, "stalls": 10, "pauses": 5, "pauses_in_call": 1, "kills": 2,
}


@dataclass(frozen=True)
class Scenario:
    """Every knob of one storm. Times in seconds unless the name says `_ms`.

    The defaults are the smoke preset's (`Scenario()` storms as `load_scenario("smoke")` does). `mix` holds a
    weight for every `MIX_KEYS` key (one it leaves out is 0); `quorum` holds the thresholds above 0 (a
    threshold of 0 is none, and is dropped).
    """

    name: str = "custom"
    workload: str = "runs"
    store: str = "sqlite:"
    workers: int = 4
    lease_ttl_ms: int = 250
    runs: int = 3
    side_runs: int = 2
    seed: int = 0  # 0: pick one at random (the chosen seed is recorded in the run directory)
    time_bound_s: float = 90.0
    # the `call-returns` bound on one store call; 0: derived from the ttl (20 x ttl, at least 2 s)
    call_timeout_s: float = 0.0
    grace_s: float = 2.0
    # one live tenure
    ops_min: int = 3
    ops_max: int = 8
    blob_names: int = 4
    busy_retries: int = 3
    # cooperative stalls
    stall_prob: float = 0.3
    stall_factor: float = 1.4
    # the share of tenures that end with a struck edge write (the worker stops itself inside it,
    # soak.storm.strike, and the nemesis holds it past the lease while a successor takes over);
    # also the chance an `edge` write of the mix is struck. Tenures end with a stall
    # (stall_prob), a strike (strike_prob) or else a release.
    strike_prob: float = 0.55
    # real pauses (SIGSTOP ... SIGCONT); 0 disables
    pause_interval_s: float = 0.8
    pause_ms: int = 0  # 0: 1.6 x lease_ttl_ms
    pause_in_call_bias: float = 0.5
    # crashes (SIGKILL, then a fresh incarnation); 0 disables
    kill_interval_s: float = 2.5
    kill_in_call_bias: float = 0.5
    # end the storm at the first suspect operation (see `soak.storm.quorum`); the checker still judges
    stop_on_suspect: bool = False
    mix: dict[str, float] = field(default_factory=lambda: dict(_DEFAULT_MIX))
    quorum: dict[str, int] = field(default_factory=lambda: dict(_DEFAULT_QUORUM))

    def __post_init__(self) -> None:
        # one spelling per storm, so equal storms compare equal: every mix key, no zero threshold
        object.__setattr__(self, "mix", {**dict.fromkeys(MIX_KEYS, 0.0), **self.mix})
        object.__setattr__(self, "quorum", {k: v for k, v in self.quorum.items() if v})

    @property
    def effective_pause_ms(self) -> int:
        """The pause length: `pause_ms`, or 1.6 x ttl when it is 0."""
        return self.pause_ms or int(self.lease_ttl_ms * 1.6)

    @property
    def call_bound_s(self) -> float:
        """The `call-returns` bound: `call_timeout_s`, or 20 x ttl (at least 2 s) when it is 0."""
        from soak.clauses import default_call_bound_s

        return self.call_timeout_s or default_call_bound_s(self.lease_ttl_ms)

    @property
    def stall_ms(self) -> int:
        return int(self.lease_ttl_ms * self.stall_factor)

    def main_runs(self) -> list[str]:
        return [f"r{i}" for i in range(self.runs)]

    def side_run_ids(self) -> list[str]:
        return [f"s{i}" for i in range(self.side_runs)]


# key -> (kind, check, what it accepts)
def _int(lo: int, hi: int | None = None):
    def check(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)
    return check, f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")


def _num(lo: float, hi: float | None = None, *, open_lo: bool = False):
    def check(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        ok_lo = v > lo if open_lo else v >= lo
        return ok_lo and (hi is None or v <= hi)
    sign = ">" if open_lo else ">="
    return check, f"a number {sign} {lo}" + (f" and <= {hi}" if hi is not None else "")


def _bool():
    return (lambda v: isinstance(v, bool)), "true or false"


def _str():
    return (lambda v: isinstance(v, str) and bool(v.strip())), "a non-empty string"


_FIELDS: dict[str, tuple[Any, str]] = {
    "name": _str(),
    "workload": _str(),
    "store": _str(),
    "workers": _int(1, 256),
    "lease_ttl_ms": _int(10),
    "runs": _int(2, 1000),
    "side_runs": _int(1, 1000),
    "seed": _int(0),
    "time_bound_s": _num(0, open_lo=True),
    "call_timeout_s": _num(0),
    "grace_s": _num(0),
    "ops_min": _int(1),
    "ops_max": _int(1),
    "blob_names": _int(1),
    "busy_retries": _int(0),
    "stall_prob": _num(0, 1),
    "stall_factor": _num(1, open_lo=True),
    "strike_prob": _num(0, 1),
    "pause_interval_s": _num(0),
    "pause_ms": _int(0),
    "pause_in_call_bias": _num(0, 1),
    "kill_interval_s": _num(0),
    "kill_in_call_bias": _num(0, 1),
    "stop_on_suspect": _bool(),
}
_TABLES = ("mix", "quorum")
#: The key naming the preset a scenario file builds on; not a `Scenario` field (the loaded scenario is complete).
BASE_KEY = "base"


def preset_names() -> list[str]:
    """The scenario presets shipped with soak."""
    return sorted(p.name[:-5] for p in resources.files("soak").joinpath("scenarios").iterdir()
                  if p.name.endswith(".toml"))


def _preset_text(name: str) -> str:
    return resources.files("soak").joinpath("scenarios", f"{name}.toml").read_text()


def _where(source: str) -> str:
    return f"scenario {source}"


def _known_keys() -> str:
    return ", ".join(sorted([*_FIELDS, *_TABLES, BASE_KEY]))


def _build(data: dict[str, Any], source: str) -> Scenario:
    """Validate a parsed TOML mapping (its base and the overrides already merged in) into a `Scenario`."""
    defaults = Scenario()  # the root preset's values: every key the data (and its bases) left out
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in _TABLES:
            continue
        if key not in _FIELDS:
            raise ScenarioError(f"{_where(source)}: unknown key {key!r}; known keys are {_known_keys()}")
        check, accepts = _FIELDS[key]
        if not check(value):
            raise ScenarioError(f"{_where(source)}: key {key!r} must be {accepts}, got {value!r}")
        kwargs[key] = float(value) if isinstance(getattr(defaults, key), float) else value
    mix = dict(defaults.mix)
    raw_mix = data.get("mix", {})
    if not isinstance(raw_mix, dict):
        raise ScenarioError(f"{_where(source)}: 'mix' must be a table of weights ({', '.join(MIX_KEYS)})")
    for key, value in raw_mix.items():
        if key not in MIX_KEYS:
            raise ScenarioError(f"{_where(source)}: unknown key 'mix.{key}'; mix keys are {', '.join(MIX_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or not math.isfinite(value):
            raise ScenarioError(f"{_where(source)}: key 'mix.{key}' must be a number >= 0, got {value!r}")
        mix[key] = float(value)
    if sum(mix.values()) <= 0:
        raise ScenarioError(f"{_where(source)}: the weights in 'mix' sum to 0; give at least one a weight > 0")
    quorum = dict(defaults.quorum)
    raw_quorum = data.get("quorum", {})
    if not isinstance(raw_quorum, dict):
        raise ScenarioError(f"{_where(source)}: 'quorum' must be a table of thresholds ({', '.join(QUORUM_KEYS)})")
    for key, value in raw_quorum.items():
        if key not in QUORUM_KEYS:
            raise ScenarioError(
                f"{_where(source)}: unknown key 'quorum.{key}'; quorum keys are {', '.join(QUORUM_KEYS)}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ScenarioError(f"{_where(source)}: key 'quorum.{key}' must be an integer >= 0 "
                                f"(0: no threshold), got {value!r}")
        quorum[key] = value
    scenario = dataclasses.replace(defaults, mix=mix, quorum=quorum, **kwargs)
    if scenario.stall_prob + scenario.strike_prob > 1:
        raise ScenarioError(
            f"{_where(source)}: keys 'stall_prob' ({scenario.stall_prob:g}) and 'strike_prob' "
            f"({scenario.strike_prob:g}) are shares of the tenures and must sum to at most 1"
        )
    if scenario.ops_max < scenario.ops_min:
        raise ScenarioError(
            f"{_where(source)}: key 'ops_max' ({scenario.ops_max}) must be >= 'ops_min' ({scenario.ops_min})"
        )
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
    for key, value in (overrides or {}).items():
        head, dot, tail = key.partition(".")
        if key == BASE_KEY:
            raise ScenarioError(
                f"{_where(source)}: override {key!r} cannot change the preset a scenario builds on (the file's "
                "keys would still win over it); choose the preset itself, e.g. --scenario nightly"
            )
        if dot:
            if head not in _TABLES:
                raise ScenarioError(
                    f"{_where(source)}: override {key!r} names no table; tables are {', '.join(_TABLES)}"
                )
            table = merged.setdefault(head, {})
            if not isinstance(table, dict):
                raise ScenarioError(f"{_where(source)}: {head!r} must be a table, so {key!r} has nowhere to go")
            table[tail] = value
        else:
            merged[key] = value
    return merged


def _overlay(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `under`: a key of `over` wins; the `mix` and `quorum` tables merge key by key."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in under.items()}
    for key, value in over.items():
        if key in _TABLES and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def _on_base(data: dict[str, Any], source: str, preset: str | None, chain: tuple[str, ...] = ()) -> dict[str, Any]:
    """`data` merged over the preset it builds on (`base`, default smoke), and that over its own base.

    `preset` is the preset `data` was read from (None for a file): the root preset without a `base` builds on
    the `Scenario` defaults, which `_build` starts from.
    """
    own = {k: v for k, v in data.items() if k != BASE_KEY}
    base = data.get(BASE_KEY)
    if base is None:
        if preset == ROOT_PRESET:
            return own
        base = ROOT_PRESET
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
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def dump_scenario(scenario: Scenario) -> str:
    """The scenario as TOML text that `load_scenario` reads back to an equal `Scenario`.

    Every key is written, every mix weight and every quorum threshold (0 where it has none), so the
    preset it builds on contributes nothing: the file stays the storm that ran, whatever the presets say later.
    """
    lines = ["# soak storm scenario (as run): every key, so no preset's value applies"]
    for f in dataclasses.fields(scenario):
        if f.name in _TABLES:
            continue
        lines.append(f"{f.name} = {_toml_value(getattr(scenario, f.name))}")
    tables = {"mix": scenario.mix, "quorum": {**dict.fromkeys(QUORUM_KEYS, 0), **scenario.quorum}}
    for table, values in tables.items():
        lines.append("")
        lines.append(f"[{table}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"
