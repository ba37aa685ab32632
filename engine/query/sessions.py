"""A rule between a result and the session (day) that holds it, pure: no I/O, tested on its own.

A question's evidence often lies in one session, but which one the ranking cannot always tell: the
first places filled from one session bet everything on it. `cap_per_group` keeps a few of the first
places for the other sessions; the candidates that made way follow right after, so the turns a
strong session holds stay near the top. Measured on LoCoMo dev (docs/benchmarks.md, round 5).
"""

from __future__ import annotations

from typing import Hashable, Sequence

__all__ = ["cap_per_group"]


def cap_per_group(groups: Sequence[Hashable], *, cap: int, within: int | None = None) -> list[int]:
    """A ranking's order (indices into `groups`, already best first) where each group holds at most
    `cap` of the first `within` places (None: all of them); the candidates that made way follow those
    places, in their order, before the rest (cap 0: off)."""
    if cap <= 0:
        return list(range(len(groups)))
    room = len(groups) if within is None else within
    seen: dict[Hashable, int] = {}
    head: list[int] = []
    waiting: list[int] = []
    for i, group in enumerate(groups):
        if len(head) >= room:
            return head + waiting + list(range(i, len(groups)))
        if seen.get(group, 0) < cap:
            seen[group] = seen.get(group, 0) + 1
            head.append(i)
        else:
            waiting.append(i)
    return head + waiting
