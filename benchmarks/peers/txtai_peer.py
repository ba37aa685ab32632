"""txtai's hybrid index as its documentation sets it up (`hybrid=True`: a dense ANN index plus
its BM25 keyword index, scores combined by txtai's default convex weights), with the vectors
handed in: `method="external"` and a transform that looks each text up among vectors we computed,
so txtai never loads a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from txtai import Embeddings

__all__ = ["Peer"]


class Peer:
    name = "txtai"

    def __init__(self, mode: str = "hybrid") -> None:
        if mode != "hybrid":
            raise ValueError(f"txtai runs hybrid only, got {mode!r}")

    def build(self, texts: Sequence[str], vectors: np.ndarray, path: Path) -> None:
        known = _Vectors(texts, vectors)
        embeddings = _embeddings(known)
        embeddings.index((i, text, None) for i, text in enumerate(texts))
        embeddings.save(str(path / "index"))
        np.save(path / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
        (path / "texts.json").write_text(json.dumps(list(texts)), encoding="utf-8")

    def open(self, path: Path) -> "Searcher":
        texts = json.loads((path / "texts.json").read_text(encoding="utf-8"))
        known = _Vectors(texts, np.load(path / "vectors.npy"))
        embeddings = Embeddings()
        embeddings.load(str(path / "index"), config={"transform": _lookup(known)})
        return Searcher(embeddings, known)


def _embeddings(known: "_Vectors") -> Embeddings:
    return Embeddings(hybrid=True, method="external", transform=_lookup(known), content=False)


def _lookup(known: "_Vectors") -> Callable[[Sequence[str]], np.ndarray]:
    # txtai calls a transform that is not a plain function (a bound method) to make one: a lambda.
    return lambda texts: known.transform(texts)


class _Vectors:
    """text -> its precomputed vector; queries are added as they come (`Searcher.search`)."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.by_text = dict(zip(texts, np.asarray(vectors, dtype=np.float32)))

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.by_text[text] for text in texts])


class Searcher:
    def __init__(self, embeddings: Embeddings, known: _Vectors) -> None:
        self.embeddings, self.known = embeddings, known

    def search(self, text: str, vector: np.ndarray, k: int) -> list[int]:
        self.known.by_text[text] = np.asarray(vector, dtype=np.float32)
        return [int(row) for row, _ in self.embeddings.search(text, limit=k)]
