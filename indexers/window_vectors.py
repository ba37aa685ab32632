"""Which vectors a set of windows needs, and where they go: each window's own, and each message's
(a one-message window lends its vector; a message inside a longer window has its line embedded)."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from engine.store.embedding_cache import content_hash
from indexers.chunking import Chunk
from indexers.shard import Shard

__all__ = ["message_lines_to_embed", "texts_to_embed", "put_message_vectors", "vectors_of"]


def message_lines_to_embed(chunks: Sequence[Chunk], has_vectors: Callable[[Sequence[str]], np.ndarray]
                           ) -> tuple[dict[str, int], dict[str, str]]:
    """Which messages of these windows lend a one-message window's vector (message id -> index in
    `chunks`) and which need their own line embedded (message id -> line), skipping the messages
    `has_vectors` (asked once for all of them) says have one.

    A split message lends its first piece's vector (part 0) and no other: windows are embedded in
    blocks, and "the first piece in this block" would make the vector depend on where a block began
    (a resumed index gave 13-18 long messages another vector than an uninterrupted one)."""
    own: dict[str, int] = {}
    alone: set[str] = set()  # messages with a window of their own here (a split one's later pieces too)
    lines: dict[str, str] = {}
    for index, chunk in enumerate(chunks):
        if len(chunk.message_ids) == 1:
            alone.add(chunk.message_ids[0])
            if chunk.part == 0:
                own.setdefault(chunk.message_ids[0], index)
            continue
        for message_id, line in zip(chunk.message_ids, chunk.message_lines()):
            lines.setdefault(message_id, line)
    asked = [m for m in lines if m not in alone]
    return own, {m: lines[m] for m, known in zip(asked, has_vectors(asked).tolist()) if not known}


def texts_to_embed(chunks: Sequence[Chunk], lines: Mapping[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(line ids in order, hashes, texts) of what a block embeds: the windows', then the lines'."""
    line_ids = sorted(lines)
    return (line_ids, [c.content_hash for c in chunks] + [content_hash(lines[m]) for m in line_ids],
            [c.text for c in chunks] + [lines[m] for m in line_ids])


def put_message_vectors(shard: Shard, own: dict[str, int], window_vectors: np.ndarray, line_ids: Sequence[str],
                        line_vectors: np.ndarray) -> None:
    """Store each message's vector: its one-message window's, or its own line's."""
    own_rows = np.asarray(window_vectors)[list(own.values())] if own else np.zeros((0, 1))
    shard.message_vectors.put(list(own), own_rows)
    shard.message_vectors.put(list(line_ids), line_vectors)


def vectors_of(chunks: Iterable[Chunk]) -> int:
    """The vectors `_embed_shard` looks up for these windows: each window's, and each message line
    of a longer window whose message has no window of its own."""
    chunks = list(chunks)
    alone = {c.message_ids[0] for c in chunks if len(c.message_ids) == 1}
    lines = {m for c in chunks if len(c.message_ids) > 1 for m in c.message_ids}
    return len(chunks) + len(lines - alone)
