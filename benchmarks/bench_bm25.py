"""BM25 micro-benchmark: our Bm25Index against rank_bm25.BM25Okapi on a synthetic corpus.

Corpus: seeded, Zipf-distributed vocabulary of 50k words, Poisson(40) tokens per document.
Queries: 3 tokens drawn from the same Zipf law, so they include very common terms (long
posting lists), the hard case for a sparse index.

    pytest benchmarks/bench_bm25.py --benchmark-enable   # pytest-benchmark, 10k documents
    python -m benchmarks.bench_bm25                      # queries/s of both, 10k and 100k documents
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from indexers.bm25 import Bm25Index

__all__ = ["synthetic_corpus", "synthetic_queries", "queries_per_second", "main"]

VOCAB_SIZE = 50_000
ZIPF_EXPONENT = 1.1
MEAN_DOC_LEN = 40
TOP_K = 10


def _zipf_ids(rng: np.random.Generator, size: int) -> np.ndarray:
    ranks = np.arange(1, VOCAB_SIZE + 1, dtype=np.float64)
    probs = ranks**-ZIPF_EXPONENT
    return rng.choice(VOCAB_SIZE, size=size, p=probs / probs.sum())


def synthetic_corpus(n_docs: int, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    lengths = rng.poisson(MEAN_DOC_LEN, n_docs)
    words = np.array([f"w{i}" for i in range(VOCAB_SIZE)], dtype=object)[_zipf_ids(rng, int(lengths.sum()))]
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    return [words[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]


def synthetic_queries(n_queries: int, seed: int = 1, terms: int = 3) -> list[list[str]]:
    ids = _zipf_ids(np.random.default_rng(seed), n_queries * terms).reshape(n_queries, terms)
    return [[f"w{i}" for i in row] for row in ids]


def build_ours(corpus: Sequence[Sequence[str]]) -> Bm25Index:
    index = Bm25Index()
    index.add(np.arange(len(corpus), dtype=np.int64), corpus)
    return index


def rank_bm25_top_k(model: BM25Okapi, query: list[str]) -> np.ndarray:
    scores = model.get_scores(query)
    top = np.argpartition(-scores, TOP_K)[:TOP_K]
    return top[np.argsort(-scores[top])]


def queries_per_second(run: Callable[[list[str]], object], queries: list[list[str]]) -> float:
    start = time.perf_counter()
    for query in queries:
        run(query)
    return len(queries) / (time.perf_counter() - start)


@pytest.fixture(scope="module")
def corpus_10k() -> list[list[str]]:
    return synthetic_corpus(10_000)


BENCH_QUERIES = 10  # the same queries for both, so the two rows compare directly


def test_bm25_search_10k(benchmark, corpus_10k: list[list[str]]) -> None:
    index = build_ours(corpus_10k)
    queries = synthetic_queries(BENCH_QUERIES)
    results = benchmark(lambda: [index.search(q, TOP_K) for q in queries])
    assert all(len(labels) == TOP_K for labels, _ in results)


def test_rank_bm25_search_10k(benchmark, corpus_10k: list[list[str]]) -> None:
    model = BM25Okapi(corpus_10k)
    queries = synthetic_queries(BENCH_QUERIES)
    results = benchmark.pedantic(lambda: [rank_bm25_top_k(model, q) for q in queries], rounds=3)
    assert all(len(top) == TOP_K for top in results)


def _compare(n_docs: int, n_ours: int = 300, n_theirs: int = 20) -> None:
    corpus = synthetic_corpus(n_docs)
    start = time.perf_counter()
    ours = build_ours(corpus)
    build_ours_s = time.perf_counter() - start
    start = time.perf_counter()
    theirs = BM25Okapi(corpus)
    build_theirs_s = time.perf_counter() - start
    queries = synthetic_queries(max(n_ours, n_theirs))
    for q in queries[:n_theirs]:  # same top-k (up to ties) is what makes the speed comparable
        expected = theirs.get_scores(q)
        labels, scores = ours.search(q, TOP_K)
        assert np.allclose(scores, np.sort(expected)[::-1][:TOP_K]), q
    qps_ours = queries_per_second(lambda q: ours.search(q, TOP_K), queries[:n_ours])
    qps_theirs = queries_per_second(lambda q: rank_bm25_top_k(theirs, q), queries[:n_theirs])
    print(
        f"{n_docs:>7} docs | build: ours {build_ours_s:6.2f}s, rank_bm25 {build_theirs_s:6.2f}s | "
        f"queries/s: ours {qps_ours:8.1f} ({1000 / qps_ours:6.2f} ms), "
        f"rank_bm25 {qps_theirs:6.1f} ({1000 / qps_theirs:7.1f} ms) | speed-up x{qps_ours / qps_theirs:.0f}"
    )


def main() -> None:
    for n_docs in (10_000, 100_000):
        _compare(n_docs)


if __name__ == "__main__":
    main()
