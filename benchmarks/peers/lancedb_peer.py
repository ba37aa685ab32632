"""LanceDB as a user would set it up: one table of (id, text, vector), an HNSW vector index
(HNSW-SQ, cosine: the analogue of our HNSW) and LanceDB's own full-text index; "hybrid" asks both
and merges them with LanceDB's default reranker (reciprocal rank fusion), "fts" asks the
full-text index alone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

os.environ.setdefault("LANCEDB_LOG", "error")  # else a deprecation notice per full-text query on stderr

import lancedb  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from lancedb.index import FTS, HnswSq  # noqa: E402

__all__ = ["Peer"]

TABLE = "docs"
ROWS_PER_GRAPH = 200_000  # one HNSW graph per IVF partition; LanceDB advises 1 partition for most tables


class Peer:
    def __init__(self, mode: str) -> None:
        if mode not in ("hybrid", "fts"):
            raise ValueError(f"mode must be 'hybrid' or 'fts', got {mode!r}")
        self.mode = mode
        self.name = "lancedb" if mode == "hybrid" else "lancedb-fts"

    def build(self, texts: Sequence[str], vectors: np.ndarray, path: Path) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1])
        rows = pa.table({"id": pa.array(np.arange(len(texts), dtype=np.int64)), "text": pa.array(list(texts)),
                         "vector": column})
        table = lancedb.connect(str(path)).create_table(TABLE, rows)
        table.create_index("text", config=FTS())
        if self.mode == "hybrid":
            partitions = max(1, len(texts) // ROWS_PER_GRAPH)
            table.create_index("vector", config=HnswSq(distance_type="cosine", num_partitions=partitions))

    def open(self, path: Path) -> "Searcher":
        return Searcher(lancedb.connect(str(path)).open_table(TABLE), self.mode)


class Searcher:
    def __init__(self, table: "lancedb.table.Table", mode: str) -> None:
        self.table, self.mode = table, mode

    def search(self, text: str, vector: np.ndarray, k: int) -> list[int]:
        if self.mode == "fts":
            query = self.table.search(text, query_type="fts")
        else:
            query = self.table.search(query_type="hybrid").vector(np.asarray(vector, dtype=np.float32)).text(text)
        found = query.limit(k).select(["id"]).to_arrow()
        return found.column("id").to_pylist()
