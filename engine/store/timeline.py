"""Conversations, day segments and summaries: the records that give a thread its shape in time."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from engine.store.across_threads import AcrossThreads
from engine.store.db import SMALL_INSERT_ROWS, Database, in_values
from engine.errors import InvalidInputError, UnknownConversationError, UnknownDaySegmentError
from engine.models import Conversation, DaySegment, Summary, day_segment_id
from engine.store.summary_changes import SummaryChanges
from engine.store.rows import (
    CONVERSATION_COLUMNS,
    DAY_SEGMENT_COLUMNS,
    SUMMARY_COLUMNS,
    aware,
    conversation_from_row,
    day_segment_from_row,
    naive_utc,
    summary_from_row,
)

__all__ = ["Timeline", "conversation_id_for", "summary_order", "MAX_REASON_CHARS"]

MAX_REASON_CHARS = 200  # an end reason is a label on the record ("explicit", "topic change"), not a summary


def summary_order(summary: Summary) -> tuple[str, int, str]:
    """How a user's summaries are listed (`Timeline.summaries_of_user`'s ORDER BY, written once more
    for lists merged in memory): by thread, then where they start, then id."""
    return summary.thread_id, summary.from_seq, summary.summary_id


def conversation_id_for(thread_id: str, ordinal: int) -> str:
    return f"{thread_id}:conv:{ordinal}"


class Timeline:
    def __init__(self, db: Database, across: AcrossThreads) -> None:
        self.db = db
        self.across = across  # the same reads for many threads at once
        # Per user, bumped by every write of that user's summaries (here and in Store.delete_user, nowhere
        # else), after the write, with the ids it touched: an in-memory summary index knows when and
        # what to update without asking the database on each search, and one user's write never
        # touches another's.
        self.changes = SummaryChanges()

    def revision(self, user_id: str) -> int:
        """How many times the user's summaries changed in this process (0 before any change)."""
        return self.changes.revision(user_id)

    def summaries_changed(self, user_id: str, summary_ids: Iterable[str] | None = None) -> None:
        """Record a write of these summaries of the user (None: any of them): only the store's own
        writes call this, once the write is done."""
        self.changes.bump(user_id, summary_ids)

    # Conversations ---------------------------------------------------------------------------
    def last_conversation(self, thread_id: str) -> tuple[Conversation, int] | None:
        """The thread's latest conversation with its ordinal. `max_by` rather than `ORDER BY ...
        LIMIT 1`, which costs DuckDB a top-N plan: 1.1 against 2.1 ms, once per live ingest."""
        latest = self.db.execute(f"SELECT max_by(({CONVERSATION_COLUMNS}, ordinal), ordinal) FROM conversations "
                                 "WHERE thread_id = ?", [thread_id])[0][0]
        return (conversation_from_row(latest[:-1]), int(latest[-1])) if latest is not None else None

    def last_conversations(self, thread_ids: Sequence[str]) -> dict[str, tuple[Conversation, int]]:
        """`last_conversation` of each of these threads that has one; many in one query."""
        if len(thread_ids) != 1:
            return self.across.last_conversations(thread_ids) if thread_ids else {}
        found = self.last_conversation(thread_ids[0])
        return {thread_ids[0]: found} if found is not None else {}

    def insert_conversations(self, rows: Sequence[tuple]) -> None:
        """New conversations in one insert: (id, thread, user, ordinal, started_at, last_message_at,
        first_seq, last_seq, ended_at, end_reason, title, summary)."""
        names = ("conversation_id", "thread_id", "user_id", "ordinal", "started_at", "last_message_at",
                 "first_seq", "last_seq", "ended_at", "end_reason", "title", "summary")
        columns: list[Sequence[Any]] = list(zip(*rows)) if rows else [[] for _ in names]
        types = (pa.string(), pa.string(), pa.string(), pa.int32(), pa.timestamp("us"), pa.timestamp("us"),
                 pa.int64(), pa.int64(), pa.timestamp("us"), pa.string(), pa.string(), pa.string())
        times = {"started_at", "last_message_at", "ended_at"}
        self.db.insert_arrow("conversations", pa.table({
            name: pa.array([naive_utc(v) if name in times and v is not None else v for v in column], type=kind)
            for name, column, kind in zip(names, columns, types)
        }))

    def extend_conversation(self, conversation_id: str, last_seq: int, at: datetime) -> None:
        self.db.execute(
            "UPDATE conversations SET last_seq = ?, last_message_at = ? WHERE conversation_id = ?",
            [last_seq, naive_utc(at), conversation_id],
        )

    def end_conversation(self, conversation_id: str, ended_at: datetime, reason: str) -> None:
        """End it now, with `reason` on its record: a reason over MAX_REASON_CHARS is refused, not cut,
        since a cut label would say something the caller did not."""
        if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
            shown = f"{len(reason)} characters" if isinstance(reason, str) else type(reason).__name__
            raise InvalidInputError(f"reason must be a text of at most {MAX_REASON_CHARS} characters, got {shown}: "
                                    "give a short label such as 'explicit' or 'topic change'")
        self.db.execute(
            "UPDATE conversations SET ended_at = ?, end_reason = ? WHERE conversation_id = ? AND ended_at IS NULL",
            [naive_utc(ended_at), reason, conversation_id],
        )

    def clear_conversation_summaries(self, conversation_ids: Sequence[str]) -> None:
        """Forget the titles and briefs of these conversations (they may quote deleted messages)."""
        self.db.execute("UPDATE conversations SET title = NULL, summary = NULL WHERE list_contains(?, conversation_id)",
                        [list(conversation_ids)])

    def delete_conversation(self, conversation_id: str, *, user_id: str) -> None:
        self.db.execute("DELETE FROM conversations WHERE conversation_id = ? AND user_id = ?", [conversation_id, user_id])

    def set_conversation_summary(self, conversation_id: str, title: str, summary: str) -> None:
        self.db.execute(
            "UPDATE conversations SET title = ?, summary = ? WHERE conversation_id = ?", [title, summary, conversation_id]
        )

    def set_conversation_summaries(self, rows: Sequence[tuple[str, str, str]]) -> None:
        """Many (conversation_id, title, summary) in one statement."""
        ids, titles, briefs = (list(c) for c in zip(*rows)) if rows else ([], [], [])
        self.db.execute_with(
            pa.table({"conversation_id": pa.array(ids, pa.string()), "title": pa.array(titles, pa.string()),
                      "summary": pa.array(briefs, pa.string())}),
            "UPDATE conversations c SET title = b.title, summary = b.summary FROM _batch b "
            "WHERE c.conversation_id = b.conversation_id")

    def conversations_by_id(self, conversation_ids: Sequence[str], *, user_id: str) -> dict[str, Conversation]:
        """The user's conversations among these ids (unknown ids are left out)."""
        among, values = in_values("conversation_id", list(conversation_ids))
        rows = self.db.execute(f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE user_id = ? AND {among}",
                               [user_id, *values])
        return {c.conversation_id: c for c in map(conversation_from_row, rows)}

    def get_conversation(self, conversation_id: str, *, user_id: str) -> Conversation:
        rows = self.db.execute(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE conversation_id = ? AND user_id = ?",
            [conversation_id, user_id],
        )
        if not rows:
            raise UnknownConversationError(
                f"unknown conversation {conversation_id!r}: list recent conversations to get valid ids"
            )
        return conversation_from_row(rows[0])

    def conversations(self, thread_id: str, *, limit: int | None = None, ended_only: bool = False) -> list[Conversation]:
        """The thread's conversations, newest first."""
        sql = f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE thread_id = ?"
        sql += " AND ended_at IS NOT NULL" if ended_only else ""
        sql += " ORDER BY ordinal DESC" + (" LIMIT ?" if limit is not None else "")
        params: list[object] = [thread_id] + ([limit] if limit is not None else [])
        return [conversation_from_row(r) for r in self.db.execute(sql, params)]

    def refresh_conversation_bounds(self, thread_id: str) -> None:
        """After deletions: shrink conversations to their remaining messages, drop empty ones."""
        self.db.execute(
            "DELETE FROM conversations WHERE thread_id = ? AND conversation_id NOT IN "
            "(SELECT DISTINCT conversation_id FROM messages WHERE thread_id = ? AND kind = 'turn')",
            [thread_id, thread_id],
        )
        self.db.execute(
            "UPDATE conversations c SET first_seq = b.lo, last_seq = b.hi, started_at = b.t0, last_message_at = b.t1 "
            "FROM (SELECT conversation_id, min(seq) AS lo, max(seq) AS hi, min(created_at) AS t0, max(created_at) AS t1 "
            "FROM messages WHERE thread_id = ? AND kind = 'turn' GROUP BY conversation_id) b "
            "WHERE c.conversation_id = b.conversation_id",
            [thread_id],
        )

    # Day segments ----------------------------------------------------------------------------
    def touch_days(self, user_id: str, spans: Mapping[tuple[str, date], tuple[int, int]], at: datetime) -> list[tuple[str, date]]:
        """Open each (thread, day)'s segment or extend it to its new last seq, for one thread or many
        in the same statements; returns the (thread, day) pairs that opened."""
        if not spans:
            return []
        keys = {day_segment_id(thread_id, day): (thread_id, day) for thread_id, day in spans}
        among, values = in_values("day_segment_id", list(keys))
        known = {keys[r[0]] for r in self.db.execute(f"SELECT day_segment_id FROM day_segments WHERE {among}", values)}
        ends = {day_segment_id(*key): spans[key][1] for key in known}
        if len(ends) <= SMALL_INSERT_ROWS:  # the live path: the one day the thread was already in
            for segment_id, last_seq in ends.items():
                self.db.execute("UPDATE day_segments SET ends_at_seq = ? WHERE day_segment_id = ?", [last_seq, segment_id])
        else:
            self.db.execute_with(pa.table({"day_segment_id": list(ends), "last_seq": pa.array(list(ends.values()), pa.int64())}),
                                 "UPDATE day_segments d SET ends_at_seq = b.last_seq FROM _batch b "
                                 "WHERE d.day_segment_id = b.day_segment_id")
        fresh = sorted(set(spans) - known)
        self.db.insert_arrow("day_segments", pa.table({
            "day_segment_id": [day_segment_id(*key) for key in fresh], "user_id": [user_id] * len(fresh),
            "thread_id": [thread_id for thread_id, _ in fresh], "day_label": pa.array([d for _, d in fresh], type=pa.date32()),
            "starts_at_seq": pa.array([spans[key][0] for key in fresh], type=pa.int64()),
            "ends_at_seq": pa.array([spans[key][1] for key in fresh], type=pa.int64()),
            "updated_at": pa.array([naive_utc(at)] * len(fresh), type=pa.timestamp("us")),
        }))
        return fresh

    def touch_day(self, user_id: str, thread_id: str, day_label: date, first_seq: int, last_seq: int, at: datetime) -> bool:
        """One day's segment opened or extended; True when it opened."""
        return bool(self.touch_days(user_id, {(thread_id, day_label): (first_seq, last_seq)}, at))

    def get_day_segment(self, segment_id: str, *, user_id: str) -> DaySegment:
        rows = self.db.execute(
            f"SELECT {DAY_SEGMENT_COLUMNS} FROM day_segments WHERE day_segment_id = ? AND user_id = ?",
            [segment_id, user_id],
        )
        if not rows:
            raise UnknownDaySegmentError(
                f"unknown day segment {segment_id!r}: day segment ids come from search results"
            )
        return day_segment_from_row(rows[0])

    def day_segments(self, thread_id: str, *, last: int | None = None) -> list[DaySegment]:
        """The thread's day segments in day order; `last`: only the latest ones (a live ingest
        needs the day it is in and the ones it closed, not a year of days)."""
        if last is None:
            rows = self.db.execute(
                f"SELECT {DAY_SEGMENT_COLUMNS} FROM day_segments WHERE thread_id = ? ORDER BY day_label", [thread_id])
        else:  # max_by, not ORDER BY ... LIMIT (see last_conversation)
            latest = self.db.execute(f"SELECT max_by(({DAY_SEGMENT_COLUMNS}), day_label, ?) FROM day_segments "
                                     "WHERE thread_id = ?", [last, thread_id])[0][0]
            rows = (latest or [])[::-1]
        return [day_segment_from_row(r) for r in rows]

    def day_segments_by_id(self, segment_ids: Sequence[str]) -> dict[str, DaySegment]:
        """These day segments (unknown ids are left out)."""
        among, values = in_values("day_segment_id", list(segment_ids))
        rows = self.db.execute(f"SELECT {DAY_SEGMENT_COLUMNS} FROM day_segments WHERE {among}", values)
        return {s.day_segment_id: s for s in map(day_segment_from_row, rows)}

    def clear_day_summaries(self, thread_id: str, day_labels: Sequence[date]) -> None:
        """Forget day summaries that may quote deleted messages (they are rebuilt when the day updates)."""
        self.db.execute(
            "UPDATE day_segments SET summary_markdown = NULL WHERE thread_id = ? AND list_contains(?, day_label)",
            [thread_id, list(day_labels)],
        )

    def set_day_summary(self, segment_id: str, markdown: str | None, at: datetime) -> None:
        self.db.execute(
            "UPDATE day_segments SET summary_markdown = ?, updated_at = ? WHERE day_segment_id = ?",
            [markdown, naive_utc(at), segment_id],
        )

    def set_day_summaries(self, rows: Sequence[tuple[str, str, datetime]]) -> None:
        """Many (day_segment_id, markdown, at) in one statement."""
        ids, texts, times = (list(c) for c in zip(*rows)) if rows else ([], [], [])
        self.db.execute_with(
            pa.table({"day_segment_id": pa.array(ids, pa.string()), "markdown": pa.array(texts, pa.string()),
                      "at": pa.array([naive_utc(t) for t in times], pa.timestamp("us"))}),
            "UPDATE day_segments d SET summary_markdown = b.markdown, updated_at = b.at FROM _batch b "
            "WHERE d.day_segment_id = b.day_segment_id")

    def refresh_day_bounds(self, thread_id: str) -> None:
        """After deletions: shrink day segments to their remaining messages, drop empty ones."""
        self.db.execute(
            "DELETE FROM day_segments WHERE thread_id = ? AND day_label NOT IN "
            "(SELECT DISTINCT day_label FROM messages WHERE thread_id = ?)",
            [thread_id, thread_id],
        )
        self.db.execute(
            "UPDATE day_segments d SET starts_at_seq = b.lo, ends_at_seq = b.hi FROM "
            "(SELECT day_label, min(seq) AS lo, max(seq) AS hi FROM messages WHERE thread_id = ? GROUP BY day_label) b "
            "WHERE d.thread_id = ? AND d.day_label = b.day_label",
            [thread_id, thread_id],
        )

    # Summaries -------------------------------------------------------------------------------
    def upsert_summary(self, summary: Summary) -> None:
        self.db.execute("DELETE FROM summaries WHERE summary_id = ?", [summary.summary_id])
        self.db.execute(
            f"INSERT INTO summaries ({SUMMARY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [summary.summary_id, summary.thread_id, summary.user_id, summary.kind, summary.from_seq,
             summary.to_seq, summary.markdown, naive_utc(summary.created_at), naive_utc(summary.updated_at),
             summary.day_label, summary.conversation_id, summary.title, summary.message_count],
        )
        self.summaries_changed(summary.user_id, [summary.summary_id])

    def upsert_summaries(self, summaries: Sequence[Summary]) -> None:
        """Many summaries replaced or added: one delete and one batch insert."""
        if not summaries:
            return
        ids = [s.summary_id for s in summaries]
        among, values = in_values("summary_id", ids)
        self.db.execute(f"DELETE FROM summaries WHERE {among}", values)
        string, stamp = pa.string(), pa.timestamp("us")
        self.db.insert_arrow("summaries", pa.table({
            "summary_id": pa.array(ids, string), "thread_id": pa.array([s.thread_id for s in summaries], string),
            "user_id": pa.array([s.user_id for s in summaries], string),
            "kind": pa.array([s.kind for s in summaries], string),
            "from_seq": pa.array([s.from_seq for s in summaries], pa.int64()),
            "to_seq": pa.array([s.to_seq for s in summaries], pa.int64()),
            "markdown": pa.array([s.markdown for s in summaries], string),
            "created_at": pa.array([naive_utc(s.created_at) for s in summaries], stamp),
            "updated_at": pa.array([naive_utc(s.updated_at) for s in summaries], stamp),
            "day_label": pa.array([s.day_label for s in summaries], pa.date32()),
            "conversation_id": pa.array([s.conversation_id for s in summaries], string),
            "title": pa.array([s.title for s in summaries], string),
            "message_count": pa.array([s.message_count for s in summaries], pa.int32()),
        }))
        for user_id in sorted({s.user_id for s in summaries}):
            self.summaries_changed(user_id, [s.summary_id for s in summaries if s.user_id == user_id])

    def summary_spans(self, summary_ids: Sequence[str], *, user_id: str) -> dict[str, tuple[int, datetime]]:
        """(to_seq, created_at) of the user's summaries among these ids: what a batch of summaries
        needs to know of the ones it replaces, in one query."""
        among, values = in_values("summary_id", list(summary_ids))
        rows = self.db.execute(f"SELECT summary_id, to_seq, created_at FROM summaries WHERE user_id = ? AND {among}",
                               [user_id, *values])
        return {r[0]: (int(r[1]), aware(r[2])) for r in rows}

    def summaries(self, thread_id: str, *, kinds: Sequence[str] | None = None) -> list[Summary]:
        """The thread's summaries ordered by the span they cover."""
        sql = f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE thread_id = ?"
        params: list[object] = [thread_id]
        if kinds:
            sql += " AND list_contains(?, kind)"
            params.append(list(kinds))
        return [summary_from_row(r) for r in self.db.execute(sql + " ORDER BY from_seq, to_seq, summary_id", params)]

    def summaries_of_user(self, user_id: str, summary_ids: Iterable[str] | None = None) -> list[Summary]:
        """The user's summaries (or those of them among `summary_ids`) in `summary_order`."""
        sql = f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE user_id = ?"
        params: list[object] = [user_id]
        if summary_ids is not None:
            among, values = in_values("summary_id", sorted(summary_ids))
            sql += f" AND {among}"
            params += values
        return [summary_from_row(r) for r in self.db.execute(sql + " ORDER BY thread_id, from_seq, summary_id", params)]

    def get_summary(self, summary_id: str, *, user_id: str) -> Summary | None:
        rows = self.db.execute(
            f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE summary_id = ? AND user_id = ?", [summary_id, user_id]
        )
        return summary_from_row(rows[0]) if rows else None

    def delete_summaries_touching(self, thread_id: str, seqs: Sequence[int]) -> list[str]:
        """Drop summaries whose span holds any of `seqs` (their text may quote deleted words)."""
        rows = self.db.execute(
            "DELETE FROM summaries s WHERE thread_id = ? AND EXISTS "
            "(SELECT 1 FROM unnest(?::BIGINT[]) AS t(x) WHERE t.x BETWEEN s.from_seq AND s.to_seq) "
            "RETURNING summary_id, user_id",
            [thread_id, list(seqs)],
        )
        return self._dropped(rows)

    def delete_summaries(self, summary_ids: Sequence[str]) -> list[str]:
        """Drop these summaries (of any user); returns the ids that were stored."""
        rows = self.db.execute("DELETE FROM summaries WHERE list_contains(?, summary_id) RETURNING summary_id, user_id",
                               [list(summary_ids)])
        return self._dropped(rows)

    def _dropped(self, rows: list[tuple]) -> list[str]:
        for user_id in sorted({r[1] for r in rows}):
            self.summaries_changed(user_id, [r[0] for r in rows if r[1] == user_id])
        return [r[0] for r in rows]
