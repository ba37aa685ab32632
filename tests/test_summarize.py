"""Summaries: the extractive summarizer, the OpenAI-compatible client (real HTTP), the day policy."""

from __future__ import annotations

import json
import re
import socket
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Iterator
from zoneinfo import ZoneInfo

import pytest

from engine.config import Settings
from engine.errors import InvalidInputError, InvalidTimestampError, OutOfOrderError, UnknownConversationError
from engine.store.ingest import Ingestor
from engine.models import Message, NewMessage
from engine.query.conversations import ConversationReader
from engine.store.core import Store
from engine.summaries.batch import conversation_brief
from engine.summaries.policy import DAY_NOTE_PREFIX, SummaryService, day_summary_id
from engine.summaries.chat_summarizer import OpenAICompatibleSummarizer
from engine.summaries.summarizers import (SECTIONS, ExtractiveSummarizer, SummarizerError,
                              make_summarizer, section_text, word_count)
from indexers.wordpieces import WordPieceCounter

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
THREAD = "alice:continuous"


def _msg(seq: int, role: str, content: str, **extra: object) -> Message:
    at = T0 + timedelta(minutes=seq)
    return Message(f"m{seq}", "t", "u", seq, role, content,  # type: ignore[arg-type]
                   at, at.date(), "t:conv:1", **extra)


ENGLISH = [
    _msg(1, "user", "Hi! Can you help me set up DuckDB for the search index? I want to keep everything in one file."),
    _msg(2, "assistant", "DuckDB keeps everything in one file and allows one writer process."),
    _msg(3, "user", "Let's go with DuckDB for storage. What about backups of the embeddings?"),
    _msg(4, "tool", "row " * 3000, tools_used=("shell",)),
    _msg(5, "assistant", "Next I will write the migration code for the store."),
]
FRENCH = [
    _msg(1, "user", "Bonjour, je voudrais migrer la base de données vers DuckDB pour le moteur de recherche."),
    _msg(2, "assistant", "DuckDB garde tout dans un seul fichier avec un seul processus écrivain."),
    _msg(3, "user", "Oui, on part sur DuckDB. Je ne suis pas sûr pour les sauvegardes."),
    _msg(4, "assistant", "Demain, je vais écrire les tests de migration."),
]


def _words(title: str) -> int:
    return len(title.split())


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?…])\s+", text.strip()) if s]


# Extractive ------------------------------------------------------------------------------------
def test_extractive_is_deterministic_and_has_every_heading() -> None:
    first = ExtractiveSummarizer().summarize(ENGLISH)
    assert first == ExtractiveSummarizer().summarize(list(ENGLISH))
    assert [line[3:] for line in first.splitlines() if line.startswith("## ")] == list(SECTIONS)


def test_extractive_sorts_sentences_into_sections() -> None:
    markdown = ExtractiveSummarizer().summarize(ENGLISH)
    assert "Let's go with DuckDB for storage." in section_text(markdown, "Decisions")
    assert "What about backups of the embeddings?" in section_text(markdown, "Open loops")  # never answered
    assert "I want to keep everything in one file." in section_text(markdown, "Goals")
    assert "Next I will write the migration code" in section_text(markdown, "Next steps")
    assert section_text(markdown, "Summary").startswith("User asked: Can you help me set up DuckDB")
    assert "row row row" not in markdown  # tool output is never quoted


def test_section_text_runs_from_its_heading_to_the_next_one() -> None:
    """A section's body: an LLM's Markdown too (odd spacing, any case, a `#` inside a line, a
    `###` sub-heading); the next `## ` heading ends it, else the end of the text."""
    markdown = ("##  summary \nFirst line. ## not a heading\n### Detail\n- a point\n\n## Goals\n- ship it\n"
                "##\tNext steps\n\n- write the tests\n")
    assert section_text(markdown, "Summary") == "First line. ## not a heading\n### Detail\n- a point"
    assert section_text(markdown, "Goals") == "- ship it"
    assert section_text(markdown, "Next steps") == "- write the tests"
    assert section_text(markdown, "Decisions") == "" and section_text("## Summary", "Summary") == ""
    assert section_text("## Summary\n## Goals\nx", "Summary") == ""


