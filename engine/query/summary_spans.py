"""Where summaries lie, as arrays, and which of them cover which of a search's candidate messages.

A query tests thousands of summaries (57,613 at 1M messages) against a search's ~70 candidate
messages: sorted starts and a binary search per message, no Python loop over the summaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.query.summary_records import SummaryRecords

__all__ = ["CoverPairs", "NO_COVERS", "Spans"]


@dataclass(frozen=True, slots=True)
class CoverPairs:
    """Which summaries cover which of a search's candidate messages: (message position, summary row)."""

    messages: int  # how many candidate messages
    at: np.ndarray  # positions among them
    rows: np.ndarray  # rows of the summaries scored

    def best(self, scores: np.ndarray) -> np.ndarray:
        """The best of `scores` (one per summary row) among the summaries covering each message; NaN where none does."""
        best = np.full(self.messages, -np.inf)
        np.maximum.at(best, self.at, scores[self.rows])
        return np.where(np.isfinite(best), best, np.nan)


NO_COVERS = CoverPairs(0, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))  # no messages were searched


@dataclass(frozen=True, slots=True)
class Spans:
    """Where summaries lie, as arrays: a query tests thousands of them without a Python loop."""

    threads: np.ndarray  # object: thread ids
    starts: np.ndarray  # from_seq
    ends: np.ndarray  # to_seq (inclusive)
    by_start: np.ndarray  # rows in (thread, from_seq) order
    blocks: dict[str, tuple[int, int]]  # thread -> its range of `by_start`
    longest: int  # at least the most seqs one summary spans: how far before a seq a covering one can start
    # Made once, so a search gathers nothing the size of all the summaries (57,613 at 1M messages):
    starts_by_start: np.ndarray  # starts in `by_start` order
    places: np.ndarray  # each row's place in `by_start`

    @classmethod
    def of(cls, summaries: SummaryRecords, *, ordered: bool = False) -> "Spans":
        """`ordered`: the summaries are already by thread, then start (no sort)."""
        return cls.indexed(summaries.thread_ids(), summaries.seqs[:, 0], summaries.seqs[:, 1], ordered=ordered)

    @classmethod
    def indexed(cls, threads: np.ndarray, starts: np.ndarray, ends: np.ndarray, *, ordered: bool = False) -> "Spans":
        by_start = (np.arange(len(starts), dtype=np.int64) if ordered else
                    np.array(sorted(range(len(starts)), key=lambda i: (threads[i], starts[i])), dtype=np.int64))
        longest = int((ends - starts).max()) + 1 if len(starts) else 0
        return cls._of(threads, starts, ends, by_start, longest)

    @classmethod
    def _of(cls, threads: np.ndarray, starts: np.ndarray, ends: np.ndarray, by_start: np.ndarray, longest: int) -> "Spans":
        places = np.empty(len(by_start), dtype=np.int64)
        places[by_start] = np.arange(len(by_start))
        return cls(threads, starts, ends, by_start, _blocks(threads[by_start]), longest, starts[by_start], places)

    def take(self, rows: np.ndarray) -> "Spans":
        """These rows (ascending, as `overlapping` gives them), keeping the order already sorted."""
        by_start = np.argsort(self.places[rows])
        return Spans._of(self.threads[rows], self.starts[rows], self.ends[rows], by_start, self.longest)

    def overlapping(self, intervals: dict[str, tuple[int, int]]) -> np.ndarray:
        """Rows whose span overlaps the allowed seq interval of their thread."""
        keep = np.zeros(len(self.starts), dtype=bool)
        for thread_id, (lo, hi) in intervals.items():
            keep |= (self.threads == thread_id) & (self.starts <= hi) & (self.ends >= lo)
        return np.flatnonzero(keep)

    def covering(self, thread_id: str, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in `seqs`, row) for every summary of the thread covering that seq: only the
        summaries starting at most `longest` seqs before each one are tested, not all of them."""
        first, last = self.blocks.get(thread_id, (0, 0))
        rows, starts = self.by_start[first:last], self.starts_by_start[first:last]
        lo, hi = np.searchsorted(starts, seqs - self.longest, "left"), np.searchsorted(starts, seqs, "right")
        counts = hi - lo
        at = np.repeat(np.arange(len(seqs)), counts)
        tried = rows[np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())]
        inside = self.ends[tried] >= seqs[at]
        return at[inside], tried[inside]

    def covering_pairs(self, thread_ids: Sequence[str], seqs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """`covering` for (thread, seq) pairs of any threads: (position in the pairs, row)."""
        seqs_arr, threads = np.asarray(seqs, dtype=np.int64), np.asarray(thread_ids, dtype=object)
        found = [(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))]
        for thread in set(thread_ids):  # a user has few threads
            mine = np.flatnonzero(threads == thread)
            at, rows = self.covering(thread, seqs_arr[mine])
            found.append((mine[at], rows))
        return np.concatenate([a for a, _ in found]), np.concatenate([r for _, r in found])

    def covered(self, thread_ids: Sequence[str], seqs: Sequence[int]) -> np.ndarray:
        """Whether any of these summaries covers each (thread, seq): the search's covered-by-summary flag."""
        out = np.zeros(len(seqs), dtype=bool)
        out[self.covering_pairs(thread_ids, seqs)[0]] = True
        return out


def _blocks(ordered_threads: np.ndarray) -> dict[str, tuple[int, int]]:
    """Each thread's (first, end) positions in an array sorted by thread."""
    cuts = [0, *(np.flatnonzero(ordered_threads[1:] != ordered_threads[:-1]) + 1).tolist(), len(ordered_threads)]
    return {ordered_threads[a]: (a, b) for a, b in zip(cuts, cuts[1:]) if b > a}
