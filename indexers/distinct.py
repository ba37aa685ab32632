"""Sorted distinct values by a sort, not `np.unique`.

Why: NumPy 2.4's `np.unique` finds distinct values through a hash table before sorting them, and
on this machine it takes 0.9 s for a 1M-message shard's 1.3M window labels, sorted or not, where
a sort and a mask take 0.07 s (random order) or 1 ms (already in order, as saved labels are). A
shard's load checked three such arrays: ~2.7 s of the 1M cold start. On the few hundred values a
search handles it is ~2.5x slower too (300 labels: 14.9 against 5.8 us).
"""

from __future__ import annotations

import numpy as np

__all__ = ["distinct", "all_distinct"]


def distinct(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` of a 1-D array: its distinct values, ascending."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def all_distinct(values: np.ndarray) -> bool:
    """Whether no value of a 1-D array repeats."""
    ordered = np.sort(values)
    return not bool((ordered[1:] == ordered[:-1]).any())