def test_a_conversations_brief_is_its_summarys_first_two_sentences_and_its_span() -> None:
    markdown = ("## Summary\n- none noted\nUser asked: Can you set up DuckDB? It should be fast.\n"
                "Assistant: Done. Tests pass.\n\n## Goals\n- none noted\n")
    turns = [_msg(1, "user", "Can you set up DuckDB?"), _msg(2, "assistant", "Done.")]
    brief = conversation_brief(ZoneInfo("UTC"), markdown, turns)
    assert brief.startswith("User asked: Can you set up DuckDB? It should be fast. It ran for 2 messages, from ")
    empty = conversation_brief(ZoneInfo("UTC"), "## Summary\n- none noted\n", turns)
    assert empty.startswith("The conversation had no notable content. It ran for 2 messages")


def test_extractive_answered_question_is_not_an_open_loop() -> None:
    messages = [_msg(1, "user", "Should the embeddings live in DuckDB too?"),
                _msg(2, "assistant", "Yes, the embeddings fit in a DuckDB list column.")]
    assert section_text(ExtractiveSummarizer().summarize(messages), "Open loops") == "- none noted"


def test_extractive_handles_french() -> None:
    markdown = ExtractiveSummarizer().summarize(FRENCH)
    assert "on part sur DuckDB" in section_text(markdown, "Decisions")
    assert "pas sûr pour les sauvegardes" in section_text(markdown, "Open loops")
    assert "Demain, je vais écrire les tests" in section_text(markdown, "Next steps")
    assert "je voudrais migrer" in section_text(markdown, "Goals")
    title = ExtractiveSummarizer().title(FRENCH)
    assert 5 <= _words(title) <= 8 and "DuckDB" in title


def test_extractive_title_names_the_topic_in_five_to_eight_words() -> None:
    title = ExtractiveSummarizer().title(ENGLISH)
    assert 5 <= _words(title) <= 8
    assert title.startswith("Set up DuckDB")
    short = ExtractiveSummarizer().title([_msg(1, "user", "Fix the flaky test."),
                                          _msg(2, "assistant", "Flaky test fixed in the parser.")])
    assert short == "Fix the flaky test fixed"  # four words, padded with the conversation's most said new word
    assert ExtractiveSummarizer().title([_msg(1, "user", "Hi there!")]) == "Small talk with no topic yet"
    assert ExtractiveSummarizer().title([]) == "Untitled conversation with no content yet"


def test_empty_sections_say_none_noted() -> None:
    markdown = ExtractiveSummarizer().summarize([_msg(1, "user", "The sky looks grey over Paris.")])
    for name in ("Goals", "Decisions", "Open loops", "Next steps"):
        assert section_text(markdown, name) == "- none noted"


TRIP = [
    _msg(1, "user", "Hey! I finally went to the pottery class downtown yesterday."),
    _msg(2, "assistant", "Wow, that's so cool, thanks for telling me!"),
    _msg(3, "user", "The pottery teacher showed us how to center clay on the wheel."),
    _msg(4, "assistant", "Centering clay on a pottery wheel takes patience."),
    _msg(5, "user", "My pottery bowl came out lopsided but I love it."),
    _msg(6, "assistant", "By the way, my sister adopted a rescue dog named Biscuit last week."),
    _msg(7, "user", "Did you meet Biscuit yet?"),
    _msg(8, "assistant", "Next month we are driving to the coast for a camping trip with the kids."),
]


def test_summary_covers_each_topic_once_within_its_word_budget() -> None:
    summary = section_text(ExtractiveSummarizer(cover_words=40).summarize(TRIP), "Summary").splitlines()
    quoted = summary[1:]  # after the opening request
    assert any("Biscuit" in line for line in quoted) and any("camping" in line for line in quoted)
    assert sum("pottery" in line.lower() for line in summary) <= 2  # the most talked-about topic does not crowd out the rest
    assert sum(word_count(line.split(": ", 1)[1]) for line in quoted) <= 40
    assert not any("?" in line or "thanks for telling me" in line for line in quoted)  # no questions, no filler


