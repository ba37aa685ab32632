"""Query words side by side in a turn (engine.query.phrases) and the rule that counts them (ranking)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.query.phrases import pair_weight, query_pairs
from engine.query.ranking import with_phrases

IDF = {"support": 1.0, "group": 2.0, "caroline": 3.0}


def test_the_query_pairs_are_its_neighbouring_tokens_each_once():
    assert query_pairs(["caroline", "support", "group"]) == (("caroline", "support"), ("support", "group"))
    assert query_pairs(["group"]) == () and query_pairs(["go", "go"]) == ()


def test_a_pair_counts_only_when_its_words_stand_side_by_side_in_either_order():
    pairs = query_pairs(["support", "group"])
    assert pair_weight(pairs, ["went", "support", "group", "today"], IDF) == pytest.approx(3.0)
    assert pair_weight(pairs, ["group", "support"], IDF) == pytest.approx(3.0)
    assert pair_weight(pairs, ["support", "my", "group"], IDF) == 0.0  # both words, apart
    assert pair_weight(pairs, ["support"], IDF) == 0.0


def test_the_pairs_add_to_the_shared_weight_by_the_phrase_weight():
    shared, pairs = np.array([3.0, 3.0, 1.0]), np.array([3.0, 0.0, 0.0])
    assert with_phrases(shared, pairs, weight=0.5) == pytest.approx([4.5, 3.0, 1.0])
    assert with_phrases(shared, pairs, weight=0.0) == pytest.approx(shared)  # off
