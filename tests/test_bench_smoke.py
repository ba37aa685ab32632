"""Smoke runs of the speed benchmarks at tiny sizes: they run, agree with the engine, and are seeded."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench_bulk_ingest, bench_import_beside, bench_many_threads, bench_micro, run_scale
from benchmarks.generate import (DEFAULT_START, LATEST_END, MIN_MESSAGES_PER_DAY, SyntheticEmbedder, ThreadParams,
                                 generate, iter_messages, make_queries)
from benchmarks.naive import NaiveHybrid, from_shard
from engine.api import ConversationEngine

USER = run_scale.USER


def _call(fn, *args):
    """Stands in for pytest-benchmark's fixture: run the body once."""
    return fn(*args)


@pytest.fixture(scope="module")
def embedder() -> SyntheticEmbedder:
    return SyntheticEmbedder(0)


@pytest.fixture(scope="module")
def small_engine(tmp_path_factory, embedder):
    """300 generated messages, indexed with synthetic vectors."""
    engine = ConversationEngine(tmp_path_factory.mktemp("bench") / "home", embedder=embedder)
    engine.add_user(USER, "UTC")
    messages = generate(300, seed=0, user_id=USER)
    engine.ingest(USER, messages, index=False)
    engine.index(USER)
    yield engine, messages
    engine.close()


def test_generate_is_deterministic_and_prefix_stable() -> None:
    first, again, longer = generate(120, seed=5), generate(120, seed=5), generate(400, seed=5)
    assert first == again and longer[:120] == first
    assert generate(120, seed=6) != first


def test_generated_thread_is_realistic() -> None:
    messages = list(iter_messages(ThreadParams(n_messages=3000, seed=1)))
    roles = [m["role"] for m in messages]
    assert 0.02 < roles.count("tool") / len(roles) < 0.09
    assert all(m["tools_used"] for m in messages if m["role"] == "tool")
    stamps = [m["created_at"] for m in messages]
    assert stamps == sorted(stamps) and len({s[:10] for s in stamps}) > 20  # many days
    lengths = np.array([len(m["content"].split()) for m in messages])
    assert np.median(lengths) < lengths.mean() < np.percentile(lengths, 99)  # long right tail
    text = " ".join(m["content"] for m in messages)
    assert "ORD-" in text and " the " in text and " les " in text  # ids, English and French words


def test_synthetic_vectors_cluster_by_topic(embedder, small_engine) -> None:
    texts = [m["content"] for m in small_engine[1]]
    vectors = embedder.embed(texts)
    assert vectors.shape == (300, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors, embedder.embed(texts))
    neighbours = vectors @ vectors.T
    np.fill_diagonal(neighbours, -1)
    assert neighbours.max(axis=1).mean() > 0.5 > float(neighbours.mean())  # close neighbours, diffuse mass


def test_naive_ranks_an_exact_match_first() -> None:
    vectors = np.eye(3, 384, dtype=np.float32)
    naive = NaiveHybrid([10, 11, 12], [["apple"], ["pear", "plum"], ["fig"]], vectors, str.split)
    hits = naive.search("pear", vectors[1], k=2)
    assert hits[0].label == 11 and hits[0].lexical == 1.0


def test_naive_agrees_with_the_engine_on_the_top_hit(small_engine, embedder) -> None:
    engine, messages = small_engine
    shard = engine.pipeline.shard(USER)
    naive = from_shard(shard)
    queries = make_queries(messages[::5], 8, seed=2)
    vectors = embedder.embed(queries)
    ours = [int(run_scale.core_search(engine, q, v)[0]) for q, v in zip(queries, vectors)]
    theirs = [naive.search(q, v, k=6)[0].label for q, v in zip(queries, vectors)]
    assert sum(a == b for a, b in zip(ours, theirs)) >= 7, (ours, theirs)


@pytest.mark.process
def test_run_scale_main_on_200_messages(tmp_path: Path, capsys) -> None:
    out = tmp_path / "scale.json"
    report = run_scale.main(["--sizes", "200", "--queries", "8", "--query-cost", "none", "--no-probe",
                             "--json", str(out), "--workdir", str(tmp_path)])
    assert "| 200 | synthetic |" in capsys.readouterr().out
    result = json.loads(out.read_text())["results"][0]
    assert result == json.loads(json.dumps(report["results"][0]))
    assert result["windows"] > 30 and result["ingest_rate"] > 0 and result["index_mb"] > 0
    for kind in ("e2e", "given", "core", "naive"):
        p50, p99 = result["latency_ms"][kind]
        assert 0 < p50 <= p99
    assert result["top1_agreement"] >= 0.75


