"""The day policy over whole threads at once: imports, backfill (`summarize`) and the scheduled close.

Each stale day and ended conversation is summarised once, not every ten messages as the live path
would. All of a user's threads are asked in the same statements and their jobs run in shared
blocks: an import of a chat export holds thousands of short threads, and asking the store thread by
thread cost ~20 statements a thread in catch-up reads alone.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING, Sequence

from engine.models import DaySegment, Summary
from engine.store.across_threads import SummaryEnd
from engine.summaries.batch import BLOCK, ThreadTurns, in_time_order
from engine.summaries.ids import day_summary_id
from engine.summaries.retries import SummaryJob
from engine.timeutil import to_utc, zone

if TYPE_CHECKING:
    from engine.summaries.policy import SummaryService

__all__ = ["Backfill"]


class Backfill:
    def __init__(self, service: SummaryService) -> None:
        self.service = service
        self.store = service.store

    def end_idle(self, thread_ids: Sequence[str], now: datetime) -> int:
        """The scheduled close of conversations: each thread's open one ends once idle past the
        timeout; how many ended."""
        idle = {}
        for conversation, _ in self.store.timeline.last_conversations(thread_ids).values():
            last_at = to_utc(conversation.last_message_at)
            if conversation.ended_at is None and to_utc(now) - last_at > self.service.ingestor.idle_timeout:
                idle[conversation.conversation_id] = last_at
        if idle:
            self.store.across.end_conversations(idle, "idle")
        return len(idle)

    def close_days(self, user_id: str, thread_ids: Sequence[str], now: datetime, *, since: date | None = None,
                   last_only: bool = False) -> list[Summary]:
        """Summarise each stale day and ended conversation of these threads from `since` on
        (`last_only`, the scheduled close: from each thread's last day, the only one still open).
        A day followed by a later one is closed, the last day too once it is over in the user's
        zone at `now`, else it follows the live rule. A day whose summary came with an import
        (LoCoMo) is kept."""
        if self.service.summarizer is None or not thread_ids:
            return []
        tz = zone(self.store.get_user(user_id).timezone)
        today = to_utc(now).astimezone(tz).date()
        segments = self.store.across.day_segments(thread_ids)
        ends = self.store.across.summary_ends(thread_ids, ["day", "conversation"])
        sinces = {t: days[-1].day_label if last_only else since for t, days in segments.items() if days}
        turns = ThreadTurns(self.store)
        stale = self._stale_days(user_id, segments, ends, sinces, today, turns)
        reasons = {job: reason for job, (reason, _) in stale.items()}
        starts = {job: first_seq for job, (_, first_seq) in stale.items()}  # each job's first seq
        starts.update(self._conversations_due(user_id, list(segments), ends, sinces, tz))
        return self.service.run(in_time_order(starts), turns=turns, queue=False, reasons=reasons)

    def _stale_days(self, user_id: str, segments: dict[str, list[DaySegment]], ends: dict[str, list[SummaryEnd]],
                    sinces: dict[str, date | None], today: date, turns: ThreadTurns) -> dict[SummaryJob, tuple[str, int]]:
        """The days due a summary: job -> (reason, first seq). The stale checks of a block of days
        read their turns once."""
        done = {(thread_id, day): to_seq for thread_id, found in ends.items()
                for summary_id, kind, day, _, to_seq in found
                if kind == "day" and day is not None and summary_id == day_summary_id(thread_id, day)}
        candidates: list[tuple[DaySegment, bool]] = []  # (day, whether it is its thread's last)
        for thread_id, days in segments.items():
            since = sinces[thread_id]
            for position, segment in enumerate(days):
                key = (thread_id, segment.day_label)
                if ((since is None or segment.day_label >= since)
                        and not (segment.summary_markdown and key not in done)  # its summary came with an import
                        and segment.ends_at_seq > done.get(key, 0)):
                    candidates.append((segment, position == len(days) - 1))
        due: dict[SummaryJob, tuple[str, int]] = {}
        every = self.service.settings.day_summary_every
        for start in range(0, len(candidates), BLOCK):
            block = candidates[start:start + BLOCK]
            turns.prefetch([(s.thread_id, max(s.starts_at_seq, done.get((s.thread_id, s.day_label), 0) + 1),
                             s.ends_at_seq) for s, _ in block])
            for segment, last in block:
                closed = not last or segment.day_label < today
                covered = done.get((segment.thread_id, segment.day_label), 0)
                if self.service.is_stale(segment, turns, every=1 if closed else every, near_budget=not closed,
                                         covered_to=covered):
                    job = SummaryJob(user_id, "day", segment.day_segment_id, segment.thread_id)
                    due[job] = ("closed" if closed else "progress", segment.starts_at_seq)
        return due

    def _conversations_due(self, user_id: str, thread_ids: Sequence[str], ends: dict[str, list[SummaryEnd]],
                           sinces: dict[str, date | None], tz) -> dict[SummaryJob, int]:
        """Ended conversations (last message on or after the thread's `since`) whose summary is
        missing or behind, with their first seqs. A day summary's note joins a conversation without
        extending it, so the day summaries written beside them change none."""
        done: dict[str, int] = {}
        for found in ends.values():
            for _, kind, _, conversation_id, to_seq in found:
                if kind == "conversation" and conversation_id is not None:
                    done[conversation_id] = max(to_seq, done.get(conversation_id, 0))
        jobs: dict[SummaryJob, int] = {}
        for thread_id, conversations in self.store.across.ended_conversations(thread_ids).items():
            since = sinces.get(thread_id)
            for conversation in conversations:
                if since is not None and to_utc(conversation.last_message_at).astimezone(tz).date() < since:
                    continue
                if done.get(conversation.conversation_id, 0) < conversation.last_seq:
                    job = SummaryJob(user_id, "conversation", conversation.conversation_id, thread_id)
                    jobs[job] = conversation.first_seq
        return jobs
