"""HNSW on clustered synthetic 384-d unit vectors: build time, query latency, recall vs brute force.

    python benchmarks/bench_hnsw.py [--n 100000] [--queries 1000] [--m 16,12 --ef-construction 200,100]
    python -m pytest benchmarks/bench_hnsw.py                        # pytest-benchmark micro-benchmark

The vectors imitate sentence embeddings: topics (cluster centres) of uneven size, members spread
around them at varying widths, so neighbours are dense inside a topic and ties are common, which
is harder for a graph index than uniform noise (where every point is roughly equidistant).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from indexers.hnsw import HnswIndex, HnswParams  # noqa: E402

__all__ = ["clustered_vectors", "build", "main"]

DIM = 384
EFS = (32, 64, 128, 192, 256)


def clustered_vectors(n: int, *, seed: int = 0, topics: int = 1000, dim: int = DIM) -> np.ndarray:
    """n unit vectors around `topics` centres of Zipf-like sizes and random spreads (cosine to centre ~0.4-0.8)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((topics, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    weights = 1.0 / np.arange(1, topics + 1) ** 0.8
    topic = rng.choice(topics, size=n, p=weights / weights.sum())
    spread = rng.uniform(0.04, 0.11, size=topics).astype(np.float32)
    rows = centres[topic] + rng.standard_normal((n, dim)).astype(np.float32) * spread[topic, None]
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def build(vectors: np.ndarray, params: HnswParams = HnswParams(), batch: int = 10_000) -> HnswIndex:
    """Built the way the indexer does it: batches into an index that starts small and grows."""
    index = HnswIndex(params)
    for start in range(0, len(vectors), batch):
        stop = min(start + batch, len(vectors))
        index.add(np.arange(start, stop, dtype=np.int64), vectors[start:stop])
    return index


def exact_top10(corpus: np.ndarray, queries: np.ndarray) -> np.ndarray:
    out = np.empty((len(queries), 10), dtype=np.int64)
    for start in range(0, len(queries), 100):  # bounded memory: 100 x n similarities at a time
        sims = queries[start : start + 100] @ corpus.T
        top = np.argpartition(-sims, 9, axis=1)[:, :10]
        out[start : start + 100] = top
    return out


def rss_mb() -> float:
    """This process's resident set in MB (VmRSS)."""
    status = Path("/proc/self/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("VmRSS")).split()[1]) / 1024


def measure(index: HnswIndex, queries: np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
    """(recall@10, p50 ms, p99 ms) of single-vector searches."""
    latencies, hits = [], 0
    for query, expected in zip(queries, truth):
        start = time.perf_counter()
        labels, _ = index.search(query, 10)
        latencies.append(time.perf_counter() - start)
        hits += len(set(labels.tolist()) & set(expected.tolist()))
    ms = 1000 * np.array(latencies)
    return hits / truth.size, float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def report(n: int, n_queries: int, params: HnswParams = HnswParams(), truth: np.ndarray | None = None) -> np.ndarray:
    """Build, save, load and measure one setting; the exact top-10 (computed once, passed back in)."""
    data = clustered_vectors(n + n_queries, seed=42)
    corpus, queries = data[:n], data[n:]  # held-out queries from the same topics
    started, cpu = time.perf_counter(), time.process_time()
    index = build(corpus, params)
    built, built_cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"n={n} dim={DIM} m={params.m} ef_construction={params.ef_construction}: "
          f"build {built:.1f} s, CPU {built_cpu:.1f} s ({n / built:.0f} vectors/s)")
    if truth is None:
        started = time.perf_counter()
        truth = exact_top10(corpus, queries)
        print(f"brute force: {1000 * (time.perf_counter() - started) / n_queries:.2f} ms/query (numpy matmul)")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        index.save(Path(tmp))
        print(f"save {time.perf_counter() - started:.2f} s", end="; ")
        for ef in EFS:
            started, resident = time.perf_counter(), rss_mb()
            loaded = HnswIndex.load(Path(tmp), ef=ef)
            load_s, resident = time.perf_counter() - started, rss_mb() - resident
            recall, p50, p99 = measure(loaded, queries, truth)
            if ef == EFS[0]:  # the first load: later ones may reuse memory freed by the one before
                print(f"load {load_s:.2f} s, resident +{resident:.0f} MB ({resident * 2**20 / n:.0f} B a vector)")
            print(f"ef={ef:<4} recall@10 {recall:.4f}  query p50 {p50:.3f} ms  p99 {p99:.3f} ms")
    return truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--m", default=str(HnswParams().m), help="comma-separated graph degrees to compare")
    parser.add_argument("--ef-construction", default=str(HnswParams().ef_construction), help="comma-separated build beams")
    args = parser.parse_args()
    truth = None
    for m in (int(x) for x in args.m.split(",")):
        for ef_construction in (int(x) for x in args.ef_construction.split(",")):
            truth = report(args.n, args.queries, HnswParams(m=m, ef_construction=ef_construction), truth)


# pytest-benchmark: one query at the default ef on a 20k index (kept small so it builds in seconds).


@pytest.fixture(scope="module")
def small_index() -> tuple[HnswIndex, np.ndarray]:
    data = clustered_vectors(20_100, seed=1)
    return build(data[:20_000]), data[20_000:]


def test_hnsw_query(benchmark, small_index: tuple[HnswIndex, np.ndarray]) -> None:
    index, queries = small_index
    turn = itertools.count()
    labels, _ = benchmark(lambda: index.search(queries[next(turn) % len(queries)], 10))
    assert len(labels) == 10


def test_hnsw_filtered_query(benchmark, small_index: tuple[HnswIndex, np.ndarray]) -> None:
    index, queries = small_index
    allowed = np.arange(0, 20_000, 2, dtype=np.int64)  # half the index: the graph-filter path
    labels, _ = benchmark(lambda: index.search(queries[0], 10, allowed=allowed))
    assert len(labels) == 10 and np.all(labels % 2 == 0)


if __name__ == "__main__":
    main()
