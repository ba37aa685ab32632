"""What the Navigator returns: frozen records the CLI, HTTP and MCP surfaces serialise.

Datetimes are aware UTC; surfaces turn them into ISO strings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Iterable, Sequence

from engine.models import Message, Summary
from engine.text_rules import TITLE_CAP_CHARS, shortened

__all__ = [
    "MessageView",
    "DayView",
    "SummaryView",
    "TurnsSince",
    "TurnsAround",
    "ConversationContext",
    "DayEntry",
    "TimelineEntry",
    "DayTimeline",
    "message_view",
    "summary_view",
    "capped_message",
    "view_weight",
    "fitting",
    "answer_views",
    "VIEW_CAP_CHARS",
    "ANSWER_CAP_CHARS",
    "VIEW_FIELD_CHARS",
]


VIEW_CAP_CHARS = 20_000  # characters of one message a view returns (as much as the index reads)
# What one answer's messages may weigh, in characters: each message's text plus VIEW_FIELD_CHARS for its
# other fields (ids, times). An MCP result travels twice in one event (text and structuredContent) and the
# SDK's client refuses an event over 1 MiB: 100,000 characters stay well under it, CJK (3 bytes) included.
ANSWER_CAP_CHARS = 100_000
VIEW_FIELD_CHARS = 400
SHARE_FLOOR_CHARS = 500  # answer_views never cuts a text shorter than this (a page must still say something)
# The navigation calls' defaults, written once: the Navigator, the facade and the remote client use them.
SINCE_LIMIT = 1000  # turns_since: turns per answer (the rest by from_seq=next_seq)
AROUND_COUNT, AROUND_BEFORE_RATIO = 40, 0.5  # turns_around: turns in the window, and the share before the moment
CONTEXT_TURNS = 40  # conversation_context: messages' worth of context
SUBSTRING_LIMIT = 50  # substring_search: matching turns per answer


@dataclass(frozen=True, slots=True)
class MessageView:
    message_id: str
    seq: int
    role: str
    speaker: str | None
    content: str
    created_at: datetime
    day_label: date
    conversation_id: str
    tools_used: tuple[str, ...]
    thread_id: str
    day_segment_id: str  # so a caller can open the message's day with get_day
    content_chars: int = 0  # the whole text's length: content is a page of it, VIEW_CAP_CHARS at most
    content_offset: int = 0  # where content starts in the whole text
    content_truncated: bool = False  # more follows: get the message again with offset=content_offset+len(content)


@dataclass(frozen=True, slots=True)
class DayView:
    day_segment_id: str
    thread_id: str
    day_label: date
    summary_markdown: str | None  # None until the day has been summarised
    updated_at: datetime
    message_ids: tuple[str, ...]  # the day's turns in seq order (engine notes left out)


@dataclass(frozen=True, slots=True)
class SummaryView:
    summary_id: str
    kind: str
    from_seq: int
    to_seq: int
    message_count: int  # turns actually stored in from_seq..to_seq, not the span's width
    markdown: str
    title: str | None
    day_label: date | None
    conversation_id: str | None
    ends_at: datetime | None  # created_at of the last stored message of the span
    updated_at: datetime
    overlap: int = 0  # of message_count, how many a newer chosen summary already represents


@dataclass(frozen=True, slots=True)
class TurnsSince:
    since: datetime
    messages: tuple[MessageView, ...]
    summaries: tuple[SummaryView, ...]
    truncated: bool
    next_seq: int | None = None  # when truncated: pass as from_seq to get the rest
    next_timestamp: datetime | None = None  # created_at of the first message left out
    continue_with: str | None = None
    notice: str | None = None


@dataclass(frozen=True, slots=True)
class TurnsAround:
    moment: datetime
    messages: tuple[MessageView, ...]  # before-part then after-part, in seq order
    before_count: int
    after_count: int
    requested_before: int
    requested_after: int
    notice: str | None = None  # says when history could not fill one side


@dataclass(frozen=True, slots=True)
class ConversationContext:
    requested_turns: int
    uncovered_count: int  # turns of the thread no summary covers
    summaries: tuple[SummaryView, ...]  # oldest first
    turns: tuple[MessageView, ...]  # raw uncovered turns, in order
    turns_covered: int  # messages represented: raw turns plus summaries' non-overlapping counts


def message_view(message: Message, offset: int = 0, cap: int = VIEW_CAP_CHARS) -> MessageView:
    """The message with at most `cap` (VIEW_CAP_CHARS) characters of its text from `offset`: a 7 MB
    message must not flood a model's context (or a response) ten times over; the rest is paged by offset."""
    page = message.content[offset:offset + min(cap, VIEW_CAP_CHARS)]
    return MessageView(
        message_id=message.message_id, seq=message.seq, role=message.role, speaker=message.speaker,
        content=page, created_at=message.created_at, day_label=message.day_label,
        conversation_id=message.conversation_id, tools_used=tuple(message.tools_used),
        thread_id=message.thread_id, day_segment_id=message.day_segment_id, content_chars=len(message.content),
        content_offset=offset, content_truncated=offset + len(page) < len(message.content),
    )


