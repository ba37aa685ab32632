"""Term stats: the frontier bounds every posting; a column gives each document's own frequency."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from indexers.term_stats import COLUMN_DENSITY, COLUMN_FROM, FRONTIER_EXACT, STATS_FROM, frontier, term_stats

postings = st.lists(st.tuples(st.integers(1, 40), st.integers(1, 300)), min_size=1, max_size=60)


@given(postings)
def test_frontier_dominates_every_posting_with_pairs_that_exist(pairs: list[tuple[int, int]]) -> None:
    """Every (frequency, length) has a pair at least as frequent and at most as long; below
    FRONTIER_EXACT a pair is a real posting, so the bound is the true best share there."""
    tfs, lengths = (np.array(column) for column in zip(*pairs))
    found = frontier(tfs, lengths)
    assert all(any(f >= tf and n <= length for f, n in found) for tf, length in pairs)
    assert all((f, n) in pairs for f, n in found if f < FRONTIER_EXACT)


def test_column_holds_each_documents_frequency_and_only_theirs() -> None:
    rng = np.random.default_rng(3)
    docs = np.sort(rng.choice(np.arange(100, 100 + COLUMN_FROM * 2), COLUMN_FROM, replace=False)).astype(np.int32)
    tfs = rng.integers(1, 5, len(docs)).astype(np.int32)
    tfs[7] = 300  # more than a byte holds
    stats = term_stats(docs, tfs, np.ones(docs.max() + 1, np.int64))
    assert stats is not None and stats.column is not None
    ids = np.arange(0, docs.max() + 50)  # before, across and after the term's documents
    at, found = stats.column.frequencies(ids)
    assert dict(zip(ids[at].tolist(), found.tolist())) == dict(zip(docs.tolist(), tfs.tolist()))


def test_rare_or_sparse_terms_get_no_column() -> None:
    lengths = np.ones(COLUMN_FROM * COLUMN_DENSITY * 2, np.int64)
    assert term_stats(np.arange(STATS_FROM - 1, dtype=np.int32), np.ones(STATS_FROM - 1, np.int32), lengths) is None
    sparse = np.arange(0, COLUMN_FROM * COLUMN_DENSITY * 2, COLUMN_DENSITY * 2, dtype=np.int32)
    stats = term_stats(sparse, np.ones(len(sparse), np.int32), lengths)
    assert stats is not None and stats.column is None and stats.frontier == ((1, 1),)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_column_type_follows_the_largest_frequency(dtype: type) -> None:
    docs = np.arange(COLUMN_FROM, dtype=np.int32)
    tfs = np.full(COLUMN_FROM, 255 if dtype is np.uint8 else 256, np.int32)
    stats = term_stats(docs, tfs, np.ones(COLUMN_FROM, np.int64))
    assert stats is not None and stats.column is not None and stats.column.tfs.dtype == dtype
