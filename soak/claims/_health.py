"""The node health monitor: nodes heartbeat into a registry; a node whose heartbeats stop reads offline.

The registry is the harness's, not the claim store's (the store under test holds claims only): a directory with
one small file per node that every node process of one storm shares (`NodeRegistry(path)`), or an in-process one
(`NodeRegistry(None)`). A node writes only its own file (atomically replaced), so a node stopped in the middle of
a heartbeat blocks nobody else's. Health is derived when read: `online` while the last beat is within
`offline_after_s`, `offline` once it is older, `error` where an operator marked it so, `unknown` for a node never
seen. `NodeHealthMonitor.sweep()` reports the transitions one observer saw since its last sweep (a storm records
them). Time comes from an injected clock (seconds).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from soak.claims._policy import NodeHealth

__all__ = ["HealthChange", "NodeHealthMonitor", "NodeRegistry"]


@dataclass(frozen=True, slots=True)
class HealthChange:
    """One health transition an observer saw."""

    node_id: str
    old: NodeHealth
    new: NodeHealth
    at: float


class NodeRegistry:
    """Where node heartbeats and marks live: one file per node in a directory shared by processes, or memory."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[float, str]] = {}
        self._dir = Path(path) if path is not None else None
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)

    def put(self, node_id: str, last_beat: float, health: str) -> None:
        if self._dir is None:
            with self._lock:
                self._rows[node_id] = (last_beat, health)
            return
        path = self._dir / f"{node_id}.json"
        tmp = self._dir / f".{node_id}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps({"last_beat": last_beat, "health": health}))
        os.replace(tmp, path)

    def rows(self) -> dict[str, tuple[float, str]]:
        """node -> (last beat, stored health)."""
        if self._dir is None:
            with self._lock:
                return dict(self._rows)
        out = {}
        for path in self._dir.glob("*.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # replaced while read: the next read sees it
            out[path.stem] = (float(data["last_beat"]), str(data["health"]))
        return out

    def close(self) -> None:
        pass


class NodeHealthMonitor:
    """Node health from heartbeats: `online` while a node beats within `offline_after_s`, `offline` once it is
    silent longer, `error` where marked so, `unknown` for a node never seen."""

    def __init__(self, registry: NodeRegistry, offline_after_s: float, clock: Callable[[], float] = time.time) -> None:
        self.registry, self.offline_after_s, self.clock = registry, offline_after_s, clock
        self._seen: dict[str, NodeHealth] = {}

    def beat(self, node_id: str) -> None:
        """A heartbeat from `node_id`: it is online (an `error` mark is cleared by the node's own beat)."""
        self.registry.put(node_id, self.clock(), NodeHealth.ONLINE.value)

    def mark(self, node_id: str, health: NodeHealth | str) -> None:
        """Set a node's stored health directly (an operator, or a test toggling health)."""
        row = self.registry.rows().get(node_id)
        self.registry.put(node_id, row[0] if row else self.clock(), NodeHealth(health).value)

    def _health(self, row: tuple[float, str] | None, now: float) -> NodeHealth:
        if row is None:
            return NodeHealth.UNKNOWN
        stored = NodeHealth(row[1])
        if stored is NodeHealth.ONLINE and now - row[0] > self.offline_after_s:
            return NodeHealth.OFFLINE
        return stored

    def health(self, node_id: str) -> NodeHealth:
        """The node's health now."""
        return self._health(self.registry.rows().get(node_id), self.clock())

    def snapshot(self) -> dict[str, NodeHealth]:
        now = self.clock()
        return {node: self._health(row, now) for node, row in self.registry.rows().items()}

    def sweep(self) -> list[HealthChange]:
        """Every node whose health changed since this observer's last sweep (a silent node turns offline)."""
        now, out = self.clock(), []
        for node, health in self.snapshot().items():
            old = self._seen.get(node, NodeHealth.UNKNOWN)
            if health is not old:
                out.append(HealthChange(node, old, health, now))
                self._seen[node] = health
        return out
