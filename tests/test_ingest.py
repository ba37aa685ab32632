"""Ingestion: ids, order, seq, day segments in the user's zone, conversations, atomicity."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import InvalidInputError, OutOfOrderError, UnknownThreadError, UnknownUserError
from engine.importers.records import BadRecord, check_message
from engine.store.ingest import Ingestor
from engine.models import NewMessage
from engine.store.core import Store

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.duckdb") as s:
        s.ensure_user("alice", "Europe/Paris")
        s.ensure_user("bob", "Asia/Tokyo")
        yield s


@pytest.fixture
def ingestor(store):
    return Ingestor(store, idle_timeout=timedelta(minutes=30))


def test_seq_is_dense_and_ordered(store, ingestor):
    ingestor.add_messages("alice", [NewMessage("user", f"a{i}", T0 + timedelta(seconds=i)) for i in range(3)])
    ingestor.add_messages("alice", [NewMessage("assistant", f"b{i}", T0 + timedelta(minutes=1, seconds=i)) for i in range(3)])
    seqs = [m.seq for m in store.messages_in_range("alice:continuous", 0)]
    assert seqs == [1, 2, 3, 4, 5, 6]


def test_reingesting_same_id_or_external_id_is_a_noop(store, ingestor):
    first = ingestor.add_messages("alice", [NewMessage("user", "hi", T0, message_id="x1"),
                                            NewMessage("user", "yo", T0, external_id="D1:1")])
    again = ingestor.add_messages("alice", [NewMessage("user", "hi", T0, message_id="x1"),
                                            NewMessage("user", "yo", T0, external_id="D1:1")])
    assert len(first.inserted) == 2 and again.inserted == () and len(again.duplicates) == 2
    assert store.stats()["messages"] == 2


def test_repeats_within_one_batch_are_stored_once(store, ingestor):
    result = ingestor.add_messages("alice", [NewMessage("user", "hi", T0, message_id="x1")] * 3)
    assert result.inserted == ("x1",) and store.stats()["messages"] == 1


def test_message_id_of_another_user_is_refused(store, ingestor):
    ingestor.add_messages("alice", [NewMessage("user", "hi", T0, message_id="shared")])
    with pytest.raises(InvalidInputError, match="external_id"):
        ingestor.add_messages("bob", [NewMessage("user", "hi", T0, message_id="shared")])


def test_older_message_is_refused_and_nothing_changes(store, ingestor):
    ingestor.add_messages("alice", [NewMessage("user", "late", T0 + timedelta(hours=1))])
    before = store.stats()
    with pytest.raises(OutOfOrderError, match="time order"):
        ingestor.add_messages("alice", [NewMessage("user", "fine", T0 + timedelta(hours=2)),
                                        NewMessage("user", "early", T0)])
    assert store.stats() == before


def test_a_message_a_little_older_than_the_one_before_takes_its_time(store, ingestor):
    """Two writers a little apart: a phone a minute fast sends the question, the agent's server the reply."""
    ingestor.add_messages("alice", [NewMessage("user", "question", T0 + timedelta(minutes=1))])
    reply = ingestor.add_messages("alice", [NewMessage("assistant", "reply", T0 + timedelta(seconds=30)),
                                            NewMessage("user", "thanks", T0 + timedelta(seconds=50))])
    assert reply.inserted and reply.first_seq == 2
    stored = store.messages_in_range("alice:continuous", 0)
    assert [(m.content, m.created_at) for m in stored] == [(text, T0 + timedelta(minutes=1))
                                                          for text in ("question", "reply", "thanks")]
    with pytest.raises(OutOfOrderError, match="clock_skew_seconds"):  # beyond the allowance: refused
        ingestor.add_messages("alice", [NewMessage("user", "late", T0 + timedelta(minutes=1) - timedelta(minutes=6))])
    strict = Ingestor(store, idle_timeout=timedelta(minutes=30), clock_skew=timedelta(0))
    with pytest.raises(OutOfOrderError):
        strict.add_messages("alice", [NewMessage("user", "a second early", T0 + timedelta(seconds=59))])
    assert len(store.messages_in_range("alice:continuous", 0)) == 3


def test_missing_timestamp_means_now(store):
    now = datetime(2030, 1, 2, 3, 4, tzinfo=timezone.utc)
    Ingestor(store, idle_timeout=timedelta(minutes=30), clock=lambda: now).add_messages("alice", [NewMessage("user", "x")])
    assert store.messages_in_range("alice:continuous", 0)[0].created_at == now


def test_day_segments_follow_the_users_zone(store, ingestor):
    # 21:50 UTC is 23:50 in Paris; 22:10 UTC is 00:10 the next day there.
    stamps = [datetime(2024, 5, 1, 21, 50, tzinfo=timezone.utc), datetime(2024, 5, 1, 22, 10, tzinfo=timezone.utc)]
    ingestor.add_messages("alice", [NewMessage("user", f"m{i}", t) for i, t in enumerate(stamps)])
    days = store.timeline.day_segments("alice:continuous")
    assert [str(d.day_label) for d in days] == ["2024-05-01", "2024-05-02"]
    assert [(d.starts_at_seq, d.ends_at_seq) for d in days] == [(1, 1), (2, 2)]
    # ...and the late-night session is still one conversation: midnight splits days, not conversations.
    assert len(store.timeline.conversations("alice:continuous")) == 1


