"""Pseudo-relevance feedback (engine/query/feedback.py): pure functions, no model."""

from __future__ import annotations

import numpy as np
import pytest

from engine.query.feedback import feedback_terms, rocchio


def test_feedback_adds_the_words_most_of_the_best_windows_share():
    windows = [frozenset({"camping", "lake", "kids"}), frozenset({"camping", "lake"}), frozenset({"camping", "paint"})]
    idf = {"camping": 2.0, "lake": 3.0, "kids": 5.0, "paint": 4.0}
    terms = feedback_terms(windows, idf, frozenset({"trip"}), count=5, weight=0.3)
    assert terms == pytest.approx({"camping": 0.3, "lake": 0.2})  # one window's words ("kids") are not added
    assert "camping" not in feedback_terms(windows, idf, frozenset({"camping"}), count=5, weight=0.3)
    assert feedback_terms(windows, idf, frozenset(), count=5, weight=0.0) == {}


def test_rocchio_moves_the_query_towards_the_feedback_and_keeps_unit_length():
    query, feedback = np.array([1.0, 0.0]), np.array([[0.0, 1.0], [0.0, 1.0]])
    moved = rocchio(query, feedback, weight=1.0)
    assert moved == pytest.approx([2 ** -0.5, 2 ** -0.5])
    assert rocchio(query, feedback, weight=0.0) is query
