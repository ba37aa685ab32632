"""The shard's in-memory message table: what a search shows of a message, without SQL."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from engine.api import ConversationEngine
from engine.models import Message
from indexers.message_table import MessageTable

T0 = datetime(2024, 5, 1, 9, 0, 30, 123456, tzinfo=timezone.utc)


def message(seq: int, *, thread: str = "t", role: str = "user", speaker: str | None = None,
            tools: tuple[str, ...] = (), conversation: str = "c") -> Message:
    at = T0 + timedelta(hours=seq)
    return Message(message_id=f"{thread}-{seq}", thread_id=thread, user_id="u", seq=seq, role=role,  # type: ignore[arg-type]
                   content="x", created_at=at, day_label=at.date(), conversation_id=conversation, speaker=speaker,
                   tools_used=tools)


def test_put_then_get_keeps_every_field():
    table = MessageTable()
    table.put([message(1, speaker="Caroline"), message(2, role="tool", tools=("grep", "sed")), message(3, role="assistant")])
    first, tool, third = (table.get("t", s) for s in (1, 2, 3))
    assert first is not None and tool is not None and third is not None
    assert (first.thread_id, first.seq, first.message_id, first.created_at, first.day_label, first.role,
            first.speaker, first.label) == (
        "t", 1, "t-1", T0 + timedelta(hours=1), date(2024, 5, 1), "user", "Caroline", "Caroline")
    assert first.created_at.utcoffset() == timedelta(0)
    assert (tool.role, tool.speaker, tool.label) == ("tool", None, "Tool: grep, sed")
    assert (third.role, third.label, third.created_at, third.day_label) == (
        "assistant", "Assistant", T0 + timedelta(hours=3), date(2024, 5, 1))
    assert table.get("t", 0) is None and table.get("t", 99) is None and table.get("other", 1) is None
    assert len(table) == 3


def test_times_are_kept_in_utc_whatever_the_offset_they_came_with():
    paris = timezone(timedelta(hours=2))
    at = datetime(2024, 5, 2, 1, 30, tzinfo=paris)  # still 1 May in UTC
    table = MessageTable()
    table.put([Message(message_id="m", thread_id="t", user_id="u", seq=1, role="user", content="x", created_at=at,
                       day_label=date(2024, 5, 2), conversation_id="c")])
    card = table.get("t", 1)
    assert card is not None and card.created_at == at and card.created_at.tzinfo == timezone.utc
    assert (card.created_at.hour, card.day_label) == (23, date(2024, 5, 2))  # the day label is the user's, as given


def test_growth_past_capacity_and_threads_apart():
    table = MessageTable()
    table.put([message(3)])
    table.put(message(s) for s in range(0, 500, 7))  # far past the first allocation
    table.put([message(1000, thread="other")])
    assert len(table) == len(range(0, 500, 7)) + 1 + 1
    assert table.get("t", 3).message_id == "t-3"  # kept through the growth
    assert table.get("t", 497).created_at == T0 + timedelta(hours=497) and table.get("t", 498) is None
    assert table.get("other", 1000).message_id == "other-1000" and table.get("t", 1000) is None
    assert table.get("other", 999) is None


def test_cards_of_many_messages_in_several_threads_at_once():
    """A search reads its candidates' cards in one call: each in its place, None where there is no message."""
    table = MessageTable()
    table.put([message(s) for s in range(1, 6)] + [message(s, thread="other", speaker="Ann") for s in (2, 9)])
    table.forget("t", [3])
    asked = [("other", 9), ("t", 1), ("t", 3), ("unknown", 1), ("t", 5), ("other", 2), ("t", 99), ("t", -1), ("t", 1)]
    cards = table.cards([t for t, _ in asked], [s for _, s in asked])
    assert [c.message_id if c else None for c in cards] == ["other-9", "t-1", None, None, "t-5", "other-2", None, None, "t-1"]
    assert [(c.seq, c.speaker, c.created_at) for c in cards if c and c.thread_id == "other"] == [
        (9, "Ann", T0 + timedelta(hours=9)), (2, "Ann", T0 + timedelta(hours=2))]
    assert table.cards([], []) == []


def test_forget_and_put_again():
    table = MessageTable()
    table.put([message(1), message(2)])
    table.forget("t", [2, 5000, -1])
    table.forget("unknown", [1])
    assert table.get("t", 2) is None and table.get("t", 1) is not None and len(table) == 1
    table.put([message(1, speaker="Mel")])  # overwrite
    table.put([message(1, speaker="Mel")])  # idempotent
    assert table.get("t", 1).speaker == "Mel" and len(table) == 1
    table.put([message(2)])
    assert table.get("t", 2).message_id == "t-2" and len(table) == 2


