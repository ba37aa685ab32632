"""A user's shard built from messages alone, in two steps a worker on any machine can run.

1. `build_lexical`: the user's messages (an Arrow table read once from the store by the driver)
   -> windows (`indexers/rechunk.py`) -> BM25; it also says which texts need vectors.
2. `finish_and_publish`: those vectors -> HNSW and per-message vectors -> a new version published
   with the same version-directory + CURRENT flip as every save.

Neither step opens the store or the embedding cache: the driver consults the cache before and fills
it after. The rules are the pipeline's own functions, so the shard equals a single-process reindex.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa

from engine.collector import fewer_collections
from engine.store.rows import messages_from_arrow
from indexers.bm25 import Bm25Index
from indexers.chunking import Chunk, WordPieceCounter
from indexers.hnsw import HnswIndex
from indexers.lexical import LexicalTokenizer
from indexers.manifest import BuildSpec, Manifest
from engine.store.embedding_cache import content_hash
from indexers.pipeline import PipelineParams
from indexers.rechunk import rechunk_tails
from indexers.window_vectors import message_lines_to_embed, put_message_vectors
from indexers.shard import Shard
from indexers.shard_storage import ShardStorage

__all__ = ["UserJob", "LexicalBuild", "build_lexical", "texts_to_embed", "finish_and_publish", "attach_vectors"]


@dataclass(frozen=True, slots=True)
class UserJob:
    """One user to rebuild: its threads in the store's order, each with its highest seq ever given."""

    user_id: str
    threads: tuple[tuple[str, int], ...]

    @property
    def watermarks(self) -> dict[str, int]:
        """What the rebuilt manifest's watermarks will be (threads that never had a message: none)."""
        return {thread_id: last_seq for thread_id, last_seq in self.threads if last_seq > 0}


@dataclass(frozen=True, slots=True)
class LexicalBuild:
    """A shard without vectors, in a form that travels between processes (a Shard holds a lock)."""

    manifest: Manifest
    chunks: dict[int, Chunk]
    bm25: Bm25Index


def build_lexical(job: UserJob, messages: pa.Table, params: PipelineParams, spec: BuildSpec) -> LexicalBuild:
    """Windows and BM25 of one user, exactly as `IndexPipeline.reindex` builds them."""
    shard = Shard.empty(Manifest(user_id=job.user_id, spec=spec), LexicalTokenizer(params.tokenizer),
                        Bm25Index(params.bm25), None)
    by_thread: dict[str, list] = defaultdict(list)
    with fewer_collections():  # as the pipeline's catch-up: what a build makes mostly lives on
        for message in messages_from_arrow(messages):
            by_thread[message.thread_id].append(message)
        # as the pipeline: a thread that never had a message gets no watermark
        rechunk_tails(shard, {thread_id: (by_thread.get(thread_id, []), last_seq) for thread_id, last_seq in job.threads
                              if last_seq > 0}, params.chunk, WordPieceCounter())
    return LexicalBuild(shard.manifest, dict(shard.chunks), shard.bm25)  # plain windows travel between processes


def texts_to_embed(chunks: Sequence[Chunk]) -> dict[str, str]:
    """Content hash -> text of every window and every message line a fresh shard needs a vector for."""
    wanted = {chunk.content_hash: chunk.text for chunk in chunks}
    _, lines = message_lines_to_embed(chunks, lambda ids: np.zeros(len(ids), dtype=bool))
    wanted.update((content_hash(line), line) for line in lines.values())
    return wanted


def attach_vectors(shard: Shard, vectors: Mapping[str, np.ndarray]) -> None:
    """Give every window without a vector its vector, and each message its own (the pipeline's rule)."""
    labels = np.asarray(shard.without_vectors(), dtype=np.int64)
    chunks = [shard.chunks[int(label)] for label in labels]
    if not chunks:
        return
    window_vectors = np.stack([vectors[chunk.content_hash] for chunk in chunks]).astype(np.float32)
    shard.set_vectors(labels, window_vectors)
    own, lines = message_lines_to_embed(chunks, shard.message_vectors.has)
    ids = sorted(lines)
    line_vectors = (np.stack([vectors[content_hash(lines[m])] for m in ids]).astype(np.float32) if ids
                    else np.zeros((0, shard.manifest.spec.dim), dtype=np.float32))
    put_message_vectors(shard, own, window_vectors, ids, line_vectors)


def finish_and_publish(build: LexicalBuild, params: PipelineParams, storage_url: str,
                       hashes: Sequence[str], *blocks: np.ndarray) -> Manifest:
    """Vectors (`hashes` in order, rows across `blocks`) into the shard, then publish it."""
    rows = np.concatenate(blocks) if blocks else np.zeros((0, build.manifest.spec.dim), dtype=np.float32)
    if len(rows) != len(hashes):
        raise ValueError(f"{len(hashes)} hashes but {len(rows)} vectors")
    shard = Shard(build.manifest, LexicalTokenizer(params.tokenizer), build.bm25, HnswIndex(params.hnsw),
                  dict(build.chunks), set())
    attach_vectors(shard, dict(zip(hashes, rows)))
    ShardStorage(storage_url).publish(shard)
    return shard.manifest
