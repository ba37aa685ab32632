"""The pure scoring functions of conversation.search."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.ranking import (
    ScoreParts,
    apply_penalty,
    clamp_vector,
    dedupe_best,
    merge_summaries_first,
    normalise_lexical,
    passes_floor,
    ranks_of,
    rrf_fusion,
    summary_slots,
    tie_break_key,
    weighted_fusion,
)


def parts(final: float, lexical: float) -> ScoreParts:
    return ScoreParts(vector=0.1, lexical=lexical, lexical_raw=lexical * 3, fused=final, penalty=1.0,
                      vector_rank=None, lexical_rank=1, fusion="weighted")


@given(st.lists(st.floats(min_value=0.0, max_value=50.0), min_size=1, max_size=30))
def test_lexical_normalisation_is_monotone_and_bounded(raw):
    scores = normalise_lexical(np.array(raw))
    assert ((scores >= 0) & (scores <= 1)).all()
    order = np.argsort(raw, kind="stable")
    assert (np.diff(scores[order]) >= -1e-12).all()


def test_lexical_normalisation_never_saturates_every_hit():
    scores = normalise_lexical(np.array([9.0, 3.0, 1.5, 0.0]))
    assert scores.tolist() == pytest.approx([1.0, 1 / 3, 1 / 6, 0.0])


def test_matched_documents_with_non_positive_bm25_still_count():
    # Okapi BM25 gives a term found in most of a tiny corpus a negative idf.
    scores = normalise_lexical(np.array([-0.2, -0.5, 0.0]), matched=np.array([True, True, False]))
    assert scores[0] > scores[1] > 0 and scores[2] == 0


def test_equal_non_positive_scores_stay_tied():
    scores = normalise_lexical(np.array([-0.4, -0.4, -0.9]), matched=np.array([True, True, True]))
    assert scores.tolist() == pytest.approx([1.0, 1.0, 0.5])


def test_vector_scores_are_clamped():
    assert clamp_vector(np.array([-0.3, 0.4, 1.2])).tolist() == [0.0, 0.4, 1.0]


def test_ranks_only_among_present():
    ranks = ranks_of(np.array([0.2, 0.9, 0.5, 0.7]), present=np.array([True, True, False, True]))
    assert ranks.tolist() == [3, 1, 0, 2]


def test_weighted_fusion_uses_the_weights():
    fused = weighted_fusion(np.array([1.0, 0.0]), np.array([0.0, 1.0]), vector_weight=0.7, lexical_weight=0.3)
    assert fused.tolist() == pytest.approx([0.7, 0.3])
    with pytest.raises(ValueError):
        weighted_fusion(np.array([1.0]), np.array([1.0]), vector_weight=0, lexical_weight=0)


def test_rrf_rewards_agreement_and_ignores_absence():
    fused = rrf_fusion(np.array([1, 2, 0]), np.array([1, 0, 1]), k=60)
    assert fused[0] == pytest.approx(1.0)
    assert fused[0] > fused[2] and fused[0] > fused[1]
    assert fused[1] == pytest.approx(fused[2] * (61 / 62))


def test_penalty_only_for_covered_messages():
    assert apply_penalty(True, 0.85) == 0.85
    assert apply_penalty(False, 0.85) == 1.0


def test_floor_never_drops_a_strong_keyword_hit():
    # The peers' bug: a 0.3 lexical weight under a 0.35 floor dropped every keyword-only hit.
    keyword_only = parts(final=0.3, lexical=1.0)
    weak = parts(final=0.3, lexical=0.1)
    assert passes_floor(keyword_only, 0.35)
    assert not passes_floor(weak, 0.35)
    assert passes_floor(weak, None)


def test_dedupe_keeps_the_best_per_key():
    items = [("m1", 0.4), ("m2", 0.9), ("m1", 0.8)]
    kept = dedupe_best(items, key=lambda x: x[0], score=lambda x: x[1])
    assert sorted(kept) == [("m1", 0.8), ("m2", 0.9)]


def test_ties_go_to_the_newer_day_then_the_newer_message():
    hits = [(0.5, date(2024, 1, 1), 10.0), (0.5, date(2024, 1, 2), 5.0), (0.5, date(2024, 1, 2), 7.0),
            (0.6, date(2023, 1, 1), 1.0)]
    ordered = sorted(hits, key=lambda h: tie_break_key(*h))
    assert ordered == [(0.6, date(2023, 1, 1), 1.0), (0.5, date(2024, 1, 2), 7.0),
                       (0.5, date(2024, 1, 2), 5.0), (0.5, date(2024, 1, 1), 10.0)]


@pytest.mark.parametrize("limit,expected", [(1, 0), (2, 1), (6, 2), (20, 2)])
def test_summary_slots_never_crowd_out_messages(limit, expected):
    assert summary_slots(limit, max_summaries=2) == expected


def test_summaries_come_first_and_unused_slots_go_to_messages():
    merged = merge_summaries_first(["s1", "s2", "s3"], ["m1", "m2", "m3", "m4", "m5"], limit=6, max_summaries=2)
    assert merged == ["s1", "s2", "m1", "m2", "m3", "m4"]
    assert merge_summaries_first([], ["m1", "m2"], limit=6, max_summaries=2) == ["m1", "m2"]
    assert merge_summaries_first(["s1"], ["m1"], limit=1, max_summaries=2) == ["m1"]
