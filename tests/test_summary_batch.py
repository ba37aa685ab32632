"""Summaries in batches read the store once per batch and only what the policy needs: a bulk ingest
reads its range once, the scheduled close reads the last day only (not the whole thread)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from engine.api import ConversationEngine
from engine.config import Settings
from engine.summaries.batch import TurnRange

T0 = datetime(2024, 3, 4, 9, 0, tzinfo=timezone.utc)
LATER = datetime(2024, 4, 1, 12, 0, tzinfo=timezone.utc)


def _days(n_days: int, per_day: int) -> list[dict]:
    """`per_day` turns a day (a conversation each morning and each evening), `n_days` days in a row."""
    out = []
    for day in range(n_days):
        for i in range(per_day):
            at = T0 + timedelta(days=day, hours=0 if i < per_day // 2 else 9, minutes=i)
            out.append({"role": "user" if i % 2 == 0 else "assistant", "message_id": f"d{day}-{i}",
                        "created_at": at.isoformat(),
                        "content": f"We decided to use topic{day} for step {i}. I'll send the report tomorrow."})
    return out


class _Counting:
    """Wraps store.messages_in_range: how many queries and rows the summaries asked for."""

    def __init__(self, engine: ConversationEngine) -> None:
        self.queries = self.rows = 0
        inner = engine.store.messages_in_range

        def counted(*args, **kwargs):
            found = inner(*args, **kwargs)
            self.queries, self.rows = self.queries + 1, self.rows + len(found)
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


def test_turn_range_slices_what_it_holds_and_reads_the_union_when_asked_next_to_it(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home", settings=Settings(summarizer="none"), embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", _days(2, 10), index=False)
        counting = _Counting(engine)
        turns = TurnRange(engine.store, "u:continuous")
        turns.prefetch([(1, 5), (6, 12)])
        assert [m.seq for m in turns.between(3, 8)] == [3, 4, 5, 6, 7, 8] and counting.queries == 1
        assert [m.seq for m in turns.between(10, 15)] == [10, 11, 12, 13, 14, 15] and counting.queries == 2
        assert [m.seq for m in turns.between(1, 4)] == [1, 2, 3, 4] and counting.queries == 2  # the union was kept


def test_a_backfill_of_more_than_a_block_reads_each_stretch_of_the_thread_once(tmp_path: Path) -> None:
    """Days and conversations run in time order, a block at a time: each block spans one stretch of
    the thread, read in one query. (Days first, then conversations, read 9,000 turns of this
    3,000-turn thread; at 30k messages, 4.5 million.)"""
    home = tmp_path / "home"
    with ConversationEngine(home, settings=Settings(summarizer="none"), embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", _days(150, 20), index=False)  # 150 days, 300 conversations: two blocks
    with ConversationEngine(home, settings=Settings(summary_workers=0), embedder=None,
                            clock=lambda: datetime(2025, 1, 1, tzinfo=timezone.utc)) as engine:
        reads: list[int] = []
        inner = engine.store.messages_in_range

        def counted(*args, **kwargs):
            found = inner(*args, **kwargs)
            if kwargs.get("include_notes") is False:  # the summaries' reads (not the lexical update's)
                reads.append(len(found))
            return found
        engine.store.messages_in_range = counted  # type: ignore[method-assign]
        report = engine.summarize("u")
        assert (report.day_summaries, report.conversation_summaries) == (150, 300)
        assert len(reads) <= 3 and sum(reads) <= 2 * 3000 + 100  # the stale checks' read, then each block's
