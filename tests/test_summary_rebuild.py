"""What a deletion or a replaced text drops is summarised again from what remains: a closed day or
an ended conversation does not lose its summary for one deleted turn, and no summary keeps the old
words (real DuckDB file, hash embedder, the extractive summarizer)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.errors import SummarizerError
from engine.summaries.summarizers import ExtractiveSummarizer
from tests.support import HashEmbedder

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
SECRET = "zebraquartz"


def _messages(secret: str) -> list[dict]:
    """Two days of six turns each (a conversation a day); turn 2 of day 0 carries `secret`."""
    out = []
    for day in range(2):
        for i in range(6):
            word = secret if (day, i) == (0, 2) else "Postgres"
            out.append({"role": "user" if i % 2 == 0 else "assistant", "message_id": f"m{day}-{i}",
                        "content": f"We decided to use {word} for the ledger, day {day} item {i}. Next step: migrate.",
                        "created_at": (T0 + timedelta(days=day, minutes=i)).isoformat()})
    return out


def _engine(home: Path, **settings: object) -> ConversationEngine:
    return ConversationEngine(home, embedder=HashEmbedder(), clock=lambda: T0 + timedelta(days=5),
                              settings=Settings(**settings))


@pytest.fixture
def engine(tmp_path: Path):
    with _engine(tmp_path / "home") as e:
        e.add_user("u", "UTC")
        yield e


def _summaries(engine: ConversationEngine) -> dict[tuple[str, int], str]:
    """(kind, first seq) -> Markdown of the user's summaries."""
    return {(s.kind, s.from_seq): s.markdown for s in engine.store.timeline.summaries_of_user("u")}


def _day_texts(engine: ConversationEngine) -> list[str | None]:
    thread_ids = [t.thread_id for t in engine.store.threads_of("u")]
    return [d.summary_markdown for days in engine.store.across.day_segments(thread_ids).values() for d in days]


def test_deleting_a_turn_of_a_closed_day_summarises_that_day_and_conversation_again(engine: ConversationEngine) -> None:
    engine.ingest("u", _messages(SECRET))
    engine.finalize_days("u")
    before = _summaries(engine)
    assert set(before) == {("day", 1), ("conversation", 1), ("day", 7), ("conversation", 7)}
    assert SECRET in before[("day", 1)] and all(_day_texts(engine))
    assert engine.delete_messages("u", ["m0-2"]) == 1
    after = _summaries(engine)
    assert set(after) == set(before)  # nothing lost: both summaries of day 0 are back
    assert not any(SECRET in text for text in after.values())
    assert after[("day", 7)] == before[("day", 7)]  # the other day is untouched
    assert all(_day_texts(engine)) and not any(SECRET in (t or "") for t in _day_texts(engine))
    titles = [c.title for t in engine.store.threads_of("u") for c in engine.store.timeline.conversations(t.thread_id)]
    assert len(titles) == 2 and all(titles)
    hits = engine.search("u", "ledger day 0 item 4", kinds=["summary"]).results
    assert any(h.summary_kind == "day" and h.from_seq == 1 for h in hits)  # the rebuilt one is searchable
    assert engine.finalize_days("u").day_summaries == 0  # and up to date


def test_without_a_summarizer_a_deletion_only_drops(tmp_path: Path) -> None:
    with _engine(tmp_path / "a") as with_summaries:
        with_summaries.add_user("u", "UTC")
        with_summaries.ingest("u", _messages(SECRET))
        with_summaries.finalize_days("u")
        assert _summaries(with_summaries)
    with _engine(tmp_path / "a", summarizer="none") as e:
        e.delete_messages("u", ["m0-2"])
        assert set(_summaries(e)) == {("day", 7), ("conversation", 7)}


