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
    tables = ("embedding_cache", "summary_embeddings")
    return sum(int(engine.store.db.execute(f"SELECT count(*) FROM {table}")[0][0]) for table in tables)


def test_summaries_are_embedded_when_written_and_a_search_embeds_or_writes_nothing(engine: ConversationEngine):
    embedder = engine.pipeline.embedder
    assert isinstance(embedder, CountingEmbedder)
    engine.ingest("alice", messages(ALICE))  # a later day opens: 4 March's summary is written
    summaries = engine.store.timeline.summaries_of_user("alice")
    assert summaries and engine.summary_index.cache is not None
    assert engine.summary_index.cache.missing("alice", [summary_key(s) for s in summaries]) == []
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


def test_a_store_from_before_the_summaries_table_moves_their_vectors_over(tmp_path: Path):
    """Schema 3 keeps summaries' vectors in a table of their own; a store whose summary vectors are
    in the shared table (schema 2) gets them moved, so nothing is embedded again."""
    home = tmp_path / "home"
    with ConversationEngine(home, settings=Settings(), embedder=CountingEmbedder(), clock=lambda: NOW) as e:
        e.add_user("alice", "Europe/Paris")
        e.ingest("alice", messages(ALICE))
        e.summarize_range("alice", 1, 4)  # one with a title, and a day summary
        keys = sorted(summary_key(s) for s in e.store.timeline.summaries_of_user("alice"))
        db = e.store.db
        db.execute("INSERT INTO embedding_cache SELECT * FROM summary_embeddings")  # schema 2's place
        db.execute("DROP TABLE summary_embeddings")
        db.execute("DELETE FROM schema_version WHERE version = 3")
    with ConversationEngine(home, settings=Settings(), embedder=CountingEmbedder(), clock=lambda: NOW) as e:
        moved = e.store.db.execute("SELECT content_hash FROM summary_embeddings WHERE user_id = 'alice' ORDER BY 1")
        assert len(keys) >= 2 and [r[0] for r in moved] == keys
        embedder = e.pipeline.embedder
        assert isinstance(embedder, CountingEmbedder)
        assert e.summary_index.embed_pending("alice") == 0 and embedder.texts == []
        hits = e.search("alice", "which database did we pick", kinds=["summary"], explain=True).results
        assert hits and all(h.parts is not None and h.parts.vector is not None for h in hits)
