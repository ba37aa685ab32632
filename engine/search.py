"""conversation.search: candidates from BM25, HNSW and summaries, fused, cited, penalised, merged.

Every query is scoped to one user's shard; filters become seq intervals applied before any
top-k cut; each list is taken `max(candidate_depth, 5 x limit)` deep so fusion has room.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Callable, Sequence

import numpy as np

from engine.citation import best_line, make_snippet
from engine.config import Settings
from engine.errors import EmbeddingUnavailableError, InvalidInputError
from engine.filters import SearchFilters, seq_intervals
from engine.models import Summary, day_segment_id
from engine.ranking import (ScoreParts, apply_penalty, clamp_vector, dedupe_best, merge_summaries_first,
                            normalise_lexical, passes_floor, ranks_of, rrf_fusion, tie_break_key, weighted_fusion)
from engine.search_types import LIMIT_RANGE, MAX_QUERY_CHARS, SearchHit, SearchMode, SearchResponse
from engine.summary_index import Coverage, SummaryIndex
from indexers.embedders import DeadlineEmbedder
from indexers.pipeline import IndexPipeline
from indexers.chunking import Chunk
from indexers.shard import Shard

__all__ = ["Searcher"]

KINDS = ("summary", "message")


@dataclass(frozen=True, slots=True)
class _Query:
    text: str
    tokens: list[str]
    vector: np.ndarray | None
    mode: SearchMode
    fusion: str


class Searcher:
    def __init__(self, pipeline: IndexPipeline, summaries: SummaryIndex, settings: Settings, *,
                 clock: Callable[[], datetime], query_embedder: DeadlineEmbedder | None) -> None:
        self.pipeline = pipeline
        self.store = pipeline.store
        self.summaries = summaries
        self.settings = settings
        self.clock = clock
        self.query_embedder = query_embedder

    def search(self, user_id: str, query: str, *, day=None, recency_days=None, start=None, end=None,
               limit: int = 6, min_score: float | None = None, kinds: Sequence[str] = KINDS, explain: bool = False,
               mode: SearchMode | None = None, fusion: str | None = None, penalty: bool = True) -> SearchResponse:
        began = time.perf_counter()
        text, limit, kinds = _check_query(query), _check_limit(limit), _check_kinds(kinds)
        if min_score is not None and not isinstance(min_score, (int, float)):
            raise InvalidInputError("min_score must be a number from 0 to 1, or omitted")
        user = self.store.get_user(user_id)
        filters = SearchFilters.parse(timezone=user.timezone, now=self.clock(), day=day,
                                      recency_days=recency_days, start=start, end=end)
        intervals = seq_intervals(self.store, user_id, filters)
        shard = self.pipeline.shard(user_id)
        q, notice = self._prepare(text, shard, mode, fusion or self.settings.fusion)
        messages = self._message_hits(user_id, shard, q, intervals, limit, penalty) if "message" in kinds else []
        floor_of = [h for h in messages if passes_floor(h.parts, min_score)]
        summaries = self._summary_hits(user_id, q, intervals, limit, floor_of) if "summary" in kinds else []
        summaries = [h for h in summaries if passes_floor(h.parts, min_score)]
        max_summaries = self.settings.max_summary_results if "message" in kinds else limit
        merged = merge_summaries_first(summaries, floor_of, limit=limit, max_summaries=max_summaries)
        results = tuple(h if explain else replace(h, parts=None) for h in merged)
        return SearchResponse(
            query=text, results=results, mode=q.mode, not_vector_indexed=self.pipeline.pending_vector_messages(user_id),
            took_ms=round((time.perf_counter() - began) * 1000, 2), notice=notice,
        )

    # Query ----------------------------------------------------------------------------------
    def _prepare(self, text: str, shard: Shard, mode: SearchMode | None, fusion: str) -> tuple[_Query, str | None]:
        tokens = shard.tokenizer.tokenize(text)
        if mode not in (None, "hybrid", "lexical", "vector"):
            raise InvalidInputError(f"mode must be hybrid, lexical or vector, got {mode!r}")
        if mode == "lexical":
            return _Query(text, tokens, None, "lexical", fusion), None
        vector, notice = self._embed_query(text, shard)
        if vector is None:
            return _Query(text, tokens, None, "lexical", fusion), notice
        return _Query(text, tokens, vector, mode or "hybrid", fusion), notice

    def _embed_query(self, text: str, shard: Shard) -> tuple[np.ndarray | None, str | None]:
        if self.query_embedder is None or shard.hnsw is None:
            return None, "embeddings are disabled: lexical search only"
        try:
            return self.query_embedder.embed_within([text], self.settings.embedding_timeout_s)[0], None
        except EmbeddingUnavailableError as exc:
            return None, f"lexical search only: {exc.message}"

    # Messages -------------------------------------------------------------------------------
    def _message_hits(self, user_id: str, shard: Shard, q: _Query, intervals, limit: int, penalty: bool) -> list[SearchHit]:
        depth = max(self.settings.candidate_depth, 5 * limit)
        with shard.lock:
            labels, raw, matched, cosine = _window_candidates(shard, q, intervals, depth)
            if not len(labels):
                return []
            parts = self._fuse(raw, matched, cosine, q)
            order = np.argsort([-p.fused for p in parts], kind="stable")[: 3 * limit + 10]
            weights = (self.settings.vector_weight, self.settings.lexical_weight)
            # idf can be <= 0 in a tiny corpus; a floor keeps "shares more query terms" meaningful there
            idf = {t: max(shard.bm25.max_score([t]), 0.0) + 0.01 for t in set(q.tokens)}
            cited = [c for i in order
                     if (c := _cite(shard, int(labels[i]), parts[i], q, intervals, weights, idf)) is not None]
        cited = dedupe_best(cited, key=lambda c: c.message_id, score=lambda c: c.parts.fused)
        cited.sort(key=lambda c: -c.parts.fused)
        cited = cited[: limit + 10]  # the penalty may reorder these; nothing further down can overtake
        stored = {m.message_id: m for m in self.store.messages_by_ids([c.message_id for c in cited], user_id=user_id)}
        coverage = self.summaries.coverage(user_id)
        hits = [self._hit(c, stored[c.message_id], coverage, penalty, q) for c in cited if c.message_id in stored]
        hits.sort(key=lambda h: tie_break_key(h.score, h.day_label, h.created_at.timestamp()))
        return hits[:limit]

    def _hit(self, cited: "_Cited", message, coverage: Coverage, penalty: bool, q: _Query) -> SearchHit:
        is_covered = coverage.covers(message.thread_id, message.seq)
        parts = replace(cited.parts, penalty=apply_penalty(is_covered, self.settings.covered_penalty) if penalty else 1.0)
        chunk = cited.chunk
        return SearchHit(
            kind="message", score=round(parts.final, 6), thread_id=message.thread_id, day_label=message.day_label,
            day_segment_id=message.day_segment_id, snippet=make_snippet(message.content, q.text.split() + q.tokens),
            covered_by_summary=is_covered, from_seq=chunk.from_seq, to_seq=chunk.to_seq,
            message_id=message.message_id, seq=message.seq, created_at=message.created_at, role=message.role,
            speaker=message.speaker, first_message_id=chunk.message_ids[0], last_message_id=chunk.message_ids[-1],
            parts=parts,
        )

    def _fuse(self, raw: np.ndarray, matched: np.ndarray, cosine: np.ndarray | None, q: _Query) -> list[ScoreParts]:
        lexical = normalise_lexical(raw, matched)
        has_vec = ~np.isnan(cosine) if cosine is not None else np.zeros(len(raw), dtype=bool)
        vector = clamp_vector(np.nan_to_num(cosine, nan=0.0)) if cosine is not None else np.zeros(len(raw))
        lex_rank, vec_rank = ranks_of(raw, present=matched), ranks_of(vector, present=has_vec)
        if q.mode == "lexical":
            fused, how = lexical, np.full(len(raw), "lexical")
        elif q.mode == "vector":
            fused, how = vector, np.full(len(raw), "vector")
        elif q.fusion == "rrf":
            fused, how = rrf_fusion(vec_rank, lex_rank, k=self.settings.rrf_k), np.full(len(raw), "rrf")
        else:
            both = weighted_fusion(vector, lexical, vector_weight=self.settings.vector_weight,
                                   lexical_weight=self.settings.lexical_weight)
            # a window not yet embedded is scored lexically rather than with a vector score of 0
            fused, how = np.where(has_vec, both, lexical), np.where(has_vec, "weighted", "lexical")
        return [ScoreParts(vector=float(vector[i]) if has_vec[i] else None, lexical=float(lexical[i]),
                           lexical_raw=float(raw[i]), fused=float(fused[i]), penalty=1.0,
                           vector_rank=int(vec_rank[i]) or None, lexical_rank=int(lex_rank[i]) or None,
                           fusion=str(how[i])) for i in range(len(raw))]

    # Summaries ------------------------------------------------------------------------------
    def _summary_hits(self, user_id: str, q: _Query, intervals, limit: int, messages: list[SearchHit]) -> list[SearchHit]:
        matches = self.summaries.match(user_id, q.tokens, q.vector, intervals)
        if not matches.summaries:
            return []
        parts = self._fuse(matches.lexical_raw, matches.matched, matches.cosine, q)
        # A summary leads only if it would have earned a place among the messages on its own score.
        bar = messages[min(limit, len(messages)) - 1].score if messages else 0.0
        hits = [_summary_hit(s, p, q) for s, p in zip(matches.summaries, parts)
                if p.fused > 0 and p.fused >= bar]
        hits.sort(key=lambda h: tie_break_key(h.score, h.day_label, h.to_seq))
        return hits


@dataclass(frozen=True, slots=True)
class _Cited:
    message_id: str
    chunk: Chunk
    parts: ScoreParts


def _cite(shard: Shard, label: int, parts: ScoreParts, q: _Query, intervals,
          weights: tuple[float, float], idf: dict[str, float]) -> _Cited | None:
    """The window's best message for the query, among those the filters allow."""
    chunk = shard.chunks[label]
    span = intervals.get(chunk.thread_id) if intervals is not None else None
    allowed = [span is None or span[0] <= seq <= span[1] for seq in chunk.message_seqs]
    similarities = shard.message_vectors.similarities(chunk.message_ids, q.vector) if q.vector is not None else None
    index = best_line(shard.line_tokens(label), allowed, q.tokens, idf.__getitem__, similarities,
                      vector_weight=weights[0], lexical_weight=weights[1])
    return None if index is None else _Cited(chunk.message_ids[index], chunk, parts)


