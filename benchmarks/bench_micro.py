"""Micro-benchmarks of the query path's parts: fusion, the lexical tokenizer, BM25 and HNSW at 100k.

    pytest benchmarks/bench_micro.py --benchmark-enable     # timings; builds 100k-document indexes once
    pytest benchmarks/bench_micro.py                        # --benchmark-disable (the project default):
                                                            # each body runs once on 2k-document indexes

The indexes are session fixtures, seeded: documents are Zipf draws over the generator's English
vocabulary (benchmarks/generate.py), vectors are clustered unit vectors (topic centres + noise).
With benchmarks disabled the fixtures shrink to 2k documents so the file stays a fast check.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.generate import vocabulary  # noqa: E402
from engine.query.ranking import (clamp_vector, normalise_lexical, ranks_of, rrf_fusion,  # noqa: E402
                            weighted_fusion)
from indexers.bm25 import Bm25Index  # noqa: E402
from indexers.hnsw import HnswIndex, HnswParams  # noqa: E402
from indexers.lexical import LexicalTokenizer, TokenizerParams  # noqa: E402

__all__ = ["zipf_documents", "clustered_vectors", "fuse"]

FULL_SIZE = 100_000
SMOKE_SIZE = 2_000  # with --benchmark-disable
CANDIDATES = 200
TOP_K = 50  # the engine's candidate depth


def _size(config: pytest.Config) -> int:
    """FULL_SIZE when benchmarks run, SMOKE_SIZE when they are disabled (pytest-benchmark's rule)."""
    disabled = config.getoption("benchmark_disable") and not config.getoption("benchmark_enable")
    return SMOKE_SIZE if disabled else FULL_SIZE


def zipf_documents(n: int, seed: int = 0, mean_len: int = 60) -> list[list[str]]:
    """n token lists: Poisson lengths, words by the generator's Zipf law (common words included)."""
    vocab = vocabulary(seed)
    rng = np.random.default_rng([seed, 10])
    lengths = np.maximum(rng.poisson(mean_len, n), 1)
    ids = np.searchsorted(vocab.word_cdf, rng.random(int(lengths.sum())), side="right")
    words = vocab.words[np.minimum(ids, len(vocab.words) - 1)].tolist()
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    return [words[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def clustered_vectors(n: int, seed: int = 0, topics: int = 500, dim: int = 384) -> np.ndarray:
    """n unit vectors around `topics` centres of Zipf-like sizes (what sentence embeddings look like)."""
    rng = np.random.default_rng([seed, 11])
    centres = rng.standard_normal((topics, dim)).astype(np.float32)
    weights = 1.0 / np.arange(1, topics + 1) ** 0.8
    topic = rng.choice(topics, size=n, p=weights / weights.sum())
    rows = centres[topic] / np.sqrt(dim) + rng.standard_normal((n, dim)).astype(np.float32) * 0.06
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def fuse(raw: np.ndarray, matched: np.ndarray, cosine: np.ndarray) -> np.ndarray:
    """The ranking functions the search path calls per query, in its order (weighted and RRF)."""
    lexical = normalise_lexical(raw, matched)
    vector = clamp_vector(cosine)
    lex_rank, vec_rank = ranks_of(raw, present=matched), ranks_of(vector)
    rrf_fusion(vec_rank, lex_rank, k=60)
    return weighted_fusion(vector, lexical, vector_weight=0.7, lexical_weight=0.3)


@pytest.fixture(scope="session")
def bm25_index(request: pytest.FixtureRequest) -> Bm25Index:
    documents = zipf_documents(_size(request.config))
    index = Bm25Index()
    index.add(list(range(len(documents))), documents)
    return index


@pytest.fixture(scope="session")
def hnsw_index(request: pytest.FixtureRequest) -> tuple[HnswIndex, np.ndarray]:
    """The index and 16 held-out query vectors from the same topics."""
    n = _size(request.config)
    vectors = clustered_vectors(n + 16)
    index = HnswIndex(HnswParams(), capacity=n)
    for start in range(0, n, 10_000):  # batches, as the pipeline adds them
        stop = min(start + 10_000, n)
        index.add(np.arange(start, stop), vectors[start:stop])
    return index, vectors[n:]


def test_fusion_200_candidates(benchmark) -> None:
    rng = np.random.default_rng(0)
    raw = np.where(rng.random(CANDIDATES) < 0.6, rng.gamma(2.0, 3.0, CANDIDATES), 0.0)
    cosine = rng.uniform(-0.1, 0.9, CANDIDATES)
    fused = benchmark(fuse, raw, raw > 0, cosine)
    assert fused.shape == (CANDIDATES,) and np.all((0 <= fused) & (fused <= 1))


def test_tokenizer_200_tokens(benchmark) -> None:
    """Steady state: the tokenizer memoises stems per distinct raw token, as a live engine's does."""
    words = zipf_documents(1, seed=3, mean_len=170)[0][:170] + ["ORD-482113", "E1042", "v2.3.11", "café"] * 8
    text = " ".join(words[:200])
    tokenizer = LexicalTokenizer(TokenizerParams())
    tokens = benchmark(tokenizer.tokenize, text)
    assert "ord-482113" in tokens and len(tokens) > 50


def test_bm25_query_100k(benchmark, bm25_index: Bm25Index) -> None:
    queries = zipf_documents(16, seed=5, mean_len=4)  # Zipf terms: common words, long posting lists
    state = {"i": 0}

    def one_query() -> tuple[np.ndarray, np.ndarray]:
        state["i"] += 1
        return bm25_index.search(queries[state["i"] % len(queries)], TOP_K)

    labels, scores = benchmark(one_query)
    assert 0 < len(labels) <= TOP_K and np.all(np.diff(scores) <= 1e-9)


def test_hnsw_query_100k(benchmark, hnsw_index: tuple[HnswIndex, np.ndarray]) -> None:
    index, queries = hnsw_index
    state = {"i": 0}

    def one_query() -> tuple[np.ndarray, np.ndarray]:
        state["i"] += 1
        return index.search(queries[state["i"] % len(queries)], TOP_K)

    labels, sims = benchmark(one_query)
    assert len(labels) == TOP_K and np.all(np.diff(sims) <= 1e-6)
