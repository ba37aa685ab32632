"""Which summaries cover a message (engine/query/summary_index.Spans): the search's summary context."""

from __future__ import annotations

import numpy as np

from engine.query.summary_index import Spans


def _brute(threads, starts, ends, thread, seqs):
    return sorted((i, row) for i, seq in enumerate(seqs) for row in range(len(starts))
                  if threads[row] == thread and starts[row] <= seq <= ends[row])


def test_covering_finds_exactly_the_summaries_over_each_seq_also_after_a_filter() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        threads = np.array([f"t{int(rng.integers(0, 3))}" for _ in range(n)], dtype=object)
        starts = rng.integers(0, 200, n)
        ends = starts + rng.integers(0, 40, n) * (rng.random(n) < 0.9) + rng.integers(0, 150, n) * (rng.random(n) < 0.1)
        spans = Spans.indexed(threads, starts, ends)
        kept = np.flatnonzero(rng.random(n) < 0.6)
        for view, (t, s, e) in ((spans, (threads, starts, ends)),
                                (spans.take(kept), (threads[kept], starts[kept], ends[kept]))):
            for thread in ("t0", "t1", "t2", "t9"):
                seqs = rng.integers(0, 260, int(rng.integers(0, 30)))
                at, rows = view.covering(thread, seqs)
                assert sorted(zip(at.tolist(), rows.tolist())) == _brute(t, s, e, thread, seqs)
