"""Summaries as search results: scored like windows, context for the messages they cover, and hits
of their own when they lead (engine.query.search merges them first)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.models import Summary, day_segment_id
from engine.query.citation import make_snippet
from engine.query.ranking import FusedScores, ScoreParts, tie_break_key
from engine.query.search_types import SearchHit
from engine.query.summary_index import SummaryMatches
from engine.query.summary_spans import NO_COVERS, CoverPairs
from indexers.shard import Shard

__all__ = ["ScoredSummaries", "NEAR_SAME_SPAN"]


@dataclass(frozen=True, slots=True)
class ScoredSummaries:
    """The summaries the filters allow (with their spans as arrays), and their fused scores."""

    matches: SummaryMatches
    scores: FusedScores
    covers: CoverPairs = NO_COVERS  # which of them cover which candidate message (SummaryMatches.candidates)

    def covering(self) -> np.ndarray:
        """The best fused score among the summaries covering each candidate message; NaN where none does."""
        return self.covers.best(self.scores.fused)

    def hits(self, bar: float, limit: int, words: list[str], shard: Shard) -> list[SearchHit]:
        """The summaries scoring at least `bar` as hits, best first, at most `limit`, none over nearly
        another's span; ranked by the hits' own tie-breaks before any snippet is built."""
        fused, summaries = self.scores.fused, self.matches.summaries
        leading = np.flatnonzero((fused > 0) & (fused >= bar))
        days = summaries.days[leading]  # ordinals, 0 for none
        ranked = leading[np.lexsort((-self.matches.spans.ends[leading], -days, -np.round(fused[leading], 6)))]
        spans = [(thread, start, end) for thread, (start, end) in
                 zip(summaries.codes[ranked, 0].tolist(), summaries.seqs[ranked].tolist())]
        best = _distinct_spans(spans, ranked, limit)
        hits = [_summary_hit(self.matches.full(i), self.scores.parts(i), words, shard) for i in best]
        hits.sort(key=lambda h: tie_break_key(h.score, h.day_label, h.to_seq))
        return hits


NEAR_SAME_SPAN = 0.8  # two summaries whose spans share this much of their union say the same thing


def _distinct_spans(ranked: Sequence[tuple[int, int, int]], rows: np.ndarray, limit: int) -> list[int]:
    """Up to `limit` rows, best first, none over nearly the same span as another (overlap over union
    >= NEAR_SAME_SPAN): of such a pair (a conversation and its day) the shorter span, the more specific
    one, shows, in the better one's place. `ranked`: each row's (thread code, from_seq, to_seq)."""
    kept: list[tuple[tuple[int, int, int], int]] = []
    for span, row in zip(ranked, rows):
        twin = next((k for k, (other, _) in enumerate(kept) if _near_same(span, other)), None)
        if twin is None:
            if len(kept) < limit:
                kept.append((span, int(row)))
        elif _length(span) < _length(kept[twin][0]):
            kept[twin] = (span, int(row))
    return [row for _, row in kept]


def _length(span: tuple[int, int, int]) -> int:
    return span[2] - span[1] + 1


def _near_same(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    (thread_a, start_a, end_a), (thread_b, start_b, end_b) = a, b
    if thread_a != thread_b:
        return False
    overlap = min(end_a, end_b) - max(start_a, start_b) + 1
    return overlap > 0 and overlap / (max(end_a, end_b) - min(start_a, start_b) + 1) >= NEAR_SAME_SPAN


def _summary_hit(summary: Summary, parts: ScoreParts, words: list[str], shard: Shard) -> SearchHit:
    """A summary hit with its day (a conversation summary: the day it started) and its time span."""
    first, last = shard.messages.get(summary.thread_id, summary.from_seq), shard.messages.get(summary.thread_id,
                                                                                              summary.to_seq)
    day = summary.day_label or (first.day_label if first else None)
    return SearchHit(
        kind="summary", score=round(parts.final, 6), thread_id=summary.thread_id, day_label=day,
        day_segment_id=day_segment_id(summary.thread_id, day) if day else None,
        snippet=make_snippet(summary.markdown, words), covered_by_summary=False,
        from_seq=summary.from_seq, to_seq=summary.to_seq, summary_id=summary.summary_id,
        summary_kind=summary.kind, parts=parts, started_at=first.created_at if first else None,
        ended_at=last.created_at if last else None,
    )