def summary_view(summary: Summary, message_count: int, ends_at: datetime | None, overlap: int = 0) -> SummaryView:
    return SummaryView(
        summary_id=summary.summary_id, kind=summary.kind, from_seq=summary.from_seq, to_seq=summary.to_seq,
        message_count=message_count, markdown=summary.markdown, title=shortened(summary.title, TITLE_CAP_CHARS),
        day_label=summary.day_label, conversation_id=summary.conversation_id, ends_at=ends_at,
        updated_at=summary.updated_at, overlap=overlap,
    )


def capped_message(message: Message) -> Message:
    """The message with at most VIEW_CAP_CHARS of its text and, when cut, a marker saying how to get the rest
    (for results that return messages themselves: a conversation, a context payload)."""
    extra = len(message.content) - VIEW_CAP_CHARS
    if extra <= 0:
        return message
    marker = (f" [... {extra} more characters: get message {message.message_id!r} with offset={VIEW_CAP_CHARS} "
              "for the rest]")
    return replace(message, content=message.content[:VIEW_CAP_CHARS] + marker)


def view_weight(message: Message) -> int:
    """What a message weighs in an answer as a view: its (capped) text and its other fields."""
    return min(len(message.content), VIEW_CAP_CHARS) + VIEW_FIELD_CHARS


def fitting(weights: Iterable[int], room: int = ANSWER_CAP_CHARS) -> int:
    """How many items, from the first, one answer holds by their weights (at least one): what a paged
    result shows before its `next_seq`."""
    count = 0
    for count, weight in enumerate(weights, start=1):
        room -= weight
        if room < 0 and count > 1:
            return count - 1
    return count


def answer_views(messages: Sequence[Message]) -> tuple[MessageView, ...]:
    """Views of all `messages` that together fit one answer: the longest texts are cut to one length
    (short ones stay whole, none below SHARE_FLOOR_CHARS); a cut view says so (content_truncated), and
    the rest is read by offset. For results that cannot page (a window around a moment, a grep)."""
    lengths = sorted(min(len(m.content), VIEW_CAP_CHARS) for m in messages)
    room, cap = ANSWER_CAP_CHARS - VIEW_FIELD_CHARS * len(lengths), VIEW_CAP_CHARS
    for index, length in enumerate(lengths):
        if length * (len(lengths) - index) > room:
            cap = max(room // (len(lengths) - index), SHARE_FLOOR_CHARS)
            break
        room -= length
    return tuple(message_view(m, cap=cap) for m in messages)


# Days as the web page reads them (engine.query.days) --------------------------------------------
@dataclass(frozen=True, slots=True)
class DayEntry:
    """A day of the thread that has messages."""

    day_label: date
    day_segment_id: str
    has_summary: bool


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    message: MessageView
    kind: str  # "turn" (conversation content) or "note" (a system message the engine appended)
    covered_by: str | None  # id of a summary whose span holds the message; None when none does


@dataclass(frozen=True, slots=True)
class DayTimeline:
    thread_id: str
    day_label: date
    timezone: str  # the user's: times on the page are shown in it
    day_segment_id: str | None  # None when the day has no messages
    summary: Summary | None  # the day's summary, None until the day is summarised
    entries: tuple[TimelineEntry, ...]  # every message of the day, notes included, in seq order
