"""Pure rules between a turn and the session (day) that holds it: no I/O, each tested on its own.

A question about one episode ("what did Melanie paint after the camping trip?") often has its
evidence spread over a few turns of one session; a session with several strong candidates is a
stronger sign than one turn alone (`with_session_evidence`). The opposite rule, at most a few
results of one session (`cap_per_group`), makes room for the other sessions of multi-hop questions.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

__all__ = ["session_strength", "with_session_evidence", "cap_per_group"]


def session_strength(scores: np.ndarray, groups: Sequence[Hashable], *, top: int) -> np.ndarray:
    """Each candidate's session strength: the mean of the best `top` scores of its group (itself
    included; a group with fewer candidates averages what it has over `top`, so one lone strong
    turn does not make a strong session)."""
    scores = np.asarray(scores, dtype=np.float64)
    if top < 1 or not len(scores):
        return np.zeros_like(scores)
    members: dict[Hashable, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    strength = np.zeros_like(scores)
    for indices in members.values():
        best = np.sort(scores[indices])[::-1][:top]
        strength[indices] = float(best.sum()) / top
    return strength


def with_session_evidence(scores: np.ndarray, groups: Sequence[Hashable], *, weight: float, top: int) -> np.ndarray:
    """A candidate's score plus `weight` times its session's strength (0: off): of two equal turns,
    the one whose session holds more strong candidates ranks first."""
    scores = np.asarray(scores, dtype=np.float64)
    if weight <= 0:
        return scores
    return scores + weight * session_strength(scores, groups, top=top)


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