def test_a_larger_budget_quotes_more_and_keeps_conversation_order() -> None:
    small = section_text(ExtractiveSummarizer(cover_words=15).summarize(TRIP), "Summary").splitlines()
    large = section_text(ExtractiveSummarizer(cover_words=80).summarize(TRIP), "Summary").splitlines()
    assert len(small) < len(large)
    order = [next(i for i, m in enumerate(TRIP) if line.split(": ", 1)[1].rstrip(".") in m.content) for line in large]
    assert order == sorted(order)


# OpenAI-compatible client against a real local server -----------------------------------------
class _Server:
    def __init__(self, status: int, answer: object) -> None:
        self.requests: list[tuple[str, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append((self.path, json.loads(body)))
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(content: str) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}}
    return {"id": "x", "object": "chat.completion", "choices": [choice]}


@pytest.fixture
def llm() -> Iterator[_Server]:
    server = _Server(200, _completion("## Summary\nThey chose DuckDB.\n\n## Goals\n- none noted"))
    yield server
    server.close()


def test_openai_client_sends_a_chat_completion_and_parses_it(llm: _Server) -> None:
    summarizer = OpenAICompatibleSummarizer(llm.url + "/", "tiny-model", timeout=5)
    assert summarizer.summarize(ENGLISH) == "## Summary\nThey chose DuckDB.\n\n## Goals\n- none noted\n"
    path, body = llm.requests[0]
    assert path == "/v1/chat/completions"
    assert body["model"] == "tiny-model" and body["temperature"] == 0
    system, user = body["messages"]
    assert system["role"] == "system" and all(f"## {name}" in system["content"] for name in SECTIONS)
    assert user["role"] == "user" and "User: Hi! Can you help me set up DuckDB" in user["content"]
    first = ENGLISH[0].created_at.astimezone(timezone.utc)
    assert user["content"].startswith(f"[{first:%Y-%m-%d %H:%M} UTC] ")  # a time that says its zone
    assert "characters omitted" in user["content"] and len(user["content"]) < 4000  # tool dump cut


def test_openai_client_title_is_cleaned_and_clamped() -> None:
    server = _Server(200, _completion('Title: "Choosing DuckDB as the single-file store for search"'))
    try:
        title = OpenAICompatibleSummarizer(server.url, "m").title(ENGLISH)
    finally:
        server.close()
    assert title == "Choosing DuckDB as the single-file store for search"[: len(title)]
    assert 5 <= _words(title) <= 8 and '"' not in title
    assert "title of 5 to 8 words" in server.requests[0][1]["messages"][0]["content"]


def test_openai_client_http_500_is_a_clear_error() -> None:
    server = _Server(500, {"error": "model overloaded"})
    try:
        with pytest.raises(SummarizerError, match=r"HTTP 500.*model overloaded.*CONVSEARCH_SUMMARIZER=extractive"):
            OpenAICompatibleSummarizer(server.url, "m").summarize(ENGLISH)
    finally:
        server.close()


def test_openai_client_unreachable_is_a_clear_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there any more
    with pytest.raises(SummarizerError, match="cannot reach the summarizer") as info:
        OpenAICompatibleSummarizer(f"http://127.0.0.1:{port}/v1", "m", timeout=2).summarize(ENGLISH)
    assert info.value.code == "summarizer_unavailable"


def test_openai_client_falls_back_only_when_told() -> None:
    server = _Server(200, {"unexpected": True})
    try:
        with pytest.raises(SummarizerError, match="choices"):
            OpenAICompatibleSummarizer(server.url, "m").summarize(ENGLISH)
        fallback = OpenAICompatibleSummarizer(server.url, "m", fallback=ExtractiveSummarizer())
        assert fallback.summarize(ENGLISH) == ExtractiveSummarizer().summarize(ENGLISH)
    finally:
        server.close()


def test_make_summarizer_follows_settings() -> None:
    assert make_summarizer(Settings(summarizer="none")) is None
    assert isinstance(make_summarizer(Settings(summarizer="extractive")), ExtractiveSummarizer)
    with pytest.raises(InvalidInputError, match="CONVSEARCH_LLM_URL"):
        make_summarizer(Settings(summarizer="openai"))
    built = make_summarizer(Settings(summarizer="openai", llm_url="http://127.0.0.1:9/v1", llm_model="m"))
    assert isinstance(built, OpenAICompatibleSummarizer) and built.model == "m"


