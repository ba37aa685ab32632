"""Embeddings keyed by (user, model, content hash): unchanged text is never embedded twice.

The cache lives in the store's DuckDB file, so it survives reindex jobs (a warm reindex embeds
nothing) and is forgotten with the user or the chunks it belongs to.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from engine.db import Database

__all__ = ["EmbeddingCache"]


class EmbeddingCache:
    def __init__(self, db: Database, model: str) -> None:
        self.db = db
        self.model = model

    def get(self, user_id: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        if not hashes:
            return {}
        table = self.db.fetch_arrow(
            "SELECT content_hash, vector FROM embedding_cache WHERE user_id = ? AND model = ? "
            "AND list_contains(?, content_hash)",
            [user_id, self.model, list(set(hashes))],
        )
        if table.num_rows == 0:
            return {}
        keys = table.column("content_hash").to_pylist()
        flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        vectors = flat.astype(np.float32).reshape(len(keys), -1)
        return dict(zip(keys, vectors))

    def put(self, user_id: str, hashes: Sequence[str], vectors: np.ndarray) -> None:
        """Insert new entries (existing keys are left as they are)."""
        if not len(hashes):
            return
        fresh = sorted(set(hashes) - set(self.get(user_id, hashes)))
        if not fresh:
            return
        row_of = {h: i for i, h in enumerate(hashes)}
        rows = np.asarray([vectors[row_of[h]] for h in fresh], dtype=np.float32)
        batch = pa.table({
            "user_id": [user_id] * len(fresh), "model": [self.model] * len(fresh), "content_hash": fresh,
            "vector": pa.array(list(rows), type=pa.list_(pa.float32())),
        })
        self.db.insert_arrow("embedding_cache", batch)

    def forget(self, user_id: str, hashes: Sequence[str] | None = None) -> None:
        """Drop entries of a user (all of them, or those hashes) under every model."""
        if hashes is None:
            self.db.execute("DELETE FROM embedding_cache WHERE user_id = ?", [user_id])
        elif hashes:
            self.db.execute(
                "DELETE FROM embedding_cache WHERE user_id = ? AND list_contains(?, content_hash)",
                [user_id, list(hashes)],
            )

    def keep_only(self, user_id: str, live_hashes: Sequence[str]) -> None:
        """Drop the user's entries no live chunk uses (after a reindex)."""
        self.db.execute(
            "DELETE FROM embedding_cache WHERE user_id = ? AND NOT list_contains(?, content_hash)",
            [user_id, list(live_hashes)],
        )
