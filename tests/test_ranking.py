"""The pure scoring functions of conversation.search."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.query.ranking import (
    ScoreParts,
    apply_penalty,
    clamp_vector,
    earned,
    favour_named_speakers,
    lead_bar,
    lift_reacted_to,
    lift_replies,
    merge_summaries_first,
    message_scores,
    names_speaker,
    normalise_lexical,
    own_lexical,
    own_scores,
    passes_floor,
    rank_at,
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


def test_one_entrys_rank_is_its_rank_among_all_ties_included():
    rng = np.random.default_rng(2)
    for _ in range(200):
        scores = rng.integers(0, 5, int(rng.integers(1, 30))).astype(np.float64)  # many ties
        present = rng.random(len(scores)) < 0.7
        ranks = ranks_of(scores, present=present)
        assert [rank_at(scores, present, i) or 0 for i in range(len(scores))] == ranks.tolist()


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


def test_a_message_is_exempt_from_the_floor_by_its_own_line_not_its_window():
    # the window holds the keyword, the message does not (and the other way round)
    without = ScoreParts(vector=0.1, lexical=1.0, lexical_raw=3.0, fused=0.3, penalty=1.0, vector_rank=None,
                         lexical_rank=1, fusion="weighted", own_lexical=0.0)
    holding = ScoreParts(vector=0.1, lexical=0.2, lexical_raw=0.6, fused=0.3, penalty=1.0, vector_rank=None,
                         lexical_rank=4, fusion="weighted", own_lexical=1.0)
    assert not passes_floor(without, 0.35)
    assert passes_floor(holding, 0.35)


WEIGHTS = {"vector_weight": 0.7, "lexical_weight": 0.3}


def test_own_lexical_score_is_the_shared_query_weight_relative_to_the_best_line():
    assert own_scores([np.nan] * 3, [2.0, 0.0, 4.0], mode="lexical", **WEIGHTS).tolist() == [0.5, 0.0, 1.0]


def test_own_vector_score_picks_the_closest_line_when_words_do_not_match():
    own = own_scores([0.1, 0.6, 0.2], [0.0, 0.0, 0.0], mode="hybrid", **WEIGHTS)
    assert int(np.argmax(own)) == 1


def test_own_score_blends_shared_words_and_meaning():
    # line 0 shares the query's word, line 1 is slightly closer in meaning: the word wins at 0.3 weight
    own = own_scores([0.50, 0.55, 0.1], [1.0, 0.0, 0.0], mode="hybrid", **WEIGHTS)
    assert own == pytest.approx([0.7 * 0.50 + 0.3, 0.7 * 0.55, 0.7 * 0.1])
    assert own_scores([0.5, 0.55], [1.0, 0.0], mode="vector", **WEIGHTS).tolist() == [0.5, 0.55]


def test_a_line_without_a_vector_is_scored_on_its_words():
    own = own_scores([np.nan, 0.9], [1.0, 0.5], mode="hybrid", **WEIGHTS)
    assert own[0] == 1.0 and own[1] == pytest.approx(0.7 * 0.9 + 0.3 * 0.5)


def test_own_lexical_is_relative_to_the_best_line():
    assert own_lexical([2.0, 0.0, 4.0]).tolist() == [0.5, 0.0, 1.0]
    assert own_lexical([0.0, 0.0]).tolist() == [0.0, 0.0]


def test_context_counts_only_as_far_as_the_own_line_earned_it():
    assert earned([0.9, 0.9, 0.2], [0.05, 0.6, 0.6], 2.0) == pytest.approx([0.1, 0.9, 0.2])
    assert earned([0.9], [0.0], np.inf) == pytest.approx([0.9])  # an infinite cap turns the rule off


def test_a_line_that_matches_nothing_is_not_lifted_by_its_window():
    # "Good night, Alice." shares the decision's window but not its words or meaning
    good_night, decision = message_scores([0.63, 0.34], [0.06, 0.37], [np.nan, np.nan], own_weight=0.3,
                                          summary_weight=0.25, context_cap=2.0)
    assert decision > good_night
    uncapped = message_scores([0.63, 0.34], [0.06, 0.37], [np.nan, np.nan], own_weight=0.3, summary_weight=0.25)
    assert uncapped[0] > uncapped[1]  # round 1's blend ranked it first


def test_the_summary_is_capped_like_the_window():
    capped = message_scores([0.1], [0.1], [1.0], own_weight=0.5, summary_weight=0.5, context_cap=2.0)
    assert capped == pytest.approx([0.5 * (0.5 * 0.1 + 0.5 * 0.1) + 0.5 * 0.2])


@pytest.mark.parametrize("speaker,named", [("Caroline", True), ("caroline", True), ("Mel", False), (None, False),
                                           ("Ünïcødé Bot", True), ("Jon Snow", False)])
def test_a_speaker_is_named_by_every_word_of_the_name(speaker, named):
    assert names_speaker(frozenset({"what", "did", "caroline", "research", "ünïcødé", "bot", "jon"}), speaker) is named


def test_other_speakers_weigh_less_only_when_someone_is_named():
    scores = np.array([0.5, 0.6, 0.4])
    favoured = favour_named_speakers(scores, np.array([True, False, False]), other_weight=0.8)
    assert favoured == pytest.approx([0.5, 0.48, 0.32])
    assert favour_named_speakers(scores, np.zeros(3, dtype=bool), other_weight=0.8) == pytest.approx(scores)


def test_the_reply_after_a_strong_match_is_lifted_and_nothing_else():
    scores = np.array([0.9, 0.1, 0.3, 0.05])
    previous = np.array([-1, 0, 1, -1])  # 1 answers 0, 2 answers 1; 3 starts elsewhere
    lifted = lift_replies(scores, previous, lift=0.8)
    assert lifted == pytest.approx([0.9, 0.72, 0.3, 0.05])  # lifted from the score before the lift: no chain
    assert lift_replies(scores, previous, lift=0.0) == pytest.approx(scores)
    assert lift_replies(np.zeros(0), np.zeros(0, dtype=np.int64), lift=0.8).size == 0


def test_the_turn_a_strong_match_reacts_to_is_lifted_and_nothing_else():
    scores = np.array([0.1, 0.9, 0.2, 0.05, 0.6])
    previous = np.array([-1, 0, 1, -1, -1])  # 1 answers 0, 2 answers 1; 3 and 4 start elsewhere
    lifted = lift_reacted_to(scores, previous, lift=0.8)
    assert lifted == pytest.approx([0.72, 0.9, 0.2, 0.05, 0.6])  # 0 reacted to by 1; 1's reply is weaker
    assert lift_reacted_to(scores, previous, lift=0.0) == pytest.approx(scores)
    assert lift_reacted_to(np.zeros(0), np.zeros(0, dtype=np.int64), lift=0.8).size == 0


def test_a_reply_in_a_strong_window_beats_a_near_match_in_a_weak_one():
    # the reply shares no word with the query, but its window (question + reply) matches well
    scores = message_scores([0.9, 0.3], [0.4, 0.6], [np.nan, np.nan], own_weight=0.3, summary_weight=0.25)
    assert scores == pytest.approx([0.7 * 0.9 + 0.3 * 0.4, 0.7 * 0.3 + 0.3 * 0.6])
    assert scores[0] > scores[1]


def test_the_covering_summary_lends_its_score_and_no_summary_is_neutral():
    covered = message_scores([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], own_weight=0.3, summary_weight=0.25)
    assert covered == pytest.approx([0.75 * 0.5 + 0.25, 0.75 * 0.5])
    uncovered = message_scores([0.5], [0.5], [np.nan], own_weight=0.3, summary_weight=0.25)
    assert uncovered == pytest.approx([0.5])  # not yet summarised: not demoted
    assert message_scores([0.5], [0.5], [1.0], own_weight=0.3, summary_weight=0.0) == pytest.approx([0.5])


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=20),
       st.floats(0, 1), st.floats(0, 1), st.sampled_from([0.5, 2.0, np.inf]))
def test_message_scores_stay_in_0_1(rows, own_weight, summary_weight, cap):
    window, own, summary = (np.array(c) for c in zip(*rows))
    scores = message_scores(window, own, summary, own_weight=own_weight, summary_weight=summary_weight,
                            context_cap=cap)
    assert np.all((scores >= -1e-12) & (scores <= 1 + 1e-12))


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


def test_a_summary_leads_only_past_the_margin_over_the_best_message():
    assert lead_bar(0.5, 1.0) == 0.5  # outscore the best message
    assert lead_bar(0.5, 1.3) == pytest.approx(0.65)  # and by the margin
    assert lead_bar(None, 1.3) == 0.0  # no message: any summary that matches may lead
