"""Deletion that deletes: a message, a conversation or a user leaves the store, its summaries,
the windows and vectors of its shard and the embedding cache, so no search or reindex brings it back.

Summaries are dropped rather than edited when their span held a deleted message: their text may
quote it. Day summaries of the affected days are cleared for the same reason, then rebuilt from the
messages that remain (the backfill's policy from the earliest affected day), so "summaries first"
does not lose a closed day for one deleted turn. A message whose text an import replaced
(`import --update`) drops the summaries that may quote its old text the same way.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from engine.errors import InvalidInputError
from engine.models import Message, Summary
from engine.store.core import Store
from engine.query.summary_index import SummaryIndex, summary_key
from indexers.pipeline import IndexPipeline

if TYPE_CHECKING:
    from engine.api import ConversationEngine
    from engine.summaries.policy import SummaryService

__all__ = ["Deleter", "deletion_report"]


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
    """`ConversationEngine.delete`: exactly one of the three, through the facade's locked calls."""
    if sum((message_ids is not None, conversation_id is not None, bool(all_of_user))) != 1:
        raise InvalidInputError("give exactly one of message_ids, conversation_id or all_of_user")
    if all_of_user:
        return {"user_id": user_id, "deleted": "user", "messages_deleted": engine.delete_user(user_id)}
    if conversation_id is not None:
        count = engine.delete_conversation(user_id, conversation_id)
        return {"user_id": user_id, "deleted": "conversation", "conversation_id": conversation_id,
                "messages_deleted": count}
    engine.store.get_user(user_id)  # an unknown user is an error, not "0 deleted"
    wanted = checked_ids(message_ids)  # before list(): a string would become its characters
    found = {m.message_id for m in engine.store.messages_by_ids(wanted, user_id=user_id)}
    count = engine.delete_messages(user_id, wanted)
    return {"user_id": user_id, "deleted": "messages", "message_ids": sorted(found),
            "not_found": sorted(set(wanted) - found), "messages_deleted": count}


