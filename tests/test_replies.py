"""The reply lift lifts replies only: a turn after its conversation ended (idle gap or end) is no reply."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np

from engine.api import ConversationEngine
from engine.query.search import replied_to
from indexers.message_table import MessageCard
from tests.support import HashEmbedder

MATCH = {"message_id": "m1", "role": "user", "content": "We moved the billing database to PostgreSQL.",
         "created_at": "2024-03-04T10:00"}


def _card(thread: str, seq: int, conversation: int) -> MessageCard:
    at = datetime(2024, 3, 4, 10, tzinfo=timezone.utc) + timedelta(minutes=seq)
    return MessageCard(thread, seq, f"{thread}{seq}", at, "user", None, at.date(), "User", conversation)


def test_a_turn_replies_to_the_one_before_it_in_its_conversation_only() -> None:
    cards = [_card("t", 1, 0), _card("t", 2, 0), _card("t", 3, 1), None, _card("u", 4, 2), _card("t", 5, 1)]
    # t2 replies to t1; t3 opens the next conversation; u4's thread has no seq 3 here,
    # and t5 follows seq 4 of its thread, which is not a candidate
    assert replied_to(cards).tolist() == [-1, 0, -1, -1, -1, -1]


def test_a_turn_after_an_explicit_end_is_no_reply(tmp_path) -> None:
    """Two minutes apart, well within the idle gap, but the conversation was ended between them."""
    after = {"message_id": "m2", "role": "user", "content": "Good night, see you tomorrow.",
             "created_at": "2024-03-04T10:02"}
    with ConversationEngine(tmp_path, embedder=HashEmbedder()) as engine:
        engine.add_user("alice", "UTC")
        engine.ingest("alice", [MATCH])
        engine.end_conversation("alice")
        engine.ingest("alice", [after])
        engine.index("alice")
        cards = _cards_of(engine, ("m1", "m2"))
        assert replied_to(cards).tolist() == [-1, -1]
        engine.ingest("alice", [{**after, "message_id": "m3", "created_at": "2024-03-04T10:03"}])
        assert replied_to(_cards_of(engine, ("m2", "m3"))).tolist() == [-1, 0]


def _cards_of(engine: ConversationEngine, message_ids: tuple[str, ...]) -> list[MessageCard | None]:
    views = [engine.get("alice", message_id=m) for m in message_ids]
    table = engine.pipeline.shard("alice").messages
    return [table.get(v.thread_id, v.seq) for v in views]  # type: ignore[union-attr]


def test_good_night_the_next_conversation_never_outranks_the_match(tmp_path) -> None:
    """The match is in a conversation its summary covers (x0.85); the late turn is in a new one. Lifted
    by the match's score before the penalty, "Good night" ranked first with no word of the query."""
    late = {"message_id": "m2", "role": "assistant", "content": "Good night, see you tomorrow.",
            "created_at": "2024-03-04T23:00"}
    with ConversationEngine(tmp_path, embedder=HashEmbedder()) as engine:
        engine.add_user("alice", "UTC")
        engine.ingest("alice", [MATCH, late])
        engine.index("alice")
        hits = engine.search("alice", "billing database", explain=True).results
    assert hits[0].message_id == "m1" and hits[0].covered_by_summary
    later = [h for h in hits if h.message_id == "m2"]
    assert not later or later[0].score < 0.5 * hits[0].score and np.isclose(later[0].parts.own, 0.0, atol=1e-3)
