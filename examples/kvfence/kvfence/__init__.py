"""kvfence: a worked example of a soak-certifiable fenced run store (one JSON-lines file + flock)."""

from kvfence.store import KvFenceStore, open_store

__all__ = ["KvFenceStore", "open_store"]
