"""Step strikes of a wire store's child, aimed next to the child's exchanges with what its store shares.

A store served over the wire runs in a child process; across processes it can race another only between two of its
own exchanges with the database (a statement, a round trip), and every boundary between the same two exchanges
stops it in the same place as far as another process can tell. A child that counts its boundaries (docs/wire.md,
section 4) also reports the ones that ended a wait (`waits`: an exchange had returned there), and `ChildAim`
sends `SHARE` of the step strikes to the boundaries on either side of those waits, each once per sweep, instead of
the uniform sweep over all n: a fence check and the write it guards, made as two exchanges, leave their window
open at one of these few. A wait counts where it recurs: in at least half the counted calls of the surface with the
same n (the child's own scheduling makes waits that come and go). The rest stay uniform, for exchanges too quick
to show as a wait. `SHARE` is higher than a worker's own strikes' (`soak.storm.strike`): over the wire, every
boundary between the same two exchanges stops the store in the same place as far as another process can tell, so
the uniform sweep spends most of its strikes where an aimed one already was.

A strike held while a successor took the run over, whose call the fence then refused after an exchange that came
after the stop, stopped the store before its fence check: the check ran after the stop and saw the successor (a
call already stale is refused before the stop, and makes no exchange after it). Every boundary up to that one precedes the
check, and no window between a check and its write opens there, so aimed strikes leave them out (the uniform ones
do not: a call refused for another reason, its lease already stale, teaches nothing, and the uniform sweep still
reaches every boundary).

The worker learns a surface's n (and its waits) before the surface's first strike by asking the child to count
one call without stopping (`k` 0), so no strike is spent on a guessed n.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

__all__ = ["SHARE", "ChildAim"]

#: The share of a wire child's step strikes aimed next to its exchanges.
SHARE = 0.75


class ChildAim:
    """One worker's aim at its wire child's exchanges, per surface."""

    def __init__(self) -> None:
        # surface -> n -> [calls counted, how often each boundary ended a wait in them]
        self._waits: dict[str, dict[int, list[Any]]] = {}
        self._done: dict[str, tuple[int, set[int]]] = {}  # surface -> (n, near positions struck in this sweep)
        self._before: dict[tuple[str, int], int] = {}  # (surface, n) -> the last boundary known to precede the check
        self.aimed = False  # the strike planned last is aimed next to an exchange

    def counted(self, surface: str) -> bool:
        """Whether a call of `surface` was counted already (else the next one is counted first, without a stop)."""
        return surface in self._waits

    def note(self, surface: str, seen: int, waits: tuple[int, ...]) -> None:
        """A call of `surface` made `seen` boundaries, and an exchange had returned at each of `waits`."""
        calls = self._waits.setdefault(surface, {}).setdefault(seen, [0, Counter()])
        calls[0] += 1
        calls[1].update(w for w in set(waits) if 1 < w <= seen)

    def before_check(self, surface: str, k: int, n: int) -> None:
        """A strike at boundary k of n was held while a successor took over, and the fence then refused the call."""
        if k > 0:
            self._before[(surface, n)] = max(k, self._before.get((surface, n), 0))

    def near(self, surface: str, n: int) -> tuple[int, ...]:
        """The boundaries on either side of the waits that recur in the surface's counted calls of n boundaries,
        past those known to precede the fence check (all of them while that would leave none)."""
        calls, counts = self._waits.get(surface, {}).get(n, (0, Counter()))
        near = sorted({b for w, c in counts.items() if 2 * c >= calls for b in (w - 1, w)})
        floor = self._before.get((surface, n), 0)
        return tuple(b for b in near if b > floor) or tuple(near)

    def pick(self, surface: str, n: int, u: float) -> int | None:
        """The boundary to strike instead of the uniform sweep's (None: keep the sweep's); `u` is the plan's draw."""
        self.aimed = False
        near = self.near(surface, n)
        seed = int(u * 2**32)
        if not near or random.Random(seed ^ 0xA1D).random() >= SHARE:
            return None
        done_n, done = self._done.get(surface, (0, set()))
        if done_n != n:
            done = set()
        left = [k for k in near if k not in done] or list(near)
        if len(left) == len(near):
            done = set()
        k = random.Random(seed).choice(left)
        self._done[surface] = (n, done | {k})
        self.aimed = True
        return k
