"""Summaries as search candidates: a small per-user BM25 and vector set, rebuilt when they change.

A user has few summaries (one a day or conversation), so exact scoring of all of them is cheaper
than keeping an ANN graph; the vectors come from the same cache as the windows'.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from dataclasses import dataclass

import numpy as np

from engine.models import Summary
from indexers.bm25 import Bm25Index
from indexers.pipeline import IndexPipeline

__all__ = ["SummaryIndex", "SummaryMatches", "Coverage", "summary_text"]


@dataclass(frozen=True, slots=True)
class SummaryMatches:
    summaries: tuple[Summary, ...]
    lexical_raw: np.ndarray
    matched: np.ndarray  # shares a term with the query
    cosine: np.ndarray | None  # None when there are no vectors (lexical mode)


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
class _Entry:
    fingerprint: tuple
    summaries: tuple[Summary, ...]
    bm25: Bm25Index
    vectors: np.ndarray | None
    coverage: Coverage


class SummaryIndex:
    def __init__(self, pipeline: IndexPipeline) -> None:
        self.pipeline = pipeline
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def match(self, user_id: str, query_tokens: list[str], query_vector: np.ndarray | None,
              intervals: dict[str, tuple[int, int]] | None) -> SummaryMatches:
        """Every summary of the user the filters allow, with its raw BM25 and cosine."""
        entry = self._entry(user_id, with_vectors=query_vector is not None)
        keep = [i for i, s in enumerate(entry.summaries) if _inside(s, intervals)]
        labels = np.asarray(keep, dtype=np.int64)
        raw = entry.bm25.scores_for(query_tokens, labels) if keep else np.zeros(0)
        hits = entry.bm25.search(query_tokens, len(keep), labels)[0] if keep and query_tokens else np.zeros(0)
        matched = np.isin(labels, hits) | (np.asarray(raw) > 0)
        cosine = None
        if query_vector is not None and entry.vectors is not None:
            cosine = entry.vectors[labels] @ query_vector if keep else np.zeros(0)
        return SummaryMatches(tuple(entry.summaries[i] for i in keep), np.asarray(raw, dtype=np.float64), matched, cosine)

    def summaries_of(self, user_id: str) -> tuple[Summary, ...]:
        return self._entry(user_id, with_vectors=False).summaries

    def coverage(self, user_id: str) -> "Coverage":
        """Which messages the user's summaries cover, for the search penalty (built once per change)."""
        return self._entry(user_id, with_vectors=False).coverage

    def forget(self, user_id: str) -> None:
        with self._lock:
            self._entries.pop(user_id, None)

    def _entry(self, user_id: str, *, with_vectors: bool) -> _Entry:
        fingerprint = (self.pipeline.store.timeline.revision,)
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
        vectors = None
        if with_vectors and self.pipeline.embedder is not None and summaries:
            hashes = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
            vectors, _ = self.pipeline.cached_vectors(user_id, hashes, texts)
        return _Entry(fingerprint, summaries, bm25, vectors, Coverage(summaries))


def summary_text(summary: Summary) -> str:
    """What a summary is indexed and embedded as."""
    return f"{summary.title}\n{summary.markdown}" if summary.title else summary.markdown


def _inside(summary: Summary, intervals: dict[str, tuple[int, int]] | None) -> bool:
    if intervals is None:
        return True
    span = intervals.get(summary.thread_id)
    return span is not None and summary.from_seq <= span[1] and summary.to_seq >= span[0]
