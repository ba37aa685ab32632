"""Reads of a thread's history for navigation and search filters: turns by day, time, seq or text,
what no summary covers, and the seq interval a time filter selects.

Every list holds turns only (engine notes are not conversation content) in seq order unless a
method says newest first. Callers scope the thread to its user before asking.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Sequence

from engine.models import Message
from engine.store.db import Database
from engine.store.rows import MESSAGE_COLUMNS, aware, message_from_row, naive_utc

__all__ = ["History"]

# Messages no summary of the thread covers (one parameter: the thread id). Each side is filtered
# to the thread in its own subquery so DuckDB runs a pure range join: with the thread equality in
# the ON clause it falls back to a hash join plus filter, ~30x slower on 100k messages.
_UNCOVERED = (
    "messages ANTI JOIN (SELECT from_seq, to_seq FROM summaries WHERE thread_id = ?) s "
    "ON messages.seq >= s.from_seq AND messages.seq <= s.to_seq"
)


class History:
    def __init__(self, db: Database) -> None:
        self.db = db

    def turn_ids_of_day(self, thread_id: str, day_label: date) -> list[str]:
        rows = self.db.execute(
            "SELECT message_id FROM messages WHERE thread_id = ? AND day_label = ? AND kind = 'turn' ORDER BY seq",
            [thread_id, day_label])
        return [r[0] for r in rows]

    def turns_of_day(self, thread_id: str, day_label: date, first_seq: int, last_seq: int) -> list[Message]:
        """The day's turns with first_seq <= seq <= last_seq."""
        return self._turns(thread_id, "day_label = ? AND seq BETWEEN ? AND ?", [day_label, first_seq, last_seq])

    def turns_since(self, thread_id: str, since: datetime, from_seq: int, limit: int) -> list[Message]:
        """Turns at or after `since` with seq >= from_seq."""
        return self._turns(thread_id, "created_at >= ? AND seq >= ?", [naive_utc(since), from_seq], limit=limit)

    def turns_before(self, thread_id: str, moment: datetime, limit: int) -> list[Message]:
        """The latest `limit` turns before `moment`, newest first."""
        return self._turns(thread_id, "created_at < ?", [naive_utc(moment)], limit=limit, newest_first=True)

    def turns_from(self, thread_id: str, moment: datetime, limit: int) -> list[Message]:
        """The first `limit` turns at or after `moment`."""
        return self._turns(thread_id, "created_at >= ?", [naive_utc(moment)], limit=limit)

    def turns_between_seqs(self, thread_id: str, start_seq: int, end_seq: int) -> list[Message]:
        """Turns with start_seq <= seq < end_seq."""
        return self._turns(thread_id, "seq >= ? AND seq < ?", [start_seq, end_seq])

    def turns_containing(self, thread_id: str, text: str, limit: int) -> list[Message]:
        """Turns holding `text`, ignoring case; strpos on a bound parameter, never a LIKE pattern or a
        regex, so nothing needs escaping."""
        return self._turns(thread_id, "strpos(lower(content), lower(?)) > 0", [text], limit=limit)

    def latest_uncovered_turns(self, thread_id: str, limit: int) -> list[Message]:
        """The latest `limit` turns no summary covers, newest first."""
        return self._turns(thread_id, "TRUE", [], limit=limit, newest_first=True, uncovered=True)

    def uncovered_turn_count(self, thread_id: str) -> int:
        rows = self.db.execute(f"SELECT count(*) FROM {_UNCOVERED} WHERE thread_id = ? AND kind = 'turn'",
                               [thread_id, thread_id])
        return int(rows[0][0])

    def summary_turn_stats(self, thread_id: str) -> dict[str, tuple[int, datetime | None]]:
        """summary id -> (turns stored in its span, latest created_at in it of any kind): the real
        counts, as messages may have been deleted since it was written."""
        # Per-thread subqueries keep this a pure range join (see _UNCOVERED).
        rows = self.db.execute(
            "SELECT s.summary_id, count(m.seq) FILTER (WHERE m.kind = 'turn'), max(m.created_at) "
            "FROM (SELECT summary_id, from_seq, to_seq FROM summaries WHERE thread_id = ?) s "
            "LEFT JOIN (SELECT seq, kind, created_at FROM messages WHERE thread_id = ?) m "
            "ON m.seq >= s.from_seq AND m.seq <= s.to_seq GROUP BY s.summary_id",
            [thread_id, thread_id],
        )
        return {r[0]: (int(r[1]), aware(r[2])) for r in rows}

    def turn_count_in_spans(self, thread_id: str, spans: Sequence[tuple[int, int]]) -> int:
        """Turns whose seq lies in one of the inclusive `spans` (disjoint)."""
        if not spans:
            return 0
        rows = self.db.execute(
            "SELECT count(*) FROM (SELECT seq FROM messages WHERE thread_id = ? AND kind = 'turn') m "
            "JOIN (SELECT unnest(?::BIGINT[]) AS lo, unnest(?::BIGINT[]) AS hi) g ON m.seq >= g.lo AND m.seq <= g.hi",
            [thread_id, [lo for lo, _ in spans], [hi for _, hi in spans]],
        )
        return int(rows[0][0])

    def seq_bounds(self, user_id: str, *, day: date | None = None, start: datetime | None = None,
                   end: datetime | None = None) -> dict[str, tuple[int, int]]:
        """thread -> (first seq, last seq) of the user's messages on `day` and in [start, end)."""
        sql = "SELECT thread_id, min(seq), max(seq) FROM messages WHERE user_id = ?"
        params: list[object] = [user_id]
        if day is not None:
            sql += " AND day_label = ?"
            params.append(day)
        if start is not None:
            sql += " AND created_at >= ?"
            params.append(naive_utc(start))
        if end is not None:
            sql += " AND created_at < ?"
            params.append(naive_utc(end))
        rows = self.db.execute(sql + " GROUP BY thread_id", params)
        return {thread: (int(lo), int(hi)) for thread, lo, hi in rows}

    def _turns(self, thread_id: str, where: str, params: Sequence[object], *, limit: int | None = None,
               newest_first: bool = False, uncovered: bool = False) -> list[Message]:
        """The thread's turns matching `where` (a constant of this module, never caller text)."""
        source = _UNCOVERED if uncovered else "messages"
        sql = f"SELECT {MESSAGE_COLUMNS} FROM {source} WHERE thread_id = ? AND kind = 'turn' AND ({where})"
        sql += " ORDER BY seq DESC" if newest_first else " ORDER BY seq"
        args: list[object] = [*([thread_id] if uncovered else []), thread_id, *params]
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [message_from_row(r) for r in self.db.execute(sql, args)]
