"""LabelSet, the bitmap of window labels with a vector, behaves as the set it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from indexers.label_set import LabelSet


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
