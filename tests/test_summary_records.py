"""SummaryRecords: the summary index's columns give back each summary as it was, without its Markdown."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, datetime, timedelta, timezone

import numpy as np

from engine.models import Summary
from engine.query.summary_records import SummaryRecords


def _summaries(n: int, seed: int, user: str = "u1") -> list[Summary]:
    rng = np.random.default_rng(seed)
    at = datetime(2024, 3, 4, 5, 6, 7, 891_011, tzinfo=timezone.utc)
    out = []
    for i in range(n):
        kind = ("day", "conversation", "range")[i % 3]
        start = int(rng.integers(0, 10_000))
        out.append(Summary(
            summary_id=f"{user}:s{i}", thread_id=f"{user}:t{i % 2}", user_id=user, kind=kind, from_seq=start,
            to_seq=start + int(rng.integers(0, 50)), markdown=f"## Summary\nnumber {i}",
            created_at=at + timedelta(microseconds=int(rng.integers(0, 10**12))), updated_at=at + timedelta(days=i),
            day_label=date(2024, 1, 1) + timedelta(days=i) if kind == "day" else None,
            conversation_id=f"{user}:t0:conv:{i}" if kind == "conversation" else None,
            title=f"title {i}" if i % 2 else None, message_count=i * 3))
    return out


def test_every_summary_comes_back_equal_but_its_markdown() -> None:
    summaries = _summaries(30, 1)
    records = SummaryRecords.of(summaries)
    bare = [replace(s, markdown="") for s in summaries]
    assert len(records) == 30 and list(records) == bare and records[7] == bare[7] and records[2:5] == bare[2:5]
    assert records.ids.tolist() == [s.summary_id for s in summaries]
    assert records.thread_ids().tolist() == [s.thread_id for s in summaries]
    assert records.days.tolist() == [s.day_label.toordinal() if s.day_label else 0 for s in summaries]
    assert list(SummaryRecords.of([])) == [] and not SummaryRecords.of([]) and not len(SummaryRecords.of([]).thread_ids())


def test_rows_taken_and_joined_keep_each_summary_whole() -> None:
    first, second = _summaries(12, 2), _summaries(7, 3, user="u2")  # other threads, user and kinds to code
    records = SummaryRecords.of(first).joined(SummaryRecords.of(second))
    both = [replace(s, markdown="") for s in first + second]
    assert list(records) == both
    rows = [18, 0, 5, 12, 5]
    assert list(records.take(rows)) == [both[i] for i in rows]
    assert list(records.take(np.array([], dtype=np.int64))) == []
    assert list(records.take([3, 4]).joined(SummaryRecords.of(second[:2]))) == [both[3], both[4], *both[12:14]]

