"""One summary policy on every path: imports, live ingest, backfill, the scheduled close; spot checks
on the sample (real DuckDB file, lexical only: no test here needs vectors)."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine.api import ConversationEngine
from engine.surfaces.cli import main
from engine.config import Settings
from engine.errors import UnknownDaySegmentError
from engine.summaries.policy import DAY_NOTE_PREFIX
from engine.summaries.summarizers import TITLE_WORDS, section_text, word_count
from tests.support import HashEmbedder

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample.jsonl"
LATER = datetime(2024, 4, 1, 12, 0, tzinfo=timezone.utc)  # every sample day is over


def _engine(home: Path, **settings: object) -> ConversationEngine:
    return ConversationEngine(home, settings=Settings(**settings), embedder=None, clock=lambda: LATER)


def _days(engine: ConversationEngine, user: str) -> dict[date, str]:
    return {s.day_label: s.markdown for s in engine.store.timeline.summaries_of_user(user) if s.kind == "day"}


def _conversations(engine: ConversationEngine, user: str) -> list:
    return [c for t in engine.store.threads_of(user) for c in engine.store.timeline.conversations(t.thread_id)]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample imported the README's way, on the command line."""
    home = tmp_path_factory.mktemp("readme") / "home"
    assert main(["--home", str(home), "ingest", str(SAMPLE), "--format", "jsonl"]) == 0
    return home


def test_the_readme_import_makes_day_and_conversation_summaries(imported: Path) -> None:
    with _engine(imported) as engine:
        for user in ("alice", "bob"):
            segments = [s for t in engine.store.threads_of(user) for s in engine.store.timeline.day_segments(t.thread_id)]
            assert set(_days(engine, user)) == {s.day_label for s in segments}  # every day, the last one closed too
            for conversation in _conversations(engine, user):
                assert TITLE_WORDS[0] <= word_count(conversation.title) <= TITLE_WORDS[1], conversation.title
                assert conversation.summary and conversation.summary.endswith(")."), conversation.summary


def test_alices_4_march_names_the_postgresql_decision(imported: Path) -> None:
    with _engine(imported) as engine:
        markdown = _days(engine, "alice")[date(2024, 3, 4)]
    decisions = section_text(markdown, "Decisions")
    assert "we go with PostgreSQL 15.4" in decisions
    assert "PostgreSQL 15.4" not in section_text(markdown, "Next steps")  # a decision is filed once


def test_bobs_kyoto_day_quotes_the_booking_and_the_japanese(imported: Path) -> None:
    with _engine(imported) as engine:
        markdown = _days(engine, "bob")[date(2024, 3, 6)]
        titles = [c.title for c in _conversations(engine, "bob")]
    assert "I booked Ryokan Hanaya near Gion, from 12 to 15 April." in section_text(markdown, "Decisions")
    assert "京都に三泊四日" in markdown  # CJK sentences are quoted
    assert any("京都" in t for t in titles)


def test_a_question_is_never_a_decision(imported: Path) -> None:
    with _engine(imported) as engine:
        markdown = _days(engine, "alice")[date(2024, 3, 5)]
    assert "on garde la sauvegarde SQLite combien de temps ?" in section_text(markdown, "Open loops")
    assert "?" not in section_text(markdown, "Decisions")


def test_live_ingest_and_backfill_make_the_same_summaries_as_the_import(tmp_path: Path, imported: Path) -> None:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    with _engine(tmp_path / "live") as live:
        for row in rows:  # one message per call, as an agent sends them
            live.add_user(row["user_id"], row["timezone"])
            message = {k: row[k] for k in ("role", "content", "created_at", "message_id", "speaker", "tools_used")
                       if k in row}
            live.ingest(row["user_id"], [message], index=False)
        live.finalize_days()
        with _engine(imported) as bulk:
            for user in ("alice", "bob"):
                assert _days(live, user) == _days(bulk, user)
                assert ([(c.title, c.summary) for c in _conversations(live, user)]
                        == [(c.title, c.summary) for c in _conversations(bulk, user)])
    with _engine(tmp_path / "old", summarizer="none") as old:  # a store imported by the previous version
        old.import_file(SAMPLE, fmt="jsonl")
        assert old.stats()["summaries"] == 0
    assert main(["--home", str(tmp_path / "old"), "summarize", "--all"]) == 0
    with _engine(tmp_path / "old") as backfilled, _engine(imported) as bulk:
        for user in ("alice", "bob"):
            assert _days(backfilled, user) == _days(bulk, user)
        assert backfilled.summarize().day_summaries == 0  # nothing left to do: no repeat work