# Summary service ---------------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path) -> Iterator[Store]:
    with Store(tmp_path / "store.duckdb") as s:
        s.ensure_user("alice", "UTC")
        s.ensure_user("bob", "UTC")
        yield s


def _service(store: Store, **settings: object) -> tuple[SummaryService, Ingestor]:
    clock = lambda: datetime(2024, 6, 1, tzinfo=timezone.utc)  # noqa: E731
    ingestor = Ingestor(store, idle_timeout=timedelta(minutes=30), clock=clock)
    service = SummaryService(store, ExtractiveSummarizer(), Settings(**settings), clock=clock,
                             ingestor=ingestor, counter=WordPieceCounter())
    return service, ingestor


def test_a_service_without_an_ingestor_stores_by_the_settings(store: Store) -> None:
    """The service's own ingestor (none given) keeps the settings' time rules, as the engine's does."""
    now = datetime(2024, 6, 1, tzinfo=timezone.utc)
    service = SummaryService(store, ExtractiveSummarizer(), Settings(future_tolerance_hours=1, clock_skew_seconds=0),
                             clock=lambda: now, counter=WordPieceCounter())
    with pytest.raises(InvalidTimestampError, match="more than 1 h after now"):
        service.ingestor.add_messages("alice", [NewMessage("user", "From a fast clock.", now + timedelta(hours=2))])
    service.ingestor.add_messages("alice", [NewMessage("user", "On time.", now)])
    with pytest.raises(OutOfOrderError, match="clock skew"):
        service.ingestor.add_messages("alice", [NewMessage("user", "A minute behind.", now - timedelta(minutes=1))])


def _turns(start: int, count: int, day: datetime = T0) -> list[NewMessage]:
    return [NewMessage("user" if i % 2 else "assistant", f"Message {i} about the DuckDB store and its index.",
                       day + timedelta(minutes=i)) for i in range(start, start + count)]


def _notes(store: Store) -> list[Message]:
    return [m for m in store.messages_in_range(THREAD, 1) if m.kind == "note"]


def test_day_summary_updates_every_ten_turns_and_when_the_day_closes(store: Store) -> None:
    service, ingestor = _service(store)
    counts_at_update: list[int] = []
    sent = 0
    # 4 + 5 after the first update makes 10 only if the note (seq 11) were counted: it must not be.
    for size in (5, 5, 4, 5, 1, 5):
        result = ingestor.add_messages("alice", _turns(sent, size))
        sent += size
        for summary in service.after_ingest("alice", result):
            assert summary.kind == "day" and summary.summary_id == f"{THREAD}:sum:day:2024-05-01"
            counts_at_update.append(summary.message_count)
    assert counts_at_update == [10, 20]
    notes = _notes(store)
    assert [n.content for n in notes] == [DAY_NOTE_PREFIX + "2024-05-01"] * 2
    assert all(n.role == "system" for n in notes)
    segment = store.timeline.day_segments(THREAD)[0]
    stored = store.timeline.get_summary(day_summary_id(THREAD, T0.date()), user_id="alice")
    assert stored is not None and segment.summary_markdown == stored.markdown

    next_day = ingestor.add_messages("alice", _turns(0, 1, T0 + timedelta(days=1)))
    updated = service.after_ingest("alice", next_day)
    day = [s for s in updated if s.kind == "day"]
    assert len(day) == 1 and day[0].day_label == T0.date()
    first_turns = [m for m in store.messages_in_range(THREAD, 1) if m.kind == "turn" and m.day_label == T0.date()]
    assert (day[0].from_seq, day[0].to_seq, day[0].message_count) == (first_turns[0].seq, first_turns[-1].seq, 25)
    conversation = [s for s in updated if s.kind != "day"]
    assert [s.kind for s in conversation] == ["conversation"]  # 23 hours of silence ended it
    assert conversation[0].message_count == 25  # the two notes inside it are not summarised


