"""What conversation.search returns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

from engine.query.ranking import ScoreParts

__all__ = ["SearchHit", "SearchResponse", "SearchMode", "LIMIT_RANGE", "DEFAULT_LIMIT", "KINDS", "MAX_QUERY_CHARS",
           "MAX_RECENCY_DAYS", "recency_in_range"]

SearchMode = Literal["hybrid", "lexical", "vector"]
LIMIT_RANGE = (1, 20)
MAX_RECENCY_DAYS = 36500  # a hundred years: anything longer is no filter at all


def recency_in_range(days: float) -> bool:
    return 0 < days <= MAX_RECENCY_DAYS
DEFAULT_LIMIT = 6  # results when the caller does not say
KINDS = ("summary", "message")  # what a search returns unless `kinds` narrows it
MAX_QUERY_CHARS = 4096


@dataclass(frozen=True, slots=True)
class SearchHit:
    kind: Literal["summary", "message"]
    score: float
    thread_id: str
    day_label: date | None
    day_segment_id: str | None
    snippet: str
    covered_by_summary: bool
    from_seq: int
    to_seq: int
    message_id: str | None = None  # the message to cite: the best match of its window
    seq: int | None = None
    created_at: datetime | None = None
    role: str | None = None
    speaker: str | None = None
    first_message_id: str | None = None  # the window's first and last messages
    last_message_id: str | None = None
    summary_id: str | None = None
    summary_kind: str | None = None
    parts: ScoreParts | None = None  # only with explain=True
    started_at: datetime | None = None  # summary hits: when the first and last messages they cover were written
    ended_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SearchResponse:
    query: str
    results: tuple[SearchHit, ...]
    mode: SearchMode
    not_vector_indexed: int  # messages found lexically but not yet in the vector index
    took_ms: float
    notice: str | None = None  # e.g. why the search fell back to lexical
    terms: tuple[str, ...] = ()  # the query's words as the keyword index searched them (stemmed, no stop words or dates)