class Deleter:
    def __init__(self, store: Store, pipeline: IndexPipeline, summary_index: SummaryIndex,
                 summaries: SummaryService | None = None) -> None:
        self.store = store
        self.pipeline = pipeline
        self.summary_index = summary_index
        self.summaries = summaries  # rebuilds what a deletion dropped (None: nothing is rebuilt)

    def delete_messages(self, user_id: str, message_ids: Sequence[str]) -> int:
        """Delete the user's messages among `message_ids` (another user's ids are ignored)."""
        self.store.get_user(user_id)  # an unknown user (or not a user id at all) is an error, not "0 deleted"
        messages = self.store.messages_by_ids(checked_ids(message_ids), user_id=user_id)
        if messages:  # loaded and caught up while the store still holds them, so its save drops their windows
            self.pipeline.shard(user_id)
        by_thread: dict[str, list[Message]] = {}
        for m in messages:
            by_thread.setdefault(m.thread_id, []).append(m)
        dropped = [thread_id for thread_id, doomed in by_thread.items() if self._delete_in_thread(user_id, thread_id, doomed)]
        if messages:
            self.forget_unused_vectors(user_id)
        self.summary_index.forget(user_id)
        self._summarise_again(user_id, {t: min(m.day_label for m in by_thread[t]) for t in dropped})
        return len(messages)

    def text_replaced(self, user_id: str, thread_id: str, seqs: set[int]) -> None:
        """Messages whose text an import replaced (same seqs): the summaries that may quote the old
        text go (the import's backfill writes them again), their windows are re-indexed."""
        lo, hi = min(seqs), max(seqs)
        changed = [m for m in self.store.messages_in_range(thread_id, lo, hi + 1) if m.seq in seqs]
        with self.store.transaction():
            touched, _ = self._drop_summaries(thread_id, changed)
        self._forget_summary_vectors(user_id, touched)
        self.pipeline.rewrite_messages(user_id, thread_id, seqs)

    def _summarise_again(self, user_id: str, since: Mapping[str, date]) -> None:
        """Each thread's days and ended conversations from `since` (its earliest affected day) that
        lack an up-to-date summary get one, as a backfill would; their notes and vectors follow."""
        service = self.summaries
        if service is None or service.summarizer is None:
            return
        written = [s for thread_id, day in since.items()
                   for s in service.backfill.close_days(user_id, [thread_id], service.clock(), since=day)]
        if written:
            self.pipeline.update_lexical(user_id)  # a day summary leaves a note, which is a message
            self.summary_index.embed_written(user_id, written)  # these only: a backlog is the background step's

    def forget_unused_vectors(self, user_id: str) -> None:
        """Drop cached vectors no live window, message line or summary uses: a window re-chunked
        or a summary rewritten since it was embedded left its old text's vector behind, and it
        may hold deleted words. (Also after a reindex, which may re-chunk.)"""
        if self.pipeline.cache is not None:
            self.pipeline.cache.keep_only(user_id, self.pipeline.live_hashes(user_id))
        if self.summary_index.cache is not None:
            self.summary_index.cache.keep_only(
                user_id, [summary_key(s) for s in self.store.timeline.summaries_of_user(user_id)])

    def delete_conversation(self, user_id: str, conversation_id: str) -> int:
        conversation = self.store.timeline.get_conversation(conversation_id, user_id=user_id)
        count = self.delete_messages(user_id, self.store.message_ids_of_conversation(user_id, conversation_id))
        # refresh_conversation_bounds already dropped it if it had turns; this covers an empty one
        self.store.timeline.delete_conversation(conversation.conversation_id, user_id=user_id)
        return count

    def delete_user(self, user_id: str) -> int:
        """Everything of the user: rows of every table, the shard directory, the cache."""
        self.store.get_user(user_id)
        count = self.store.delete_user(user_id)
        self.pipeline.forget_user(user_id)
        self.summary_index.forget(user_id)
        if self.summary_index.cache is not None:
            self.summary_index.cache.deleted_with_user(user_id)
        return count

    def _delete_in_thread(self, user_id: str, thread_id: str, doomed: list[Message]) -> bool:
        """Whether a summary went with them (see _drop_summaries)."""
        with self.store.transaction():
            touched, dropped = self._drop_summaries(thread_id, doomed)
            self.store.delete_messages([m.message_id for m in doomed])
            self.store.timeline.refresh_day_bounds(thread_id)
            self.store.timeline.refresh_conversation_bounds(thread_id)
        self._forget_summary_vectors(user_id, touched)
        self.pipeline.forget_messages(user_id, thread_id, {m.seq for m in doomed})
        return dropped

    def _drop_summaries(self, thread_id: str, messages: Sequence[Message]) -> tuple[list[Summary], bool]:
        """Inside the caller's transaction: the summaries whose span holds one of `messages` go, and
        their days' summaries and their conversations' titles and briefs are cleared (each may quote
        them). Returns the summaries dropped, and whether those or any summary of these days and
        conversations existed (what is to be written again; a day never summarised stays so)."""
        seqs = sorted(m.seq for m in messages)
        days, conversations = {m.day_label for m in messages}, {m.conversation_id for m in messages}
        stored = self.store.timeline.summaries(thread_id)
        touched = [s for s in stored if any(s.covers(q) for q in seqs)]
        beside = any((s.kind == "day" and s.day_label in days) or (s.kind == "conversation" and s.conversation_id
                                                                    in conversations) for s in stored)
        self.store.timeline.delete_summaries_touching(thread_id, seqs)
        self.store.timeline.clear_day_summaries(thread_id, sorted(days))
        self.store.timeline.clear_conversation_summaries(sorted(conversations))
        return touched, bool(touched) or beside

    def _forget_summary_vectors(self, user_id: str, dropped: Sequence[Summary]) -> None:
        if self.summary_index.cache is not None and dropped:
            self.summary_index.cache.forget(user_id, [summary_key(s) for s in dropped])
