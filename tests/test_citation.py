"""Snippets, message vectors on disk, and summary coverage."""

from __future__ import annotations

import numpy as np
import pytest

from engine.query.citation import make_snippet
from engine.errors import IndexStateError
from indexers.message_vectors import MessageVectors

def test_snippet_centres_on_the_match():
    text = "x " * 300 + "ECONNRESET from the proxy " + "y " * 300
    snippet = make_snippet(text, ["econnreset"])
    assert "ECONNRESET" in snippet and snippet.startswith("…") and snippet.endswith("…")


def test_message_vectors_round_trip_and_forget(tmp_path):
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(3, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    store = MessageVectors(8)
    store.put(["a", "b", "c"], vectors)
    store.forget(["b"])
    store.save(tmp_path / "mv")
    loaded = MessageVectors.load(tmp_path / "mv", 8)
    sims = loaded.similarities(["a", "b", "c"], vectors[0])
    assert sims[0] == pytest.approx(1.0, abs=2e-3) and np.isnan(sims[1]) and "b" not in loaded


def test_loaded_message_vectors_take_changes_and_save_them(tmp_path):
    """A loaded (memory-mapped) set takes new, replaced and forgotten vectors, and saves them all."""
    rng = np.random.default_rng(8)
    vectors = rng.normal(size=(4, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    store = MessageVectors(8)
    store.put(["a", "b", "c"], vectors[:3])
    store.save(tmp_path / "v1")
    loaded = MessageVectors.load(tmp_path / "v1", 8)
    loaded.put(["b", "d"], vectors[[3, 3]])  # b replaced, d new
    loaded.forget(["c"])
    loaded.save(tmp_path / "v2")
    again = MessageVectors.load(tmp_path / "v2", 8)
    assert len(again) == 3 and "c" not in again
    sims = again.similarities(["a", "b", "c", "d"], vectors[3])
    assert sims[1] == pytest.approx(1.0, abs=2e-3) and sims[3] == pytest.approx(1.0, abs=2e-3) and np.isnan(sims[2])
    assert sims[0] == pytest.approx(float(vectors[0] @ vectors[3]), abs=2e-3)


def test_unreadable_message_vectors_are_reported(tmp_path):
    (tmp_path / "mv").mkdir()
    (tmp_path / "mv" / "ids.json").write_text("[\"a\"]")
    np.save(tmp_path / "mv" / "vectors.npy", np.zeros((2, 8), dtype=np.float16))
    with pytest.raises(IndexStateError, match="reindex"):
        MessageVectors.load(tmp_path / "mv", 8)


def test_coverage_merges_spans_and_answers_by_thread():
    from datetime import datetime, timezone

    from engine.models import Summary
    from engine.query.summary_spans import Spans
    from engine.query.summary_records import SummaryRecords

    at = datetime(2024, 1, 1, tzinfo=timezone.utc)
    spans = [("t", 1, 5), ("t", 4, 9), ("t", 20, 22), ("u", 1, 3)]
    coverage = Spans.of(SummaryRecords.of([Summary(f"s{i}", t, "x", "range", a, b, "md", at, at)
                                           for i, (t, a, b) in enumerate(spans)]))

    def covers(thread: str, seq: int) -> bool:
        return bool(coverage.covered([thread], [seq])[0])

    assert [s for s in range(0, 25) if covers("t", s)] == [*range(1, 10), 20, 21, 22]
    assert covers("u", 2) and not covers("u", 4) and not covers("v", 1)
    assert coverage.covered(["t", "v", "u", "t"], [21, 1, 3, 10]).tolist() == [True, False, True, False]
