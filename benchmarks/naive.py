"""The naive hybrid design the seed docs imply, as the baseline of the speed benchmarks.

rank-bm25's BM25Okapi over every window, brute-force NumPy cosine over every window vector, and a
Python merge of the two top lists (0.7 x cosine + 0.3 x BM25 divided by the query's best BM25).
It is built from the very windows, tokens and vectors of an engine shard, so any difference in
speed comes from the data structures, not from different inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from rank_bm25 import BM25Okapi

__all__ = ["NaiveHit", "NaiveHybrid", "from_shard"]

VECTOR_WEIGHT = 0.7
LEXICAL_WEIGHT = 0.3


@dataclass(frozen=True, slots=True)
class NaiveHit:
    label: int  # the shard's window label
    score: float
    lexical: float  # max-normalised BM25
    cosine: float


class NaiveHybrid:
    """Every query scores every window twice (BM25 and cosine); no index beyond rank_bm25's dicts."""

    def __init__(self, labels: Sequence[int], token_lists: Sequence[Sequence[str]], vectors: np.ndarray,
                 tokenize: Callable[[str], list[str]]) -> None:
        if not (len(labels) == len(token_lists) == len(vectors)) or not len(labels):
            raise ValueError("need as many labels, token lists and vectors, and at least one window")
        self.labels = np.asarray(labels, dtype=np.int64)
        # rank_bm25 divides by zero on an empty document list only; an empty document is fine.
        self.bm25 = BM25Okapi([list(tokens) for tokens in token_lists])
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.tokenize = tokenize

    def search(self, query: str, vector: np.ndarray, k: int = 10, depth: int = 50) -> list[NaiveHit]:
        """Top k windows: union of the top `depth` of each side, merged and ranked in Python."""
        tokens = self.tokenize(query)
        lexical = self.bm25.get_scores(tokens) if tokens else np.zeros(len(self.labels))
        cosine = self.vectors @ np.asarray(vector, dtype=np.float32)
        best = float(lexical.max())
        merged: dict[int, NaiveHit] = {}
        for i in _top(lexical, depth).tolist() + _top(cosine, depth).tolist():
            if i in merged:
                continue
            lex = float(lexical[i]) / best if best > 0 else 0.0
            cos = float(cosine[i])
            score = VECTOR_WEIGHT * max(cos, 0.0) + LEXICAL_WEIGHT * max(lex, 0.0)
            merged[i] = NaiveHit(int(self.labels[i]), score, lex, cos)
        return sorted(merged.values(), key=lambda h: (-h.score, h.label))[:k]


def _top(scores: np.ndarray, depth: int) -> np.ndarray:
    depth = min(depth, len(scores))
    return np.argpartition(-scores, depth - 1)[:depth]


def from_shard(shard) -> NaiveHybrid:
    """The naive design over an engine shard's windows (re-tokenised) and stored vectors."""
    labels = sorted(label for label in shard.chunks if label in shard.has_vector)
    tokens = [shard.tokenizer.tokenize(shard.chunks[label].text) for label in labels]
    vectors = shard.hnsw.vectors(np.asarray(labels, dtype=np.int64))
    return NaiveHybrid(labels, tokens, vectors, shard.tokenizer.tokenize)
