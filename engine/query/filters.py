"""Search filters to seq intervals.

Threads are appended in time order, so every time filter (day, recency, start/end) selects one
contiguous seq interval per thread. Filtering windows and summaries by interval happens before
fusion, so a filter can never empty a result list that was cut too early.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from engine.errors import InvalidInputError
from engine.query.search_types import MAX_RECENCY_DAYS, recency_in_range
from engine.store.core import Store
from engine.timeutil import parse_day, parse_timestamp, zone

__all__ = ["SearchFilters", "seq_intervals"]

Intervals = dict[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class SearchFilters:
    day: date | None = None
    start: datetime | None = None
    end: datetime | None = None

    @property
    def active(self) -> bool:
        return self.day is not None or self.start is not None or self.end is not None

    @classmethod
    def parse(cls, *, timezone: str, now: datetime, day: str | date | None = None, recency_days: float | None = None,
              start: str | datetime | None = None, end: str | datetime | None = None) -> "SearchFilters":
        """Read the caller's filters: a naive time is in the user's zone; recency counts back from now."""
        tz = zone(timezone)
        begin = parse_timestamp(start, tz) if start is not None else None
        finish = parse_timestamp(end, tz) if end is not None else None
        if recency_days is not None:
            if not isinstance(recency_days, (int, float)) or isinstance(recency_days, bool) or not recency_in_range(recency_days):
                raise InvalidInputError(f"recency_days must be a number of days, more than 0 and at most {MAX_RECENCY_DAYS} "
                                        f"(0.5 is twelve hours), got {recency_days!r}")
            recent = now - timedelta(days=float(recency_days))
            begin = max(begin, recent) if begin else recent
        if begin and finish and begin >= finish:
            raise InvalidInputError(f"start {begin.isoformat()} is not before end {finish.isoformat()}: swap them")
        return cls(day=parse_day(day) if day is not None else None, start=begin, end=finish)


def seq_intervals(store: Store, user_id: str, filters: SearchFilters) -> Intervals | None:
    """thread -> (first seq, last seq) the filters allow; None when there are no filters."""
    if not filters.active:
        return None
    return store.history.seq_bounds(user_id, day=filters.day, start=filters.start, end=filters.end)
