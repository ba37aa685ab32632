"""The reply lift lifts replies only: a turn after the idle gap that ends a conversation is no reply."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np

from engine.api import ConversationEngine
from engine.query.search import replied_to
from indexers.message_table import MessageCard
from tests.support import HashEmbedder

MATCH = {"message_id": "m1", "role": "user", "content": "We moved the billing database to PostgreSQL.",
         "created_at": "2024-03-04T10:00"}


def _card(thread: str, seq: int, minute: int) -> MessageCard:
    at = datetime(2024, 3, 4, 10, tzinfo=timezone.utc) + timedelta(minutes=minute)
    return MessageCard(thread, seq, f"{thread}{seq}", at, "user", None, at.date(), "User")


def test_a_turn_replies_to_the_one_before_it_within_the_idle_gap_only() -> None:
    cards = [_card("t", 1, 0), _card("t", 2, 5), _card("t", 3, 40), None, _card("u", 4, 41), _card("t", 5, 41)]
    # t2 replies to t1; t3 comes 35 minutes after t2: a new conversation; u4's thread has no seq 3 here,
    # and t5 follows seq 4 of its thread, which is not a candidate
    assert replied_to(cards, timedelta(minutes=30)).tolist() == [-1, 0, -1, -1, -1, -1]
    cards = [_card("t", 1, 0), _card("t", 2, 31)]
    assert replied_to(cards, timedelta(minutes=30)).tolist() == [-1, -1]
    assert replied_to(cards, timedelta(minutes=31)).tolist() == [-1, 0]


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
