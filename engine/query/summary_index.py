"""Summaries as search candidates: a small per-user BM25 and vector set, rebuilt when they change.

A user has few summaries (one a day or conversation), so exact scoring of all of them is cheaper
than keeping an ANN graph; the vectors come from the same cache as the windows'. The write paths
embed new summaries (`embed_pending`); a search only reads the cache, so it never embeds or writes,
and a summary without a vector yet is scored lexically, as a window without one is.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.models import Summary
from indexers.bm25 import Bm25Index
from engine.store.embedding_cache import content_hash
from indexers.pipeline import IndexPipeline

__all__ = ["SummaryIndex", "SummaryMatches", "Spans", "Coverage", "summary_text", "summary_key"]


@dataclass(frozen=True, slots=True)
class SummaryMatches:
    summaries: tuple[Summary, ...]
    lexical_raw: np.ndarray
    matched: np.ndarray  # shares a term with the query
    vectors: np.ndarray | None  # of these summaries (NaN rows: no vector yet); None: not asked for, or none
    spans: "Spans"  # of these summaries, as arrays

    def cosine(self, query_vector: np.ndarray | None) -> np.ndarray | None:
        """Each summary's cosine with the query (NaN: no vector yet); None without both vectors."""
        return None if query_vector is None or self.vectors is None else self.vectors @ query_vector


class Coverage:
    """Merged summary spans per thread: `covers(thread, seq)` is a binary search, not a scan."""

    def __init__(self, summaries: tuple[Summary, ...]) -> None:
        spans: dict[str, list[tuple[int, int]]] = {}
        for s in sorted(summaries, key=lambda s: (s.thread_id, s.from_seq)):
            merged = spans.setdefault(s.thread_id, [])
            if merged and s.from_seq <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], s.to_seq))
            else:
                merged.append((s.from_seq, s.to_seq))
        self._starts = {t: [a for a, _ in v] for t, v in spans.items()}
        self._spans = spans

    def covers(self, thread_id: str, seq: int) -> bool:
        starts = self._starts.get(thread_id)
        if not starts:
            return False
        i = bisect.bisect_right(starts, seq) - 1
        return i >= 0 and self._spans[thread_id][i][1] >= seq


@dataclass(frozen=True, slots=True)
class Spans:
    """Where summaries lie, as arrays: a query tests thousands of them without a Python loop."""

    threads: np.ndarray  # object: thread ids
    starts: np.ndarray  # from_seq
    ends: np.ndarray  # to_seq (inclusive)
    by_start: np.ndarray  # rows in (thread, from_seq) order
    blocks: dict[str, tuple[int, int]]  # thread -> its range of `by_start`
    longest: int  # at least the most seqs one summary spans: how far before a seq a covering one can start

    @classmethod
    def of(cls, summaries: Sequence[Summary]) -> "Spans":
        return cls.indexed(np.array([s.thread_id for s in summaries], dtype=object),
                           np.array([s.from_seq for s in summaries], dtype=np.int64),
                           np.array([s.to_seq for s in summaries], dtype=np.int64))

    @classmethod
    def indexed(cls, threads: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> "Spans":
        by_start = np.array(sorted(range(len(starts)), key=lambda i: (threads[i], starts[i])), dtype=np.int64)
        longest = int((ends - starts).max()) + 1 if len(starts) else 0
        return cls(threads, starts, ends, by_start, _blocks(threads[by_start]), longest)

    def take(self, rows: np.ndarray) -> "Spans":
        """These rows (ascending, as `overlapping` gives them), keeping the order already sorted."""
        renumbered = np.full(len(self.starts), -1, dtype=np.int64)
        renumbered[rows] = np.arange(len(rows))
        by_start = renumbered[self.by_start]
        by_start = by_start[by_start >= 0]
        threads = self.threads[rows]
        return Spans(threads, self.starts[rows], self.ends[rows], by_start, _blocks(threads[by_start]), self.longest)

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
        rows = self.by_start[first:last]
        starts = self.starts[rows]
        lo, hi = np.searchsorted(starts, seqs - self.longest, "left"), np.searchsorted(starts, seqs, "right")
        counts = hi - lo
        at = np.repeat(np.arange(len(seqs)), counts)
        tried = rows[np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())]
        inside = self.ends[tried] >= seqs[at]
        return at[inside], tried[inside]


def _blocks(ordered_threads: np.ndarray) -> dict[str, tuple[int, int]]:
    """Each thread's (first, end) positions in an array sorted by thread."""
    cuts = [0, *(np.flatnonzero(ordered_threads[1:] != ordered_threads[:-1]) + 1).tolist(), len(ordered_threads)]
    return {ordered_threads[a]: (a, b) for a, b in zip(cuts, cuts[1:]) if b > a}


@dataclass(frozen=True, slots=True)
class _Entry:
    fingerprint: tuple
    summaries: tuple[Summary, ...]
    bm25: Bm25Index
    vectors: np.ndarray | None  # NaN rows: not embedded yet
    coverage: Coverage
    spans: Spans
    every: np.ndarray  # labels 0..n-1: what an unfiltered query scores


