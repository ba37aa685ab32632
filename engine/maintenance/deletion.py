"""Deletion that deletes: a message, a conversation or a user leaves the store, its summaries,
the windows and vectors of its shard and the embedding cache, so no search or reindex brings it back.

Summaries are dropped rather than edited when their span held a deleted message: their text may
quote it. Day summaries of the affected days are cleared for the same reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from engine.errors import InvalidInputError
from engine.models import Message
from engine.store.core import Store
from engine.query.summary_index import SummaryIndex, summary_key
from indexers.pipeline import IndexPipeline

if TYPE_CHECKING:
    from engine.api import ConversationEngine

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
    def __init__(self, store: Store, pipeline: IndexPipeline, summary_index: SummaryIndex) -> None:
        self.store = store
        self.pipeline = pipeline
        self.summary_index = summary_index

    def delete_messages(self, user_id: str, message_ids: Sequence[str]) -> int:
        """Delete the user's messages among `message_ids` (another user's ids are ignored)."""
        self.store.get_user(user_id)  # an unknown user (or not a user id at all) is an error, not "0 deleted"
        messages = self.store.messages_by_ids(checked_ids(message_ids), user_id=user_id)
        by_thread: dict[str, list[Message]] = {}
        for m in messages:
            by_thread.setdefault(m.thread_id, []).append(m)
        for thread_id, doomed in by_thread.items():
            self._delete_in_thread(user_id, thread_id, doomed)
        if messages:
            self.forget_unused_vectors(user_id)
        self.summary_index.forget(user_id)
        return len(messages)

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

    def _delete_in_thread(self, user_id: str, thread_id: str, doomed: list[Message]) -> None:
        seqs = sorted(m.seq for m in doomed)
        touched = [s for s in self.store.timeline.summaries(thread_id)
                   if any(s.from_seq <= q <= s.to_seq for q in seqs)]
        with self.store.transaction():
            self.store.timeline.delete_summaries_touching(thread_id, seqs)
            self.store.timeline.clear_day_summaries(thread_id, sorted({m.day_label for m in doomed}))
            # a conversation's title and brief may quote the deleted text too (rebuilt when it is summarised)
            self.store.timeline.clear_conversation_summaries(sorted({m.conversation_id for m in doomed}))
            self.store.delete_messages([m.message_id for m in doomed])
            self.store.timeline.refresh_day_bounds(thread_id)
            self.store.timeline.refresh_conversation_bounds(thread_id)
        if self.summary_index.cache is not None and touched:
            self.summary_index.cache.forget(user_id, [summary_key(s) for s in touched])
        self.pipeline.forget_messages(user_id, thread_id, set(seqs))