def _window_candidates(shard: Shard, q: _Query, intervals, depth: int):
    """Union of the BM25 and HNSW top lists, each candidate scored by both sides.

    Returns (labels, raw BM25, matched-a-term mask, cosine with NaN where a window has no vector).
    """
    allowed = shard.allowed(intervals) if intervals is not None else None
    if allowed is not None and not len(allowed):
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=bool), None
    lexical_labels = shard.bm25.search(q.tokens, depth, allowed)[0] if q.tokens else np.zeros(0, dtype=np.int64)
    found = [lexical_labels] if q.mode != "vector" else []
    if q.vector is not None and q.mode != "lexical" and shard.hnsw is not None and len(shard.hnsw) > 0:
        found.append(shard.hnsw.search(q.vector, depth, allowed)[0])
    labels = np.unique(np.concatenate(found)).astype(np.int64) if found else np.zeros(0, dtype=np.int64)
    raw = np.asarray(shard.bm25.scores_for(q.tokens, labels), dtype=np.float64)
    matched = np.isin(labels, lexical_labels) | (raw > 0)
    if q.vector is None:
        return labels, raw, matched, None
    cosine = np.full(len(labels), np.nan)
    with_vec = np.array([int(x) in shard.has_vector for x in labels], dtype=bool)
    if with_vec.any():
        cosine[with_vec] = shard.hnsw.vectors(labels[with_vec]) @ q.vector
    return labels, raw, matched, cosine


