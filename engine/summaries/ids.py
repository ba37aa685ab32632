"""Summary ids are derived from what they summarise, so a rewrite replaces the summary it updates."""

from __future__ import annotations

from datetime import date

__all__ = ["day_summary_id", "conversation_summary_id", "range_summary_id"]


def day_summary_id(thread_id: str, day_label: date) -> str:
    return f"{thread_id}:sum:day:{day_label.isoformat()}"


def conversation_summary_id(thread_id: str, conversation_id: str) -> str:
    return f"{thread_id}:sum:conv:{conversation_id.rsplit(':', 1)[-1]}"


def range_summary_id(thread_id: str, from_seq: int, to_seq: int) -> str:
    return f"{thread_id}:sum:range:{from_seq}-{to_seq}"
