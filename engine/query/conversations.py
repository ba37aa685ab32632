"""Conversations as records to read: the latest across a user's threads, and one with its messages."""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.models import Conversation, Message
from engine.query.navigation_results import fitting, view_weight
from engine.store.core import Store
from engine.store.timeline import MAX_REASON_CHARS
from engine.text_rules import TITLE_CAP_CHARS, shortened
from engine.validation import whole_number

__all__ = ["ConversationDetail", "ConversationReader", "MAX_RECENT"]

MAX_RECENT = 100


@dataclass(frozen=True, slots=True)
class ConversationDetail:
    """A conversation: its record and its messages in order, as many as one answer holds (ANSWER_CAP_CHARS)."""

    conversation: Conversation
    messages: tuple[Message, ...]
    truncated: bool = False  # more messages follow: continue_with says how to read them
    next_seq: int | None = None  # seq of the first message left out
    continue_with: str | None = None


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
        return [_shown(c) for c in found[:limit]]

    def get(self, user_id: str, conversation_id: str, *, include_notes: bool = False) -> ConversationDetail:
        """The conversation's record and its first messages (engine notes only when asked), as many as one
        answer holds: a 10,000-message conversation is megabytes, so the rest is read by seq."""
        conversation = _shown(self.store.timeline.get_conversation(conversation_id, user_id=user_id))
        rows = self.store.messages_in_range(conversation.thread_id, conversation.first_seq, conversation.last_seq + 1,
                                            include_notes=include_notes)
        messages = [m for m in rows if m.conversation_id == conversation_id]
        shown = messages[:fitting(map(view_weight, messages))]
        if len(shown) == len(messages):
            return ConversationDetail(conversation, tuple(shown))
        rest = messages[len(shown)]
        hint = (f"more messages follow (through seq {conversation.last_seq}): read them with get_turns_since "
                f"(HTTP /api/get_turns_since) with timestamp '{conversation.started_at.isoformat()}', "
                f"thread_id '{conversation.thread_id}', from_seq={rest.seq} and include_summaries=false, "
                f"and stop after seq {conversation.last_seq}")
        return ConversationDetail(conversation, tuple(shown), truncated=True, next_seq=rest.seq, continue_with=hint)


def _shown(conversation: Conversation) -> Conversation:
    """The record with its title and end reason as short as they are made now (older stores may hold a
    title made from a whole first message)."""
    return replace(conversation, title=shortened(conversation.title, TITLE_CAP_CHARS),
                   end_reason=shortened(conversation.end_reason, MAX_REASON_CHARS))