def test_idle_gap_and_explicit_end_start_new_conversations(store, ingestor):
    ingestor.add_messages("alice", [NewMessage("user", "a", T0), NewMessage("user", "b", T0 + timedelta(minutes=29))])
    result = ingestor.add_messages("alice", [NewMessage("user", "c", T0 + timedelta(minutes=61))])
    assert result.ended_conversations == ("alice:continuous:conv:1",)
    assert ingestor.end_conversation("alice:continuous", "user said bye") == "alice:continuous:conv:2"
    ingestor.add_messages("alice", [NewMessage("user", "d", T0 + timedelta(minutes=62))])
    conversations = store.timeline.conversations("alice:continuous")
    assert [(c.first_seq, c.last_seq, c.end_reason) for c in reversed(conversations)] == [
        (1, 2, "idle"), (3, 3, "user said bye"), (4, 4, None)]


def test_one_megabyte_message_is_stored_intact(store, ingestor):
    text = ("données 数据 " * 100_000)[:1_000_000]
    ingestor.add_messages("alice", [NewMessage("tool", text, T0, tools_used=("grep",))])
    stored = store.messages_in_range("alice:continuous", 0)[0]
    assert stored.content == text and stored.tools_used == ("grep",)


def test_bad_messages_get_clear_errors_and_store_nothing(store, ingestor):
    before = store.stats()
    with pytest.raises(InvalidInputError, match="role"):
        ingestor.add_messages("alice", [NewMessage("user", "ok", T0), NewMessage("robot", "x", T0)])
    with pytest.raises(InvalidInputError, match="NUL"):
        ingestor.add_messages("alice", [NewMessage("user", "a\x00b", T0)])
    with pytest.raises(UnknownUserError):
        ingestor.add_messages("carol", [NewMessage("user", "x", T0)])
    with pytest.raises(UnknownThreadError):
        ingestor.add_messages("alice", [NewMessage("user", "x", T0)], thread_id="bob:continuous")
    assert store.stats() == before


@pytest.mark.parametrize("bad", [
    NewMessage("robot", "x", T0),  # type: ignore[arg-type]
    NewMessage("user", "a\x00b", T0),
    NewMessage("user", "half an emoji \ud83d", T0),
    NewMessage("user", "x", T0, message_id="m\x01"),  # a control character: live ingest once let it through
    NewMessage("user", "x", T0, external_id=" "),
])
def test_live_ingest_and_every_importer_refuse_a_bad_message_for_the_same_reason(store, ingestor, bad):
    before = store.stats()
    with pytest.raises(BadRecord) as imported:
        check_message(bad)
    with pytest.raises(InvalidInputError) as live:
        ingestor.add_messages("alice", [bad])
    assert live.value.message == f"message 0: {imported.value.reason}"
    assert store.stats() == before


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gaps=st.lists(st.integers(min_value=0, max_value=3 * 24 * 60), min_size=1, max_size=40),
       batch=st.integers(min_value=1, max_value=7))
def test_conversations_and_days_partition_the_thread(tmp_path_factory, gaps, batch):
    """Whatever the gaps and batch sizes: every message in exactly one conversation and one day."""
    with Store(tmp_path_factory.mktemp("h") / "s.duckdb") as store:
        store.ensure_user("u", "America/New_York")
        ingestor = Ingestor(store, idle_timeout=timedelta(minutes=30))
        stamps, now = [], T0
        for gap in gaps:
            now += timedelta(minutes=gap)
            stamps.append(now)
        messages = [NewMessage("user", f"m{i}", t) for i, t in enumerate(stamps)]
        for start in range(0, len(messages), batch):
            ingestor.add_messages("u", messages[start:start + batch])
        stored = store.messages_in_range("u:continuous", 0)
        conversations = sorted(store.timeline.conversations("u:continuous"), key=lambda c: c.first_seq)
        spans = [(c.first_seq, c.last_seq) for c in conversations]
        assert [s for a, b in spans for s in range(a, b + 1)] == [m.seq for m in stored]
        expected_conversations = 1 + sum(1 for g in gaps[1:] if g > 30)
        assert len(conversations) == expected_conversations
        days = store.timeline.day_segments("u:continuous")
        assert [s for d in days for s in range(d.starts_at_seq, d.ends_at_seq + 1)] == [m.seq for m in stored]
        assert all(m.day_label == m.created_at.astimezone(__import__("zoneinfo").ZoneInfo("America/New_York")).date()
                   for m in stored)


def test_engine_notes_join_the_last_conversation_and_never_open_one(store, ingestor):
    ingestor.add_messages("alice", [NewMessage("user", "a", T0)], as_conversation="Migrated Conversation History")
    ingestor.add_messages("alice", [NewMessage("system", "day summary updated", T0 + timedelta(hours=2), kind="note")])
    conversations = store.timeline.conversations("alice:continuous")
    assert len(conversations) == 1 and conversations[0].last_seq == 1
    note = store.messages_in_range("alice:continuous", 2)[0]
    assert note.conversation_id == conversations[0].conversation_id


def test_a_deleted_last_message_never_gives_its_seq_away(store, ingestor):
    ingestor.add_messages("alice", [NewMessage("user", f"m{i}", T0 + timedelta(seconds=i)) for i in range(3)])
    store.delete_messages([store.messages_in_range("alice:continuous", 3)[0].message_id])
    ingestor.add_messages("alice", [NewMessage("user", "next", T0 + timedelta(minutes=1))])
    assert [m.seq for m in store.messages_in_range("alice:continuous", 0)] == [1, 2, 4]
