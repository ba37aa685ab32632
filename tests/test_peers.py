"""benchmarks/peers/: each peer builds, reopens and finds both a word and a vector, when its
optional extra (`.[peers]`) is installed; skipped otherwise. Real libraries, small seeded data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import peers
from benchmarks.peers import scale
from engine.evaluation.locomo import RunConfig, open_corpus
from tests.support import HashEmbedder

TEXTS = [f"Alice: we spoke about the weather on day {i}" for i in range(40)]
TEXTS[17] = "Bob: the flamingo migration starts in March"
LIBRARIES = {"lancedb": "lancedb", "lancedb-fts": "lancedb", "txtai": "txtai", "bm25s": "bm25s"}
# Importing LanceDB takes seconds, txtai (torch, transformers) tens of seconds on a busy machine.
SLOW_IMPORTS = {"lancedb", "lancedb-fts", "txtai"}


def _vectors(n: int) -> np.ndarray:
    """Row i is the unit vector e_i: the query e_j has cosine 1 with row j and 0 with every other."""
    return np.eye(n, 64, dtype=np.float32)


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW_IMPORTS else [])
                                  for name in peers.PEERS])
def test_a_peer_finds_a_rare_word_and_a_vector_after_reopening(name, tmp_path):
    pytest.importorskip(LIBRARIES[name])
    vectors = _vectors(len(TEXTS))
    peer = peers.load(name)
    peer.build(TEXTS, vectors, tmp_path)
    searcher = peer.open(tmp_path)
    both = searcher.search("flamingo migration", vectors[29], 5)  # row 17 by its words, row 29 by its vector
    if name == "lancedb-fts":  # the full-text peer has no vectors
        assert both[0] == 17
    else:
        assert set(both[:2]) == {17, 29}
        assert searcher.search("zebra quantum", vectors[29], 5)[0] == 29
    assert len(searcher.search("weather", vectors[0], 5)) == 5


def test_an_unknown_peer_is_refused_with_the_known_names():
    with pytest.raises(SystemExit, match="lancedb, lancedb-fts, txtai, bm25s"):
        peers.parse_names("lancedb,elastic")


@pytest.mark.process
def test_run_peers_builds_and_serves_in_child_processes_with_ratios(tmp_path):
    pytest.importorskip("bm25s")
    vectors = _vectors(len(TEXTS))
    queries = ["flamingo migration", "weather day 3"]
    data = scale.export(list(range(100, 140)), TEXTS, vectors, queries, dict(zip(queries, vectors[:2])),
                        tmp_path / "data")
    assert json.loads((data / "windows.json").read_text())["labels"][0] == 100
    ours = {"build_s": 2.0, "p50": 1.0, "p99": 2.0, "rss_mb": 100.0, "disk_mb": 1.0}
    found = scale.run_peers(["bm25s"], data, ours, k=5)["bm25s"]
    assert found["rss_mb"] > 0 and found["p50"] > 0 and found["disk_mb"] > 0
    assert found["ratio"]["rss_mb"] == pytest.approx(found["rss_mb"] / 100.0, abs=0.01)
    assert "bm25s" in scale.peer_table(40, ours, {"bm25s": found})


def _tiny_locomo(path):
    turns = [("Ana", "I adopted a grey kitten named Pixel last weekend."), ("Ben", "Congrats! How is she settling in?"),
             ("Ana", "She sleeps on my keyboard all day."), ("Ben", "My sister is moving to Lisbon in spring.")]
    sample = {"sample_id": "conv-p1", "qa": [
        {"question": "What is the name of Ana's kitten?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
        {"question": "Where is Ben's sister moving?", "answer": "Lisbon", "evidence": ["D1:4"], "category": 2}],
        "conversation": {"speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
                         "session_1": [{"speaker": s, "dia_id": f"D1:{i}", "text": t} for i, (s, t) in enumerate(turns, 1)]}}
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


def test_the_locomo_harness_scores_a_peer_by_the_turns_it_returns(tmp_path):
    pytest.importorskip("bm25s")
    from benchmarks.peers.locomo import run_peer, turns_of

    embedder = HashEmbedder()
    with open_corpus(_tiny_locomo(tmp_path / "tiny.json"), embedder=embedder, summaries="none") as corpus:
        turns = {"conv-p1": turns_of(corpus, "conv-p1")}
        assert [line for *_, line in turns["conv-p1"]][0] == "Ana: I adopted a grey kitten named Pixel last weekend."
        vectors = {"conv-p1": embedder.embed([line for *_, line in turns["conv-p1"]])}
        found = run_peer("bm25s", corpus, vectors, turns, tmp_path / "peers", RunConfig(summaries=False, ks=(1, 5)))
    overall = found["groups"]["overall"]
    assert overall["questions"] == 2
    assert overall["turn"]["recall_any@1"] == 1.0  # both answers are the turn that shares their words
    assert overall["session"]["recall_any@1"] == 1.0
