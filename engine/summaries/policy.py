"""Summaries of a thread: message ranges on request, days by policy, conversations when they end.

Day policy: a day's summary is rewritten over the whole day so far
- when the day closes: a later day opens, or the scheduled close (`finalize`) finds the day over
  in the user's time zone;
- within the day, once `day_summary_every` turns arrived since its last update, or once those
  unsummarised turns near `day_token_budget` tokens (so the raw text a prompt would need stays bounded).
Ended conversations get a title and summary. The live path applies it per batch (`after_ingest`);
bulk paths (imports, backfill) apply the same rules once per day and conversation after the whole
batch, over all of a user's threads at once (`backfill.Backfill`), so a 10,000-message import
summarises each day once, not every ten messages.
The policy keeps no counters: "since its last update" is the day's turns with seq > the stored day
summary's to_seq, so it survives restarts and concurrent processes. Engine notes (kind="note") are
never summarised and never counted.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime
from typing import Callable, Iterator, Mapping, Sequence
from zoneinfo import ZoneInfo

from engine.config import Settings
from engine.errors import ConvsearchError, InvalidInputError
from engine.store.ingest import Ingestor
from engine.models import (Conversation, ConversationEnd, DaySegment, IngestResult, Message, Summary, SummaryKind, Thread,
                           day_segment_id)
from engine.store.core import Store
from engine.summaries.summarizers import Summarizer, SummarizerError, clamp_title
from engine.summaries.backfill import Backfill
from engine.summaries.batch import (BLOCK, FreshTurns, Made, PendingSummaries, Planned, ThreadTurns, conversation_brief,
                                   in_time_order)
from engine.summaries.ids import conversation_summary_id, day_summary_id, range_summary_id
from engine.summaries.retries import RetryQueue, SummaryJob
from engine.summaries.workers import (BULK_MESSAGES, Ask, SummaryWorkers, Texts, default_workers, distinct_asks, lane_of,
                                       texts_of)
from engine.timeutil import utcnow, zone
from engine.validation import seq_range
from indexers.wordpieces import WordPieceCounter

__all__ = [
    "SummaryService",
    "SummarizeReport",
    "DAY_NOTE_PREFIX",
    "NEAR_BUDGET",
    "day_summary_id",
    "conversation_summary_id",
    "range_summary_id",
]

log = logging.getLogger("convsearch.summaries")
log.addHandler(logging.NullHandler())

DAY_NOTE_PREFIX = "day summary updated: "
NEAR_BUDGET = 0.9  # "nears the budget": update before the raw day text overflows it


@dataclass(frozen=True, slots=True)
class SummarizeReport:
    """What a backfill or scheduled close did."""

    users: tuple[str, ...]
    day_summaries: int = 0
    conversation_summaries: int = 0
    conversations_ended: int = 0

    @classmethod
    def of(cls, users: Sequence[str], summaries: Sequence[Summary], ended: int = 0) -> "SummarizeReport":
        kinds = [s.kind for s in summaries]
        return cls(tuple(users), kinds.count("day"), kinds.count("conversation"), ended)


# The turns `storing` keeps, per request thread (the Ingestor's one callback serves every user).
_FRESH: ContextVar[FreshTurns | None] = ContextVar("convsearch_fresh_turns", default=None)


class SummaryService:
    def __init__(self, store: Store, summarizer: Summarizer | None, settings: Settings, *,
                 clock: Callable[[], datetime] = utcnow, ingestor: Ingestor | None = None,
                 counter: WordPieceCounter | None = None) -> None:
        self.store = store
        self.summarizer = summarizer
        self.settings = settings
        self.clock = clock
        self.ingestor = ingestor or Ingestor.of(store, settings, clock)
        self.counter = counter or WordPieceCounter()
        self.retries = RetryQueue()
        workers = settings.summary_workers
        self.workers = SummaryWorkers(default_workers() if workers is None else workers)
        self.backfill = Backfill(self)  # imports, backfill and the scheduled close: many threads at once
        self._bulk_stores = 0  # bulk batches being stored (`storing`)
        self.ingestor.on_stored = self._stored

    def close(self) -> None:
        """Stop the summary workers (started only by a large block)."""
        self.workers.close()

    @contextmanager
    def storing(self, messages: int | None) -> Iterator[FreshTurns | None]:
        """A batch of `messages` (None: a file, size unknown) is being stored: a bulk one starts the
        summary workers now, and they read its turns ahead as they are stored, so they are ready
        when its summaries are (`SummaryWorkers.read_ahead`). A bulk batch of known size also keeps
        its turns for `start_after_ingest` (an import's days are summarised later, from the store)."""
        if self.summarizer is None or (messages is not None and messages < BULK_MESSAGES):
            yield None
            return
        self.workers.warm(self.summarizer)
        self._bulk_stores += 1
        fresh = FreshTurns() if messages is not None else None
        keeping = _FRESH.set(fresh)  # per request thread: two users' batches never mix
        try:
            yield fresh
        finally:
            _FRESH.reset(keeping)
            self._bulk_stores -= 1

    def _stored(self, messages: Sequence[Message]) -> None:
        """The Ingestor's word on what it stored: a bulk store's turns are read ahead, and kept."""
        if self._bulk_stores and self.summarizer is not None:
            self.workers.read_ahead(self.summarizer, messages)
            fresh = _FRESH.get()
            if fresh is not None:
                fresh.add(messages)

    # On request --------------------------------------------------------------------------------
    def summarize_message_range(self, user_id: str, start_seq: int, end_seq: int,
                                thread_id: str | None = None) -> Summary:
        """Summarise turns with start_seq <= seq < end_seq; stored as kind="range" (to_seq = last seq included)."""
        _check_range(start_seq, end_seq)
        thread = self._thread(user_id, thread_id)
        turns = self.store.messages_in_range(thread.thread_id, start_seq, end_seq, include_notes=False)
        if not turns:
            raise InvalidInputError(
                f"no messages with {start_seq} <= seq < {end_seq} in thread {thread.thread_id!r}: "
                "seqs start at 1 and end_seq is exclusive"
            )
        summarizer = self._require()
        markdown = summarizer.summarize(turns)
        title = clamp_title(summarizer.title(turns))
        summary = self._build(range_summary_id(thread.thread_id, turns[0].seq, turns[-1].seq), user_id,
                              "range", turns, markdown, title=title)
        self.store.timeline.upsert_summary(summary)
        return summary

    # Day policy --------------------------------------------------------------------------------
    def after_ingest(self, user_id: str, result: IngestResult) -> list[Summary]:
        """Apply the day policy and summarise ended conversations; returns the summaries written."""
        return self.start_after_ingest(user_id, result).finish()

    def start_after_ingest(self, user_id: str, result: IngestResult, fresh: FreshTurns | None = None) -> PendingSummaries:
        """`after_ingest` begun: a large batch's texts are made in the workers while the caller
        does other work (indexing the batch); `finish` writes them. `fresh`: the batch's turns, as
        `storing` kept them."""
        if self.summarizer is None or not result.inserted:
            return PendingSummaries(self._plan, self._finish, None, [], True, {})
        # days only open at the thread's end (time order): the day before each opened one is among these
        segments = self.store.timeline.day_segments(result.thread_id, last=len(result.opened_days) + 1)
        checks: list[tuple[DaySegment, int, bool]] = []  # (day, every, near_budget)
        for opened in sorted(result.opened_days):
            before = [s for s in segments if s.day_label < opened]
            if before:
                checks.append((before[-1], 1, False))
        if segments:
            checks.append((segments[-1], self.settings.day_summary_every, True))
        days = [segment for segment, _, _ in checks]
        turns = ThreadTurns(self.store)
        batch = fresh.by_thread.get(result.thread_id) if fresh is not None else None
        if batch:
            self._seed(turns, user_id, result, days, batch)
        covered = self._covered(user_id, result.thread_id, days)
        turns.prefetch([(result.thread_id, day.starts_at_seq, day.ends_at_seq) for day in days])
        starts = {SummaryJob(user_id, "day", segment.day_segment_id, result.thread_id): segment.starts_at_seq
                  for segment, every, near in checks
                  if self.is_stale(segment, turns, every=every, near_budget=near, covered_to=covered[segment.day_label])}
        ended = [SummaryJob(user_id, "conversation", c, result.thread_id) for c in result.ended_conversations]
        if len(starts) + len(ended) <= BLOCK:  # one block (the live path): no need to read where each starts
            return self._start([*self.retries.due(user_id), *starts, *ended], turns=turns)
        firsts = self.store.timeline.conversations_by_id(result.ended_conversations, user_id=user_id)
        starts.update({job: firsts[job.target].first_seq if job.target in firsts else 0 for job in ended})
        return self._start([*self.retries.due(user_id), *in_time_order(starts)], turns=turns)

    def _seed(self, turns: ThreadTurns, user_id: str, result: IngestResult, days: Sequence[DaySegment],
              batch: Sequence[Message]) -> None:
        """The batch's turns in hand, with the stored ones its summaries quote too: of the days it
        checks, and of the conversation open before it when the batch ended it (the first ended)."""
        first_ended = self.store.timeline.conversations_by_id(result.ended_conversations[:1], user_id=user_id)
        begins = [day.starts_at_seq for day in days] + [c.first_seq for c in first_ended.values()]
        turns.seed(result.thread_id, min(begins, default=batch[0].seq), batch)

    def retry_failed(self, user_id: str | None = None) -> list[Summary]:
        """Retry every summary (of one user, or all) whose summarizer call failed (the server's background
        step calls this a user at a time, under that user's lock)."""
        return self.run(self.retries.due(user_id)) if self.summarizer is not None else []

    def users_to_retry(self) -> list[str]:
        return sorted({job.user_id for job in self.retries.due()})

    def retry_status(self) -> dict[str, object]:
        return self.retries.status()

    def run(self, jobs: Sequence[SummaryJob], *, turns: ThreadTurns | None = None, queue: bool = True,
            reasons: Mapping[SummaryJob, str] | None = None) -> list[Summary]:
        """Run the jobs (of one user) a block at a time (one read, one write each). A summarizer
        failure queues the job for a retry instead of failing the caller (`queue`), else it is
        raised once what the block made is written."""
        return self._start(jobs, turns=turns, queue=queue, reasons=reasons).finish()

    def _start(self, jobs: Sequence[SummaryJob], *, turns: ThreadTurns | None = None, queue: bool = True,
               reasons: Mapping[SummaryJob, str] | None = None) -> PendingSummaries:
        """`run` begun: the first block is read and its texts start in the workers (when large).
        A thread's jobs stay together in their order; a block may hold several short threads of
        one user (the retries of a server's background step are of many users)."""
        by_user: dict[str, dict[str, list[SummaryJob]]] = {}
        for job in dict.fromkeys(jobs):
            by_user.setdefault(job.user_id, {}).setdefault(job.thread_id, []).append(job)
        turns = turns or ThreadTurns(self.store)
        blocks: list[tuple[list[SummaryJob], ThreadTurns]] = []
        for threads in by_user.values():
            mine = [job for thread_jobs in threads.values() for job in thread_jobs]
            blocks += [(mine[start:start + BLOCK], turns) for start in range(0, len(mine), BLOCK)]
        first = self._plan(*blocks[0]) if blocks else None
        return PendingSummaries(self._plan, self._finish, first, blocks[1:], queue, reasons or {})

    def _plan(self, jobs: Sequence[SummaryJob], turns: ThreadTurns) -> Planned:
        """A block's reads, and its texts started in the workers when it is large."""
        user_id, timeline = jobs[0].user_id, self.store.timeline
        days = timeline.day_segments_by_id([j.target for j in jobs if j.kind == "day"])
        conversations = timeline.conversations_by_id([j.target for j in jobs if j.kind == "conversation"],
                                                     user_id=user_id)
        wanted = [days[j.target] for j in jobs if j.kind == "day" and j.target in days]
        turns.prefetch([(d.thread_id, d.starts_at_seq, d.ends_at_seq) for d in wanted]
                       + [(c.thread_id, c.first_seq, c.last_seq) for c in conversations.values()])
        ids = [day_summary_id(d.thread_id, d.day_label) for d in wanted] + [
            conversation_summary_id(c.thread_id, c.conversation_id) for c in conversations.values()]
        known = {i: created for i, (_, created) in timeline.summary_spans(ids, user_id=user_id).items()}
        asks = {job: self._ask(job, days, conversations, turns) for job in jobs}
        for job in [job for job, ask in asks.items() if ask is None]:
            self.retries.succeeded(job)  # nothing to write: its day or conversation is gone or empty
        wanted_asks = [(job, ask) for job, ask in asks.items() if ask is not None]
        distinct = distinct_asks([ask for _, ask in wanted_asks])
        pending = self.workers.start(self._require(), distinct.asks)
        return Planned(user_id, wanted_asks, distinct, days, conversations, known,
                       zone(self.store.get_user(user_id).timezone), pending)

    def _finish(self, plan: Planned, queue: bool, reasons: Mapping[SummaryJob, str]) -> list[Summary]:
        """A block's texts (from the workers, or made here one job at a time) written in one transaction."""
        summarizer = self._require()
        in_workers = plan.pending.result() if plan.pending is not None else None
        made: list[Made] = []
        by_turns: dict[int, Texts] = {}  # a distinct ask's texts, made here once
        for (job, ask), at in zip(plan.asks, plan.distinct.of):
            try:
                if at not in by_turns:
                    by_turns[at] = in_workers[at] if in_workers is not None else texts_of(summarizer, plan.distinct.asks[at])
                texts = by_turns[at] if ask.titled else Texts(by_turns[at].markdown, None)
            except SummarizerError as exc:
                if not queue:
                    self._write(plan.user_id, made, reasons)
                    raise
                self.retries.failed(job, exc.message)
                log.warning("summary.failed kind=%s target=%s retry=queued reason=%r", job.kind, job.target, exc.message)
                continue
            made.append(self._made(job, ask, texts, plan.days, plan.conversations, plan.known, plan.tz))
        self._write(plan.user_id, made, reasons)
        return [m.summary for m in made]

    def _ask(self, job: SummaryJob, days: Mapping[str, DaySegment], conversations: Mapping[str, Conversation],
             turns: ThreadTurns) -> Ask | None:
        """What a job's summary quotes; None when its day or conversation is gone or holds no turns."""
        if job.kind == "day":
            segment = days.get(job.target)
            quoted = turns.between(segment.thread_id, segment.starts_at_seq, segment.ends_at_seq) if segment else []
            return Ask(quoted, False, lane_of(quoted[0].day_label)) if quoted else None
        conversation = conversations.get(job.target)
        quoted = [] if conversation is None else [
            m for m in turns.between(conversation.thread_id, conversation.first_seq, conversation.last_seq)
            if m.conversation_id == job.target]
        if conversation is None or not quoted:
            return None
        return Ask(quoted, not conversation.title, lane_of(quoted[0].day_label))  # keep a title given at import

    def _made(self, job: SummaryJob, ask: Ask, texts: Texts, days: Mapping[str, DaySegment],
              conversations: Mapping[str, Conversation], known: Mapping[str, datetime], tz: ZoneInfo) -> Made:
        """The summary a job made from its texts (the summarizer ran outside any transaction: an LLM may be slow)."""
        quoted = ask.turns
        if job.kind == "day":
            segment = days[job.target]
            label = segment.day_label
            summary = self._build(day_summary_id(job.thread_id, label), job.user_id, "day", quoted, texts.markdown,
                                  title=f"Day summary {label.isoformat()}", day_label=label, known=known)
            return Made(job, summary, segment_id=segment.day_segment_id)
        title = conversations[job.target].title or clamp_title(texts.title or "")
        summary = self._build(conversation_summary_id(job.thread_id, job.target), job.user_id, "conversation", quoted,
                              texts.markdown, title=title, conversation_id=job.target, known=known)
        return Made(job, summary, title=title, brief=conversation_brief(tz, texts.markdown, quoted))

    def _write(self, user_id: str, made: Sequence[Made], reasons: Mapping[SummaryJob, str]) -> None:
        """Everything a block made in one transaction; each day summary leaves a note in its thread."""
        if not made:
            return
        timeline = self.store.timeline
        day_rows = [(m.segment_id, m.summary.markdown, m.summary.updated_at) for m in made if m.segment_id is not None]
        notes: dict[str, list[str]] = {}
        for m in made:
            if m.segment_id is not None and m.summary.day_label is not None:
                notes.setdefault(m.summary.thread_id, []).append(DAY_NOTE_PREFIX + m.summary.day_label.isoformat())
        with self.store.transaction():
            timeline.upsert_summaries([m.summary for m in made])
            timeline.set_day_summaries(day_rows)
            timeline.set_conversation_summaries([(m.job.target, m.title, m.brief) for m in made
                                                 if m.title is not None and m.brief is not None])
            self.ingestor.add_notes(user_id, notes)  # stamped at each thread's last message: time order holds
        for m in made:
            self.retries.succeeded(m.job)
            s = m.summary
            if m.segment_id is not None:
                log.info("summary.day_updated thread_id=%s day=%s reason=%s from_seq=%d to_seq=%d messages=%d",
                         s.thread_id, s.day_label, reasons.get(m.job, "scheduled"), s.from_seq, s.to_seq,
                         s.message_count)
            else:
                log.info("summary.conversation_updated conversation_id=%s messages=%d", m.job.target, s.message_count)

    def _covered(self, user_id: str, thread_id: str, segments: Sequence[DaySegment]) -> dict[date, int]:
        """Each day's summary's to_seq (0: none), in one query."""
        spans = self.store.timeline.summary_spans([day_summary_id(thread_id, s.day_label) for s in segments],
                                                  user_id=user_id)
        return {s.day_label: spans.get(day_summary_id(thread_id, s.day_label), (0, None))[0] for s in segments}

    def is_stale(self, segment: DaySegment, turns: ThreadTurns, *, every: int, near_budget: bool,
                 covered_to: int) -> bool:
        """True when the day has at least `every` turns its summary (to `covered_to`, 0: none) does
        not cover, or they near the budget."""
        if segment.ends_at_seq <= covered_to:
            return False
        fresh = turns.between(segment.thread_id, max(segment.starts_at_seq, covered_to + 1), segment.ends_at_seq)
        if len(fresh) >= every:
            return True
        if not near_budget or not fresh:
            return False
        threshold = int(NEAR_BUDGET * self.settings.day_token_budget)
        return self.counter.count_upto("\n".join(m.content for m in fresh), threshold) >= threshold

    def regenerate_day(self, user_id: str, day_label: date, thread_id: str | None = None) -> Summary:
        """Rewrite one day's summary now, whatever the policy says (the user asked for it)."""
        thread = self._thread(user_id, thread_id)
        segment = self.store.timeline.get_day_segment(day_segment_id(thread.thread_id, day_label), user_id=user_id)
        if not self.store.messages_in_range(thread.thread_id, segment.starts_at_seq, segment.ends_at_seq + 1,
                                            limit=1, include_notes=False):
            raise InvalidInputError(f"day {day_label.isoformat()} of thread {thread.thread_id!r} holds only engine "
                                    "notes: there is nothing to summarise")
        self._require()
        job = SummaryJob(user_id, "day", segment.day_segment_id, thread.thread_id)
        return self.run([job], queue=False, reasons={job: "regenerate"})[0]

    # Conversations -----------------------------------------------------------------------------
    def end_conversation(self, user_id: str, thread_id: str | None = None, reason: str = "explicit") -> ConversationEnd:
        """Explicitly end the thread's open conversation and summarise it."""
        thread = self._thread(user_id, thread_id)
        ended = self.ingestor.end_conversation(thread.thread_id, reason)
        if ended is None or self.summarizer is None:
            return ConversationEnd(ended)
        written = self.run([SummaryJob(user_id, "conversation", ended, thread.thread_id)])
        return ConversationEnd(ended, written[0] if written else None)

    # Helpers -----------------------------------------------------------------------------------
    def _require(self) -> Summarizer:
        if self.summarizer is None:
            raise ConvsearchError("summaries are off (CONVSEARCH_SUMMARIZER=none): set it to 'extractive' or 'openai'")
        return self.summarizer

    def _thread(self, user_id: str, thread_id: str | None) -> Thread:
        if thread_id is None:
            return self.store.continuous_thread(user_id)
        return self.store.get_thread(thread_id, user_id=user_id)

    def _build(self, summary_id: str, user_id: str, kind: SummaryKind, turns: Sequence[Message], markdown: str, *,
               title: str | None, day_label: date | None = None, conversation_id: str | None = None,
               known: Mapping[str, datetime] | None = None) -> Summary:
        """`known`: created_at of the summaries a batch replaces (read once for the batch)."""
        now = self.clock()
        if known is None:
            existing = self.store.timeline.get_summary(summary_id, user_id=user_id)
            known = {summary_id: existing.created_at} if existing else {}
        return Summary(
            summary_id=summary_id, thread_id=turns[0].thread_id, user_id=user_id, kind=kind,
            from_seq=turns[0].seq, to_seq=turns[-1].seq, markdown=markdown,
            created_at=known.get(summary_id, now), updated_at=now, day_label=day_label,
            conversation_id=conversation_id, title=title, message_count=len(turns),
        )


def _check_range(start_seq: int, end_seq: int) -> None:
    seq_range(start_seq, end_seq)
