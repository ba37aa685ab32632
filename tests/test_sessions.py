"""The cap of the first places per session (engine/query/sessions.py): a pure function, no model."""

from __future__ import annotations

from engine.query.sessions import cap_per_group


def test_a_session_keeps_at_most_cap_places_ahead_of_the_others():
    order = cap_per_group(["a", "a", "a", "b", "a", "c"], cap=2)
    assert order == [0, 1, 3, 5, 2, 4]  # a's third and fourth follow every other session's result
    assert cap_per_group(["a", "a", "a"], cap=0) == [0, 1, 2]


def test_the_cap_may_hold_for_the_first_places_only():
    order = cap_per_group(["a", "a", "a", "b", "a", "c"], cap=2, within=3)
    assert order == [0, 1, 3, 2, 4, 5]  # a's third made way for b in the first three, and follows them
    assert cap_per_group(["a", "b"], cap=1, within=5) == [0, 1]
    assert cap_per_group(["a", "a", "a", "a"], cap=1, within=2) == [0, 1, 2, 3]  # no other session: order kept
