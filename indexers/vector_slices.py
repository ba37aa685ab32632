"""A backlog's vectors made outside the user's lock, a slice at a time.

The background step (engine.maintenance.closing) plans a slice of windows without vectors under
the user's lock, runs the model without it, and keeps what the model made under the lock again.
A live call for that user then waits for a plan or a keep (milliseconds), not for the model
(seconds a slice with MiniLM on 2 cores). Only windows still in the user's live shard
keep their vectors, and only their texts enter the embedding cache: a window that a deletion
removed while the model ran leaves no vector behind, as the deletion's own forgetting promises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Protocol

import numpy as np

from indexers.chunking import Chunk
from indexers.shard import Shard
from indexers.window_vectors import message_lines_to_embed, put_message_vectors, texts_to_embed

if TYPE_CHECKING:
    from indexers.pipeline import IndexPipeline

__all__ = ["Sliced", "VectorSlice", "plan_slice", "embed_slice", "keep_slice"]


class Sliced(Protocol):
    """A planned slice: its texts the cache lacks, as (key, text), what `embed_slice` embeds (a
    `VectorSlice` of windows, or engine.query.summary_index's slice of summaries)."""

    def missing(self) -> list[tuple[str, str]]: ...


@dataclass(frozen=True, slots=True)
class VectorSlice:
    """Windows to give vectors: their texts and their messages' lines, and what the cache had."""

    user_id: str
    shard: Shard  # the live shard when planned: a reindex or a forgotten user replaces it
    labels: np.ndarray
    chunks: tuple[Chunk, ...]
    own: Mapping[str, int]  # message id -> index of its one-message window in `chunks`
    line_ids: tuple[str, ...]  # messages of longer windows whose own line is embedded
    hashes: tuple[str, ...]  # the windows', then the lines'
    texts: tuple[str, ...]
    cached: Mapping[str, np.ndarray]

    def missing(self) -> list[tuple[str, str]]:
        """(hash, text) of what the cache did not have, each text once."""
        return sorted({h: t for h, t in zip(self.hashes, self.texts) if h not in self.cached}.items())


def plan_slice(pipeline: IndexPipeline, user_id: str, limit: int) -> VectorSlice | None:
    """Under the user's lock: up to `limit` windows without a vector (None when there is none)."""
    if pipeline.embedder is None or pipeline.cache is None:
        return None
    shard = pipeline.shard(user_id)
    with shard.lock:
        labels = shard.without_vectors()[:limit]  # the oldest first
        chunks = tuple(shard.chunks[x] for x in labels)
        own, lines = message_lines_to_embed(chunks, shard.message_vectors.has)
    if not chunks:
        return None
    line_ids, hashes, texts = texts_to_embed(chunks, lines)
    return VectorSlice(user_id, shard, np.asarray(labels, dtype=np.int64), chunks, own, tuple(line_ids), tuple(hashes),
                       tuple(texts), pipeline.cache.get(user_id, hashes))


def embed_slice(pipeline: IndexPipeline, planned: Sliced) -> dict[str, np.ndarray] | None:
    """Without the lock: the model's vectors for what the cache lacked, in one call (the slice is
    the batch); None when embedding is paused (a stopping server: the slice stays pending)."""
    assert pipeline.embedder is not None
    if pipeline.paused.is_set():
        return None
    missing = planned.missing()
    if not missing:
        return {}
    return dict(zip((h for h, _ in missing), pipeline.embedder.embed([text for _, text in missing])))


def keep_slice(pipeline: IndexPipeline, planned: VectorSlice, made: Mapping[str, np.ndarray]) -> int:
    """Under the user's lock again: cache and set the vectors of the planned windows still in the
    user's live shard, and their messages'; returns the windows given a vector."""
    assert pipeline.cache is not None
    shard = planned.shard
    if pipeline.loaded(planned.user_id) is not shard:
        return 0  # rebuilt or forgotten meanwhile: the new shard plans its own
    vectors = {**planned.cached, **made}
    with shard.lock:
        live = np.array([int(x) in shard.chunks for x in planned.labels], dtype=bool)
        kept = [c for c, alive in zip(planned.chunks, live) if alive]
        messages = {m for c in kept for m in c.message_ids}
        line_ids = [m for m in planned.line_ids if m in messages]
        line_hashes = dict(zip(planned.line_ids, planned.hashes[len(planned.chunks):]))
        fresh = [h for h in [c.content_hash for c in kept] + [line_hashes[m] for m in line_ids] if h in made]
        pipeline.cache.put(planned.user_id, fresh, np.asarray([made[h] for h in fresh], dtype=np.float32))
        window_vectors = np.asarray([vectors[c.content_hash] for c in planned.chunks], dtype=np.float32)
        shard.set_vectors(planned.labels[live], window_vectors[live])
        own = {m: i for m, i in planned.own.items() if live[i]}
        line_vectors = np.asarray([vectors[line_hashes[m]] for m in line_ids], dtype=np.float32)
        put_message_vectors(shard, own, window_vectors, line_ids, line_vectors.reshape(len(line_ids), shard.manifest.spec.dim))
    return int(live.sum())