def _summary_hit(summary: Summary, parts: ScoreParts, q: _Query) -> SearchHit:
    return SearchHit(
        kind="summary", score=round(parts.final, 6), thread_id=summary.thread_id, day_label=summary.day_label,
        day_segment_id=day_segment_id(summary.thread_id, summary.day_label) if summary.day_label else None,
        snippet=make_snippet(summary.markdown, q.text.split() + q.tokens), covered_by_summary=False,
        from_seq=summary.from_seq, to_seq=summary.to_seq, summary_id=summary.summary_id,
        summary_kind=summary.kind, parts=parts,
    )


def _check_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query is empty: give a few words to search for")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInputError(f"query is {len(query)} characters; the maximum is {MAX_QUERY_CHARS}: shorten it")
    return query.strip()


def _check_limit(limit: object) -> int:
    low, high = LIMIT_RANGE
    if isinstance(limit, bool) or not isinstance(limit, int) or not low <= limit <= high:
        raise InvalidInputError(f"limit must be a whole number from {low} to {high}, got {limit!r}")
    return limit


def _check_kinds(kinds: object) -> tuple[str, ...]:
    if isinstance(kinds, str):
        kinds = (kinds,)
    chosen = tuple(kinds) if isinstance(kinds, (list, tuple)) else ()
    if not chosen or any(k not in KINDS for k in chosen):
        raise InvalidInputError(f"kinds must be a non-empty subset of {KINDS}, got {kinds!r}")
    return chosen
