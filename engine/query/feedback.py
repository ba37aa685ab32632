"""Pseudo-relevance feedback, pure: the best windows of a first pass tell the second pass what the
query is about. Lexical (RM3-like): the words the best windows share are added to the BM25 query
with a small weight. Vector (Rocchio): the query vector moves towards the best windows' mean.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

__all__ = ["feedback_terms", "rocchio"]

MIN_WINDOWS = 2  # a word of one window alone says nothing about the query


def feedback_terms(windows: Sequence[frozenset[str]], idf: Mapping[str, float], query: frozenset[str], *,
                   count: int, weight: float) -> dict[str, float]:
    """Up to `count` words held by at least MIN_WINDOWS of the best `windows` and not in the query,
    best by (share of the windows holding it) x idf; each weighs `weight` x that share (0..weight)."""
    if weight <= 0 or count < 1 or len(windows) < MIN_WINDOWS:
        return {}
    held: dict[str, int] = {}
    for words in windows:
        for word in words - query:
            held[word] = held.get(word, 0) + 1
    shared = {w: n / len(windows) for w, n in held.items() if n >= MIN_WINDOWS and idf.get(w, 0.0) > 0}
    best = sorted(shared, key=lambda w: (-shared[w] * idf[w], w))[:count]
    return {w: weight * shared[w] for w in best}


def rocchio(vector: np.ndarray, feedback: np.ndarray, *, weight: float) -> np.ndarray:
    """The query vector plus `weight` times the mean of the `feedback` vectors (rows), unit length again."""
    if weight <= 0 or not len(feedback):
        return vector
    moved = np.asarray(vector, dtype=np.float64) + weight * np.asarray(feedback, dtype=np.float64).mean(axis=0)
    norm = float(np.linalg.norm(moved))
    return (moved / norm).astype(vector.dtype) if norm > 0 else vector
