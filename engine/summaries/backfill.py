"""The day policy over whole threads at once: imports, backfill (`summarize`) and the scheduled close.

Each stale day and ended conversation is summarised once, not every ten messages as the live path
would. All of a user's threads are asked in the same statements and their jobs run in shared
blocks: an import of a chat export holds thousands of short threads, and asking the store thread by
thread cost ~20 statements a thread in catch-up reads alone.
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import date, datetime
from typing import TYPE_CHECKING, Sequence

from engine.models import DaySegment, Summary
from engine.store.across_threads import SummaryEnd
from engine.store.placing import idle_past
from engine.summaries.batch import BLOCK, ThreadTurns, in_time_order
from engine.summaries.ids import day_summary_id
from engine.summaries.retries import SummaryJob
from engine.timeutil import to_utc, zone

if TYPE_CHECKING:
    from engine.summaries.policy import SummaryService

__all__ = ["Backfill"]


def _uncovered(day: DaySegment, done: dict[tuple[str, date], int]) -> tuple[int, int]:
    """The seqs of a day its summary (to `done`'s seq for it, if any) does not cover yet."""
    return max(day.starts_at_seq, done.get((day.thread_id, day.day_label), 0) + 1), day.ends_at_seq


def _any_between(seqs: list[int], lo: int, hi: int) -> bool:
    """Whether sorted `seqs` hold one in [lo, hi]."""
    at = bisect_left(seqs, lo)
    return at < len(seqs) and seqs[at] <= hi


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
            if conversation.ended_at is None and idle_past(last_at, to_utc(now), self.service.ingestor.idle_timeout):
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
        """The days due a summary: job -> (reason, first seq), in the segments' order."""
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
        closed = [s for s, last in candidates if not last or s.day_label < today]
        still_open = [s for s, last in candidates if last and s.day_label >= today]
        due = {key: "closed" for key in self._days_holding_turns(closed, done)}
        due.update((key, "progress") for key in self._days_in_progress(still_open, done, turns))
        return {SummaryJob(user_id, "day", s.day_segment_id, s.thread_id): (due[key], s.starts_at_seq)
                for s, _ in candidates if (key := (s.thread_id, s.day_label)) in due}

    def _days_in_progress(self, days: Sequence[DaySegment], done: dict[tuple[str, date], int], turns: ThreadTurns
                          ) -> list[tuple[str, date]]:
        """The days not over yet that the live rule finds due (every so many turns, or near the
        budget); a block of them reads its turns once."""
        due = []
        for start in range(0, len(days), BLOCK):
            block = days[start:start + BLOCK]
            turns.prefetch([(s.thread_id, *_uncovered(s, done)) for s in block])
            due += [(s.thread_id, s.day_label) for s in block if self.service.is_stale(
                s, turns, every=self.service.settings.day_summary_every, near_budget=True,
                covered_to=done.get((s.thread_id, s.day_label), 0))]
        return due

    def _days_holding_turns(self, days: Sequence[DaySegment], done: dict[tuple[str, date], int]) -> set[tuple[str, date]]:
        """The closed days with a turn their summary does not cover: due a summary (one turn is
        enough once a day is over). Their turns' seqs are read, not the turns."""
        uncovered = {(day.thread_id, day.day_label): _uncovered(day, done) for day in days}
        spans: dict[str, tuple[int, int]] = {}
        for (thread_id, _), (lo, hi) in uncovered.items():
            if lo <= hi:
                known = spans.get(thread_id, (lo, hi))
                spans[thread_id] = (min(known[0], lo), max(known[1], hi))
        seqs = self.store.turn_seqs_in_ranges(spans)
        return {key for key, (lo, hi) in uncovered.items() if _any_between(seqs.get(key[0], []), lo, hi)}

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
