"""The retrieval metrics on hand-made ranked lists, plus a few properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.evaluation.locomo import hit_coverage, score_question, session_of
from engine.evaluation.metrics import (as_slots, dcg, mean, ndcg, percentile, recall_all, recall_any,
                                       recall_fraction, reciprocal_rank)
from engine.query.search_types import SearchHit

RANKED = ["a", None, "b", "c", "d"]  # None: a summary hit holding rank 2


def test_recall_any_all_and_fraction_at_cutoffs() -> None:
    slots = as_slots(RANKED)
    assert recall_any(slots, {"b", "x"}, 2) == 0.0
    assert recall_any(slots, {"b", "x"}, 3) == 1.0
    assert recall_all(slots, {"a", "c"}, 3) == 0.0
    assert recall_all(slots, {"a", "c"}, 4) == 1.0
    assert recall_fraction(slots, {"a", "c", "x", "y"}, 4) == 0.5
    assert recall_fraction(slots, {"a", "c", "x", "y"}, 1) == 0.25


def test_recall_over_sets_counts_each_id_once() -> None:
    windows = [frozenset({"a", "b"}), frozenset(), frozenset({"b"})]
    assert recall_all(windows, {"a", "b"}, 1) == 1.0
    assert recall_fraction(windows, {"a", "b", "c"}, 3) == pytest.approx(2 / 3)


def test_k_beyond_the_list_uses_the_whole_list() -> None:
    assert recall_any(as_slots(["a"]), {"a"}, 20) == 1.0


def test_dcg_is_longmemevals_form() -> None:
    # g1 + g2/log2(2) + g3/log2(3): ranks 1 and 2 weigh the same
    assert dcg([1, 1, 1], 3) == pytest.approx(2 + 1 / math.log2(3))
    assert dcg([0, 0, 1, 1], 3) == pytest.approx(1 / math.log2(3))


def test_ndcg_hand_computed() -> None:
    # relevant {b, d}: found at ranks 3 and 5; ideal: two ones at ranks 1 and 2 -> 2
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / 2
    assert ndcg(RANKED, {"b", "d"}, 10) == pytest.approx(expected)
    assert ndcg(["b", "d"], {"b", "d"}, 10) == 1.0
    assert ndcg(["x", "y"], {"b"}, 10) == 0.0


def test_ndcg_ideal_uses_min_of_k_and_relevant() -> None:
    # three relevant but k = 1: the ideal is one gain, so a hit at rank 1 is perfect
    assert ndcg(["a"], {"a", "b", "c"}, 1) == 1.0


def test_ndcg_counts_a_repeated_id_once() -> None:
    assert ndcg(["a", "a"], {"a", "b"}, 2) == pytest.approx(0.5)


def test_reciprocal_rank_skips_summary_slots() -> None:
    assert reciprocal_rank(RANKED, {"b"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(RANKED, {"zz"}) == 0.0
    assert reciprocal_rank([None, "a"], {"a"}) == 0.5


@pytest.mark.parametrize("metric", [
    lambda: recall_any([], set(), 5), lambda: ndcg([], set(), 5), lambda: reciprocal_rank([], []),
    lambda: recall_all([frozenset("a")], {"a"}, 0),
])
def test_undefined_inputs_raise(metric) -> None:
    with pytest.raises(ValueError):
        metric()


def test_percentile_and_mean() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 99) == pytest.approx(4.96)
    assert percentile([7.0], 99) == 7.0
    assert mean([1.0, 2.0, 6.0]) == 3.0
    with pytest.raises(ValueError):
        mean([])


ids = st.lists(st.sampled_from("abcdef") | st.none(), max_size=12)
wanted = st.sets(st.sampled_from("abcdefgh"), min_size=1, max_size=4)


@given(ids, wanted, st.integers(1, 15))
def test_metrics_stay_in_unit_range_and_are_ordered(ranked, relevant, k) -> None:
    slots = as_slots(ranked)
    values = [recall_any(slots, relevant, k), recall_all(slots, relevant, k), recall_fraction(slots, relevant, k),
              ndcg(ranked, relevant, k), reciprocal_rank(ranked, relevant)]
    assert all(0.0 <= v <= 1.0 + 1e-12 for v in values)
    assert recall_all(slots, relevant, k) <= recall_fraction(slots, relevant, k) <= recall_any(slots, relevant, k)
    assert recall_any(slots, relevant, k) <= recall_any(slots, relevant, k + 1)


def _hit(kind: str, seq: int | None, start: int, end: int) -> SearchHit:
    return SearchHit(kind=kind, score=1.0, thread_id="t", day_label=None, day_segment_id=None, snippet="",
                     covered_by_summary=False, from_seq=start, to_seq=end, seq=seq)


def test_hit_coverage_and_levels() -> None:
    turns = {("t", 0): "D1:1", ("t", 1): "D1:2", ("t", 2): "D1:3", ("t", 3): "D2:1", ("t", 4): "D2:2"}
    hits = [_hit("summary", None, 3, 4), _hit("message", 1, 0, 2), _hit("message", 4, 3, 4)]
    cited, windows, sessions = hit_coverage(hits, turns, ["D1:3", "D2:1"])
    assert cited == [None, "D1:2", "D2:2"]
    assert windows == [frozenset(), frozenset({"D1:3"}), frozenset({"D2:1"})]
    assert sessions == [frozenset({"D2:1"}), frozenset({"D1:3"}), frozenset({"D2:1"})]
    scores = score_question(cited, windows, sessions, ["D1:3", "D2:1"], (1, 2))
    assert scores["turn"]["recall_any@2"] == 0.0  # right windows, wrong cited turns
    assert scores["window"]["recall_any@2"] == 1.0 and scores["window"]["recall_all@2"] == 0.0
    assert scores["session"]["recall_all@2"] == 1.0 and scores["session"]["recall_frac@1"] == 0.5
    assert scores["turn"]["mrr"] == 0.0 and "ndcg@2" in scores["turn"]


def test_session_of() -> None:
    assert session_of("D12:3") == "12"
    with pytest.raises(ValueError):
        session_of("D:12:3")
