"""`distinct` and `all_distinct` give what `np.unique` gives, on integers and floats, in any order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from indexers.distinct import all_distinct, distinct


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-2**62, 2**62), max_size=60), st.booleans())
def test_distinct_integers_are_np_unique(values: list[int], in_order: bool):
    arr = np.array(sorted(values) if in_order else values, dtype=np.int64)
    np.testing.assert_array_equal(distinct(arr), np.unique(arr))
    assert distinct(arr).dtype == np.int64
    assert all_distinct(arr) == (len(np.unique(arr)) == len(arr))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 0.5, 1.0, 1e-300, 3.25, -7.0]), max_size=40))
def test_distinct_floats_are_np_unique(values: list[float]):
    arr = np.array(values, dtype=np.float64)
    np.testing.assert_array_equal(distinct(arr), np.unique(arr))


def test_a_repeat_anywhere_is_found():
    labels = np.arange(1000, dtype=np.int64)
    assert all_distinct(labels) and all_distinct(labels[::-1]) and all_distinct(labels[:0]) and all_distinct(labels[:1])
    for at in (0, 500, 999):
        twice = labels.copy()
        twice[at] = labels[(at + 1) % 1000]
        assert not all_distinct(twice) and not all_distinct(twice[::-1])
