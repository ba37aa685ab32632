"""Summaries in batches read the store once per batch and only what the policy needs: a bulk ingest
reads its range once, the scheduled close reads the last day only (not the whole thread)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator
from zoneinfo import ZoneInfo

import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.summaries.batch import FreshTurns, TurnRange
from engine.summaries.policy import DAY_NOTE_PREFIX
from tests.support import StatementCount, chat_export

T0 = datetime(2024, 3, 4, 9, 0, tzinfo=timezone.utc)
LATER = datetime(2024, 4, 1, 12, 0, tzinfo=timezone.utc)


def _days(n_days: int, per_day: int, conversations: int = 2) -> list[dict]:
    """`per_day` turns a day in `conversations` conversations an hour apart, `n_days` days in a row."""
    out = []
    for day in range(n_days):
        for i in range(per_day):
            at = T0 + timedelta(days=day, hours=i * conversations // per_day, minutes=i)
            out.append({"role": "user" if i % 2 == 0 else "assistant", "message_id": f"d{day}-{i}",
                        "created_at": at.isoformat(),
                        "content": f"We decided to use topic{day} for step {i}. I'll send the report tomorrow."})
    return out


class _Counting:
    """Wraps store.messages_in_range: how many queries and rows the summaries asked for."""

    def __init__(self, engine: ConversationEngine) -> None:
        self.queries = self.rows = 0
        self.turn_reads: list[int] = []  # the summaries' reads (turns only), not the lexical update's
        inner = engine.store.messages_in_range

        def counted(*args, **kwargs):
            found = inner(*args, **kwargs)
            self.queries, self.rows = self.queries + 1, self.rows + len(found)
            if kwargs.get("include_notes") is False:
                self.turn_reads.append(len(found))
            return found
        engine.store.messages_in_range = counted  # type: ignore[method-assign]


def test_a_bulk_ingest_reads_its_turns_once_and_the_close_reads_the_last_day_only(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home", settings=Settings(), embedder=None, clock=lambda: LATER) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", _days(1, 20), index=False)
        counting = _Counting(engine)
        engine.ingest("u", _days(8, 20)[20:], index=False)  # closes 7 days and 14 conversations at once
        summaries = engine.store.timeline.summaries_of_user("u")
        assert sum(s.kind == "day" for s in summaries) == 8 and sum(s.kind == "conversation" for s in summaries) == 15
        assert counting.queries <= 4  # the stale checks and every summary slice one read (plus the lexical update)
        counting.queries = counting.rows = 0
        engine.finalize_days("u")  # the scheduled close: only the last day can still be open
        assert counting.rows <= 20 + 20  # that day's turns (twice at most), never the thread's 160
        assert engine.store.timeline.get_day_segment("u:continuous:day:2024-03-11", user_id="u").summary_markdown


@contextmanager
def _turn_range(tmp_path: Path, n_days: int, per_day: int) -> Iterator[tuple[TurnRange, _Counting]]:
    """A turn range over a stored thread (no summaries), and the count of what it reads."""
    with ConversationEngine(tmp_path / "home", settings=Settings(summarizer="none"), embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", _days(n_days, per_day), index=False)
        yield TurnRange(engine.store, "u:continuous"), _Counting(engine)


def test_turn_range_slices_what_it_holds_and_reads_the_union_when_asked_next_to_it(tmp_path: Path) -> None:
    with _turn_range(tmp_path, 2, 10) as (turns, counting):
        turns.prefetch([(1, 5), (6, 12)])
        assert [m.seq for m in turns.between(3, 8)] == [3, 4, 5, 6, 7, 8] and counting.queries == 1
        assert [m.seq for m in turns.between(10, 15)] == [10, 11, 12, 13, 14, 15] and counting.queries == 2
        assert [m.seq for m in turns.between(1, 4)] == [1, 2, 3, 4] and counting.queries == 2  # the union was kept
        assert [m.seq for m in turns.between(16, 17)] == [16, 17] and counting.queries == 3


def test_a_turn_range_reads_a_far_ask_alone(tmp_path: Path) -> None:
    """Next to what it holds but much smaller than the union: only the ask is read."""
    with _turn_range(tmp_path, 130, 20) as (turns, counting):
        assert len(turns.between(1, 2500)) == 2500
        assert [m.seq for m in turns.between(2501, 2502)] == [2501, 2502] and counting.rows == 2500 + 2  # not 1..2502
        assert len(turns.between(2503, 2600)) == 98 and counting.rows == 2500 + 2 + 100  # close: the union 2501..2600


def test_a_backfill_of_more_than_a_block_reads_each_stretch_of_the_thread_once(tmp_path: Path) -> None:
    """Days and conversations run in time order, a block at a time: each block spans one stretch of
    the thread, read in one query. (Days first, then conversations, read 9,000 turns of a
    3,000-turn thread; at 30k messages, 4.5 million.) Whether a closed day holds a turn is asked of
    the turns' seqs alone: reading the turns for it, a block of days at a time, read them twice."""
    home = tmp_path / "home"
    with ConversationEngine(home, settings=Settings(summarizer="none"), embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", _days(300, 10), index=False)  # 300 days, 600 conversations: four blocks
    with ConversationEngine(home, settings=Settings(summary_workers=0), embedder=None,
                            clock=lambda: datetime(2025, 1, 1, tzinfo=timezone.utc)) as engine:
        counting = _Counting(engine)
        report = engine.summarize("u")
        assert (report.day_summaries, report.conversation_summaries) == (300, 600)
        reads = counting.turn_reads
        assert len(reads) <= 4 and sum(reads) <= 3000 + 40, reads  # each block's stretch, once


def test_one_ingest_of_more_than_a_block_reads_each_stretch_of_the_thread_once(tmp_path: Path) -> None:
    """`engine.ingest` of a large batch runs its days and conversations in time order too, and a
    turn range joins what it holds to an ask only when the two lie close together. (Days, then
    conversations, with a union that kept growing, read ~250,000 turns of this 3,000-turn batch;
    at 30k messages in one call, 4.5 million, and the summaries took 78 s instead of 7.)"""
    with ConversationEngine(tmp_path / "home", settings=Settings(summary_workers=0), embedder=None) as engine:
        engine.add_user("u", "UTC")
        counting = _Counting(engine)
        engine.ingest("u", _days(260, 20, conversations=10), index=False)  # 2,859 closed: 12 blocks
        summaries = engine.store.timeline.summaries_of_user("u")
        assert (sum(s.kind == "day" for s in summaries), sum(s.kind == "conversation" for s in summaries)) == (260, 2599)
        reads = counting.turn_reads
        assert len(reads) <= 13 and sum(reads) <= 2 * 5200 + 13 * 20, reads  # the stale checks', then each block's (a day apart)


def test_a_backfill_of_many_short_threads_runs_in_statements_of_many_threads(tmp_path: Path) -> None:
    """An import of a chat export holds one thread per conversation: its summaries are asked of
    and written to the store for all threads at once (thread by thread: ~26 statements a thread),
    and each day summary's note lands in its own thread as an ingest would place it."""
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chat_export(60, 4, T0)), encoding="utf-8")
    home = tmp_path / "home"
    with ConversationEngine(home, settings=Settings(summarizer="none"), embedder=None) as engine:
        engine.import_file(path, fmt="openai", user_id="u")
    with ConversationEngine(home, settings=Settings(summary_workers=0), embedder=None, clock=lambda: LATER) as engine:
        statements = StatementCount(engine)
        report = engine.summarize("u")
        assert (report.day_summaries, report.conversation_summaries) == (60, 60)
        assert statements.count <= 40, statements.count
        threads = engine.store.threads_of("u")
        for thread in threads[:: 7]:
            *turns, note = engine.store.messages_in_range(thread.thread_id, 1)
            assert note.kind == "note" and note.seq == len(turns) + 1 == 5 and note.created_at == turns[-1].created_at
            assert note.conversation_id == turns[-1].conversation_id and note.content.startswith(DAY_NOTE_PREFIX)
        assert sum(engine.store.message_count(t.thread_id) for t in threads) == 240  # notes are not turns
        for check in ("store_seq_order", "store_thread_tail", "store_day_bounds", "store_conversation_bounds",
                      "store_summary_span"):
            assert engine.store.checks.problems(check) == [], check


