"""What the kernel says of a process (Linux `/proc`), for the parts of soak that stop and continue processes."""

from __future__ import annotations

__all__ = ["proc_state"]


def proc_state(pid: int) -> bytes:
    """The kernel's one-letter scheduling state of a process (b"T" stopped, b"R" running, ...; b"" when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3]
    except (OSError, ValueError):
        return b""
