"""What a query may want to know of a common term's postings in one segment, beyond the postings:
how much it can add to a score (its frontier) and, when it is dense, each document's frequency at
hand (its column). Made once per segment and term (`Segment.stats`), since segments never change.

Why: at 1M windows a query joining rare words with very common ones (postings up to ~700,000)
spent most of its time scoring tens of thousands of candidates on the common terms, walking or
binary-searching their postings; and the bound that lets a top list stop early, idf x (k1 + 1),
is loose by a fifth on such terms (docs/benchmarks.md, issue 18).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["STATS_FROM", "TermColumn", "TermStats", "common_rows", "frontier", "term_stats"]

STATS_FROM = 4_096  # a term's postings in a segment from which it gets a frontier: rarer ones are read, not bounded
COLUMN_FROM = 65_536  # ... and from which it may get a column,
COLUMN_DENSITY = 8  # if it holds at least one in this many of the documents its postings span
FRONTIER_EXACT = 8  # frequencies below this keep their own shortest document in a frontier


@dataclass(frozen=True, slots=True)
class TermColumn:
    """A term's frequency in each document from `first` to `first + len(tfs) - 1` (0: absent): one
    byte per document spanned, at most what its postings take (COLUMN_DENSITY)."""

    first: int
    tfs: np.ndarray  # uint8 when every frequency fits, else int32

    def frequencies(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ids, frequencies) of the given documents that hold the term."""
        offsets = ids - self.first
        inside = np.flatnonzero((offsets >= 0) & (offsets < len(self.tfs)))
        tfs = self.tfs[offsets[inside]]
        held = tfs > 0
        return inside[held], tfs[held]


@dataclass(frozen=True, slots=True)
class TermStats:
    """A term's frontier in a segment, and its column there if it is dense enough to have one."""

    frontier: tuple[tuple[int, int], ...]  # (frequency, length) pairs dominating every posting
    column: TermColumn | None


def term_stats(docs: np.ndarray, tfs: np.ndarray, doc_len: np.ndarray) -> TermStats | None:
    """Stats of a term's postings (documents ascending; `doc_len`: every document's length), or
    None when they are too few to be worth any (STATS_FROM)."""
    if len(docs) < STATS_FROM:
        return None
    first, last = int(docs[0]), int(docs[-1])
    column = None
    if len(docs) >= max(COLUMN_FROM, (last - first + 1) / COLUMN_DENSITY):
        column_tfs = np.zeros(last - first + 1, np.uint8 if tfs.max() <= np.iinfo(np.uint8).max else np.int32)
        column_tfs[docs - first] = tfs
        column = TermColumn(first, column_tfs)
    return TermStats(frontier(tfs, doc_len[docs]), column)


def common_rows(ptr: np.ndarray) -> np.ndarray:
    """The rows of a CSR segment's terms that have stats (STATS_FROM postings or more)."""
    return np.flatnonzero(np.diff(ptr) >= STATS_FROM)


def frontier(tfs: np.ndarray, lengths: np.ndarray) -> tuple[tuple[int, int], ...]:
    """(frequency, length) pairs such that every posting has one with a frequency at least its own
    and a length at most its own, so BM25's share of the best pair bounds every posting's (it grows
    with the frequency and shrinks with the length): each frequency below FRONTIER_EXACT with its
    shortest document, the higher ones together (their largest frequency, their shortest length).
    One pass (`np.minimum.at`): a loop over the frequencies made the first query of a common term slow."""
    absent = np.iinfo(np.int64).max
    shortest = np.full(FRONTIER_EXACT + 1, absent)
    np.minimum.at(shortest, np.minimum(tfs, FRONTIER_EXACT), lengths)
    top = int(tfs.max())
    return tuple((tf if tf < FRONTIER_EXACT else top, int(length))
                 for tf, length in enumerate(shortest.tolist()) if length != absent)
