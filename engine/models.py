"""Frozen records passed between the store, the indexers and the query layer.

Timestamps inside the engine are timezone-aware UTC datetimes; `day_label` is the calendar date of
a message in its user's time zone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Literal, Mapping, Protocol

__all__ = [
    "Role",
    "MessageKind",
    "SummaryKind",
    "ROLES",
    "User",
    "Thread",
    "NewMessage",
    "Message",
    "Spoken",
    "Conversation",
    "DaySegment",
    "Summary",
    "IngestResult",
]

Role = Literal["user", "assistant", "system", "tool"]
ROLES: tuple[str, ...] = ("user", "assistant", "system", "tool")
# "turn" is conversation content; "note" is a system message the engine appends itself
# (e.g. "day summary updated"), which the indexes do not treat as content.
MessageKind = Literal["turn", "note"]
SummaryKind = Literal["day", "conversation", "range"]


@dataclass(frozen=True, slots=True)
class User:
    user_id: str
    timezone: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Thread:
    thread_id: str
    user_id: str
    mode: Literal["thread", "continuous"]
    created_at: datetime
    title: str | None = None


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message as a caller hands it in, before the store gives it a seq."""

    role: Role
    content: str
    created_at: datetime | None = None
    message_id: str | None = None
    external_id: str | None = None
    speaker: str | None = None
    tools_used: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    kind: MessageKind = "turn"


class Spoken(Protocol):
    """What a reader of a message's words needs (the extractive summarizer, and with its position
    chunking): a Message, or the slimmer record a worker process is sent."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...

    @property
    def speaker(self) -> str | None: ...

    @property
    def kind(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Message:
    message_id: str
    thread_id: str
    user_id: str
    seq: int
    role: Role
    content: str
    created_at: datetime
    day_label: date
    conversation_id: str
    speaker: str | None = None
    tools_used: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    external_id: str | None = None
    kind: MessageKind = "turn"

    @property
    def day_segment_id(self) -> str:
        return day_segment_id(self.thread_id, self.day_label)


@dataclass(frozen=True, slots=True)
class Conversation:
    conversation_id: str
    thread_id: str
    user_id: str
    started_at: datetime
    first_seq: int
    last_seq: int
    last_message_at: datetime
    ended_at: datetime | None = None
    end_reason: str | None = None
    title: str | None = None
    summary: str | None = None


@dataclass(frozen=True, slots=True)
class DaySegment:
    day_segment_id: str
    user_id: str
    thread_id: str
    day_label: date
    starts_at_seq: int
    ends_at_seq: int
    summary_markdown: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Summary:
    """A Markdown summary covering messages `from_seq..to_seq` (inclusive) of one thread."""

    summary_id: str
    thread_id: str
    user_id: str
    kind: SummaryKind
    from_seq: int
    to_seq: int
    markdown: str
    created_at: datetime
    updated_at: datetime
    day_label: date | None = None
    conversation_id: str | None = None
    title: str | None = None
    message_count: int = 0

    def covers(self, seq: int) -> bool:
        return self.from_seq <= seq <= self.to_seq


@dataclass(frozen=True, slots=True)
class ConversationEnd:
    """What ending the open conversation did: the conversation ended (None: none was open) and its
    summary (None when summaries are off, or when the summarizer failed: then it is queued for a retry)."""

    conversation_id: str | None
    summary: Summary | None = None
    ended: bool = field(init=False)  # written out beside the two, so a client need not infer it

    def __post_init__(self) -> None:
        object.__setattr__(self, "ended", self.conversation_id is not None)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What one ingest call did; the facade uses the closed days and conversations to summarise."""

    thread_id: str
    inserted: tuple[str, ...]
    duplicates: tuple[str, ...]
    first_seq: int | None
    last_seq: int | None
    opened_days: tuple[date, ...] = ()
    ended_conversations: tuple[str, ...] = ()
    seconds: float = 0.0  # the whole call, as the facade timed it
    messages_per_s: float = 0.0
    phases_s: Mapping[str, float] = field(default_factory=dict)  # store, summaries, lexical[, embed]


def day_segment_id(thread_id: str, day_label: date) -> str:
    """Day segment ids are derived, so a day is addressable without a lookup."""
    return f"{thread_id}:day:{day_label.isoformat()}"