def test_micro_benchmark_bodies_run_on_tiny_indexes() -> None:
    bench_micro.test_fusion_200_candidates(_call)
    bench_micro.test_tokenizer_200_tokens(_call)
    bm25 = bench_micro.Bm25Index()
    documents = bench_micro.zipf_documents(300)
    bm25.add(list(range(300)), documents)
    bench_micro.test_bm25_query_100k(_call, bm25)
    vectors = bench_micro.clustered_vectors(316)
    hnsw = bench_micro.HnswIndex(bench_micro.HnswParams(), capacity=300)
    hnsw.add(np.arange(300), vectors[:300])
    bench_micro.test_hnsw_query_100k(_call, (hnsw, vectors[300:]))


def test_overhead_measurement_runs(tmp_path: Path, embedder) -> None:
    overhead = run_scale.measure_overhead(embedder, tmp_path, n_messages=120)
    assert overhead["texts_embedded"] >= overhead["windows"] > 10
    # Timings of a tiny run can round to zero on a fast machine: check they are reported, not their size.
    timings = ("raw_windows_s", "raw_all_s", "pipeline_s", "pipeline_embed_s", "overhead_pct", "vs_windows_pct")
    assert all(math.isfinite(overhead[key]) for key in timings)
    assert min(overhead[key] for key in timings[:4]) >= 0


@pytest.mark.process
def test_run_scale_reindex_is_warm_and_summarizer_is_chosen(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CONVSEARCH_SUMMARIZER", "extractive")  # main sets it; monkeypatch restores it
    report = run_scale.main(["--sizes", "200", "--queries", "8", "--query-cost", "none", "--no-probe",
                             "--reindex", "--summarizer", "none", "--batch", "7", "--workdir", str(tmp_path)])
    result = report["results"][0]
    assert report["args"]["summarizer"] == "none"
    assert result["reindex"]["embeddings_computed"] == 0 and result["reindex"]["embeddings_reused"] > 0
    assert result["top1_agreement"] >= 0.75  # the reindex renumbers windows: it must come after the comparison
    assert os.environ["CONVSEARCH_SUMMARIZER"] == "none"  # what the engines of the run (and its probe) read


def test_a_long_generated_thread_starts_early_enough_to_end_before_now():
    """Ingest refuses times far in the future: a 1M-message thread must start decades back, after 1970."""
    assert ThreadParams(n_messages=10_000).first_day() == DEFAULT_START
    big = ThreadParams(n_messages=1_000_000).first_day()
    assert datetime(1970, 1, 1, tzinfo=timezone.utc) < big < DEFAULT_START
    assert big + timedelta(days=1_000_000 // MIN_MESSAGES_PER_DAY) <= LATEST_END


def test_many_threads_imports_one_thread_per_conversation() -> None:
    assert bench_many_threads.export(3, 4, seed=1) == bench_many_threads.export(3, 4, seed=1)
    assert bench_many_threads.export(3, 4, seed=1) != bench_many_threads.export(3, 4, seed=2)
    figures = bench_many_threads.run(5, 4)
    assert (figures["threads"], figures["messages"]) == (5, 20)
    assert figures["stored"]["threads"] == 5 and figures["stored"]["conversations"] == 5
    assert figures["summaries"] == 10 and figures["messages_per_s"] > 0  # a day's and a conversation's each
    assert figures["first_search_hits"] > 0  # the times may round to 0: only that they are there is checked
    assert figures["first_search_s"] >= 0 and figures["reindex_s"] >= 0


def test_bulk_ingest_loads_the_same_messages_both_ways_and_finds_them(tmp_path: Path) -> None:
    out = tmp_path / "bulk.json"
    results = bench_bulk_ingest.main(["--n", "300", "--json", str(out)])
    assert [r["path"] for r in results] == ["ingest", "import"] and json.loads(out.read_text()) == results
    for result in results:
        assert result["messages"] == 300 and result["hits"] > 0
        assert result["until_first_answer_s"] >= result["seconds"] and "summaries" in result["phases_s"]


def test_import_beside_reports_another_users_writes_and_keeps_them(tmp_path: Path) -> None:
    out = tmp_path / "beside.json"
    result = bench_import_beside.main(["--n", "400", "--every", "0.02", "--json", str(out)])
    assert json.loads(out.read_text()) == result and result["messages"] == 400
    assert result["writes_sent"] >= 1 and result["writes_found"] == result["writes_sent"]  # every write landed
    assert result["writes"]["count"] == result["writes_sent"] and "store" in result["phases_s"]
