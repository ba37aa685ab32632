"""Summary hits (engine/query/summary_hits.py): of a day and its conversation over nearly one span, one shows."""

from __future__ import annotations

import numpy as np

from engine.query.summary_hits import _distinct_spans


def test_of_two_summaries_over_nearly_one_span_the_shorter_shows_in_the_better_ones_place() -> None:
    spans = [(0, 1, 10), (0, 1, 9), (1, 1, 10), (0, 20, 30), (0, 20, 31), (0, 5, 30)]  # (thread code, from, to)
    rows = np.array([10, 11, 12, 13, 15, 14])
    # 11 is 10's twin (9/10 of their union) and shorter; 12 is another thread's; 15 is 13's longer twin
    assert _distinct_spans(spans, rows, 3) == [11, 12, 13]
    assert _distinct_spans(spans, rows, 4) == [11, 12, 13, 14]
    assert _distinct_spans(spans[:1] + [(0, 3, 10)], rows[:2], 2) == [11]  # 8/10 of their union: twins
    assert _distinct_spans(spans[:1] + [(0, 4, 10)], rows[:2], 2) == [10, 11]  # 7/10: not
