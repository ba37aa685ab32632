"""The rules between a turn and its session (engine/query/sessions.py): pure functions, no model."""

from __future__ import annotations

import numpy as np
import pytest

from engine.query.sessions import cap_per_group, session_strength, with_session_evidence


def test_a_sessions_strength_is_the_mean_of_its_best_candidates_over_top():
    scores = np.array([0.9, 0.5, 0.1, 0.6])
    strength = session_strength(scores, ["a", "a", "a", "b"], top=2)
    assert strength == pytest.approx([0.7, 0.7, 0.7, 0.3])  # b's lone turn averages over 2: no lone strong session


def test_of_two_equal_turns_the_one_in_the_stronger_session_ranks_first():
    scores = np.array([0.5, 0.5, 0.4, 0.4])
    lifted = with_session_evidence(scores, ["a", "b", "b", "b"], weight=0.2, top=3)
    assert lifted[1] > lifted[0]
    assert with_session_evidence(scores, ["a", "b", "b", "b"], weight=0.0, top=3) == pytest.approx(scores)


def test_a_session_keeps_at_most_cap_places_ahead_of_the_others():
    order = cap_per_group(["a", "a", "a", "b", "a", "c"], cap=2)
    assert order == [0, 1, 3, 5, 2, 4]  # a's third and fourth follow every other session's result
    assert cap_per_group(["a", "a", "a"], cap=0) == [0, 1, 2]


def test_the_cap_may_hold_for_the_first_places_only():
    order = cap_per_group(["a", "a", "a", "b", "a", "c"], cap=2, within=3)
    assert order == [0, 1, 3, 2, 4, 5]  # a's third made way for b in the first three, and follows them
    assert cap_per_group(["a", "b"], cap=1, within=5) == [0, 1]