def test_turn_seqs_in_ranges_are_the_turns_of_one_thread_or_many(tmp_path: Path) -> None:
    """What the closed days' stale checks read: each range's turn seqs, never a note's, one thread
    by itself or many in one query."""
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chat_export(5, 6, T0)), encoding="utf-8")
    with ConversationEngine(tmp_path / "home", settings=Settings(summary_workers=0), embedder=None,
                            clock=lambda: LATER) as engine:
        engine.import_file(path, fmt="openai", user_id="u")  # each thread: 6 turns, then its day's note
        store = engine.store
        threads = [t.thread_id for t in store.threads_of("u")]
        assert [m.kind for m in store.messages_in_range(threads[0], 1)] == ["turn"] * 6 + ["note"]
        asked = {t: (2 + i % 3, 7) for i, t in enumerate(threads)}
        expected = {t: [m.seq for m in store.messages_in_range(t, lo, hi + 1, include_notes=False)]
                    for t, (lo, hi) in asked.items()}
        assert store.turn_seqs_in_ranges(asked) == expected and expected[threads[1]] == [3, 4, 5, 6]
        assert store.turn_seqs_in_ranges({threads[2]: (4, 7)}) == {threads[2]: [4, 5, 6]}
        assert store.turn_seqs_in_ranges({threads[0]: (7, 9), threads[1]: (1, 2)}) == {threads[0]: [], threads[1]: [1, 2]}
        assert store.turn_seqs_in_ranges({}) == {}