def test_bulk_paths_summarise_each_day_once(tmp_path: Path) -> None:
    with _engine(tmp_path / "home") as engine:
        engine.import_file(SAMPLE, fmt="jsonl")
        notes = [m.content for t in engine.store.threads_of("alice")
                 for m in engine.store.messages_in_range(t.thread_id, 0) if m.kind == "note"]
        days = {d.isoformat() for d in _days(engine, "alice")}
    assert sorted(n.removeprefix(DAY_NOTE_PREFIX) for n in notes) == sorted(days)  # one update, one note, a day


def test_retention_applies_to_imports(tmp_path: Path) -> None:
    with _engine(tmp_path / "home", max_conversations_retained=3) as engine:
        engine.import_file(SAMPLE, fmt="jsonl")
        ended = [c for c in _conversations(engine, "alice") if c.ended_at is not None]
        assert len(ended) == 3 and all(c.title for c in ended)
        kept = {m.day_label for t in engine.store.threads_of("alice") for m in engine.store.messages_in_range(t.thread_id, 0)}
        assert date(2024, 3, 4) not in kept and date(2024, 3, 4) not in _days(engine, "alice")


def test_the_scheduled_close_ends_idle_conversations_and_closes_the_day(tmp_path: Path) -> None:
    at = datetime(2024, 5, 2, 9, 0, tzinfo=timezone.utc)
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: at) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user", "content": "We decided to use DuckDB for the store.",
                             "created_at": "2024-05-02T08:00"},
                            {"role": "assistant", "content": "Good: I will write the schema next.",
                             "created_at": "2024-05-02T08:01"}], index=False)
        assert engine.stats("u")["summaries"] == 0  # two turns: the live rule waits for ten
        same_day = engine.finalize_days(now=at)
        assert (same_day.day_summaries, same_day.conversations_ended) == (0, 1)  # idle since 08:01, not over yet
        report = engine.finalize_days(now=at + timedelta(days=1))
        assert (report.day_summaries, report.conversation_summaries) == (1, 0)
        day = engine.store.timeline.summaries_of_user("u")
        assert "We decided to use DuckDB" in section_text(next(s for s in day if s.kind == "day").markdown, "Decisions")
        assert engine.finalize_days(now=at + timedelta(days=2)).day_summaries == 0


def test_a_day_is_regenerated_on_request(imported: Path, tmp_path: Path) -> None:
    with _engine(imported) as engine:
        before = engine.store.timeline.get_summary("alice:continuous:sum:day:2024-03-04", user_id="alice")
        again = engine.regenerate_day_summary("alice", "2024-03-04")
        assert again.summary_id == before.summary_id and again.markdown == before.markdown
        assert again.day_label == date(2024, 3, 4) and again.to_seq == before.to_seq
        with pytest.raises(UnknownDaySegmentError):
            engine.regenerate_day_summary("alice", "2024-02-01")
    assert main(["--home", str(imported), "summarize", "--user", "bob", "--regenerate", "2024-03-06"]) == 0


def test_summary_hits_show_once_per_span_up_to_the_limit(imported: Path) -> None:
    with _engine(imported) as engine:
        for query in ("PostgreSQL migration", "database decision", "rollback window"):
            one = engine.search("alice", query, kinds=["summary"], limit=1).results
            assert len(one) == 1
            hits = engine.search("alice", query, kinds=["summary"], limit=6).results
            assert len(hits) > 1
            for i, a in enumerate(hits):
                assert a.day_label is not None and a.started_at <= a.ended_at
                for b in hits[i + 1:]:
                    overlap = min(a.to_seq, b.to_seq) - max(a.from_seq, b.from_seq) + 1
                    assert overlap / (max(a.to_seq, b.to_seq) - min(a.from_seq, b.from_seq) + 1) < 0.8


def test_extractive_segments_cjk_and_reads_short_choices_as_decisions() -> None:
    from engine.models import Message
    from engine.summaries.summarizers import ExtractiveSummarizer, split_sentences

    assert split_sentences("京都に行きます。桜はまだ咲いていますか？はい。") == ["京都に行きます。", "桜はまだ咲いていますか？", "はい。"]  # noqa: E501
    at = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
    turns = [Message(f"m{i}", "t", "u", i, role, text, at + timedelta(minutes=i), at.date(), "t:conv:1")
             for i, (role, text) in enumerate([("user", "Keihan or JR to Gion from Osaka?"),
                                               ("assistant", "The Keihan line is cheaper and goes to Gion."),
                                               ("user", "Keihan it is. TODO: check the ryokan check-in time.")], 1)]
    markdown = ExtractiveSummarizer().summarize(turns)
    assert "Keihan it is." in section_text(markdown, "Decisions")
    assert "check the ryokan check-in time" in section_text(markdown, "Open loops")
    assert section_text(markdown, "Open loops").count("- ") == 1  # the answered question is not a loop