def test_an_import_that_replaces_a_text_drops_the_summaries_quoting_the_old_one(engine: ConversationEngine,
                                                                              tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def imported(secret: str, **kw: object) -> None:
        path.write_text("".join(json.dumps(m) + "\n" for m in _messages(secret)))
        engine.import_file(path, fmt="jsonl", user_id="u", **kw)

    imported(SECRET)
    assert SECRET in _summaries(engine)[("day", 1)]
    assert engine.search("u", SECRET, kinds=["summary"]).results
    imported("Mongo", update=True)
    after = _summaries(engine)
    assert set(after) == {("day", 1), ("conversation", 1), ("day", 7), ("conversation", 7)}
    assert not any(SECRET in text for text in after.values()) and "Mongo" in after[("day", 1)]
    assert not any(SECRET in (t or "") for t in _day_texts(engine))
    assert not engine.search("u", SECRET, mode="lexical").results  # neither the message nor a summary holds the old word


def test_a_summarizer_failure_queues_the_rebuild_and_the_deletion_stands(engine: ConversationEngine,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    engine.ingest("u", _messages(SECRET))
    engine.finalize_days("u")

    def down(self: object, turns: object) -> str:
        raise SummarizerError("the LLM is down")

    monkeypatch.setattr(ExtractiveSummarizer, "summarize", down)
    assert engine.delete_messages("u", ["m0-2"]) == 1  # no error: the deletion happened
    assert not engine.store.messages_by_ids(["m0-2"], user_id="u")
    assert set(_summaries(engine)) == {("day", 7), ("conversation", 7)}
    assert engine.summary_retries()["pending_retries"] == 2  # the day and the conversation, for later
    monkeypatch.undo()
    engine.summaries.retries.clock = lambda: float("inf")  # past the retry delay
    engine.summaries.retry_failed()
    assert set(_summaries(engine)) == {("day", 1), ("conversation", 1), ("day", 7), ("conversation", 7)}


def test_a_deletion_summarises_nothing_that_had_no_summary(tmp_path: Path) -> None:
    third_day = [{**m, "message_id": f"m2-{i}", "created_at": (T0 + timedelta(days=2, minutes=i)).isoformat()}
                 for i, m in enumerate(_messages(SECRET)[:6])]
    with _engine(tmp_path / "a", summarizer="none") as e:
        e.add_user("u", "UTC")
        e.ingest("u", _messages(SECRET))  # days 0 and 1, never summarised
    with _engine(tmp_path / "a") as e:  # summaries on from now
        e.ingest("u", third_day)
        e.finalize_days("u")  # the last day only
        before = set(_summaries(e))
        assert ("day", 1) not in before and ("day", 13) in before  # day 0 has none (day 1 closed as day 2 began)
        assert e.delete_messages("u", ["m0-1", "m2-1"]) == 2
        assert set(_summaries(e)) == before  # day 2's again; day 0 left alone
        assert e.summarize("u").day_summaries == 1  # what the deletion left alone is the backfill's


def test_retention_dropping_conversations_of_one_day_summarises_that_day_once(tmp_path: Path) -> None:
    conversations = [[{**m, "message_id": f"c{k}-{i}", "created_at": (T0 + timedelta(hours=2 * k, minutes=i)).isoformat()}
                      for i, m in enumerate(_messages(SECRET)[:4])] for k in range(3)]

    def day_notes(e: ConversationEngine) -> int:
        thread_id = e.store.threads_of("u")[0].thread_id
        return sum(m.kind == "note" for m in e.store.messages_in_range(thread_id, 0))

    with _engine(tmp_path / "a") as e:
        e.add_user("u", "UTC")
        for batch in conversations:
            e.ingest("u", batch)
        e.finalize_days("u")  # the three conversations ended, the day closed
        notes = day_notes(e)
    with _engine(tmp_path / "a", max_conversations_retained=1) as e:
        e.summarize("u")  # retention drops the first two in one deletion
        assert [c.conversation_id[-1] for c in e.store.timeline.conversations(e.store.threads_of("u")[0].thread_id)] == ["3"]
        assert day_notes(e) == notes + 1  # the day written again once, not once a conversation
        assert _summaries(e)[("day", 9)]  # and it covers what is left
