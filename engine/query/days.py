"""Days of a thread as a person reads them: which days have messages, and one day's timeline.

Unlike the Navigator (what an agent reads), a day's timeline keeps the engine's notes ("day summary
updated") and says, for each message, which summary covers it: the web page folds covered
messages under their summary (seed 003, 3.4) and shows the notes folded.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Callable

from engine.models import day_segment_id
from engine.query.navigation_results import DayEntry, DayTimeline, TimelineEntry, message_view
from engine.store.core import Store, continuous_thread_id
from engine.timeutil import utcnow, zone

__all__ = ["DayBrowser", "DayEntry", "DayTimeline", "TimelineEntry"]


class DayBrowser:
    """Read-only: never creates a thread or a day."""

    def __init__(self, store: Store, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.clock = clock

    def today(self, user_id: str) -> date:
        """The user's calendar date now, in their time zone."""
        return self.clock().astimezone(zone(self.store.get_user(user_id).timezone)).date()

    def list_days(self, user_id: str, thread_id: str | None = None) -> list[DayEntry]:
        """The thread's days that have messages, oldest first."""
        thread = self._thread(user_id, thread_id)
        return [DayEntry(s.day_label, s.day_segment_id, s.summary_markdown is not None)
                for s in self.store.timeline.day_segments(thread)]

    def day_timeline(self, user_id: str, day_label: date, thread_id: str | None = None) -> DayTimeline:
        """One day of the thread: its summary and every message, each marked with its covering summary."""
        user = self.store.get_user(user_id)
        thread = self._thread(user_id, thread_id)
        segment = next((s for s in self.store.timeline.day_segments(thread) if s.day_label == day_label), None)
        if segment is None:
            return DayTimeline(thread, day_label, user.timezone, None, None, ())
        rows = self.store.messages_in_range(thread, segment.starts_at_seq, segment.ends_at_seq + 1)
        summaries = self.store.timeline.summaries(thread)
        day_summary = next((s for s in summaries if s.kind == "day" and s.day_label == day_label), None)
        entries = tuple(
            TimelineEntry(message_view(m), m.kind, next((s.summary_id for s in summaries if s.covers(m.seq)), None))
            for m in rows if m.day_label == day_label
        )
        return DayTimeline(thread, day_label, user.timezone, day_segment_id(thread, day_label), day_summary, entries)

    def _thread(self, user_id: str, thread_id: str | None) -> str:
        self.store.get_user(user_id)
        if thread_id is None:
            return continuous_thread_id(user_id)
        return self.store.get_thread(thread_id, user_id=user_id).thread_id
