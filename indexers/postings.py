"""Postings of the BM25 index: CSR-by-term segments of raw term frequencies, and how they
are built from a batch and merged (the pure array work behind indexers/bm25.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from indexers.term_stats import TermStats, common_rows, term_stats

__all__ = ["Segment", "EMPTY_SEGMENT", "run_starts", "merge_segments", "batch_segment"]


@dataclass(frozen=True, slots=True)
class Segment:
    """Postings CSR by term: documents docs[ptr[i]:ptr[i+1]] contain term terms[i]."""

    terms: np.ndarray  # int32, strictly increasing term ids
    ptr: np.ndarray  # int64, len(terms) + 1
    docs: np.ndarray  # int32 internal document ids
    tfs: np.ndarray  # int32 raw term frequencies
    _stats: dict[int, TermStats] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def size(self) -> int:
        return len(self.docs)

    def stats(self, row: int, doc_len: np.ndarray) -> TermStats | None:
        """The stats of the term at `row` (indexers/term_stats.py; `doc_len`: every document's
        length), made on first use and kept: a segment never changes, nor its documents' lengths."""
        found = self._stats.get(row)
        if found is None:
            start, end = self.ptr[row], self.ptr[row + 1]
            found = term_stats(self.docs[start:end], self.tfs[start:end], doc_len)
            if found is not None:  # a rare term's None is as quick to find again
                self._stats[row] = found
        return found

    def warm(self, doc_len: np.ndarray) -> None:
        """Make the stats of every term that has them now, not on a query's first use of the term."""
        for row in common_rows(self.ptr).tolist():
            self.stats(row, doc_len)

    def posting_terms(self) -> np.ndarray:
        return np.repeat(self.terms, np.diff(self.ptr))

    @staticmethod
    def from_sorted(post_terms: np.ndarray, docs: np.ndarray, tfs: np.ndarray) -> Segment:
        """Build from postings already sorted by term."""
        heads = run_starts(post_terms)
        ptr = np.append(heads, len(post_terms)).astype(np.int64)
        terms = post_terms[heads].astype(np.int32)
        return Segment(terms, ptr, docs.astype(np.int32, copy=False), tfs.astype(np.int32, copy=False))


def run_starts(values: np.ndarray) -> np.ndarray:
    """Index of the first element of each run of equal values (in a sorted array)."""
    if not len(values):
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))


EMPTY_SEGMENT = Segment.from_sorted(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))


def merge_segments(older: Segment, newer: Segment) -> Segment:
    """One segment from two; the stable sort keeps each term's postings in document order."""
    terms = np.concatenate((older.posting_terms(), newer.posting_terms()))
    order = np.argsort(terms, kind="stable")
    docs = np.concatenate((older.docs, newer.docs))[order]
    return Segment.from_sorted(terms[order], docs, np.concatenate((older.tfs, newer.tfs))[order])


def batch_segment(term_ids: np.ndarray, lengths: np.ndarray, first_doc: int) -> Segment:
    """Postings of a batch: runs of equal sorted (term, doc) keys give tf, ordered by term then doc."""
    n = len(lengths)
    # the same values either way; NumPy's stable sort took 0.21 s for a 100k build's 4.9M keys, its default 0.30
    keys = np.sort(term_ids * n + np.repeat(np.arange(n, dtype=np.int64), lengths), kind="stable")
    heads = run_starts(keys)
    keys, tfs = keys[heads], np.diff(np.append(heads, len(keys)))
    return Segment.from_sorted(keys // n, keys % n + first_doc, tfs)
