"""Search says when messages were matched by keywords only because their vectors are pending, and what to run."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.api import ConversationEngine

FIRST = [{"role": "user", "content": "We chose PostgreSQL for the ledger. " * 3, "created_at": "2024-05-01T10:00"},
         {"role": "user", "content": "Then we argued about backups and their schedule, " * 12,
          "created_at": "2024-05-01T10:01"}]  # long enough to fill windows that later messages leave alone


@pytest.mark.model  # see tests/conftest.py (--fast)
def test_pending_vectors_are_named_with_the_command_to_run(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home") as engine:
        assert engine.pipeline.embedder is not None
        engine.add_user("u", "UTC")
        engine.ingest("u", FIRST, index=False)
        first = engine.search("u", "which database for the ledger?")
        assert first.mode == "lexical" and first.not_vector_indexed == 2
        assert "none of the 2 messages has a vector yet" in first.notice
        assert "convsearch index --user u" in first.notice
        engine.index("u")
        assert engine.search("u", "which database for the ledger?").notice is None
        engine.ingest("u", [{"role": "user", "content": "And Redis for the cache", "created_at": "2024-05-03T10:00"}],
                      index=False)
        later = engine.search("u", "cache")
        assert later.mode == "hybrid" and "1 messages have no vector yet" in later.notice
        assert "convsearch index --user u" in later.notice
        assert engine.search("u", "cache", mode="lexical").notice is None  # asked for keywords: nothing to say
