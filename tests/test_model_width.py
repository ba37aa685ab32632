"""A model of another width than MiniLM's (a larger packaged model, a test's own): the vector index
takes the embedder's width, so nothing but the embedder changes."""

from __future__ import annotations

import numpy as np

from engine.api import ConversationEngine
from tests.support import HashEmbedder


class WideHashEmbedder(HashEmbedder):
    """The hash embedder at twice MiniLM's width, under its own name (its vectors are not MiniLM's)."""

    name = "test-hash-768"
    dim = 768


MESSAGES = [
    {"message_id": "m1", "role": "user", "content": "We moved the billing database to PostgreSQL.",
     "created_at": "2024-03-04T10:00"},
    {"message_id": "m2", "role": "assistant", "content": "Good night, see you tomorrow.", "created_at": "2024-03-04T10:05"},
]


def test_an_embedder_of_another_width_indexes_searches_and_reopens(tmp_path) -> None:
    with ConversationEngine(tmp_path, embedder=WideHashEmbedder()) as engine:
        engine.add_user("alice", "UTC")
        engine.ingest("alice", MESSAGES)
        engine.index("alice")
        first = engine.search("alice", "billing database", explain=True).results[0]
        assert first.message_id == "m1" and first.parts is not None and first.parts.vector is not None
        assert engine.pipeline.shard("alice").hnsw.params.dim == 768
    with ConversationEngine(tmp_path, embedder=WideHashEmbedder()) as reopened:
        again = reopened.search("alice", "billing database", mode="vector", explain=True).results
        assert again[0].message_id == "m1" and np.isclose(again[0].parts.vector, first.parts.vector, atol=1e-3)
