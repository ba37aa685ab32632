"""A user's summaries as columns, for the summary index: a `Summary` is made only for a row read.

Why: a 1M-message user has ~57,600 summaries. Held as `Summary` objects, each was a tracked object
with its own copies of thread and user ids, two datetimes and a date: 57,613 of the 144k objects a
full garbage collection walked after the shard loaded (72-75 ms; 39-58 as columns). A search reads a
few hundred rows' spans and days, and whole summaries only for the hits it shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Iterable, Iterator, Sequence, cast, overload

import numpy as np

from engine.models import Summary, SummaryKind

__all__ = ["SummaryRecords"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True, eq=False)
class SummaryRecords(Sequence[Summary]):
    """Summaries without their Markdown (`markdown=""`; the index packs it apart), by row. Compared
    by identity: its columns are arrays."""

    ids: np.ndarray  # object: summary ids (object arrays, not tuples: rows are taken without a Python loop)
    names: tuple[str, ...]  # the distinct thread ids, user ids and kinds, which `codes` index
    codes: np.ndarray  # (n, 3) int32: thread, user and kind of each row
    seqs: np.ndarray  # (n, 2) int64: from_seq, to_seq
    micros: np.ndarray  # (n, 2) int64: created_at, updated_at in microseconds since the UTC epoch
    days: np.ndarray  # int32: day_label as an ordinal, 0 for none
    counts: np.ndarray  # int64: message_count
    conversations: np.ndarray  # object: str or None
    titles: np.ndarray  # object: str or None

    @classmethod
    def of(cls, summaries: Sequence[Summary]) -> "SummaryRecords":
        names: dict[str, int] = {}
        def code(name: str) -> int:
            return names.setdefault(name, len(names))
        codes = [(code(s.thread_id), code(s.user_id), code(s.kind)) for s in summaries]
        return cls(
            _objects(s.summary_id for s in summaries), tuple(names), np.array(codes, dtype=np.int32).reshape(-1, 3),
            np.array([(s.from_seq, s.to_seq) for s in summaries], dtype=np.int64).reshape(-1, 2),
            np.array([(_micros(s.created_at), _micros(s.updated_at)) for s in summaries], dtype=np.int64).reshape(-1, 2),
            np.array([s.day_label.toordinal() if s.day_label else 0 for s in summaries], dtype=np.int32),
            np.array([s.message_count for s in summaries], dtype=np.int64),
            _objects(s.conversation_id for s in summaries), _objects(s.title for s in summaries))

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, row: int) -> Summary: ...
    @overload
    def __getitem__(self, row: slice) -> Sequence[Summary]: ...
    def __getitem__(self, row: int | slice) -> Summary | Sequence[Summary]:
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        thread, user, kind = self.codes[row].tolist()
        start, end = self.seqs[row].tolist()
        created, updated = self.micros[row].tolist()
        day = int(self.days[row])
        return Summary(
            summary_id=self.ids[row], thread_id=self.names[thread], user_id=self.names[user],
            kind=cast(SummaryKind, self.names[kind]), from_seq=start, to_seq=end, markdown="",
            created_at=_EPOCH + timedelta(microseconds=created), updated_at=_EPOCH + timedelta(microseconds=updated),
            day_label=date.fromordinal(day) if day else None, conversation_id=self.conversations[row],
            title=self.titles[row], message_count=int(self.counts[row]))

    def __iter__(self) -> Iterator[Summary]:
        return (self[i] for i in range(len(self)))

    def thread_ids(self) -> np.ndarray:
        """Each row's thread id (an object array)."""
        return np.array(self.names, dtype=object)[self.codes[:, 0]] if len(self) else np.zeros(0, dtype=object)

    def take(self, rows: Sequence[int] | np.ndarray) -> "SummaryRecords":
        """These rows, in this order."""
        at = np.asarray(rows, dtype=np.int64)
        return SummaryRecords(self.ids[at], self.names, self.codes[at], self.seqs[at], self.micros[at], self.days[at],
                              self.counts[at], self.conversations[at], self.titles[at])

    def joined(self, other: "SummaryRecords") -> "SummaryRecords":
        """These rows, then the other's (its names coded as these)."""
        names = dict(zip(self.names, range(len(self.names))))
        remap = np.array([names.setdefault(n, len(names)) for n in other.names], dtype=np.int32)
        join = lambda a, b: np.concatenate((a, b))  # noqa: E731
        return SummaryRecords(join(self.ids, other.ids), tuple(names), join(self.codes, remap[other.codes]),
                              join(self.seqs, other.seqs), join(self.micros, other.micros), join(self.days, other.days),
                              join(self.counts, other.counts), join(self.conversations, other.conversations),
                              join(self.titles, other.titles))


def _objects(values: Iterable[str | None]) -> np.ndarray:
    return np.array(list(values), dtype=object)


def _micros(at: datetime) -> int:
    """Microseconds since the UTC epoch of an aware time, exactly (no float)."""
    return (at - _EPOCH) // timedelta(microseconds=1)