def test_bulk_columns_read_like_messages():
    """The store's naive-UTC columns load to the same cards as the Message objects."""
    rows = [message(1, speaker="Ann"), message(2, role="tool", tools=("ls",)), message(3, role="system", thread="u"),
            message(4, role="tool", conversation="d")]
    bulk = MessageTable()
    bulk.put_arrow(pa.table({
        "thread_id": [m.thread_id for m in rows], "seq": [m.seq for m in rows], "message_id": [m.message_id for m in rows],
        "created_at": pa.array([m.created_at.replace(tzinfo=None) for m in rows], pa.timestamp("us")),
        "day_label": pa.array([m.day_label for m in rows], pa.date32()), "role": [m.role for m in rows],
        "conversation_id": [m.conversation_id for m in rows],
        "speaker": pa.array([m.speaker for m in rows], pa.string()), "tools_used": [list(m.tools_used) for m in rows],
    }))
    one_by_one = MessageTable()
    one_by_one.put(rows)
    cards = [bulk.get(m.thread_id, m.seq) for m in rows]
    assert cards == [one_by_one.get(m.thread_id, m.seq) for m in rows]
    assert [c.label for c in cards] == ["Ann", "Tool: ls", "System", "Tool"]
    assert cards[0].conversation == cards[1].conversation == cards[2].conversation != cards[3].conversation
    assert cards[0].created_at == T0 + timedelta(hours=1)


def test_a_negative_seq_is_refused():
    with pytest.raises(ValueError):
        MessageTable().put([message(-1)])


def _assert_matches_store(engine: ConversationEngine, user: str) -> int:
    table = engine.pipeline.shard(user).messages
    checked = 0
    for thread in engine.store.threads_of(user):
        for stored in engine.store.messages_in_range(thread.thread_id, 0):
            card = table.get(stored.thread_id, stored.seq)
            assert card is not None, stored.message_id
            assert (card.thread_id, card.seq, card.message_id, card.created_at, card.day_label, card.role,
                    card.speaker) == (stored.thread_id, stored.seq, stored.message_id, stored.created_at,
                                      stored.day_label, stored.role, stored.speaker)
            checked += 1
    assert len(table) == checked  # nothing more: no deleted message lingers
    return checked


def _notes(engine: ConversationEngine) -> int:
    thread_id = engine.store.threads_of("ann")[0].thread_id
    return sum(m.kind == "note" for m in engine.store.messages_in_range(thread_id, 0))


def _rows(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"message number {i}", "message_id": f"m{i}",
             "created_at": (T0 + timedelta(minutes=50 * i)).isoformat(), **({"speaker": "Ann"} if i % 3 == 0 else {})}
            for i in range(n)]


@pytest.mark.slow
def test_the_table_follows_the_store_through_ingest_delete_reopen_and_reindex(tmp_path: Path):
    rows = _rows(40)
    rows[7] = {"role": "tool", "content": "ran it", "message_id": "m7", "tools_used": ["grep"],
               "created_at": rows[7]["created_at"]}
    with ConversationEngine(tmp_path / "home", embedder=None) as engine:
        engine.add_user("ann", "Europe/Paris")
        engine.ingest("ann", rows[:25])
        assert _assert_matches_store(engine, "ann") >= 25  # engine notes are messages too
        engine.ingest("ann", rows[25:])
        engine.index("ann")
        stored = _assert_matches_store(engine, "ann")
        assert stored >= 40
        notes = _notes(engine)
        assert engine.delete_messages("ann", ["m3", "m30"]) == 2
        kept = _assert_matches_store(engine, "ann")
        assert kept == stored - 2 + _notes(engine) - notes  # and the notes of the day summaries written again
        tool = engine.store.messages_by_ids(["m7"], user_id="ann")[0]
        assert engine.pipeline.shard("ann").messages.get(tool.thread_id, tool.seq).label == "Tool: grep"
    with ConversationEngine(tmp_path / "home", embedder=None) as engine:  # shard loaded from disk
        assert _assert_matches_store(engine, "ann") == kept
        engine.ingest("ann", [{"role": "user", "content": "after reopening", "message_id": "late",
                               "created_at": (T0 + timedelta(days=3)).isoformat()}])
        grown = _assert_matches_store(engine, "ann")  # the late message, and any note the gap made
        assert grown > kept
        engine.reindex("ann")
        assert _assert_matches_store(engine, "ann") == grown
        hit = engine.search("ann", "number 12", mode="lexical", kinds=("message",)).results[0]
        assert hit.message_id == "m12" and hit.snippet == "message number 12" and hit.speaker == "Ann"


def test_a_search_runs_no_sql(tmp_path: Path):
    with ConversationEngine(tmp_path / "home", embedder=None) as engine:
        engine.add_user("ann")
        engine.ingest("ann", _rows(30))
        engine.search("ann", "number", mode="lexical")  # loads the shard and the summary coverage once
        calls: list[str] = []
        db = engine.store.db
        for name in ("execute", "fetch_arrow"):
            real = getattr(db, name)
            setattr(db, name, lambda sql, params=None, _real=real: calls.append(sql) or _real(sql, params))
        hits = engine.search("ann", "number 21", mode="lexical", kinds=("message",)).results
        assert hits and hits[0].message_id == "m21" and hits[0].created_at == T0 + timedelta(minutes=50 * 21)
        assert calls == []