@pytest.mark.process  # the summary workers
def test_a_day_and_its_one_conversation_are_summarised_once(tmp_path: Path) -> None:
    """Each conversation of a chat export is its thread's one day: both summaries quote the same
    turns, so the summarizer is asked once for both, in the engine's process (counted here) and by
    the workers alike (the asks sent counted)."""
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chat_export(40, 30, T0)), encoding="utf-8")  # 1,200 turns: workers take them
    for workers in (0, 1):
        with ConversationEngine(tmp_path / f"home{workers}", settings=Settings(summary_workers=workers),
                                embedder=None, clock=lambda: LATER) as engine:
            service, asked = engine.summaries, {"summarize": 0, "title": 0, "sent": 0}
            inner, start = service.summarizer, service.workers.start

            class Counting:  # not marked pure: it stays in the engine's process
                def summarize(self, messages):
                    asked["summarize"] += 1
                    return inner.summarize(messages)

                def title(self, messages):
                    asked["title"] += 1
                    return inner.title(messages)

            def counted_start(summarizer, asks):
                asked["sent"] += len(asks)
                return start(summarizer, asks)
            if workers == 0:
                service.summarizer = Counting()
            service.workers.start = counted_start  # type: ignore[method-assign]
            engine.import_file(path, fmt="openai", user_id="u")
            summaries = engine.store.timeline.summaries_of_user("u")
            days = {s.thread_id: s for s in summaries if s.kind == "day"}
            conversations = {s.thread_id: s for s in summaries if s.kind == "conversation"}
            assert len(days) == len(conversations) == 40 and asked["sent"] == 40
            assert all(days[t].markdown == conversations[t].markdown for t in days)
            assert all(days[t].title == f"Day summary {days[t].day_label}" and conversations[t].title for t in days)
            assert (asked["summarize"], asked["title"]) == ((40, 40) if workers == 0 else (0, 0))
            assert workers == 0 or service.workers._workers  # the workers made them


def _varied(n: int) -> list[dict]:
    """Turns 7 minutes apart over three days, written every way a caller may: naive times (the user's
    zone) and times at another offset, speakers, tools, metadata, external ids."""
    paris, plus_five = ZoneInfo("Europe/Paris"), timezone(timedelta(hours=5))
    out = []
    for i in range(n):
        at = datetime(2024, 3, 4, 0, 8, tzinfo=paris) + timedelta(minutes=7 * i + 40 * (i // 50))  # a new conversation every 50
        out.append({"role": "user" if i % 3 else "assistant", "speaker": "Ana" if i % 3 else None,
                    "created_at": at.replace(tzinfo=None).isoformat() if i % 2 else at.astimezone(plus_five).isoformat(),
                    "content": f"Step {i}: we decided on plan{i % 17}. Should we ship topic{i % 5} now? I'll check.",
                    "tools_used": ["search"] if i % 7 == 0 else [], "metadata": {"n": i} if i % 4 == 0 else {},
                    "external_id": f"x{i}" if i % 5 == 0 else None})
    return out


def test_a_bulk_ingest_quotes_its_own_turns_as_the_store_gives_them_back(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk `engine.ingest` keeps the turns it stored for its summaries instead of reading them
    back (`FreshTurns`). Its summaries are those made from the store's rows, read back."""
    written = {}
    for kept in (True, False):
        if not kept:
            monkeypatch.setattr(FreshTurns, "add", lambda self, stored: None)  # nothing kept: all read back
        with ConversationEngine(tmp_path / str(kept), embedder=None, clock=lambda: LATER) as engine:
            engine.add_user("u", "Europe/Paris")
            engine.ingest("u", [{"role": "user", "content": "Late, the plan for tomorrow first.",  # across midnight
                                 "created_at": "2024-03-03T23:58:00"},
                                {"role": "user", "content": "Still here.", "created_at": "2024-03-04T00:01:00"}],
                          index=False)
            counting = _Counting(engine)
            engine.ingest("u", _varied(600), index=False)
            read = sum(counting.turn_reads)
            assert read < 10 if kept else read >= 600, counting.turn_reads  # the conversation's earlier turns only
            written[kept] = ([(s.summary_id, s.markdown, s.title, s.from_seq, s.to_seq, s.message_count)
                              for s in engine.store.timeline.summaries_of_user("u")],
                             [(c.conversation_id, c.title, c.summary) for c in engine.list_conversations("u", 100)])
    assert len(written[True][0]) > 10 and written[True] == written[False]
