"""Deletion that deletes: a message, a conversation or a user leaves the store, its summaries,
the windows and vectors of its shard and the embedding cache, so no search or reindex brings it back.

Summaries are dropped rather than edited when their span held a deleted message: their text may
quote it. Day summaries of the affected days are cleared for the same reason. The day and ended
conversation summaries dropped are then written again from the messages that remain, so "summaries
first" does not lose a closed day for one deleted turn; nothing else is summarised, and a summarizer
failure queues them for a retry (the deletion has happened). A message whose text an import replaced
(`import --update`) drops the summaries that may quote its old text the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any, Sequence

from engine.errors import InvalidInputError
from engine.facade_edges import guarded_write
from engine.models import Message, Summary
from engine.store.core import Store
from engine.query.summary_index import SummaryIndex, summary_key
from engine.summaries.batch import in_time_order
from engine.summaries.retries import SummaryJob
from indexers.pipeline import IndexPipeline

if TYPE_CHECKING:
    from engine.api import ConversationEngine
    from engine.summaries.policy import SummaryService

__all__ = ["Deleter", "Deleted", "deletion_report"]


def checked_ids(message_ids: object) -> list[str]:
    """`message_ids` when it is a collection of id strings; a bare string (whose characters would be
    taken for ids, deleting other messages) or anything else is refused."""
    if isinstance(message_ids, (str, bytes)) or not isinstance(message_ids, (list, tuple, set, frozenset)) \
            or not all(isinstance(m, str) for m in message_ids):
        raise InvalidInputError(f"message_ids must be a list of message id strings, like ['m1', 'm2'], got "
                                f"{type(message_ids).__name__}")
    return list(message_ids)


def deletion_report(engine: ConversationEngine, user_id: str, *, message_ids: Sequence[str] | None,
                    conversation_id: str | None, all_of_user: bool) -> dict[str, Any]:
    """`ConversationEngine.delete`: exactly one of the three, each under the user's writer lock as the
    facade's writes run (`guarded_write`), the deleter's counts in the report."""
    if sum((message_ids is not None, conversation_id is not None, bool(all_of_user))) != 1:
        raise InvalidInputError("give exactly one of message_ids, conversation_id or all_of_user")
    if all_of_user:
        return {"user_id": user_id, "deleted": "user", "messages_deleted": engine.delete_user(user_id)}
    if conversation_id is not None:
        with guarded_write(engine.locks.user(user_id)):
            deleted = engine.deleter.delete_conversations(user_id, [conversation_id])
        return {"user_id": user_id, "deleted": "conversation", "conversation_id": conversation_id, **deleted.counts()}
    engine.store.get_user(user_id)  # an unknown user is an error, not "0 deleted"
    wanted = checked_ids(message_ids)  # before list(): a string would become its characters
    with guarded_write(engine.locks.user(user_id)):  # what is found is what this call deletes: another's waits
        found = {m.message_id for m in engine.store.messages_by_ids(wanted, user_id=user_id)}
        deleted = engine.deleter.delete_messages(user_id, wanted)
    return {"user_id": user_id, "deleted": "messages", "message_ids": sorted(found),
            "not_found": sorted(set(wanted) - found), **deleted.counts()}


@dataclass(frozen=True, slots=True)
class Deleted:
    """What a deletion took: its messages, the summaries whose span held one of them (their text may
    quote it), and the day and conversation summaries written again from the messages that remain."""

    messages: int
    summaries_deleted: int = 0
    summaries_rewritten: int = 0

    def counts(self) -> dict[str, int]:
        return {"messages_deleted": self.messages, "summaries_deleted": self.summaries_deleted,
                "summaries_rewritten": self.summaries_rewritten}


@dataclass(frozen=True, slots=True)
class Dropped:
    """What a deletion in one thread took from its summaries: the summaries deleted, and the days
    and conversations that had a summary (to be written again)."""

    thread_id: str
    summaries: tuple[Summary, ...]
    days: frozenset[date]
    conversations: frozenset[str]


class Deleter:
    def __init__(self, store: Store, pipeline: IndexPipeline, summary_index: SummaryIndex,
                 summaries: SummaryService | None = None) -> None:
        self.store = store
        self.pipeline = pipeline
        self.summary_index = summary_index
        self.summaries = summaries  # rebuilds what a deletion dropped (None: nothing is rebuilt)

    def delete_messages(self, user_id: str, message_ids: Sequence[str]) -> Deleted:
        """Delete the user's messages among `message_ids` (another user's ids are ignored)."""
        self.store.get_user(user_id)  # an unknown user (or not a user id at all) is an error, not "0 deleted"
        messages = self.store.messages_by_ids(checked_ids(message_ids), user_id=user_id)
        if messages:  # loaded and caught up while the store still holds them, so its save drops their windows
            self.pipeline.shard(user_id)
        by_thread: dict[str, list[Message]] = {}
        for m in messages:
            by_thread.setdefault(m.thread_id, []).append(m)
        dropped = [self._delete_in_thread(user_id, thread_id, doomed) for thread_id, doomed in by_thread.items()]
        if messages:
            self.forget_unused_vectors(user_id)
        self.summary_index.forget(user_id)
        rewritten = self._summarise_again(user_id, dropped)
        return Deleted(len(messages), sum(len(d.summaries) for d in dropped), rewritten)

    def text_replaced(self, user_id: str, thread_id: str, seqs: set[int]) -> None:
        """Messages whose text an import replaced (same seqs): the summaries that may quote the old
        text go (the import's backfill writes them again), their windows are re-indexed."""
        lo, hi = min(seqs), max(seqs)
        changed = [m for m in self.store.messages_in_range(thread_id, lo, hi + 1) if m.seq in seqs]
        with self.store.transaction():
            dropped = self._drop_summaries(thread_id, changed)
        self._forget_summary_vectors(user_id, dropped.summaries)
        self.pipeline.rewrite_messages(user_id, thread_id, seqs)

    def _summarise_again(self, user_id: str, dropped: Sequence[Dropped]) -> int:
        """The days (still holding turns) and ended conversations whose summary went get one again,
        and their notes and vectors; a summarizer failure is queued for a retry, not raised. Returns
        how many summaries were written."""
        service = self.summaries
        if service is None or service.summarizer is None or not any(d.days or d.conversations for d in dropped):
            return 0
        threads = [d.thread_id for d in dropped]
        segments = self.store.across.day_segments(threads)
        ended = self.store.across.ended_conversations(threads)
        starts: dict[SummaryJob, int] = {}
        for d in dropped:
            starts.update((SummaryJob(user_id, "day", s.day_segment_id, d.thread_id), s.starts_at_seq)
                          for s in segments.get(d.thread_id, []) if s.day_label in d.days)
            starts.update((SummaryJob(user_id, "conversation", c.conversation_id, d.thread_id), c.first_seq)
                          for c in ended.get(d.thread_id, []) if c.conversation_id in d.conversations)
        written = service.run(in_time_order(starts), queue=True, reasons=dict.fromkeys(starts, "deletion"))
        if written:
            self.pipeline.update_lexical(user_id)  # a day summary leaves a note, which is a message
            self.summary_index.embed_written(user_id, written)  # these only: a backlog is the background step's
        return len(written)

    def forget_unused_vectors(self, user_id: str) -> None:
        """Drop cached vectors no live window, message line or summary uses: a window re-chunked
        or a summary rewritten since it was embedded left its old text's vector behind, and it
        may hold deleted words. (Also after a reindex, which may re-chunk.)"""
        if self.pipeline.cache is not None:
            self.pipeline.cache.keep_only(user_id, self.pipeline.live_hashes(user_id))
        if self.summary_index.cache is not None:
            self.summary_index.cache.keep_only(
                user_id, [summary_key(s) for s in self.store.timeline.summaries_of_user(user_id)])

    def delete_conversations(self, user_id: str, conversation_ids: Sequence[str]) -> Deleted:
        """Their messages in one deletion (a day they share is summarised again once), then the
        conversations; an unknown id is an error before anything goes."""
        for conversation_id in conversation_ids:
            self.store.timeline.get_conversation(conversation_id, user_id=user_id)
        ids = [m for c in conversation_ids for m in self.store.message_ids_of_conversation(user_id, c)]
        deleted = self.delete_messages(user_id, ids)
        for conversation_id in conversation_ids:  # refresh_conversation_bounds dropped those with turns; an empty one
            self.store.timeline.delete_conversation(conversation_id, user_id=user_id)
        return deleted

    def delete_user(self, user_id: str) -> int:
        """Everything of the user: rows of every table, the shard directory, the cache."""
        self.store.get_user(user_id)
        count = self.store.delete_user(user_id)
        self.pipeline.forget_user(user_id)
        self.summary_index.forget(user_id)
        if self.summary_index.cache is not None:
            self.summary_index.cache.deleted_with_user(user_id)
        return count

    def _delete_in_thread(self, user_id: str, thread_id: str, doomed: list[Message]) -> Dropped:
        with self.store.transaction():
            dropped = self._drop_summaries(thread_id, doomed)
            self.store.delete_messages([m.message_id for m in doomed])
            self.store.timeline.refresh_day_bounds(thread_id)
            self.store.timeline.refresh_conversation_bounds(thread_id)
        self._forget_summary_vectors(user_id, dropped.summaries)
        self.pipeline.forget_messages(user_id, thread_id, {m.seq for m in doomed})
        return dropped

    def _drop_summaries(self, thread_id: str, messages: Sequence[Message]) -> Dropped:
        """Inside the caller's transaction: the summaries whose span holds one of `messages` go, and
        their days' summaries and their conversations' titles and briefs are cleared (each may quote
        them). Returns what went: those summaries, and the days and conversations that had one."""
        seqs = sorted(m.seq for m in messages)
        days, conversations = {m.day_label for m in messages}, {m.conversation_id for m in messages}
        stored = self.store.timeline.summaries(thread_id)
        touched = [s for s in stored if any(s.covers(q) for q in seqs)]
        mine = [*touched, *(s for s in stored if s.day_label in days or s.conversation_id in conversations)]
        self.store.timeline.delete_summaries_touching(thread_id, seqs)
        self.store.timeline.clear_day_summaries(thread_id, sorted(days))
        self.store.timeline.clear_conversation_summaries(sorted(conversations))
        return Dropped(thread_id, tuple(touched), frozenset(s.day_label for s in mine if s.kind == "day" and s.day_label),
                       frozenset(s.conversation_id for s in mine if s.kind == "conversation" and s.conversation_id))

    def _forget_summary_vectors(self, user_id: str, dropped: Sequence[Summary]) -> None:
        if self.summary_index.cache is not None and dropped:
            self.summary_index.cache.forget(user_id, [summary_key(s) for s in dropped])
