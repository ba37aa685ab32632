"""Which summaries cover a message (engine/query/summary_index.Spans): the search's summary context;
and which summaries a search scores (`SummaryMatches.candidates`)."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from engine.models import Summary
from engine.query.summary_index import SummaryMatches, packed_markdown
from engine.query.summary_spans import Spans


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


def _matches(n: int, rng: np.random.Generator, tied: bool = False) -> SummaryMatches:
    at = datetime(2024, 3, 4, tzinfo=timezone.utc)
    summaries = tuple(Summary(f"s{i}", f"t{i % 2}", "u", "conversation", 10 * (i // 2), 10 * (i // 2) + 9, "", at, at)
                      for i in range(n))
    raw = np.where(rng.random(n) < 0.5, rng.integers(1, 4, n) if tied else rng.random(n) * 5, 0.0)
    vectors = rng.standard_normal((n, 4)).astype(np.float32)
    records, markdown = packed_markdown(summaries)
    return SummaryMatches(records, raw, raw > 0, vectors, Spans.of(records), markdown)


def test_a_search_scores_the_best_lexical_summaries_and_those_over_its_messages() -> None:
    rng = np.random.default_rng(5)
    for round_no in range(30):
        matches = _matches(40, rng, tied=round_no % 2 == 1)  # scores tied with the third best: all scored
        threads, seqs = ["t0", "t1", "t1"], [int(rng.integers(0, 200)), int(rng.integers(0, 200)), 5]
        picked, covers = matches.candidates(threads, seqs, depth=3)
        ids = {s.summary_id for s in picked.summaries}
        third = sorted(matches.lexical_raw[matches.matched])[-3]
        best = np.flatnonzero(matches.matched & (matches.lexical_raw >= third))
        covering = {s.summary_id for s in matches.summaries
                    for thread, seq in zip(threads, seqs) if s.thread_id == thread and s.covers(seq)}
        assert ids == {f"s{i}" for i in best} | covering
        rows = [int(s.summary_id[1:]) for s in picked.summaries]
        assert rows == sorted(rows)  # the user's order, each with its own score, vector and span
        assert np.array_equal(picked.lexical_raw, matches.lexical_raw[rows])
        assert np.array_equal(picked.vectors, matches.vectors[rows])
        # the same products, to float32's last bit: BLAS may take another kernel for fewer rows
        np.testing.assert_allclose(picked.cosine(np.ones(4, dtype=np.float32)),
                                   matches.cosine(np.ones(4, dtype=np.float32))[rows], rtol=1e-6)
        pairs = {(int(a), picked.summaries[r].summary_id) for a, r in zip(covers.at, covers.rows)}
        assert pairs == {(a, s.summary_id) for a, (thread, seq) in enumerate(zip(threads, seqs))
                         for s in matches.summaries if s.thread_id == thread and s.covers(seq)}  # rows of `picked`
        scores = rng.random(len(picked.summaries))
        best = covers.best(scores)
        for a in range(len(seqs)):
            mine = [scores[r] for at, r in zip(covers.at, covers.rows) if at == a]
            assert best[a] == max(mine) if mine else np.isnan(best[a])
        whole, all_covers = matches.candidates(threads, seqs, depth=40)  # no more than a list holds: all
        assert whole is matches and {(int(a), int(r)) for a, r in zip(all_covers.at, all_covers.rows)} == {
            (a, int(sid[1:])) for a, sid in pairs}
    everything = _matches(6, rng)  # s0..s5 over seqs 0-29 of t0 and t1: every one covers a message
    assert everything.candidates(["t0", "t1"] * 3, [0, 0, 10, 10, 20, 20], depth=1)[0] is everything