def test_day_summary_updates_when_raw_text_nears_the_token_budget(store: Store) -> None:
    service, ingestor = _service(store, day_token_budget=100)
    short = ingestor.add_messages("alice", [NewMessage("user", "Short hello there.", T0)])
    assert service.after_ingest("alice", short) == []
    long_text = "The DuckDB store keeps messages, summaries and day segments in one file. " * 6
    assert 90 <= WordPieceCounter().count(long_text) < 200  # near the budget, far from 10 messages
    result = ingestor.add_messages("alice", [NewMessage("assistant", long_text, T0 + timedelta(minutes=1))])
    updated = service.after_ingest("alice", result)
    assert [s.kind for s in updated] == ["day"] and updated[0].message_count == 2


def test_range_summary_is_stored_and_returned(store: Store) -> None:
    service, ingestor = _service(store)
    ingestor.add_messages("alice", _turns(0, 8))
    summary = service.summarize_message_range("alice", 2, 6)
    assert (summary.kind, summary.from_seq, summary.to_seq, summary.message_count) == ("range", 2, 5, 4)
    assert store.timeline.get_summary(summary.summary_id, user_id="alice") == summary
    assert 5 <= _words(summary.title or "") <= 8 and "## Decisions" in summary.markdown
    assert store.timeline.get_summary(summary.summary_id, user_id="bob") is None


@pytest.mark.parametrize("start,end", [(6, 2), (3, 3)])
def test_reversed_or_empty_range_is_a_clear_error(store: Store, start: int, end: int) -> None:
    service, ingestor = _service(store)
    ingestor.add_messages("alice", _turns(0, 8))
    with pytest.raises(InvalidInputError, match="empty or reversed"):
        service.summarize_message_range("alice", start, end)
    with pytest.raises(InvalidInputError, match="no messages"):
        service.summarize_message_range("alice", 50, 60)


CHAT = [
    ("user", "Can you help me plan the backup strategy for the DuckDB store?"),
    ("assistant", "A nightly copy of the DuckDB file is enough while there is one writer."),
    ("user", "Let's go with nightly copies kept for seven days."),
    ("assistant", "Next I will write the backup script."),
]


def _chat(at: datetime) -> list[NewMessage]:
    return [NewMessage(role, text, at + timedelta(minutes=i))  # type: ignore[arg-type]
            for i, (role, text) in enumerate(CHAT)]


def test_ended_conversation_gets_a_title_and_two_or_three_sentences(store: Store) -> None:
    service, ingestor = _service(store)
    service.after_ingest("alice", ingestor.add_messages("alice", _chat(T0)))
    result = ingestor.add_messages("alice", [NewMessage("user", "Back again.", T0 + timedelta(hours=3))])
    assert result.ended_conversations == (f"{THREAD}:conv:1",)
    updated = service.after_ingest("alice", result)
    assert [s.kind for s in updated] == ["conversation"]
    record = store.timeline.get_conversation(f"{THREAD}:conv:1", user_id="alice")
    assert 5 <= _words(record.title or "") <= 8 and "backup" in (record.title or "").lower()
    assert 2 <= len(_sentences(record.summary or "")) <= 3
    assert "4 messages" in (record.summary or "")


def test_explicit_end_summarises_and_conversations_are_listed(store: Store) -> None:
    service, ingestor = _service(store)
    ingestor.add_messages("alice", _chat(T0))
    ended = service.end_conversation("alice").summary
    assert ended is not None and ended.kind == "conversation" and ended.message_count == 4
    reader = ConversationReader(store)
    recent = reader.recent("alice")
    assert [c.conversation_id for c in recent] == [f"{THREAD}:conv:1"] and recent[0].ended_at is not None
    assert recent[0].title == ended.title and (recent[0].first_seq, recent[0].last_seq) == (1, 4)
    whole = reader.get("alice", f"{THREAD}:conv:1")
    assert [m.content for m in whole.messages] == [text for _, text in CHAT]
    with pytest.raises(UnknownConversationError):
        reader.get("bob", f"{THREAD}:conv:1")
    assert not service.end_conversation("alice").ended  # nothing open any more
