"""Embeddings keyed by (user, model, content hash): unchanged text is never embedded twice.

The cache lives in the store's DuckDB file, so it survives reindex jobs (a warm reindex embeds
nothing) and is forgotten with the user or the chunks it belongs to. Windows and message lines
share one table, summaries have their own: loading a user's summary vectors then reads only those.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Literal, Sequence

import numpy as np
import pyarrow as pa

from engine.store.db import Database, in_values

__all__ = ["EmbeddingCache", "content_hash"]

Table = Literal["embedding_cache", "summary_embeddings"]  # the windows' and lines', the summaries'


def content_hash(text: str) -> str:
    """The cache key of a text (a window, a message line, a summary): equal texts share one vector."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """The cache of one model. Which hashes it holds is also kept in memory per user (loaded in one
    query on first use, as 64-bit keys): "is it cached?" is then answered without SQL, so a fresh
    build asks the store nothing, and the store is asked only for vectors it holds. Why: DuckDB
    answers a keyed lookup by scanning the table, so a lookup per batch grew with the cache (at 1M
    rows, 2.9 s a batch with `list_contains`)."""

    def __init__(self, db: Database, model: str, table: Table = "embedding_cache") -> None:
        self.db = db
        self.model = model
        self.table = table
        self._known: dict[str, set[int]] = {}

    def _known_of(self, user_id: str) -> set[int]:
        known = self._known.get(user_id)
        if known is None:
            table = self.db.fetch_arrow(
                f"SELECT content_hash FROM {self.table} WHERE user_id = ? AND model = ?", [user_id, self.model])
            known = self._known[user_id] = {hash(h) for h in table.column("content_hash").to_pylist()}
        return known

    def missing(self, user_id: str, hashes: Sequence[str]) -> list[str]:
        """The distinct hashes among these that the cache holds no vector for (answered from memory)."""
        known = self._known_of(user_id)
        return sorted({h for h in hashes if hash(h) not in known})

    def get(self, user_id: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors of these hashes (one query, and none when the memory says none is cached)."""
        known = self._known_of(user_id)
        wanted = sorted({h for h in hashes if hash(h) in known})
        if not wanted:
            return {}
        among, values = in_values("content_hash", wanted)
        table = self.db.fetch_arrow(f"SELECT content_hash, vector FROM {self.table} WHERE user_id = ? AND model = ? AND {among}",
                                    [user_id, self.model, *values])
        if table.num_rows == 0:
            return {}
        keys = table.column("content_hash").to_pylist()
        flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        vectors = flat.astype(np.float32, copy=False).reshape(len(keys), -1)  # read-only views: callers copy them
        return dict(zip(keys, vectors))

    def put(self, user_id: str, hashes: Sequence[str], vectors: np.ndarray) -> None:
        """Insert entries; keys already stored are left as they are."""
        row_of = {h: i for i, h in enumerate(hashes)}
        fresh = sorted(row_of)
        if not fresh:
            return
        rows = np.asarray([vectors[row_of[h]] for h in fresh], dtype=np.float32)
        batch = pa.table({
            "user_id": [user_id] * len(fresh), "model": [self.model] * len(fresh), "content_hash": fresh,
            "vector": pa.array(list(rows), type=pa.list_(pa.float32())),
        })
        # "or ignore": callers put what `get` did not find, but another engine on the same file
        # may have cached the same text meanwhile
        self.db.insert_arrow(self.table, batch, or_ignore=True)
        self._known_of(user_id).update(hash(h) for h in fresh)

    def forget(self, user_id: str, hashes: Sequence[str] | None = None) -> None:
        """Drop entries of a user (all of them, or those hashes) under every model."""
        if hashes is None:
            self.db.execute(f"DELETE FROM {self.table} WHERE user_id = ?", [user_id])
        elif hashes:
            self.db.execute(
                f"DELETE FROM {self.table} WHERE user_id = ? AND content_hash IN (SELECT unnest(?::VARCHAR[]))",
                [user_id, list(hashes)],
            )
        self._known.pop(user_id, None)  # reloaded on next use

    def deleted_with_user(self, user_id: str) -> None:
        """Drop what this cache knew of a user whose rows `Store.delete_user` already deleted."""
        self._known.pop(user_id, None)

    def keep_only(self, user_id: str, live_hashes: Iterable[str]) -> None:
        """Drop the user's entries that no live window, message line or summary uses."""
        self.db.execute(
            f"DELETE FROM {self.table} WHERE user_id = ? AND content_hash NOT IN (SELECT unnest(?::VARCHAR[]))",
            [user_id, sorted(set(live_hashes))],
        )
        self._known.pop(user_id, None)
