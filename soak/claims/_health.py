"""The node health monitor: nodes heartbeat into a registry; a node whose heartbeats stop is marked offline.

The registry is the harness's, not the claim store's (the store under test holds claims only): a SQLite file
that every node process of one storm opens (`NodeRegistry(path)`), or an in-process one (`NodeRegistry(None)`).
`NodeHealthMonitor.sweep()` turns silent nodes `offline` and writes each transition, so a storm's history shows
when a node went offline and came back. Time comes from an injected clock (seconds).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from soak.claims._policy import NodeHealth

__all__ = ["HealthChange", "NodeHealthMonitor", "NodeRegistry"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    node_id TEXT PRIMARY KEY,
    last_beat REAL NOT NULL,
    health TEXT NOT NULL,
    changed_at REAL NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class HealthChange:
    """One health transition the monitor recorded."""

    node_id: str
    old: NodeHealth
    new: NodeHealth
    at: float


class NodeRegistry:
    """Where node heartbeats and health live: a SQLite file shared by processes, or memory (path None)."""

    def __init__(self, path: str | None) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[float, str, float]] = {}
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA busy_timeout = 30000")
            for _ in range(50):
                try:
                    self._db.execute("PRAGMA journal_mode = WAL")
                    self._db.execute(_SCHEMA)
                    break
                except sqlite3.OperationalError:
                    time.sleep(0.02)

    def put(self, node_id: str, last_beat: float, health: str, changed_at: float) -> None:
        if self._db is None:
            with self._lock:
                self._rows[node_id] = (last_beat, health, changed_at)
            return
        self._db.execute("INSERT INTO nodes VALUES (?, ?, ?, ?) ON CONFLICT(node_id) DO UPDATE SET "
                         "last_beat = excluded.last_beat, health = excluded.health, changed_at = excluded.changed_at",
                         (node_id, last_beat, health, changed_at))

    def rows(self) -> dict[str, tuple[float, str, float]]:
        if self._db is None:
            with self._lock:
                return dict(self._rows)
        return {r[0]: (r[1], r[2], r[3]) for r in self._db.execute("SELECT * FROM nodes")}

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class NodeHealthMonitor:
    """Node health from heartbeats: `online` while a node beats within `offline_after_s`, `offline` once it is
    silent longer, `error` where marked so, `unknown` for a node never seen."""

    def __init__(self, registry: NodeRegistry, offline_after_s: float, clock: Callable[[], float] = time.time) -> None:
        self.registry, self.offline_after_s, self.clock = registry, offline_after_s, clock

    def beat(self, node_id: str) -> HealthChange | None:
        """A heartbeat from `node_id`: it is online again (the change, where it was not)."""
        now = self.clock()
        old = self._stored(node_id)
        self.registry.put(node_id, now, NodeHealth.ONLINE.value, now if old is not NodeHealth.ONLINE else
                          self.registry.rows()[node_id][2])
        return None if old is NodeHealth.ONLINE else HealthChange(node_id, old, NodeHealth.ONLINE, now)

    def mark(self, node_id: str, health: NodeHealth | str) -> None:
        """Set a node's health directly (an operator, or a test toggling health)."""
        now = self.clock()
        row = self.registry.rows().get(node_id)
        self.registry.put(node_id, row[0] if row else now, NodeHealth(health).value, now)

    def _stored(self, node_id: str) -> NodeHealth:
        row = self.registry.rows().get(node_id)
        return NodeHealth(row[1]) if row else NodeHealth.UNKNOWN

    def health(self, node_id: str) -> NodeHealth:
        """The node's health now (a silent node reads `offline` even before a sweep records it)."""
        row = self.registry.rows().get(node_id)
        if row is None:
            return NodeHealth.UNKNOWN
        stored = NodeHealth(row[1])
        if stored is NodeHealth.ONLINE and self.clock() - row[0] > self.offline_after_s:
            return NodeHealth.OFFLINE
        return stored

    def snapshot(self) -> dict[str, NodeHealth]:
        return {node: self.health(node) for node in self.registry.rows()}

    def sweep(self) -> list[HealthChange]:
        """Mark every online node silent for longer than `offline_after_s` offline; the changes made."""
        now, out = self.clock(), []
        for node, (last, stored, _) in self.registry.rows().items():
            if stored == NodeHealth.ONLINE.value and now - last > self.offline_after_s:
                self.registry.put(node, last, NodeHealth.OFFLINE.value, now)
                out.append(HealthChange(node, NodeHealth.ONLINE, NodeHealth.OFFLINE, now))
        return out
