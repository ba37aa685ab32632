"""A warm reindex takes the saved vector graph when the windows did not change, and only then."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.generate import SyntheticEmbedder, generate
from engine.api import ConversationEngine
from engine.config import Settings
from indexers.shard import current_version_dir

USER = "u"
QUERIES = ("order number error", "meeting tomorrow", "deploy failed again", "quad sprint")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """160 messages ingested and indexed in batches (tail windows replaced: saved labels have gaps)."""
    with ConversationEngine(tmp_path / "home", embedder=SyntheticEmbedder(0), settings=_settings()) as engine:
        engine.add_user(USER, "UTC")
        messages = generate(160, seed=1, user_id=USER)
        for start in range(0, len(messages), 40):
            engine.ingest(USER, messages[start:start + 40])  # indexed: the shard in memory follows each batch
        engine.index(USER)
    return tmp_path / "home"


def _settings(**changes: object) -> Settings:
    return Settings(summarizer="none", **changes)


def _labels(engine: ConversationEngine) -> list[int]:
    return sorted(engine.pipeline.shard(USER).chunks)


def _answers(engine: ConversationEngine) -> list[list[tuple[str, float]]]:
    return [[(h.message_id, round(h.score, 6)) for h in engine.search(USER, q, limit=8).results] for q in QUERIES]


def test_an_unchanged_reindex_keeps_the_saved_graph_and_every_answer(home: Path) -> None:
    with ConversationEngine(home, embedder=SyntheticEmbedder(0), settings=_settings()) as engine:
        before, labels = _answers(engine), _labels(engine)
        assert labels != list(range(len(labels)))  # gaps: adopting must renumber BM25 to these labels
        report = engine.reindex(USER)[0]
        assert report.embeddings_computed == 0 and report.embeddings_reused > len(labels)
        assert _labels(engine) == labels and _answers(engine) == before
    with ConversationEngine(home, embedder=SyntheticEmbedder(0), settings=_settings()) as engine:
        assert _answers(engine) == before  # and so does the saved version


def test_a_graph_that_cannot_be_read_or_another_chunking_rebuilds_from_the_cache(home: Path) -> None:
    copy = home.parent / "copy"
    shutil.copytree(home, copy)
    with ConversationEngine(home, embedder=SyntheticEmbedder(0), settings=_settings()) as engine:
        adopted = _answers(engine)
        engine.reindex(USER)
    (current_version_dir(copy / "indexes", USER) / "hnsw" / "index.faiss").unlink()
    with ConversationEngine(copy, embedder=SyntheticEmbedder(0), settings=_settings()) as engine:
        engine.pipeline._shards.clear()  # noqa: SLF001  (the broken file is only read by the reindex)
        report = engine.reindex(USER)[0]
        assert report.embeddings_computed == 0
        assert _labels(engine) == list(range(len(_labels(engine))))  # a fresh build numbers from 0
        rebuilt = _answers(engine)
    assert [[m for m, _ in a] for a in rebuilt] == [[m for m, _ in a] for a in adopted]
    assert np.allclose([s for a in rebuilt for _, s in a], [s for a in adopted for _, s in a], atol=1e-5)
    with ConversationEngine(home, embedder=SyntheticEmbedder(0), settings=_settings(window_tokens=64)) as engine:
        report = engine.reindex(USER)[0]
        labels = _labels(engine)
        assert labels == list(range(len(labels))) and report.embeddings_computed > 0  # new windows, new graph


def test_a_shard_saved_by_hnswlib_answers_the_same_and_is_rewritten(home: Path) -> None:
    """A vector graph in hnswlib's format (before the float16 graph) loads, answers as the new one,
    and the next background step saves it in the new format."""
    import hnswlib

    from indexers.hnsw import HnswIndex

    graph_dir = current_version_dir(home / "indexes", USER) / "hnsw"
    with ConversationEngine(home, embedder=SyntheticEmbedder(0), settings=_settings()) as engine:
        before = _answers(engine)
    saved = HnswIndex.load(graph_dir)
    labels = saved.labels()
    old = hnswlib.Index(space="ip", dim=saved.params.dim)
    old.init_index(max_elements=labels.size, ef_construction=saved.params.ef_construction, M=saved.params.m)
    old.add_items(saved.vectors(labels), labels.astype(np.uint64))
    shutil.rmtree(graph_dir)
    graph_dir.mkdir()
    old.save_index(str(graph_dir / "index.bin"))
    np.save(graph_dir / "labels.npy", labels)
    meta = {"dim": saved.params.dim, "m": saved.params.m, "ef_construction": saved.params.ef_construction,
            "ef": saved.params.ef, "space": "ip", "count": int(labels.size)}
    (graph_dir / "params.json").write_text(json.dumps(meta))
    with ConversationEngine(home, embedder=SyntheticEmbedder(0), settings=_settings()) as engine:
        assert _answers(engine) == before and engine.pipeline.shard(USER).dirty
        engine.maintain()
    live = current_version_dir(home / "indexes", USER) / "hnsw"
    assert (live / "index.faiss").is_file() and not (live / "index.bin").exists()
