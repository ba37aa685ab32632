"""The store's consistency checks for `convsearch doctor`, and the reads its repairs need.

Each check names one kind of problem and returns (user_id, thread_id, subject) rows, one per
problem; a summary's subject is 'summary <id>'. What a problem means and how it is fixed is the
doctor's to say (engine/maintenance/doctor.py).
"""

from __future__ import annotations

from datetime import date
from typing import Sequence

from engine.store.db import SCHEMA_VERSION, Database

__all__ = ["StoreChecks", "SCHEMA_VERSION"]

_CHECKS: dict[str, str] = {
    "store_seq_order": """
        SELECT user_id, thread_id, 'seq ' || seq FROM (
            SELECT user_id, thread_id, seq, created_at, lag(seq) OVER w AS prev_seq, lag(created_at) OVER w AS prev_at
            FROM messages WINDOW w AS (PARTITION BY thread_id ORDER BY seq, created_at))
        WHERE seq < 1 OR seq = prev_seq OR created_at < prev_at ORDER BY thread_id, seq""",
    "store_thread_tail": """
        SELECT t.user_id, t.thread_id, 'last_seq ' || t.last_seq FROM threads t
        WHERE t.last_seq < (SELECT coalesce(max(seq), 0) FROM messages m WHERE m.thread_id = t.thread_id)""",
    "store_orphan_turn": """
        SELECT m.user_id, m.thread_id, 'message ' || m.message_id FROM messages m
        LEFT JOIN conversations c ON c.conversation_id = m.conversation_id
        WHERE m.kind = 'turn' AND c.conversation_id IS NULL ORDER BY m.thread_id, m.seq""",
    "store_day_bounds": """
        SELECT m.user_id, m.thread_id, 'day ' || m.day_label FROM
            (SELECT user_id, thread_id, day_label, min(seq) AS lo, max(seq) AS hi FROM messages GROUP BY ALL) m
        LEFT JOIN day_segments d ON d.thread_id = m.thread_id AND d.day_label = m.day_label
        WHERE d.day_segment_id IS NULL OR d.starts_at_seq > m.lo OR d.ends_at_seq < m.hi
        UNION ALL
        SELECT d.user_id, d.thread_id, 'empty day ' || d.day_label FROM day_segments d
        WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = d.thread_id AND m.day_label = d.day_label)""",
    "store_conversation_bounds": """
        SELECT c.user_id, c.thread_id, 'conversation ' || c.conversation_id FROM conversations c
        LEFT JOIN (SELECT conversation_id, min(seq) AS lo, max(seq) AS hi FROM messages
                   WHERE kind = 'turn' GROUP BY 1) m ON m.conversation_id = c.conversation_id
        WHERE m.lo IS NULL OR c.first_seq > m.lo OR c.last_seq < m.hi""",
    "store_summary_span": """
        SELECT s.user_id, s.thread_id, 'summary ' || s.summary_id FROM summaries s
        LEFT JOIN threads t ON t.thread_id = s.thread_id
        WHERE t.thread_id IS NULL OR t.user_id != s.user_id OR s.from_seq < 1 OR s.from_seq > s.to_seq
           OR s.to_seq > (SELECT coalesce(max(seq), 0) FROM messages m WHERE m.thread_id = s.thread_id)""",
}


class StoreChecks:
    def __init__(self, db: Database) -> None:
        self.db = db

    def schema_version(self) -> int:
        return self.db.schema_version()

    def problems(self, check: str) -> list[tuple[str, str, str]]:
        """(user_id, thread_id, subject) of each problem the check finds."""
        return [(r[0], r[1], r[2]) for r in self.db.execute(_CHECKS[check])]

    def thread_count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM threads")[0][0])

    def missing_messages(self, user_id: str, message_ids: Sequence[str]) -> set[str]:
        """The ids among `message_ids` that are not a stored message of the user."""
        if not message_ids:
            return set()
        rows = self.db.execute(
            "SELECT x FROM unnest(?::VARCHAR[]) AS t(x) WHERE NOT EXISTS "
            "(SELECT 1 FROM messages m WHERE m.message_id = t.x AND m.user_id = ?)", [list(message_ids), user_id])
        return {r[0] for r in rows}

    def day_spans(self, thread_id: str) -> list[tuple[str, date, int, int]]:
        """(user_id, day_label, first seq, last seq) of each day the thread's messages fall on."""
        rows = self.db.execute(
            "SELECT user_id, day_label, min(seq), max(seq) FROM messages WHERE thread_id = ? GROUP BY ALL", [thread_id])
        return [(r[0], r[1], int(r[2]), int(r[3])) for r in rows]
