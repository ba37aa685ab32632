"""Summaries in search: embedded when they are written, never during a search; each user's summary
index rebuilt only when that user's summaries change (hash embedder, real DuckDB file)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.query.summary_index import summary_key
from tests.support import ALICE, BOB, NOW, HashEmbedder, messages


class CountingEmbedder(HashEmbedder):
    """The hash embedder, recording every text it is asked to embed (from any thread)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.texts.extend(texts)
        return super().embed(texts)


@pytest.fixture
def engine(tmp_path: Path):
    with ConversationEngine(tmp_path / "home", settings=Settings(), embedder=CountingEmbedder(),
                            clock=lambda: NOW) as e:
        e.add_user("alice", "Europe/Paris")
        e.add_user("bob", "Asia/Tokyo")
        yield e


def _cached_rows(engine: ConversationEngine) -> int:
    return int(engine.store.db.execute("SELECT count(*) FROM embedding_cache")[0][0])


def test_summaries_are_embedded_when_written_and_a_search_embeds_or_writes_nothing(engine: ConversationEngine):
    embedder = engine.pipeline.embedder
    assert isinstance(embedder, CountingEmbedder)
    engine.ingest("alice", messages(ALICE))  # a later day opens: 4 March's summary is written
    summaries = engine.store.timeline.summaries_of_user("alice")
    assert summaries and engine.pipeline.cache is not None
    assert engine.pipeline.cache.missing("alice", [summary_key(s) for s in summaries]) == []
    engine.summary_index.forget("alice")  # the search rebuilds the index: where summaries used to be embedded
    rows, embedder.texts = _cached_rows(engine), []
    response = engine.search("alice", "which database did we pick", kinds=["summary"], explain=True)
    assert embedder.texts == ["which database did we pick"]  # the query, nothing else
    assert _cached_rows(engine) == rows
    assert response.results and all(h.parts is not None and h.parts.vector is not None for h in response.results)


def test_a_summary_without_a_vector_is_found_lexically_until_the_background_step_embeds_it(engine: ConversationEngine):
    engine.ingest("alice", messages(ALICE), index=False)  # bulk: vectors follow later
    assert engine.summary_index.embeds_pending("alice")
    first = engine.search("alice", "PostgreSQL decision", kinds=["summary"], explain=True).results
    assert first and first[0].kind == "summary" and first[0].parts is not None and first[0].parts.vector is None
    assert "alice" in engine.maintain()
    assert not engine.summary_index.embeds_pending("alice")
    after = engine.search("alice", "PostgreSQL decision", kinds=["summary"], explain=True).results
    assert after[0].summary_id == first[0].summary_id is not None and after[0].parts is not None
    assert after[0].parts.vector is not None


def test_one_users_summary_write_leaves_the_other_users_index_alone(engine: ConversationEngine):
    engine.ingest("alice", messages(ALICE))
    engine.ingest("bob", messages(BOB))
    engine.summarize_range("bob", 1, 3)
    for user in ("alice", "bob"):
        engine.search(user, "database", kinds=["summary"])
    built = dict(engine.summary_index._entries)
    revisions = {u: engine.store.timeline.revision(u) for u in ("alice", "bob")}

    engine.summarize_range("alice", 5, 7)  # a new summary of alice's
    for user in ("alice", "bob"):
        engine.search(user, "database", kinds=["summary"])
    assert engine.summary_index._entries["bob"] is built["bob"]  # reused
    assert engine.summary_index._entries["alice"] is not built["alice"]  # rebuilt with the new summary
    assert engine.store.timeline.revision("bob") == revisions["bob"]
    assert engine.store.timeline.revision("alice") > revisions["alice"]
    assert len(engine.summary_index._entries["alice"].summaries) == len(built["alice"].summaries) + 1

    engine.delete_messages("alice", ["a5"])  # deletion drops the summaries holding it: alice's only
    engine.search("bob", "database", kinds=["summary"])
    assert engine.summary_index._entries["bob"] is built["bob"]
    assert engine.store.timeline.revision("alice") > revisions["alice"] + 1
