"""Summaries in batches: what a batch of day and conversation summaries quotes is read from the
store once (its texts may then be made in worker processes), and what it made is written in one
transaction (one insert of summaries, one update of day segments, one of conversations, one ingest
of the engine's notes). One summary at a time took ~9 queries and a transaction each: at 100k
messages, most of an ingest's time."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Callable, Mapping, Sequence
from zoneinfo import ZoneInfo

from engine.models import Conversation, DaySegment, Message, Summary
from engine.store.core import Store
from engine.summaries.retries import SummaryJob
from engine.summaries.summarizers import NONE_NOTED, section_text
from engine.summaries.text import each_sentence
from engine.summaries.workers import Ask, DistinctAsks, PendingTexts

__all__ = ["TurnRange", "ThreadTurns", "FreshTurns", "Planned", "Made", "PendingSummaries", "conversation_brief",
           "in_time_order", "BLOCK"]

BLOCK = 256  # summaries a transaction: a bulk import of a year writes its summaries in steps


class TurnRange:
    """A thread's turns (no engine notes) over one seq range, read once and sliced. Asked for
    turns next to it, it reads the union when that stays small: a live ingest reads a day's fresh
    turns, then the whole day only when the day's summary is due."""

    def __init__(self, store: Store, thread_id: str) -> None:
        self.store, self.thread_id = store, thread_id
        self.lo, self.hi = 0, -1
        self._turns: list[Message] = []
        self._seqs: list[int] = []

    def prefetch(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Read the turns of these (lo, hi) ranges in one query when they lie close together
        (their union is at most twice what they cover, plus a day or so) and are not in hand."""
        span = _union_to_read(ranges)
        if span is not None and not self.holds(*span):
            self._read(*span)

    def holds(self, lo: int, hi: int) -> bool:
        return self.lo <= lo and hi <= self.hi

    def between(self, lo: int, hi: int) -> list[Message]:
        """Turns with lo <= seq <= hi, in order: sliced from what is in hand, else read (with what
        is in hand when the two overlap closely, so a later ask for the whole day is a slice; a
        union that kept growing made a large batch's reads quadratic)."""
        if not self.holds(lo, hi):
            overlaps = self.lo <= self.hi and lo <= self.hi + 1 and hi >= self.lo - 1
            union = min(lo, self.lo), max(hi, self.hi)
            joined = overlaps and _close_together(union[1] - union[0] + 1, hi - lo + 1)
            self._read(*union) if joined else self._read(lo, hi)
        return self._turns[bisect_left(self._seqs, lo):bisect_right(self._seqs, hi)]

    def hold(self, lo: int, hi: int, turns: list[Message]) -> None:
        """Keep these turns (every turn with lo <= seq <= hi, in order) as what is in hand."""
        self._turns, self._seqs = turns, [m.seq for m in turns]
        self.lo, self.hi = lo, hi

    def _read(self, lo: int, hi: int) -> None:
        self.hold(lo, hi, self.store.messages_in_range(self.thread_id, lo, hi + 1, include_notes=False))


class ThreadTurns:
    """The turn ranges of a user's threads: what a block of summaries quotes from many threads
    (an import of a chat export) is read in one query, one thread's as `TurnRange` reads it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ranges: dict[str, TurnRange] = {}

    def of(self, thread_id: str) -> TurnRange:
        if thread_id not in self._ranges:
            self._ranges[thread_id] = TurnRange(self.store, thread_id)
        return self._ranges[thread_id]

    def between(self, thread_id: str, lo: int, hi: int) -> list[Message]:
        return self.of(thread_id).between(lo, hi)

    def seed(self, thread_id: str, lo: int, batch: Sequence[Message]) -> None:
        """Hold a batch just stored in the thread (every turn of its seqs, in order) and the stored
        turns from `lo` up to it: its summaries then quote the batch's own objects instead of
        reading them back."""
        first = batch[0].seq
        earlier = self.store.messages_in_range(thread_id, lo, first, include_notes=False) if lo < first else []
        self.of(thread_id).hold(min(lo, first), batch[-1].seq, [*earlier, *batch])

    def prefetch(self, ranges: Sequence[tuple[str, int, int]]) -> None:
        """Read what these (thread, lo, hi) ranges ask: each thread's union when it lies close
        together and is not in hand, all threads in one query (one thread: `TurnRange.prefetch`)."""
        by_thread: dict[str, list[tuple[int, int]]] = {}
        for thread_id, lo, hi in ranges:
            by_thread.setdefault(thread_id, []).append((lo, hi))
        if len(by_thread) == 1:
            for thread_id, spans in by_thread.items():
                self.of(thread_id).prefetch(spans)
            return
        wanted = {thread_id: span for thread_id, spans in by_thread.items()
                  if (span := _union_to_read(spans, single_too=True)) is not None and not self.of(thread_id).holds(*span)}
        for thread_id, turns in self.store.messages_in_ranges(wanted, include_notes=False).items():
            self.of(thread_id).hold(*wanted[thread_id], turns)


class FreshTurns:
    """The turns a bulk batch of `engine.ingest` stored, by thread, as the Ingestor placed them
    (`ThreadTurns.seed`): reading 100k of them back as Messages took 1.3-1.8 s of the engine's CPU
    beside the summary workers."""

    def __init__(self) -> None:
        self.by_thread: dict[str, list[Message]] = {}

    def add(self, stored: Sequence[Message]) -> None:
        for message in stored:
            if message.kind == "turn":
                self.by_thread.setdefault(message.thread_id, []).append(message)


def _union_to_read(ranges: Sequence[tuple[int, int]], *, single_too: bool = False) -> tuple[int, int] | None:
    """The one span worth reading ahead for these ranges: their union when they lie close
    together. A single range only `single_too` (with other threads' in one query); alone, it is
    read when `between` asks for it."""
    ranges = [(lo, hi) for lo, hi in ranges if lo <= hi]
    if not ranges or (len(ranges) == 1 and not single_too):
        return None
    lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
    return (lo, hi) if _close_together(hi - lo + 1, sum(b - a + 1 for a, b in ranges)) else None


def in_time_order(starts: Mapping[SummaryJob, int]) -> list[SummaryJob]:
    """Jobs by their first seq, a day before a conversation that starts with it: a block of them
    spans one stretch of a thread (read in one query) and the workers make one block while the
    next is read. `SummaryService.run` keeps each thread's jobs together in this order."""
    return sorted(starts, key=lambda job: (starts[job], job.kind != "day"))


def _close_together(span: int, asked: int) -> bool:
    """Whether one read of `span` seqs is worth it for `asked` of them: at most twice, plus a day or so."""
    return span <= 2 * asked + 1000


@dataclass(frozen=True, slots=True)
class Planned:
    """A block of jobs read and begun: what each quotes, what the write needs, and its texts on
    their way from the workers (None: made in the main process, one job at a time)."""

    user_id: str
    asks: Sequence[tuple[SummaryJob, Ask]]
    distinct: DistinctAsks  # the asks' texts are made once per list of turns
    days: Mapping[str, DaySegment]
    conversations: Mapping[str, Conversation]
    known: Mapping[str, datetime]  # created_at of the summaries the block replaces
    tz: ZoneInfo
    pending: PendingTexts | None  # the distinct asks' texts


@dataclass(frozen=True, slots=True)
class Made:
    """A summary made by a job, and what mirrors it: the day segment's copy or the conversation's
    title and brief."""

    job: SummaryJob
    summary: Summary
    segment_id: str | None = None
    title: str | None = None
    brief: str | None = None


class PendingSummaries:
    """Summary jobs begun (every run of the summary service): the first block is read and, when
    large, its texts are being made in the workers; `finish` writes it and runs the other blocks."""

    def __init__(self, plan: Callable[[Sequence[SummaryJob], ThreadTurns], Planned],
                 finish: Callable[[Planned, bool, Mapping[SummaryJob, str]], list[Summary]], first: Planned | None,
                 rest: Sequence[tuple[list[SummaryJob], ThreadTurns]], queue: bool,
                 reasons: Mapping[SummaryJob, str]) -> None:
        self._plan, self._finish, self.first, self.rest = plan, finish, first, rest
        self.queue, self.reasons = queue, reasons

    @property
    def in_workers(self) -> bool:
        """True while the first block's texts are being made elsewhere (the caller may work meanwhile)."""
        return self.first is not None and self.first.pending is not None

    def finish(self) -> list[Summary]:
        """Every block written, in order. The next block is read (and begun in the workers) before
        the current one is waited for, so the engine reads while the workers summarise; blocks
        never share a job, and a block's write changes nothing the next one reads."""
        written: list[Summary] = []
        current, rest = self.first, list(self.rest)
        self.first, self.rest = None, []
        while current is not None:
            following = self._plan(*rest.pop(0)) if rest else None
            written += self._finish(current, self.queue, self.reasons)
            current = following
        return written


def conversation_brief(tz: ZoneInfo, markdown: str, turns: Sequence[Message]) -> str:
    """Two or three sentences: up to two from the Summary section, then the conversation's span."""
    body = section_text(markdown, "Summary")
    sentences = list(islice((s for s in each_sentence(body) if s != NONE_NOTED.lstrip("- ")), 2))  # the first two
    if not sentences:
        sentences = ["The conversation had no notable content."]
    start, end = turns[0].created_at.astimezone(tz), turns[-1].created_at.astimezone(tz)
    span = (f"It ran for {len(turns)} messages, from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} "
            f"({tz.key}).")
    return " ".join([*(_terminated(s) for s in sentences), span])


def _terminated(sentence: str) -> str:
    return sentence if sentence[-1] in ".!?…。！？" else sentence + "."
