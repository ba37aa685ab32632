"""Pure scoring functions of conversation.search: no I/O, so each is tested on its own.

Scores flow: raw BM25 -> `normalise_lexical` (monotone, 0..1, never every hit at 1.0), cosine ->
`clamp_vector`; both -> `weighted_fusion` (or `rrf_fusion`) -> `apply_penalty` for messages a
summary covers -> `dedupe_best` (one hit per message) -> `rank_hits` (score, newer day, newer
message) -> `merge_summaries_first`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Callable, Hashable, Literal, Sequence, TypeVar

import numpy as np

__all__ = [
    "ScoreParts",
    "normalise_lexical",
    "clamp_vector",
    "ranks_of",
    "weighted_fusion",
    "rrf_fusion",
    "apply_penalty",
    "passes_floor",
    "dedupe_best",
    "tie_break_key",
    "summary_slots",
    "merge_summaries_first",
]

T = TypeVar("T")
STRONG_LEXICAL = 0.5  # a normalised lexical score this high is a keyword hit no floor may drop
MATCH_FLOOR = 0.01  # the least normalised score of a document that matches a query term


@dataclass(frozen=True, slots=True)
class ScoreParts:
    """Why a hit ranks where it does (returned with `explain`)."""

    vector: float | None  # cosine clamped to 0..1; None when the hit has no vector yet
    lexical: float  # normalised BM25, 0..1
    lexical_raw: float
    fused: float
    penalty: float  # multiplier applied: 1.0 when none
    vector_rank: int | None  # 1-based rank in the vector candidate list
    lexical_rank: int | None  # 1-based rank among lexical matches
    fusion: Literal["weighted", "rrf", "lexical", "vector"]

    @property
    def final(self) -> float:
        return self.fused * self.penalty


def normalise_lexical(raw: np.ndarray, matched: np.ndarray | None = None) -> np.ndarray:
    """BM25 scores to 0..1 by the query's best score: monotone, and only the best match reaches 1.

    Dividing by the best raw score keeps a keyword-only hit (an id, a number) at full lexical
    weight even when its absolute BM25 is small, which a fixed scale would not. Okapi BM25 can
    score a real match at or below 0 in a tiny corpus (a term in most documents): matched
    documents then keep a small positive score, or 1/dense rank when no score is positive at all.
    """
    raw = np.asarray(raw, dtype=np.float64)
    matched = raw > 0 if matched is None else np.asarray(matched, dtype=bool)
    if not matched.any():
        return np.zeros_like(raw)
    top = float(raw[matched].max())
    if top > 0.0:
        return np.where(matched, np.maximum(raw / top, MATCH_FLOOR), 0.0)
    # dense ranks: equal raw scores stay equal, so a tie stays a tie for the tie-breaks to settle
    distinct = np.unique(raw[matched])[::-1]
    dense_rank = np.searchsorted(-distinct, -raw) + 1
    return np.where(matched, 1.0 / dense_rank, 0.0)


def clamp_vector(cosine: np.ndarray) -> np.ndarray:
    """Cosine similarity to 0..1 (negative similarity is no similarity)."""
    return np.clip(np.asarray(cosine, dtype=np.float64), 0.0, 1.0)


def ranks_of(scores: np.ndarray, *, present: np.ndarray | None = None) -> np.ndarray:
    """1-based ranks by descending score among the `present` entries; 0 for the others."""
    scores = np.asarray(scores, dtype=np.float64)
    present = np.ones(len(scores), dtype=bool) if present is None else np.asarray(present, dtype=bool)
    kept = np.flatnonzero(present)
    ranks = np.zeros(len(scores), dtype=np.int64)
    ranks[kept[np.argsort(-scores[kept], kind="stable")]] = np.arange(1, len(kept) + 1)
    return ranks


def weighted_fusion(vector: np.ndarray, lexical: np.ndarray, *, vector_weight: float, lexical_weight: float) -> np.ndarray:
    """The hybrid base score: weights are renormalised so the result stays in 0..1."""
    total = vector_weight + lexical_weight
    if total <= 0:
        raise ValueError("vector_weight + lexical_weight must be positive")
    return (vector_weight * np.asarray(vector) + lexical_weight * np.asarray(lexical)) / total


def rrf_fusion(vector_rank: np.ndarray, lexical_rank: np.ndarray, *, k: int) -> np.ndarray:
    """Reciprocal rank fusion; rank 0 means absent from that list and adds nothing."""
    vector_rank, lexical_rank = np.asarray(vector_rank), np.asarray(lexical_rank)
    part_v = np.where(vector_rank > 0, 1.0 / (k + vector_rank), 0.0)
    part_l = np.where(lexical_rank > 0, 1.0 / (k + lexical_rank), 0.0)
    return (part_v + part_l) * (k + 1) / 2  # scaled so rank 1 in both lists scores 1.0


def apply_penalty(covered: bool, penalty: float) -> float:
    """The multiplier for a message hit: `penalty` when a summary already covers it."""
    return penalty if covered else 1.0


def passes_floor(parts: ScoreParts, min_score: float | None) -> bool:
    """A minimum score never drops a strong keyword hit (peers lost exact ids this way)."""
    return min_score is None or parts.final >= min_score or parts.lexical >= STRONG_LEXICAL


def dedupe_best(items: Sequence[T], key: Callable[[T], Hashable], score: Callable[[T], float]) -> list[T]:
    """Keep the best-scoring item per key (overlapping windows may cite one message twice)."""
    best: dict[Hashable, T] = {}
    for item in items:
        k = key(item)
        if k not in best or score(item) > score(best[k]):
            best[k] = item
    return list(best.values())


def tie_break_key(score: float, day_label: date | None, order: float) -> tuple[float, int, float]:
    """Sort key (ascending): higher score, then newer day, then newer message."""
    return (-round(score, 9), -(day_label.toordinal() if day_label else 0), -order)


def summary_slots(limit: int, max_summaries: int) -> int:
    """How many summaries may lead: at most half the limit, so messages are never crowded out."""
    return max(0, min(max_summaries, limit // 2))


def merge_summaries_first(summaries: Sequence[T], messages: Sequence[T], *, limit: int, max_summaries: int) -> list[T]:
    """Summaries (already ranked) first, then messages; unused summary slots go to messages."""
    lead = list(summaries[: summary_slots(limit, max_summaries)])
    return lead + list(messages[: limit - len(lead)])
