"""MessageVectors read back after a save: rows by pread (a search's few) and through the mapping
(many) give the same float16 values as were put."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from indexers.message_vectors import MessageVectors
from tests.support import saved_message_vectors


def test_saved_rows_read_back_both_ways(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    ids = [f"m{i:04d}" for i in range(400)]
    vectors, loaded = saved_message_vectors(tmp_path, ids, 16, rng)
    loaded.put(["fresh"], vectors[:1])
    loaded.forget(["m0003"])
    query = rng.standard_normal(16).astype(np.float32)
    expected = vectors.astype(np.float16).astype(np.float32) @ query
    few = ["m0399", "fresh", "m0003", "m0010", "unknown"]  # pread path
    got = loaded.similarities(few, query)
    np.testing.assert_allclose(got[[0, 1, 3]], expected[[399, 0, 10]], rtol=1e-6)
    assert np.isnan(got[2]) and np.isnan(got[4])
    many = ids[4:]  # more than 256 rows: through the mapping
    np.testing.assert_allclose(loaded.similarities(many, query), expected[4:], rtol=1e-6)
    assert len(loaded) == 400


def test_ids_found_exactly_across_saves(tmp_path: Path) -> None:
    """Saved ids are found by binary search over their UTF-8 bytes: a longer id sharing a saved
    one's prefix, a non-ASCII id, a saved id put again and a forgotten one all come out right,
    and survive a second save."""
    rng = np.random.default_rng(11)
    ids = ["a", "ab", "b", "é-1", "z" * 40]
    vectors = rng.standard_normal((5, 8)).astype(np.float32)
    first = MessageVectors(8)
    first.put(ids, vectors)
    first.save(tmp_path / "one")
    loaded = MessageVectors.load(tmp_path / "one", 8)
    asked = ["ab", "abc", "é-1", "a" * 41, "b"]
    assert loaded.has(asked).tolist() == [True, False, True, False, True]
    replaced = rng.standard_normal((1, 8)).astype(np.float32)
    loaded.put(["b"], replaced)
    loaded.forget(["a"])
    assert "a" not in loaded and "b" in loaded and len(loaded) == 4
    loaded.save(tmp_path / "two")
    again = MessageVectors.load(tmp_path / "two", 8)
    query = rng.standard_normal(8).astype(np.float32)
    got = again.similarities(["a", "b", "é-1", "z" * 40], query)
    assert np.isnan(got[0])
    np.testing.assert_allclose(got[1:], np.concatenate([replaced, vectors[[3, 4]]]).astype(np.float16).astype(np.float32)
                               @ query, rtol=1e-6)
    assert len(again) == 4


def test_a_save_in_blocks_writes_every_row(tmp_path: Path, monkeypatch) -> None:
    """Saved rows and fresh ones interleave across block edges (blocks of 7 rows here)."""
    import indexers.message_vectors as module

    monkeypatch.setattr(module, "SAVE_BLOCK", 7)
    rng = np.random.default_rng(13)
    vectors = rng.standard_normal((40, 8)).astype(np.float32)
    first = MessageVectors(8)
    first.put([f"m{i:02d}" for i in range(0, 40, 2)], vectors[0::2])
    first.save(tmp_path / "one")
    loaded = MessageVectors.load(tmp_path / "one", 8)
    loaded.put([f"m{i:02d}" for i in range(1, 40, 2)], vectors[1::2])  # fresh, between the saved ids
    loaded.save(tmp_path / "two")
    again = MessageVectors.load(tmp_path / "two", 8)
    query = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(again.similarities([f"m{i:02d}" for i in range(40)], query),
                               vectors.astype(np.float16).astype(np.float32) @ query, rtol=1e-6)
