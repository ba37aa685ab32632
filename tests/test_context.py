"""Context assembly: the window function, formatting, tool-output trimming and the default payload."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Iterator

import pytest

from engine.config import Settings
from engine.query.context import (TRUNCATION_TEXT, ContextAssembler, TruncationMarker, apply_context_window,
                            format_conversation, trim_tool_output)
from engine.errors import InvalidInputError, SettingsError, UnknownUserError
from engine.store.ingest import Ingestor
from engine.models import Message, NewMessage
from engine.store.core import Store
from engine.summaries.policy import SummaryService
from engine.summaries.summarizers import ExtractiveSummarizer
from indexers.wordpieces import WordPieceCounter

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
NOW = datetime(2024, 5, 2, 16, 0, tzinfo=timezone.utc)  # 18:00 on 2024-05-02 in Paris


@pytest.fixture(scope="module")
def counter() -> WordPieceCounter:
    c = WordPieceCounter()
    assert c.exact  # these tests measure with the real tokenizer
    return c


def _msg(seq: int, content: str, role: str = "user", **extra: object) -> Message:
    at = T0 + timedelta(minutes=seq)
    return Message(f"m{seq}", "t", "u", seq, role, content,  # type: ignore[arg-type]
                   at, at.date(), "t:conv:1", **extra)


def _many(n: int) -> list[Message]:
    return [_msg(i, f"Message number {i} talks about the DuckDB store and the search index.",
                 "user" if i % 2 else "assistant") for i in range(1, n + 1)]


# apply_context_window ---------------------------------------------------------------------------
def test_window_keeps_first_and_recent_with_one_marker_within_budget(counter: WordPieceCounter) -> None:
    messages = _many(40)
    out = apply_context_window(messages, 4500 + 200, counter=counter)
    markers = [i for i in out if isinstance(i, TruncationMarker)]
    assert len(markers) == 1 and out[1] is markers[0] and out[0] == messages[0]
    kept = [i for i in out if isinstance(i, Message)]
    assert kept[1:] == messages[-(len(kept) - 1):]  # the most recent ones, contiguous
    assert markers[0].dropped == 40 - len(kept) > 0
    assert counter.count(format_conversation(out)) <= 200
    # greedy: one more recent message would not have fitted
    wider = [out[0], markers[0], messages[-len(kept)], *kept[1:]]
    assert counter.count(format_conversation(wider)) > 200


def test_window_unchanged_when_everything_fits(counter: WordPieceCounter) -> None:
    messages = _many(5)
    assert apply_context_window(messages, 8000, counter=counter) == messages


def test_window_error_when_reserved_reaches_max(counter: WordPieceCounter) -> None:
    with pytest.raises(InvalidInputError, match="must be greater than reserved_tokens"):
        apply_context_window(_many(3), 4500, counter=counter)
    with pytest.raises(InvalidInputError):
        apply_context_window(_many(3), 1000, reserved_tokens=2000, counter=counter)


# Formatting and trimming --------------------------------------------------------------------------
def test_format_conversation_shape() -> None:
    messages = [_msg(0, "How do I grep logs?"),
                _msg(1, "Use grep -n.", "assistant", tools_used=("grep", "sed")),
                TruncationMarker(3)]
    assert format_conversation(messages).splitlines() == [
        "## Current Conversation",
        "[2024-05-01 09:00] User: How do I grep logs?",
        "[2024-05-01 09:01] Assistant: Use grep -n. [used: grep, sed]",
        TRUNCATION_TEXT,
    ]


def test_trim_tool_output_keeps_head_and_tail(counter: WordPieceCounter) -> None:
    text = "HEADLINE start of output. " + " ".join(f"row{i}" for i in range(2000)) + " FINALLINE done."
    trimmed = trim_tool_output(text, 60, counter)
    assert counter.count(trimmed) <= 60 < counter.count(text)
    assert trimmed.startswith("HEADLINE") and trimmed.endswith("FINALLINE done.") and "characters omitted" in trimmed
    assert trim_tool_output("short", 60, counter) == "short"
    medium = " ".join(f"item{i}" for i in range(40))  # tokenised whole: too short for the edge windows
    cut = trim_tool_output(medium, 30, counter)
    assert counter.count(cut) <= 30 < counter.count(medium)
    assert cut.startswith("item0 ") and cut.endswith(" item39") and "characters omitted" in cut


# Default payload ---------------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path) -> Iterator[Store]:
    with Store(tmp_path / "store.duckdb") as s:
        s.ensure_user("alice", "Europe/Paris")
        yield s


@pytest.fixture
def ingestor(store: Store) -> Ingestor:
    return Ingestor(store, idle_timeout=timedelta(minutes=30), clock=lambda: NOW)


def _assembler(store: Store, counter: WordPieceCounter, budget: int = 4000) -> ContextAssembler:
    settings = Settings(conversation_max_context_tokens=budget, conversation_reserved_tokens=0)
    return ContextAssembler(store, counter, settings, clock=lambda: NOW)


def _yesterday_with_summary(store: Store, ingestor: Ingestor, counter: WordPieceCounter) -> None:
    service = SummaryService(store, ExtractiveSummarizer(), Settings(), clock=lambda: NOW, ingestor=ingestor,
                             counter=counter)
    ingestor.add_messages("alice", [NewMessage("user", "Let's go with DuckDB for the archive.", T0)])
    today = ingestor.add_messages("alice", [NewMessage("user", "Good morning, back to the index work.",
                                                       NOW - timedelta(hours=2))])
    assert [s.kind for s in service.after_ingest("alice", today) if s.kind == "day"] == ["day"]


def test_default_payload_trims_tool_output_before_dropping(store: Store, ingestor: Ingestor,
                                                          counter: WordPieceCounter) -> None:
    _yesterday_with_summary(store, ingestor, counter)
    dump = "BEGIN " + " ".join(f"line{i}" for i in range(3000)) + " END"
    ingestor.add_messages("alice", [
        NewMessage("assistant", "Running the indexer now.", NOW - timedelta(minutes=30), tools_used=("shell",)),
        NewMessage("tool", dump, NOW - timedelta(minutes=29)),
        NewMessage("assistant", "The index is built.", NOW - timedelta(minutes=28)),
    ])
    payload = _assembler(store, counter).default_payload("alice", max_tokens=600)
    assert payload.estimated_tokens == counter.count(payload.text) <= 600
    assert payload.exact_tokens and payload.truncated and payload.source == "today"
    assert payload.messages_loaded == 4 and payload.messages_dropped == 0  # trimming sufficed
    tool = [m for m in payload.messages if m.role == "tool"][0]
    assert tool.content.startswith("BEGIN") and tool.content.endswith("END") and "characters omitted" in tool.content
    assert "Let's go with DuckDB for the archive." in (payload.yesterday_summary or "")
    assert "## Yesterday's Summary (2024-05-01)" in payload.text and payload.today_summary is None
    assert "day summary updated" not in payload.text  # engine notes stay out of the window
    assert "## Current Conversation\n[2024-05-02 16:00] User: Good morning" in payload.text  # Paris time


def test_default_payload_keeps_the_first_and_latest_turns(store: Store, ingestor: Ingestor, counter: WordPieceCounter,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """The assembler's policy is apply_context_window's: the first message, a marker, the newest that fit."""
    ingestor.add_messages("alice", [NewMessage("user", f"Turn {i}: notes about shard layout and HNSW tuning.",
                                               NOW - timedelta(minutes=60 - i)) for i in range(40)])
    with caplog.at_level(logging.INFO, logger="convsearch.context"):
        payload = _assembler(store, counter, budget=300).default_payload("alice")
    assert payload.estimated_tokens <= 300 and payload.max_tokens == 300
    first, marker = payload.items[:2]
    assert isinstance(first, Message) and first.content.startswith("Turn 0:")
    assert isinstance(marker, TruncationMarker) and marker.dropped == payload.messages_dropped > 0
    assert payload.messages[-1].content.startswith("Turn 39:")
    assert payload.messages_loaded + payload.messages_dropped == 40
    assert TRUNCATION_TEXT in payload.text
    record = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("context.assembled"))
    assert "total_messages_in_db=40" in record and f"messages_dropped={payload.messages_dropped}" in record


def test_history_limit_keeps_the_first_and_the_most_recent(store: Store, ingestor: Ingestor,
                                                           counter: WordPieceCounter) -> None:
    ingestor.add_messages("alice", [NewMessage("user", f"short {i}", NOW - timedelta(minutes=60 - i))
                                    for i in range(12)])
    roomy = _assembler(store, counter, budget=4000).default_payload("alice")
    assert [m.content for m in roomy.messages] == [f"short {i}" for i in range(12)] and not roomy.truncated
    settings = Settings(conversation_max_history_messages=5, conversation_max_context_tokens=4000,
                        conversation_reserved_tokens=0)
    limited = ContextAssembler(store, counter, settings, clock=lambda: NOW).default_payload("alice")
    assert [getattr(i, "content", "marker") for i in limited.items] == [
        "short 0", "marker", "short 8", "short 9", "short 10", "short 11"]
    assert limited.truncated and limited.messages_dropped == 7 and limited.items[1].dropped == 7


def test_the_default_budget_is_the_context_minus_the_reserved_tokens(store: Store, counter: WordPieceCounter) -> None:
    settings = Settings(conversation_max_context_tokens=6000, conversation_reserved_tokens=4500)
    assert ContextAssembler(store, counter, settings).default_payload("alice").max_tokens == 1500
    with pytest.raises(SettingsError, match="leaves fewer than 100 tokens"):
        Settings(conversation_max_context_tokens=4550, conversation_reserved_tokens=4500)


def test_slice_is_used_once_then_forgotten(store: Store, ingestor: Ingestor, counter: WordPieceCounter,
                                          caplog: pytest.LogCaptureFixture) -> None:
    ingestor.add_messages("alice", [NewMessage("user", f"old {i}", T0 + timedelta(minutes=i)) for i in range(5)])
    ingestor.add_messages("alice", [NewMessage("user", "today", NOW - timedelta(minutes=1))])
    assembler = _assembler(store, counter)
    assembler.request_slice("alice", 2, 4)
    with caplog.at_level(logging.INFO, logger="convsearch.context"):
        sliced = assembler.default_payload("alice")
    assert [m.seq for m in sliced.messages] == [2, 3] and sliced.source == "slice"
    assert sliced.requested_slice == (2, 4)
    record = [r.getMessage() for r in caplog.records if r.getMessage().startswith("context.assembled")]
    assert len(record) == 1 and "messages_loaded=2" in record[0] and "exact_tokens=True" in record[0]
    again = assembler.default_payload("alice")
    assert [m.content for m in again.messages] == ["today"] and again.source == "today"


def test_slice_request_is_checked(store: Store, counter: WordPieceCounter) -> None:
    assembler = _assembler(store, counter)
    with pytest.raises(InvalidInputError, match="empty or reversed"):
        assembler.request_slice("alice", 5, 2)
    with pytest.raises(UnknownUserError):
        assembler.request_slice("nobody", 1, 2)


def test_empty_day_gives_an_empty_window(store: Store, counter: WordPieceCounter) -> None:
    payload = _assembler(store, counter).default_payload("alice")
    assert payload.items == () and not payload.truncated and payload.text == "## Current Conversation"


def test_fallback_counter_is_reported(store: Store, ingestor: Ingestor) -> None:
    rough = WordPieceCounter(rough=True)
    assert not rough.exact and rough.count("abcdefgh") == 2 and rough.count_many(["abcde", ""]) == [2, 0]
    trimmed = trim_tool_output("x" * 4000, 50, rough)
    assert rough.count(trimmed) <= 50 and "characters omitted" in trimmed
    ingestor.add_messages("alice", [NewMessage("user", "hello", NOW - timedelta(minutes=1))])
    payload = _assembler(store, rough).default_payload("alice")
    assert payload.exact_tokens is False and payload.estimated_tokens == rough.count(payload.text)


@pytest.mark.parametrize("now_local, expected", [
    ("00:05", ["Shall we pick the blue tent?", "Yes, the blue one.", "Booked it just now."]),  # crossing midnight
    ("00:02", ["Shall we pick the blue tent?", "Yes, the blue one."]),  # under way, nothing said today yet
    ("00:40", []),  # idle past the timeout: that conversation is over, today is empty
])
def test_the_conversation_under_way_at_midnight_keeps_its_turns(store: Store, counter: WordPieceCounter,
                                                                  now_local: str, expected: list[str]) -> None:
    """A day is today's messages; talk that crosses midnight keeps what was said before it."""
    paris = timezone(timedelta(hours=2))  # Europe/Paris in May
    evening = datetime(2024, 5, 2, 23, 50, tzinfo=paris)
    now = datetime.fromisoformat(f"2024-05-03T{now_local}:00+02:00")
    ingestor = Ingestor(store, idle_timeout=timedelta(minutes=30), clock=lambda: now)
    ingestor.add_messages("alice", [NewMessage("user", "Earlier that day: a note about maps.", evening - timedelta(hours=5))])
    ingestor.add_messages("alice", [NewMessage("user", "Shall we pick the blue tent?", evening),
                                    NewMessage("assistant", "Yes, the blue one.", evening + timedelta(minutes=5))])
    if now_local == "00:05":
        ingestor.add_messages("alice", [NewMessage("user", "Booked it just now.", now - timedelta(minutes=1))])
    settings = Settings(conversation_max_context_tokens=4000, conversation_reserved_tokens=0, idle_timeout_minutes=30)
    payload = ContextAssembler(store, counter, settings, clock=lambda: now).default_payload("alice")
    assert [m.content for m in payload.messages] == expected and payload.day_label.isoformat() == "2024-05-03"


def test_a_conversation_running_for_days_is_read_from_yesterday_on(store: Store, counter: WordPieceCounter) -> None:
    """The window keeps the latest turns anyway; reading days of one conversation would not change it."""
    paris = timezone(timedelta(hours=2))
    start = datetime(2024, 5, 1, 10, 0, tzinfo=paris)
    now = datetime(2024, 5, 3, 0, 15, tzinfo=paris)
    ingestor = Ingestor(store, idle_timeout=timedelta(minutes=30), clock=lambda: now)
    times = [start + timedelta(minutes=20 * i) for i in range(115)]  # to 00:00 today, every 20 minutes
    ingestor.add_messages("alice", [NewMessage("user", f"Step {i} on {at:%m-%d %H:%M}.", at) for i, at in enumerate(times)])
    settings = Settings(conversation_max_context_tokens=20000, conversation_reserved_tokens=0, idle_timeout_minutes=30,
                        conversation_max_history_messages=500)
    payload = ContextAssembler(store, counter, settings, clock=lambda: now).default_payload("alice")
    shown = [m.content for m in payload.messages]
    assert shown[0].endswith("on 05-02 00:00.") and shown[-1].endswith("on 05-03 00:00.") and len(shown) == 73
