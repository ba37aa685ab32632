"""LabelSet, the bitmap of window labels with a vector, behaves as the set it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from indexers.label_set import LabelSet, among


def test_label_set_matches_a_python_set() -> None:
    rng = np.random.default_rng(3)
    labels, reference = LabelSet(), set()
    for _ in range(50):
        added = rng.integers(0, 5000, size=int(rng.integers(0, 40)))
        labels.update(added)
        reference.update(added.tolist())
        for gone in rng.integers(0, 5000, size=5).tolist():
            labels.discard(gone)
            reference.discard(gone)
    assert len(labels) == len(reference) and list(labels) == sorted(reference)
    asked = np.array([-1, 0, 4999, 5000, 10**7, *sorted(reference)[:3]])
    assert labels.flags(asked).tolist() == [int(x) in reference for x in asked]
    assert all((x in labels) == (x in reference) for x in range(-2, 5002))
    assert "7" not in labels and bool(LabelSet()) is False


def test_negative_label_refused() -> None:
    with pytest.raises(ValueError, match="never negative"):
        LabelSet([3, -1])


def test_among_says_what_np_isin_says():
    rng = np.random.default_rng(5)
    for size in (0, 1, 40, 300):
        labels, others = rng.integers(0, 2_000_000, size), rng.integers(0, 2_000_000, size // 2 + 1)
        labels[: size // 3] = others[: size // 3] if size // 3 <= len(others) else labels[: size // 3]
        assert among(labels, others).tolist() == np.isin(labels, others).tolist()
    assert among(np.array([3, 5, 3]), np.array([3])).tolist() == [True, False, True]
    assert among(np.array([1]), np.zeros(0, np.int64)).tolist() == [False]
