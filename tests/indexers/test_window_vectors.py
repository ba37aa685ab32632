"""A message's vector must not depend on how its windows were split into embedding blocks (a resumed
index embeds the windows in other blocks than an uninterrupted one)."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import numpy as np

from indexers.chunking import ChunkParams, chunk_thread
from indexers.message_vectors import MessageVectors
from indexers.window_vectors import message_lines_to_embed, put_message_vectors, texts_to_embed
from tests.indexers.test_chunking import counter, msg, words

DIM = 8


def vector_of(text: str) -> np.ndarray:
    """A stand-in embedding: a seeded vector per text, so two texts' vectors differ."""
    return np.random.default_rng(zlib.crc32(text.encode())).standard_normal(DIM).astype(np.float32)


def message_vectors_after(chunks: list, cuts: list[int]) -> dict[str, np.ndarray]:
    """Embed `chunks` in blocks cut at `cuts`, as the pipeline does, and read each message's vector."""
    shard = SimpleNamespace(message_vectors=MessageVectors(DIM))
    for start, end in zip([0, *cuts], [*cuts, len(chunks)]):
        block = chunks[start:end]
        own, lines = message_lines_to_embed(block, shard.message_vectors.has)
        line_ids, _, texts = texts_to_embed(block, lines)
        vectors = np.stack([vector_of(t) for t in texts]) if texts else np.zeros((0, DIM), np.float32)
        put_message_vectors(shard, own, vectors[:len(block)], line_ids, vectors[len(block):])  # type: ignore[arg-type]
    ids = sorted({m for c in chunks for m in c.message_ids})
    return dict(zip(ids, shard.message_vectors.similarities(ids, np.eye(DIM, dtype=np.float32)[0]).tolist()))


def test_a_split_messages_vector_is_its_first_pieces_whatever_the_blocks() -> None:
    messages = [msg(1, words(3)), msg(2, words(60, "long"), role="tool"), msg(3, words(3, "z"))]
    chunks = chunk_thread(messages, ChunkParams(window_tokens=24, overlap_messages=1), counter())
    pieces = [i for i, c in enumerate(chunks) if c.message_ids == ("m2",)]
    assert len(pieces) >= 3, [c.message_ids for c in chunks]
    whole = message_vectors_after(chunks, [])
    for cut in range(1, len(chunks)):  # every place a block may begin
        assert message_vectors_after(chunks, [cut]) == whole, cut
