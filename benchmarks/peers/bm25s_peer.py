"""The naive hybrid design (benchmarks/naive.py) with a fast BM25: bm25s (sparse matrices,
English stop words and the Snowball stemmer) for the lexical top list, brute-force NumPy cosine
over every vector for the semantic one, merged with naive.py's weights (0.7 x cosine + 0.3 x BM25
over the query's best BM25). What a user gets from two small libraries and a dozen lines."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np
import Stemmer

from benchmarks.naive import LEXICAL_WEIGHT, VECTOR_WEIGHT

__all__ = ["Peer"]

DEPTH = 50  # each side's top list, as in naive.py


class Peer:
    name = "bm25s"

    def __init__(self, mode: str = "hybrid") -> None:
        if mode != "hybrid":
            raise ValueError(f"bm25s runs hybrid only, got {mode!r}")

    def build(self, texts: Sequence[str], vectors: np.ndarray, path: Path) -> None:
        retriever = bm25s.BM25()
        retriever.index(_tokens(texts), show_progress=False)
        retriever.save(str(path / "bm25"))
        np.save(path / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))

    def open(self, path: Path) -> "Searcher":
        return Searcher(bm25s.BM25.load(str(path / "bm25")), np.load(path / "vectors.npy"))


_STEMMER = Stemmer.Stemmer("english")


def _tokens(texts: Sequence[str]) -> "bm25s.tokenization.Tokenized":
    return bm25s.tokenize(list(texts), stopwords="en", stemmer=_STEMMER, show_progress=False)


class Searcher:
    def __init__(self, retriever: bm25s.BM25, vectors: np.ndarray) -> None:
        self.retriever, self.vectors = retriever, vectors

    def search(self, text: str, vector: np.ndarray, k: int) -> list[int]:
        lexical = self._lexical(text, min(DEPTH, len(self.vectors)))
        cosine = self.vectors @ np.asarray(vector, dtype=np.float32)
        depth = min(DEPTH, len(cosine))
        semantic = np.argpartition(-cosine, depth - 1)[:depth]
        best = max(lexical.values(), default=0.0)
        scores = {int(i): VECTOR_WEIGHT * max(float(cosine[i]), 0.0)
                  + (LEXICAL_WEIGHT * lexical.get(int(i), 0.0) / best if best > 0 else 0.0)
                  for i in [*lexical, *semantic.tolist()]}
        return sorted(scores, key=lambda i: (-scores[i], i))[:k]

    def _lexical(self, text: str, depth: int) -> dict[int, float]:
        """Row -> BM25 score of the top `depth` rows with a positive score (bm25s's own scoring;
        `get_scores`, not `retrieve`, which starts a thread pool and a progress bar per call)."""
        tokens = bm25s.tokenize([text], stopwords="en", stemmer=_STEMMER, show_progress=False, return_ids=False)[0]
        known = [token for token in tokens if token in self.retriever.vocab_dict]
        if not known:
            return {}
        scores = self.retriever.get_scores(known)
        top = np.argpartition(-scores, depth - 1)[:depth]
        return {int(r): float(scores[r]) for r in top if scores[r] > 0}