class SummaryIndex:
    """Per user, keyed on the store's revision of the user's summaries: one user's write leaves
    every other user's index as it is."""

    def __init__(self, pipeline: IndexPipeline) -> None:
        self.pipeline = pipeline
        self._entries: dict[str, _Entry] = {}
        self._embedded: dict[str, int] = {}  # user -> the summary revision whose summaries all have vectors
        self._lock = threading.Lock()

    def embeds_pending(self, user_id: str) -> bool:
        """Whether this process wrote summaries of the user since `embed_pending` last ran for them
        (what the background step asks, without reading the store)."""
        return self.pipeline.cache is not None and self._embedded.get(user_id, 0) != self._revision(user_id)

    def embed_pending(self, user_id: str) -> int:
        """Embed the user's summaries that have no vector yet (the write paths call this, never a
        search); returns how many texts were embedded. The store is read once per user and process,
        then only after the user's summaries change."""
        cache = self.pipeline.cache
        revision = self._revision(user_id)
        if cache is None or self._embedded.get(user_id) == revision:
            return 0
        texts = {summary_key(s): summary_text(s) for s in self.pipeline.store.timeline.summaries_of_user(user_id)}
        missing = cache.missing(user_id, list(texts))
        if missing:
            self.pipeline.cached_vectors(user_id, missing, [texts[h] for h in missing])
            self.forget(user_id)  # its next use reads the new vectors
        self._embedded[user_id] = revision
        return len(missing)

    def match(self, user_id: str, query_tokens: list[str], intervals: dict[str, tuple[int, int]] | None, *,
              with_vectors: bool) -> SummaryMatches:
        """Every summary of the user the filters allow, with its raw BM25 (and its vector, for the
        query's cosine once the query's vector is known: `SummaryMatches.cosine`)."""
        entry = self._entry(user_id, with_vectors=with_vectors)
        filtered = intervals is not None
        labels = entry.spans.overlapping(intervals) if filtered else entry.every
        raw, matched = entry.bm25.match(query_tokens).scored(labels)
        vectors = entry.vectors if with_vectors else None
        if filtered:
            return SummaryMatches(tuple(entry.summaries[i] for i in labels), raw, matched,
                                  vectors[labels] if vectors is not None else None, entry.spans.take(labels))
        return SummaryMatches(entry.summaries, raw, matched, vectors, entry.spans)  # no copy of the matrix

    def coverage(self, user_id: str) -> "Coverage":
        """Which messages the user's summaries cover, for the search penalty (built once per change)."""
        return self._entry(user_id, with_vectors=False).coverage

    def forget(self, user_id: str) -> None:
        with self._lock:
            self._entries.pop(user_id, None)

    def _revision(self, user_id: str) -> int:
        return self.pipeline.store.timeline.revision(user_id)

    def _entry(self, user_id: str, *, with_vectors: bool) -> _Entry:
        fingerprint = (self._revision(user_id),)
        with self._lock:
            entry = self._entries.get(user_id)
            if entry is None or entry.fingerprint != fingerprint or (with_vectors and entry.vectors is None and entry.summaries):
                entry = self._build(user_id, fingerprint, with_vectors)
                self._entries[user_id] = entry
            return entry

    def _build(self, user_id: str, fingerprint: tuple, with_vectors: bool) -> _Entry:
        summaries = tuple(self.pipeline.store.timeline.summaries_of_user(user_id))
        texts = [summary_text(s) for s in summaries]
        bm25 = Bm25Index(self.pipeline.params.bm25)
        if summaries:
            bm25.add(list(range(len(summaries))), [self.pipeline.tokenizer.tokenize(t) for t in texts])
        vectors = self._cached_vectors(user_id, summaries) if with_vectors else None
        return _Entry(fingerprint, summaries, bm25, vectors, Coverage(summaries), Spans.of(summaries),
                      np.arange(len(summaries), dtype=np.int64))


    def _cached_vectors(self, user_id: str, summaries: Sequence[Summary]) -> np.ndarray | None:
        """The summaries' vectors as the cache holds them, NaN rows for those it does not (read only)."""
        embedder, cache = self.pipeline.embedder, self.pipeline.cache
        if embedder is None or cache is None or not summaries:
            return None
        keys = [summary_key(s) for s in summaries]
        found = cache.get(user_id, keys)
        vectors = np.full((len(keys), embedder.dim), np.nan, dtype=np.float32)
        for row, key in enumerate(keys):
            if key in found:
                vectors[row] = found[key]
        return vectors


def summary_text(summary: Summary) -> str:
    """What a summary is indexed and embedded as."""
    return f"{summary.title}\n{summary.markdown}" if summary.title else summary.markdown


def summary_key(summary: Summary) -> str:
    """The embedding cache's key of a summary's vector."""
    return content_hash(summary_text(summary))