@pytest.mark.parametrize("margin", [1.0, 1.05])
def test_one_summary_leads_and_only_when_it_outscores_every_message_by_the_margin(tmp_path: Path, margin: float) -> None:
    led = trailed = 0
    settings = Settings(summary_lead_margin=margin)  # small margins, so that both cases occur on the sample
    with ConversationEngine(tmp_path, embedder=HashEmbedder(), clock=lambda: LATER, settings=settings) as engine:
        engine.import_file(SAMPLE, fmt="jsonl")
        engine.index()
        for query in ("which database did we choose and why", "PostgreSQL migration", "pgloader dry run log",
                      "rollback window Saturday", "Kyoto ryokan booking", "ECONNRESET pool", "invoice amounts rounded"):
            user = "bob" if "Kyoto" in query else "alice"
            results = engine.search(user, query, limit=10).results
            best_message = engine.search(user, query, limit=10, kinds=["message"]).results[0]
            best_summary = engine.search(user, query, limit=1, kinds=["summary"]).results[0]
            shown = [h for h in results if h.kind == "summary"]
            assert len(shown) <= 1
            if best_summary.score >= margin * best_message.score:
                assert results[0].summary_id == best_summary.summary_id
                led += 1
            else:
                assert not shown and results[0].message_id == best_message.message_id
                trailed += 1
    assert led and trailed  # both cases were exercised


def test_the_scheduled_close_leaves_indexes_not_in_memory_where_they_are(tmp_path: Path) -> None:
    """It reaches every user, and it used to load every user's shard (a server then held them all). Its
    notes are messages: an index in memory takes them at once, another when it next loads."""
    at = datetime(2024, 5, 2, 9, 0, tzinfo=timezone.utc)
    with ConversationEngine(tmp_path, settings=Settings(future_tolerance_hours=24 * 366), embedder=None,
                            clock=lambda: at) as engine:
        for user in ("a", "b", "c"):
            engine.add_user(user, "UTC")
            engine.ingest(user, [{"role": "user", "content": f"{user} plans the ferry trip", "created_at": "2024-05-02T08:00",
                                  "message_id": f"{user}-1"}], index=False)
        assert engine.search("a", "ferry", mode="lexical").results  # a's index is loaded, the others' not
        assert engine.finalize_days(now=at + timedelta(days=1)).day_summaries == 3
        assert engine.pipeline.loaded_users() == {"a"}
        for user in ("a", "b", "c"):  # b's and c's load here
            assert dict(engine.pipeline.shard(user).manifest.watermarks) == engine.store.last_seqs(user) == {
                f"{user}:continuous": 2}, user  # the turn and the close's note
            assert engine.search(user, "ferry", kinds=("summary",)).results, user


def test_a_restart_leaves_indexes_behind_by_the_closes_notes_alone_unloaded(tmp_path: Path) -> None:
    """The close writes a note for each user it closes; a saved shard behind the store by notes only has no
    window to add, and a restart's first background step used to load every such user."""
    at = datetime(2024, 5, 2, 9, 0, tzinfo=timezone.utc)
    with ConversationEngine(tmp_path, embedder=None, clock=lambda: at) as engine:
        for user in ("a", "b"):
            engine.add_user(user, "UTC")
            engine.ingest(user, [{"role": "user", "content": f"{user} plans the ferry trip", "created_at": "2024-05-02T08:00",
                                  "message_id": f"{user}-1"}], index=False)
        assert engine.maintain() == ["a", "b"]  # indexed and saved
    with ConversationEngine(tmp_path, embedder=None, clock=lambda: at + timedelta(days=1)) as engine:
        assert engine.finalize_days().day_summaries == 2 and not engine.pipeline.loaded_users()
        assert engine.store.last_seqs("a") == {"a:continuous": 2}  # the turn and the close's note
        assert engine.maintain() == [] and not engine.pipeline.loaded_users()
        engine.ingest("b", [{"role": "user", "content": "b books the ferry", "message_id": "b-2"}], index=False)
        assert engine.maintain() == ["b"] and engine.pipeline.loaded_users() == {"b"}
        assert engine.search("a", "ferry", mode="lexical").results  # a's index loads, over the note
