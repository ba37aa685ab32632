"""Conversions between DuckDB rows and the engine's frozen records.

The store keeps naive UTC timestamps; everything above it sees aware UTC datetimes.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, overload

import pyarrow as pa

from engine.models import Conversation, DaySegment, Message, Summary, Thread, User

__all__ = [
    "MESSAGE_COLUMNS",
    "CONVERSATION_COLUMNS",
    "DAY_SEGMENT_COLUMNS",
    "SUMMARY_COLUMNS",
    "naive_utc",
    "aware",
    "message_from_row",
    "messages_from_arrow",
    "conversation_from_row",
    "day_segment_from_row",
    "summary_from_row",
    "user_from_row",
    "thread_from_row",
]

MESSAGE_COLUMNS = (
    "message_id, thread_id, user_id, seq, role, content, created_at, day_label, conversation_id, "
    "speaker, tools_used, metadata, external_id, kind"
)
# What the index reads of each message it chunks: the shard's message table and the chunker's fields,
# typed as DuckDB exports them (created_at naive UTC).
INDEXED_SCHEMA = pa.schema([
    ("thread_id", pa.string()), ("seq", pa.int64()), ("message_id", pa.string()), ("created_at", pa.timestamp("us")),
    ("day_label", pa.date32()), ("conversation_id", pa.string()), ("role", pa.string()), ("speaker", pa.string()),
    ("tools_used", pa.list_(pa.string())), ("content", pa.string()), ("kind", pa.string()),
])
INDEXED_COLUMNS = ", ".join(INDEXED_SCHEMA.names)
CONVERSATION_COLUMNS = (
    "conversation_id, thread_id, user_id, started_at, first_seq, last_seq, last_message_at, "
    "ended_at, end_reason, title, summary"
)
DAY_SEGMENT_COLUMNS = (
    "day_segment_id, user_id, thread_id, day_label, starts_at_seq, ends_at_seq, summary_markdown, updated_at"
)
SUMMARY_COLUMNS = (
    "summary_id, thread_id, user_id, kind, from_seq, to_seq, markdown, created_at, updated_at, "
    "day_label, conversation_id, title, message_count"
)


def naive_utc(value: datetime) -> datetime:
    """What the store keeps: UTC without tzinfo."""
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    return value.replace(tzinfo=None)


@overload
def aware(value: datetime) -> datetime: ...
@overload
def aware(value: None) -> None: ...
def aware(value: datetime | None) -> datetime | None:
    """A stored timestamp as aware UTC (None stays None: a nullable column)."""
    return None if value is None else value.replace(tzinfo=timezone.utc)


def message_from_row(row: tuple[Any, ...]) -> Message:
    (message_id, thread_id, user_id, seq, role, content, created_at, day_label, conversation_id,
     speaker, tools_used, metadata, external_id, kind) = row
    return Message(
        message_id=message_id, thread_id=thread_id, user_id=user_id, seq=int(seq), role=role,
        content=content, created_at=aware(created_at), day_label=day_label,
        conversation_id=conversation_id, speaker=speaker, tools_used=tuple(tools_used or ()),
        metadata=json.loads(metadata) if metadata else {}, external_id=external_id, kind=kind,
    )


def messages_from_arrow(table: Any) -> list[Message]:
    """Messages from an Arrow table of MESSAGE_COLUMNS (`Store.messages_arrow`), row by row as above."""
    columns = [table.column(name).to_pylist() for name in MESSAGE_COLUMNS.split(", ")]
    return [message_from_row(row) for row in zip(*columns)]


def indexed_table(rows: list[tuple[Any, ...]]) -> pa.Table:
    """Fetched rows of INDEXED_COLUMNS as one Arrow table: for a few rows (the live path's tail)
    fetching them costs ~0.6 ms less than DuckDB's Arrow export (4 rows of a 100k store: 0.9-1.1
    against 1.5-2.0 ms)."""
    columns = list(zip(*rows)) if rows else [()] * len(INDEXED_SCHEMA)
    return pa.table([pa.array(values, type=field.type) for values, field in zip(columns, INDEXED_SCHEMA)],
                    schema=INDEXED_SCHEMA)


def conversation_from_row(row: tuple[Any, ...]) -> Conversation:
    (conversation_id, thread_id, user_id, started_at, first_seq, last_seq, last_message_at,
     ended_at, end_reason, title, summary) = row
    return Conversation(
        conversation_id=conversation_id, thread_id=thread_id, user_id=user_id,
        started_at=aware(started_at), first_seq=int(first_seq), last_seq=int(last_seq),
        last_message_at=aware(last_message_at), ended_at=aware(ended_at), end_reason=end_reason,
        title=title, summary=summary,
    )


def day_segment_from_row(row: tuple[Any, ...]) -> DaySegment:
    (day_segment_id, user_id, thread_id, day_label, starts, ends, markdown, updated_at) = row
    return DaySegment(
        day_segment_id=day_segment_id, user_id=user_id, thread_id=thread_id, day_label=day_label,
        starts_at_seq=int(starts), ends_at_seq=int(ends), summary_markdown=markdown,
        updated_at=aware(updated_at),
    )


def summary_from_row(row: tuple[Any, ...]) -> Summary:
    (summary_id, thread_id, user_id, kind, from_seq, to_seq, markdown, created_at, updated_at,
     day_label, conversation_id, title, message_count) = row
    return Summary(
        summary_id=summary_id, thread_id=thread_id, user_id=user_id, kind=kind,
        from_seq=int(from_seq), to_seq=int(to_seq), markdown=markdown, created_at=aware(created_at),
        updated_at=aware(updated_at), day_label=day_label, conversation_id=conversation_id,
        title=title, message_count=int(message_count),
    )


def user_from_row(row: tuple[Any, ...]) -> User:
    return User(user_id=row[0], timezone=row[1], created_at=aware(row[2]))


def thread_from_row(row: tuple[Any, ...]) -> Thread:
    return Thread(thread_id=row[0], user_id=row[1], mode=row[2], title=row[3], created_at=aware(row[4]))
