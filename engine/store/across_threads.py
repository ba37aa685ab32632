"""Reads and writes over many threads in one statement each: what the summaries of an import of
a chat export (thousands of short threads, one per conversation) ask of the store.

A statement costs DuckDB ~0.6-2 ms however few rows it touches, so asking thread by thread made
such an import run at ~100 messages/s (2,000 threads of 10 messages: 36 statements a thread,
144 of its 185 s in summaries). The single-thread reads in `Store` and `Timeline` stay what the
live path uses: `thread_id = ?` lets DuckDB's zone maps skip most of a large table.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime
from typing import Iterable, Mapping, Sequence, TypeVar

import pyarrow as pa

from engine.models import Conversation, DaySegment, Message
from engine.store.db import Database
from engine.store.rows import (CONVERSATION_COLUMNS, DAY_SEGMENT_COLUMNS, INDEXED_COLUMNS, MESSAGE_COLUMNS, aware,
                               conversation_from_row, day_segment_from_row, message_from_row, naive_utc)

__all__ = ["AcrossThreads", "SummaryEnd"]

_IN_THREADS = "thread_id IN (SELECT unnest(?::VARCHAR[]))"
# messages m within each thread's (lo, hi) seq range; its parameters: `_range_params`
_IN_RANGES = ("JOIN (SELECT unnest(?::VARCHAR[]) AS thread_id, unnest(?::BIGINT[]) AS lo, unnest(?::BIGINT[]) AS hi) r "
              "ON m.thread_id = r.thread_id AND m.seq >= r.lo AND m.seq <= r.hi")

SummaryEnd = tuple[str, str, date | None, str | None, int]  # summary_id, kind, day_label, conversation_id, to_seq


class AcrossThreads:
    def __init__(self, db: Database) -> None:
        self.db = db

    def messages(self, ranges: Mapping[str, tuple[int, int]], *, include_notes: bool = True) -> dict[str, list[Message]]:
        """Each thread's messages with lo <= seq <= hi, in seq order (`Store.messages_in_range` for many)."""
        rows = self.db.execute(
            f"SELECT {', '.join('m.' + c for c in MESSAGE_COLUMNS.split(', '))} FROM messages m {_IN_RANGES} "
            + ("" if include_notes else "WHERE m.kind = 'turn' ") + "ORDER BY m.thread_id, m.seq", _range_params(ranges))
        found: dict[str, list[Message]] = {t: [] for t in ranges}
        for row in rows:
            found[row[1]].append(message_from_row(row))
        return found

    def indexed(self, ranges: Mapping[str, tuple[int, int]]) -> pa.Table:
        """`Store.indexed_in_ranges` for many threads."""
        return self.db.fetch_arrow(f"SELECT {', '.join('m.' + c for c in INDEXED_COLUMNS.split(', '))} FROM messages m "
                                   f"{_IN_RANGES} ORDER BY m.thread_id, m.seq", _range_params(ranges))

    def turn_seqs(self, ranges: Mapping[str, tuple[int, int]]) -> dict[str, list[int]]:
        """Each thread's turn seqs (no notes) with lo <= seq <= hi, in order (`Store.turn_seqs_in_ranges` for many)."""
        rows = self.db.execute(f"SELECT m.thread_id, list(m.seq ORDER BY m.seq) FROM messages m {_IN_RANGES} "
                               "WHERE m.kind = 'turn' GROUP BY m.thread_id", _range_params(ranges))
        found: dict[str, list[int]] = {t: [] for t in ranges}
        found.update(rows)
        return found

    def tails(self, thread_ids: Sequence[str]) -> dict[str, tuple[int, datetime | None]]:
        """(highest seq ever given, last created_at) of each thread ((0, None): none or empty), as
        `Store.thread_tail` gives it for one."""
        rows = self.db.execute(
            "SELECT t.thread_id, t.last_seq, max(m.created_at) FROM threads t LEFT JOIN messages m "
            f"ON m.thread_id = t.thread_id WHERE t.{_IN_THREADS} GROUP BY t.thread_id, t.last_seq",
            [list(thread_ids)])
        found: dict[str, tuple[int, datetime | None]] = {thread_id: (0, None) for thread_id in thread_ids}  # no thread yet
        found.update({thread_id: (int(last_seq or 0), aware(at)) for thread_id, last_seq, at in rows})
        return found

    def owners(self, thread_ids: Sequence[str]) -> dict[str, str]:
        """thread -> its user, for the stored ones among these."""
        return dict(self.db.execute(f"SELECT thread_id, user_id FROM threads WHERE {_IN_THREADS}", [list(thread_ids)]))

    def external_ids(self, asked: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
        """thread -> those of its asked external ids already stored in it."""
        found: dict[str, set[str]] = {thread_id: set() for thread_id in asked}
        pairs = [(thread_id, external_id) for thread_id, ids in asked.items() for external_id in ids]
        for thread_id, external_id in self.db.execute(
                "SELECT m.thread_id, m.external_id FROM messages m JOIN (SELECT unnest(?::VARCHAR[]) AS thread_id, "
                "unnest(?::VARCHAR[]) AS external_id) a ON m.thread_id = a.thread_id AND m.external_id = a.external_id",
                [[t for t, _ in pairs], [e for _, e in pairs]]):
            found[thread_id].add(external_id)
        return found

    def last_conversations(self, thread_ids: Sequence[str]) -> dict[str, tuple[Conversation, int]]:
        """Each thread's latest conversation with its ordinal (`Timeline.last_conversation` for many)."""
        rows = self.db.execute(
            f"SELECT {CONVERSATION_COLUMNS}, ordinal FROM conversations WHERE {_IN_THREADS} "
            f"QUALIFY ordinal = max(ordinal) OVER (PARTITION BY thread_id)", [list(thread_ids)])
        return {row[1]: (conversation_from_row(row[:-1]), int(row[-1])) for row in rows}

    def day_segments(self, thread_ids: Sequence[str]) -> dict[str, list[DaySegment]]:
        """Each thread's day segments in day order."""
        rows = self.db.execute(f"SELECT {DAY_SEGMENT_COLUMNS} FROM day_segments WHERE {_IN_THREADS} "
                               "ORDER BY thread_id, day_label", [list(thread_ids)])
        return _by_thread(map(day_segment_from_row, rows))

    def ended_conversations(self, thread_ids: Sequence[str]) -> dict[str, list[Conversation]]:
        """Each thread's ended conversations, oldest first."""
        rows = self.db.execute(f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE {_IN_THREADS} "
                               "AND ended_at IS NOT NULL ORDER BY thread_id, ordinal", [list(thread_ids)])
        return _by_thread(map(conversation_from_row, rows))

    def summary_ends(self, thread_ids: Sequence[str], kinds: Sequence[str]) -> dict[str, list[SummaryEnd]]:
        """Where each thread's summaries of these kinds end, without their text."""
        found: dict[str, list[SummaryEnd]] = defaultdict(list)
        for summary_id, thread_id, kind, day_label, conversation_id, to_seq in self.db.execute(
                "SELECT summary_id, thread_id, kind, day_label, conversation_id, to_seq FROM summaries "
                f"WHERE {_IN_THREADS} AND list_contains(?, kind)", [list(thread_ids), list(kinds)]):
            found[thread_id].append((summary_id, kind, day_label, conversation_id, int(to_seq)))
        return found

    def end_conversations(self, ends: Mapping[str, datetime], reason: str) -> None:
        """End these open conversations (id -> ended_at) for `reason` (`Timeline.end_conversation` for many)."""
        self.db.execute_with(
            pa.table({"conversation_id": pa.array(list(ends), pa.string()),
                      "ended_at": pa.array([naive_utc(at) for at in ends.values()], pa.timestamp("us"))}),
            "UPDATE conversations c SET ended_at = b.ended_at, end_reason = ? FROM _batch b "
            "WHERE c.conversation_id = b.conversation_id AND c.ended_at IS NULL", [reason])

    def advance(self, last_seqs: Mapping[str, int]) -> None:
        """Each thread's highest seq given raised to at least these (`Store.advance_thread` for many)."""
        self.db.execute_with(
            pa.table({"thread_id": pa.array(list(last_seqs), pa.string()),
                      "last_seq": pa.array(list(last_seqs.values()), pa.int64())}),
            "UPDATE threads t SET last_seq = greatest(t.last_seq, b.last_seq) FROM _batch b WHERE t.thread_id = b.thread_id")


def _range_params(ranges: Mapping[str, tuple[int, int]]) -> list[list]:
    """The threads, lows and highs `_IN_RANGES` joins on."""
    threads = list(ranges)
    return [threads, [ranges[t][0] for t in threads], [ranges[t][1] for t in threads]]


Record = TypeVar("Record", DaySegment, Conversation)


def _by_thread(records: Iterable[Record]) -> dict[str, list[Record]]:
    """Records grouped by their thread, in the order they came."""
    found: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        found[record.thread_id].append(record)
    return found
