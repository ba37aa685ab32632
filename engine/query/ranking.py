"""Pure scoring functions of conversation.search: no I/O, so each is tested on its own.

Scores flow: raw BM25 -> `normalise_lexical` (monotone, 0..1, never every hit at 1.0), cosine ->
`clamp_vector`; both -> `weighted_fusion` (or `rrf_fusion`) per window and per summary; each
message of the best windows -> `own_scores` (its own line, `with_phrases` for the query's word
pairs it holds) -> `message_scores` (own, its best window, its covering summary, context `earned`
by the own line) -> `lift_replies` (the turn after a strong match; by `reply_lifts`, more after a
question) -> `weigh_asking` (turns that ask) -> `lift_reacted_to` (the turn before a strong match) ->
`favour_named_speakers` -> `favour_matching` for a
date the query names -> `apply_penalty` for messages a summary covers ->
`tie_break_key` (score, newer day, newer message) -> `merge_summaries_first`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal, Sequence, TypeVar

import numpy as np

from indexers.distinct import distinct

__all__ = [
    "ScoreParts",
    "normalise_lexical",
    "clamp_vector",
    "ranks_of",
    "rank_at",
    "weighted_fusion",
    "rrf_fusion",
    "FusedScores",
    "fuse",
    "own_lexical",
    "with_phrases",
    "own_scores",
    "earned",
    "message_scores",
    "names_speaker",
    "favour_named_speakers",
    "favour_matching",
    "lift_replies",
    "reply_lifts",
    "lift_reacted_to",
    "weigh_asking",
    "apply_penalty",
    "passes_floor",
    "tie_break_key",
    "lead_bar",
    "summary_slots",
    "merge_summaries_first",
]

T = TypeVar("T")
STRONG_LEXICAL = 0.5  # a normalised lexical score this high is a keyword hit no floor may drop
MATCH_FLOOR = 0.01  # the least normalised score of a document that matches a query term


@dataclass(frozen=True, slots=True)
class ScoreParts:
    """Why a hit ranks where it does (returned with `explain`)."""

    vector: float | None  # cosine clamped to 0..1; None when the hit has no vector yet
    lexical: float  # normalised BM25, 0..1
    lexical_raw: float
    fused: float
    penalty: float  # multiplier applied: 1.0 when none
    vector_rank: int | None  # 1-based rank in the vector candidate list
    lexical_rank: int | None  # 1-based rank among lexical matches
    fusion: Literal["weighted", "rrf", "lexical", "vector"]
    # Message hits only: the fused score of the best window holding the message (vector, lexical and
    # the ranks above are that window's), the message's own match, its covering summary's score.
    window: float | None = None
    own: float | None = None
    summary: float | None = None
    own_lexical: float | None = None  # the query weight the message's own line shares, relative (0..1)

    @property
    def final(self) -> float:
        return self.fused * self.penalty


def normalise_lexical(raw: np.ndarray, matched: np.ndarray | None = None) -> np.ndarray:
    """BM25 scores to 0..1 by the query's best score: monotone, and only the best match reaches 1.

    Dividing by the best raw score keeps a keyword-only hit (an id, a number) at full lexical
    weight even when its absolute BM25 is small, which a fixed scale would not. Okapi BM25 can
    score a real match at or below 0 in a tiny corpus (a term in most documents): matched
    documents then keep a small positive score, or 1/dense rank when no score is positive at all.
    """
    raw = np.asarray(raw, dtype=np.float64)
    matched = raw > 0 if matched is None else np.asarray(matched, dtype=bool)
    if not matched.any():
        return np.zeros_like(raw)
    top = float(raw[matched].max())
    if top > 0.0:
        return np.where(matched, np.maximum(raw / top, MATCH_FLOOR), 0.0)
    # dense ranks: equal raw scores stay equal, so a tie stays a tie for the tie-breaks to settle
    levels = distinct(raw[matched])[::-1]
    dense_rank = np.searchsorted(-levels, -raw) + 1
    return np.where(matched, 1.0 / dense_rank, 0.0)


def clamp_vector(cosine: np.ndarray) -> np.ndarray:
    """Cosine similarity to 0..1 (negative similarity is no similarity)."""
    return np.clip(np.asarray(cosine, dtype=np.float64), 0.0, 1.0)


def ranks_of(scores: np.ndarray, *, present: np.ndarray | None = None) -> np.ndarray:
    """1-based ranks by descending score among the `present` entries; 0 for the others."""
    scores = np.asarray(scores, dtype=np.float64)
    present = np.ones(len(scores), dtype=bool) if present is None else np.asarray(present, dtype=bool)
    kept = np.flatnonzero(present)
    ranks = np.zeros(len(scores), dtype=np.int64)
    ranks[kept[np.argsort(-scores[kept], kind="stable")]] = np.arange(1, len(kept) + 1)
    return ranks


def rank_at(scores: np.ndarray, present: np.ndarray, i: int) -> int | None:
    """Entry i's rank in `ranks_of(scores, present=present)` (None when absent), read without sorting
    everything: a search explains a few hits of thousands of candidates (a user's summaries)."""
    if not present[i]:
        return None
    ahead = present & (scores > scores[i])
    return int(ahead.sum() + (present[:i] & (scores[:i] == scores[i])).sum()) + 1


def weighted_fusion(vector: np.ndarray, lexical: np.ndarray, *, vector_weight: float, lexical_weight: float) -> np.ndarray:
    """The hybrid base score: weights are renormalised so the result stays in 0..1."""
    total = vector_weight + lexical_weight
    if total <= 0:
        raise ValueError("vector_weight + lexical_weight must be positive")
    return (vector_weight * np.asarray(vector) + lexical_weight * np.asarray(lexical)) / total


def rrf_fusion(vector_rank: np.ndarray, lexical_rank: np.ndarray, *, k: int) -> np.ndarray:
    """Reciprocal rank fusion; rank 0 means absent from that list and adds nothing."""
    vector_rank, lexical_rank = np.asarray(vector_rank), np.asarray(lexical_rank)
    part_v = np.where(vector_rank > 0, 1.0 / (k + vector_rank), 0.0)
    part_l = np.where(lexical_rank > 0, 1.0 / (k + lexical_rank), 0.0)
    return (part_v + part_l) * (k + 1) / 2  # scaled so rank 1 in both lists scores 1.0


@dataclass(frozen=True, slots=True)
class FusedScores:
    """Fused scores of a candidate list as arrays; `parts(i)` explains one (built only for hits)."""

    vector: np.ndarray  # clamped cosine, 0 where there is no vector
    has_vector: np.ndarray
    lexical: np.ndarray
    raw: np.ndarray
    matched: np.ndarray  # ranked among the lexical matches
    fused: np.ndarray
    how: np.ndarray  # the fusion each score came from

    def parts(self, i: int, *, fused: float | None = None, penalty: float = 1.0, window: float | None = None,
              own: float | None = None, summary: float | None = None, own_lexical: float | None = None) -> ScoreParts:
        """Candidate i's parts; a message hit gives its own fused score and the parts it adds to its window's."""
        return ScoreParts(vector=float(self.vector[i]) if self.has_vector[i] else None, lexical=float(self.lexical[i]),
                          lexical_raw=float(self.raw[i]), fused=float(self.fused[i]) if fused is None else fused,
                          penalty=penalty, vector_rank=rank_at(self.vector, self.has_vector, i),
                          lexical_rank=rank_at(self.raw, self.matched, i), fusion=str(self.how[i]), window=window,
                          own=own, summary=summary, own_lexical=own_lexical)


def fuse(raw: np.ndarray, matched: np.ndarray, cosine: np.ndarray | None, *, mode: str, fusion: str,
         vector_weight: float, lexical_weight: float, rrf_k: int) -> FusedScores:
    """Raw BM25 and cosine (NaN: no vector yet) of candidates -> one score each, by mode and fusion."""
    raw, matched = np.asarray(raw, dtype=np.float64), np.asarray(matched, dtype=bool)
    lexical = normalise_lexical(raw, matched)
    has_vec = ~np.isnan(cosine) if cosine is not None else np.zeros(len(raw), dtype=bool)
    vector = clamp_vector(np.nan_to_num(cosine, nan=0.0)) if cosine is not None else np.zeros(len(raw))
    if mode == "lexical":
        fused, how = lexical, np.full(len(raw), "lexical")
    elif mode == "vector":
        fused, how = vector, np.full(len(raw), "vector")
    elif fusion == "rrf":
        fused = rrf_fusion(ranks_of(vector, present=has_vec), ranks_of(raw, present=matched), k=rrf_k)
        how = np.full(len(raw), "rrf")
    else:
        both = weighted_fusion(vector, lexical, vector_weight=vector_weight, lexical_weight=lexical_weight)
        # a candidate not yet embedded is scored lexically rather than with a vector score of 0
        fused, how = np.where(has_vec, both, lexical), np.where(has_vec, "weighted", "lexical")
    return FusedScores(vector, has_vec, lexical, raw, matched, np.asarray(fused, dtype=np.float64), how)


def own_lexical(shared: np.ndarray) -> np.ndarray:
    """The query weight (idf) each line shares, relative to the best line's: 0..1."""
    shared = np.asarray(shared, dtype=np.float64)
    top = float(shared.max()) if len(shared) else 0.0
    return shared / top if top > 0 else np.zeros_like(shared)


def with_phrases(shared: np.ndarray, pairs: np.ndarray, *, weight: float) -> np.ndarray:
    """The query weight a line shares, plus `weight` times that of the query's word pairs it holds
    side by side (engine.query.phrases): "support group" together says more than the two words apart."""
    return np.asarray(shared, dtype=np.float64) + weight * np.asarray(pairs, dtype=np.float64)


def own_scores(cosine: np.ndarray, shared: np.ndarray, *, mode: str, vector_weight: float,
               lexical_weight: float) -> np.ndarray:
    """How well each message's own line matches: its cosine and the query weight (idf) it shares.

    The shared weight is relative to the best message among the candidates. A message without a
    vector (NaN cosine) is scored lexically, as a window without one is. RRF has no score for a
    single line, so hybrid modes blend the two with the weighted-fusion weights.
    """
    lexical = own_lexical(shared)
    cosine = np.asarray(cosine, dtype=np.float64)
    vector = clamp_vector(np.nan_to_num(cosine, nan=0.0))
    if mode == "lexical":
        return lexical
    blended = weighted_fusion(vector, lexical, vector_weight=vector_weight, lexical_weight=lexical_weight)
    return np.where(np.isnan(cosine), lexical, vector if mode == "vector" else blended)


def earned(context: np.ndarray, own: np.ndarray, cap: float) -> np.ndarray:
    """Context (window, summary) counts at most `cap` times the message's own match.

    Context re-orders messages that match; it never lifts one whose own line matches nothing
    ("Good night, Alice." in the window that holds the decision must not rank with it).
    """
    context = np.asarray(context, dtype=np.float64)
    return context if np.isinf(cap) else np.minimum(context, cap * np.asarray(own, dtype=np.float64))


def message_scores(window: np.ndarray, own: np.ndarray, summary: np.ndarray, *, own_weight: float,
                   summary_weight: float, context_cap: float = np.inf) -> np.ndarray:
    """A message's score: its own match blended with its best window's, then with its summary's.

    The window lends context (the question a reply answers shares the query's words); the summary
    covering the message lends the topic of its day or conversation; both only as far as the
    message `earned` them. `summary` is NaN where none covers the message: the blend then stands
    alone, so a message not yet summarised is not demoted.
    """
    own = np.asarray(own, dtype=np.float64)
    base = (1.0 - own_weight) * earned(window, own, context_cap) + own_weight * own
    summary = np.asarray(summary, dtype=np.float64)
    lent = earned(np.nan_to_num(summary), own, context_cap)
    with_summary = (1.0 - summary_weight) * base + summary_weight * lent
    return np.where(np.isnan(summary), base, with_summary)


def names_speaker(query_words: frozenset[str], speaker: str | None) -> bool:
    """Whether the query names this speaker: every word of the name is a word of the query."""
    words = speaker.casefold().split() if speaker else []
    return bool(words) and all(w in query_words for w in words)


def favour_named_speakers(scores: np.ndarray, named: np.ndarray, *, other_weight: float) -> np.ndarray:
    """When the query names a participant, the turns of the others weigh `other_weight`.

    "What did Caroline research?" asks about Caroline's turns; the name is in every one of her
    lines and in many of the others', so words alone do not tell them apart.
    """
    return favour_matching(scores, named, other_weight=other_weight)


def favour_matching(scores: np.ndarray, matching: np.ndarray, *, other_weight: float) -> np.ndarray:
    """The candidates that do not match what the query names weigh `other_weight`; when none
    matches, the query's condition says nothing about these candidates and every score stands.

    Used for a named participant (`favour_named_speakers`) and a named date ("in May 2023": the
    turns of other days weigh less; engine.query.time_phrases reads the dates).
    """
    scores, matching = np.asarray(scores, dtype=np.float64), np.asarray(matching, dtype=bool)
    return np.where(matching, scores, other_weight * scores) if matching.any() else scores


def lift_replies(scores: np.ndarray, previous: np.ndarray, *, lift: float | np.ndarray) -> np.ndarray:
    """A turn scores at least `lift` times the turn right before it (`previous`: its index, -1: none;
    `lift`: one for all, or one per turn).

    The turn that matches a question is often the other speaker's question or the setup; the
    evidence is the reply ("another rejection..." -> "I won't let it slow me down").
    """
    scores, previous = np.asarray(scores, dtype=np.float64), np.asarray(previous, dtype=np.int64)
    lift = np.broadcast_to(np.asarray(lift, dtype=np.float64), scores.shape)
    if not len(scores) or not (lift > 0).any():
        return scores
    before = np.where(previous >= 0, scores[np.maximum(previous, 0)], 0.0)
    return np.maximum(scores, lift * before)


def lift_reacted_to(scores: np.ndarray, previous: np.ndarray, *, lift: float) -> np.ndarray:
    """A turn scores at least `lift` times its reply (the turn whose `previous` it is).

    The turn that matches is often the other speaker's reaction ("Adoption agencies? Wonderful!");
    the evidence is the turn it reacts to ("I looked into adoption agencies last week").
    """
    previous = np.asarray(previous, dtype=np.int64)
    reply = np.full(len(previous), -1, dtype=np.int64)
    is_reply = previous >= 0
    reply[previous[is_reply]] = np.flatnonzero(is_reply)  # a turn has one turn right after it
    return lift_replies(scores, reply, lift=lift)


def reply_lifts(previous_asks: np.ndarray, *, lift: float, question_lift: float) -> np.ndarray:
    """Each turn's `lift_replies` factor: `question_lift` (when higher) for the reply to a turn that
    ends with a question, `lift` for the others; a question is answered in the turn after it."""
    previous_asks = np.asarray(previous_asks, dtype=bool)
    return np.where(previous_asks, max(lift, question_lift), lift)


def weigh_asking(scores: np.ndarray, asking: np.ndarray, *, weight: float) -> np.ndarray:
    """A turn that asks weighs `weight` (1: no change), by the share of it that asks (`asking`, 0..1).

    Asked a question, the turn most like it is often the same question asked in the conversation
    ("what did we decide about the database?"); the answer is a statement.
    """
    scores, asking = np.asarray(scores, dtype=np.float64), np.asarray(asking, dtype=np.float64)
    return scores * (1.0 - (1.0 - weight) * asking)


def apply_penalty(covered: bool, penalty: float) -> float:
    """The multiplier for a message hit: `penalty` when a summary already covers it."""
    return penalty if covered else 1.0


def passes_floor(parts: ScoreParts, min_score: float | None) -> bool:
    """A minimum score never drops a strong keyword hit (peers lost exact ids this way).

    For a message the keyword must be on its own line, not elsewhere in its window.
    """
    keyword = parts.lexical if parts.own_lexical is None else parts.own_lexical
    return min_score is None or parts.final >= min_score or keyword >= STRONG_LEXICAL


def tie_break_key(score: float, day_label: date | None, order: float) -> tuple[float, int, float]:
    """Sort key (ascending): higher score, then newer day, then newer message."""
    return (-round(score, 9), -(day_label.toordinal() if day_label else 0), -order)


def lead_bar(best_message: float | None, margin: float) -> float:
    """The score a summary needs to lead: `margin` times the best message's (0 when there is none).

    A leading summary takes a message's place and never counts as a turn; one that barely outscores
    a covered message (whose score already carries `covered_penalty`) mostly cost recall on LoCoMo dev
    (docs/benchmarks.md, leave-one-conversation-out)."""
    return 0.0 if best_message is None else best_message * margin


def summary_slots(limit: int, max_summaries: int) -> int:
    """How many summaries may lead: at most half the limit, so messages are never crowded out."""
    return max(0, min(max_summaries, limit // 2))


def merge_summaries_first(summaries: Sequence[T], messages: Sequence[T], *, limit: int, max_summaries: int) -> list[T]:
    """Summaries (already ranked) first, then messages; unused summary slots go to messages."""
    lead = list(summaries[: summary_slots(limit, max_summaries)])
    return lead + list(messages[: limit - len(lead)])
