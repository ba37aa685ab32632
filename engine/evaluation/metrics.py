"""Retrieval metrics as pure functions over one ranked list and one set of relevant ids.

The definitions follow LongMemEval's `eval_utils.py` (recall_any, recall_all, ndcg with binary
relevance), plus MRR and LoCoMo's own fractional recall, so our figures compare with both papers.

A ranked list is a sequence of rank *slots*, best first. Two shapes are used:

* `Sequence[str | None]` (one id per slot) for NDCG and MRR: `None` marks a slot that holds no
  id of the kind being judged (e.g. a summary hit at turn level). It still occupies its rank, so
  it pushes later hits down, but it is never relevant.
* `Sequence[Collection[str]]` (a set of ids per slot) for the recalls: a message hit at turn level
  is `{dia_id}`, its window is the set of turns it spans, a summary at turn level is `set()`.
  `as_slots` turns the first shape into the second.

Duplicates: recall looks at the union of the top-k slots, so an id found twice counts once. In
NDCG and MRR a repeated relevant id gains only at its first rank (later copies have gain 0), so a
list cannot score above the ideal by repeating a hit.
"""

from __future__ import annotations

import math
from typing import Collection, Iterable, Sequence

__all__ = [
    "as_slots", "recall_any", "recall_all", "recall_fraction", "dcg", "ndcg", "reciprocal_rank",
    "percentile", "mean",
]


def as_slots(ranked: Sequence[str | None]) -> list[frozenset[str]]:
    """One id per slot as one set per slot (`None` -> the empty set)."""
    return [frozenset() if item is None else frozenset((item,)) for item in ranked]


def _found(ranked: Sequence[Collection[str]], k: int) -> set[str]:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return {item for slot in ranked[:k] for item in slot}


def _checked(relevant: Collection[str]) -> frozenset[str]:
    # With nothing relevant every recall is undefined (LongMemEval's all() would say 1, any() 0):
    # the caller must leave such questions out rather than score them.
    if not relevant:
        raise ValueError("no relevant ids: the metric is undefined, leave the question out")
    return frozenset(relevant)


def recall_any(ranked: Sequence[Collection[str]], relevant: Collection[str], k: int) -> float:
    """1.0 if any relevant id is in the top k slots, else 0.0."""
    return float(bool(_found(ranked, k) & _checked(relevant)))


def recall_all(ranked: Sequence[Collection[str]], relevant: Collection[str], k: int) -> float:
    """1.0 if every relevant id is in the top k slots, else 0.0."""
    return float(_checked(relevant) <= _found(ranked, k))


def recall_fraction(ranked: Sequence[Collection[str]], relevant: Collection[str], k: int) -> float:
    """The share of relevant ids found in the top k slots (LoCoMo's "recall accuracy")."""
    wanted = _checked(relevant)
    return len(_found(ranked, k) & wanted) / len(wanted)


def dcg(gains: Iterable[float], k: int) -> float:
    """LongMemEval's DCG: g1 + sum over ranks i = 2..k of g_i / log2(i).

    Note ranks 1 and 2 both weigh 1 in this form (not the log2(i + 1) of other toolkits); the
    ideal is computed the same way, so NDCG stays in [0, 1].
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    total = 0.0
    for rank, gain in enumerate(list(gains)[:k], start=1):
        total += gain if rank == 1 else gain / math.log2(rank)
    return total


def _gains(ranked: Sequence[str | None], relevant: frozenset[str]) -> list[float]:
    """Binary gain per slot; a relevant id gains only at its first occurrence."""
    seen: set[str] = set()
    gains = []
    for item in ranked:
        fresh = item is not None and item in relevant and item not in seen
        gains.append(1.0 if fresh else 0.0)
        if item is not None:
            seen.add(item)
    return gains


def ndcg(ranked: Sequence[str | None], relevant: Collection[str], k: int) -> float:
    """DCG@k of the list over the ideal DCG of min(k, number relevant) gains of 1."""
    wanted = _checked(relevant)
    ideal = dcg([1.0] * min(k, len(wanted)), k)
    return dcg(_gains(ranked, wanted), k) / ideal


def reciprocal_rank(ranked: Sequence[str | None], relevant: Collection[str]) -> float:
    """1 / rank of the first relevant slot over the whole list (1-based); 0.0 if none."""
    wanted = _checked(relevant)
    for rank, item in enumerate(ranked, start=1):
        if item is not None and item in wanted:
            return 1.0 / rank
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), interpolating linearly between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; 0.0 for no values would hide an empty group, so that raises."""
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)
