"""Conversations as records to read: the latest across a user's threads, and one with its messages."""

from __future__ import annotations

from dataclasses import dataclass

from engine.models import Conversation, Message
from engine.store.core import Store
from engine.validation import whole_number

__all__ = ["ConversationDetail", "ConversationReader", "MAX_RECENT"]

MAX_RECENT = 100


@dataclass(frozen=True, slots=True)
class ConversationDetail:
    """A whole conversation: its record and its messages in order."""

    conversation: Conversation
    messages: tuple[Message, ...]


class ConversationReader:
    def __init__(self, store: Store) -> None:
        self.store = store

    def recent(self, user_id: str, limit: int = 10) -> list[Conversation]:
        """The user's latest conversations across threads (records only: title, summary, times, span)."""
        whole_number("limit", limit, minimum=1, maximum=MAX_RECENT)
        self.store.get_user(user_id)
        found: list[Conversation] = []
        for thread in self.store.threads_of(user_id):
            found.extend(self.store.timeline.conversations(thread.thread_id, limit=limit))
        found.sort(key=lambda c: (c.last_message_at, c.conversation_id), reverse=True)
        return found[:limit]

    def get(self, user_id: str, conversation_id: str, *, include_notes: bool = False) -> ConversationDetail:
        """A whole conversation: record and messages (engine notes only when asked)."""
        conversation = self.store.timeline.get_conversation(conversation_id, user_id=user_id)
        rows = self.store.messages_in_range(conversation.thread_id, conversation.first_seq, conversation.last_seq + 1,
                                            include_notes=include_notes)
        return ConversationDetail(conversation, tuple(m for m in rows if m.conversation_id == conversation_id))
