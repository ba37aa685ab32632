"""HnswIndex: recall on real MiniLM vectors of LoCoMo, deletes, growth, filters, persistence."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import faiss
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import IndexStateError, InvalidInputError
from indexers.embedders import OnnxEmbedder
from engine.subprocesses import usable_cores
from indexers.hnsw import EXACT_FILTER_MAX, PARALLEL_ADD_MIN, HnswIndex, HnswParams, _checked_batch

LOCOMO = Path(os.environ.get("CONVSEARCH_LOCOMO_DEV", "/work/shared/data/locomo/locomo_dev.json"))
N_QUERIES = 200
DIM = 384
F16_ATOL = 2e-3  # stored vectors are float16: a unit vector's cosine moves by less than this


def _locomo_texts() -> tuple[list[str], list[str]]:
    """All turns of the dev conversations, and a seeded sample of their QA questions."""
    if not LOCOMO.exists():
        pytest.skip(f"LoCoMo dev data not found at {LOCOMO}")
    turns, questions = [], []
    for sample in json.loads(LOCOMO.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        for key in sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:])):
            turns += [t["text"] for t in conv[key]]
        questions += [q["question"] for q in sample["qa"]]
    picked = np.random.default_rng(7).choice(len(questions), size=N_QUERIES, replace=False)
    return turns, [questions[i] for i in sorted(picked)]


@pytest.fixture(scope="module")
def locomo_vectors() -> tuple[np.ndarray, np.ndarray]:
    """(turn vectors, question vectors), embedded once with the ONNX backend (the faster one)."""
    turns, questions = _locomo_texts()
    embedder = OnnxEmbedder(batch_size=64)
    return embedder.embed(turns), embedder.embed(questions)


@pytest.fixture(scope="module")
def locomo_index(locomo_vectors: tuple[np.ndarray, np.ndarray]) -> HnswIndex:
    turns, _ = locomo_vectors
    index = HnswIndex(HnswParams(), capacity=256)  # small on purpose: the build must grow it
    for start in range(0, len(turns), 500):
        chunk = np.arange(start, min(start + 500, len(turns)), dtype=np.int64)
        index.add(chunk, turns[chunk])
    return index


def _exact_top(corpus: np.ndarray, labels: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    sims = corpus @ query
    return labels[np.argsort(-sims, kind="stable")[:k]]


def _recall(index: HnswIndex, corpus: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    labels = np.arange(len(corpus), dtype=np.int64)
    hits = [len(set(index.search(q, k)[0]) & set(_exact_top(corpus, labels, q, k))) for q in queries]
    return sum(hits) / (k * len(queries))


def _unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.slow
def test_recall_on_locomo(locomo_index: HnswIndex, locomo_vectors: tuple[np.ndarray, np.ndarray]) -> None:
    turns, questions = locomo_vectors
    assert len(locomo_index) == len(turns) > 2000
    assert _recall(locomo_index, turns, questions) >= 0.95


@pytest.mark.slow
def test_recall_survives_save_and_load(
    locomo_index: HnswIndex, locomo_vectors: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    turns, questions = locomo_vectors
    locomo_index.save(tmp_path / "hnsw")
    loaded = HnswIndex.load(tmp_path / "hnsw", dim=DIM)
    assert len(loaded) == len(turns) and loaded.params == locomo_index.params
    assert _recall(loaded, turns, questions) >= 0.95
    np.testing.assert_array_equal(loaded.search(questions[0], 10)[0], locomo_index.search(questions[0], 10)[0])


@pytest.mark.slow
def test_similarities_are_cosines_best_first(
    locomo_index: HnswIndex, locomo_vectors: tuple[np.ndarray, np.ndarray]
) -> None:
    turns, questions = locomo_vectors
    labels, sims = locomo_index.search(questions[3], 10)
    assert labels.dtype == np.int64 and sims.dtype == np.float32
    np.testing.assert_allclose(sims, turns[labels] @ questions[3], atol=F16_ATOL)
    assert np.all(np.diff(sims) <= 1e-6)


@pytest.mark.slow
def test_allowed_filter_small_is_exact(locomo_index: HnswIndex, locomo_vectors: tuple[np.ndarray, np.ndarray]) -> None:
    turns, questions = locomo_vectors
    subset = np.sort(np.random.default_rng(1).choice(len(turns), size=300, replace=False)).astype(np.int64)
    stored = locomo_index.vectors(subset)  # exact over what the index holds (float16: near-ties may swap)
    for query in questions[:20]:
        labels, sims = locomo_index.search(query, 10, allowed=subset)
        np.testing.assert_array_equal(labels, _exact_top(stored, subset, query / np.linalg.norm(query), 10))
        np.testing.assert_allclose(sims, turns[labels] @ query, atol=F16_ATOL)


@pytest.mark.slow
def test_allowed_filter_large_uses_graph(
    locomo_index: HnswIndex, locomo_vectors: tuple[np.ndarray, np.ndarray]
) -> None:
    turns, questions = locomo_vectors
    subset = np.arange(0, len(turns), dtype=np.int64)[np.arange(len(turns)) % 10 != 0]  # 90%: above the cut-off
    assert subset.size > EXACT_FILTER_MAX
    allowed = set(subset.tolist())
    hits = 0
    for query in questions[:50]:
        labels, _ = locomo_index.search(query, 10, allowed=subset)
        assert set(labels.tolist()) <= allowed and len(labels) == 10
        hits += len(set(labels) & set(_exact_top(turns[subset], subset, query, 10)))
    assert hits / 500 >= 0.95


def test_remove_hides_labels_and_readd_restores() -> None:
    rng = np.random.default_rng(2)
    vectors = _unit(rng, 200)
    index = HnswIndex(HnswParams(), capacity=64)
    index.add(np.arange(200, dtype=np.int64), vectors)
    gone = np.arange(0, 200, 3)
    index.remove(gone.tolist() + [10_000])  # an unknown label is ignored
    index.remove(gone.tolist())  # and so is a second removal
    assert len(index) == 200 - gone.size and 0 not in index and 1 in index
    for label in gone[:20]:
        found, _ = index.search(vectors[label], 200)
        assert not set(found.tolist()) & set(gone.tolist())
        assert len(found) == 200 - gone.size
    index.add(np.array([0]), vectors[0])
    assert index.search(vectors[0], 1)[0].tolist() == [0] and 0 in index


def test_readding_a_label_replaces_its_vector() -> None:
    rng = np.random.default_rng(3)
    old, new = _unit(rng, 2)
    index = HnswIndex(HnswParams(dim=DIM))
    index.add(np.array([5]), old[None])
    index.add(np.array([5]), new[None])
    assert len(index) == 1
    np.testing.assert_allclose(index.vectors(np.array([5]))[0], new, atol=F16_ATOL)
    assert not np.allclose(index.vectors(np.array([5]))[0], old, atol=F16_ATOL)


def test_grows_geometrically_past_capacity() -> None:
    rng = np.random.default_rng(4)
    vectors = _unit(rng, 300)
    index = HnswIndex(HnswParams(), capacity=16)
    for start in range(0, 300, 10):
        index.add(np.arange(start, start + 10, dtype=np.int64), vectors[start : start + 10])
    assert len(index) == 300 and 300 <= index.capacity <= 512
    for label in (0, 150, 299):
        assert index.search(vectors[label], 1)[0].tolist() == [label]


def test_k_larger_than_live_count_and_empty_index() -> None:
    index = HnswIndex(HnswParams(dim=8), capacity=4)
    empty_labels, empty_sims = index.search(np.ones(8, dtype=np.float32), 5)
    assert empty_labels.shape == (0,) and empty_sims.shape == (0,)
    vectors = _unit(np.random.default_rng(5), 5, dim=8)
    index.add(np.arange(5, dtype=np.int64), vectors)
    labels, sims = index.search(vectors[0], 50)
    assert sorted(labels.tolist()) == [0, 1, 2, 3, 4] and labels[0] == 0
    index.remove([1, 2])
    labels, _ = index.search(vectors[0], 50)
    assert sorted(labels.tolist()) == [0, 3, 4]
    assert index.search(vectors[0], 50, allowed=np.array([1, 2, 99]))[0].size == 0


def test_deleted_labels_stay_hidden_after_load(tmp_path: Path) -> None:
    vectors = _unit(np.random.default_rng(6), 50)
    index = HnswIndex(HnswParams())
    index.add(np.arange(50, dtype=np.int64), vectors)
    index.remove(range(25))
    index.save(tmp_path)
    loaded = HnswIndex.load(tmp_path, ef=64)
    assert loaded.params.ef == 64 and len(loaded) == 25 and 3 not in loaded
    assert set(loaded.search(vectors[3], 50)[0].tolist()) == set(range(25, 50))
    loaded.add(np.array([3]), vectors[3][None])  # a deleted label can come back after a load
    assert loaded.search(vectors[3], 1)[0].tolist() == [3]


def test_empty_index_round_trips(tmp_path: Path) -> None:
    HnswIndex(HnswParams(dim=16)).save(tmp_path)
    loaded = HnswIndex.load(tmp_path)
    assert len(loaded) == 0 and loaded.search(np.ones(16, dtype=np.float32), 3)[0].size == 0


def _saved(tmp_path: Path) -> Path:
    index = HnswIndex(HnswParams(dim=16))
    index.add(np.arange(10, dtype=np.int64), _unit(np.random.default_rng(8), 10, dim=16))
    index.save(tmp_path / "idx")
    return tmp_path / "idx"


def _corrupt_index(d: Path) -> None:
    (d / "index.faiss").write_bytes((d / "index.faiss").read_bytes()[:500])


def _other_dim(d: Path) -> None:
    meta = json.loads((d / "params.json").read_text())
    (d / "params.json").write_text(json.dumps(meta | {"dim": 32}))


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: (d / "params.json").unlink(),
        lambda d: (d / "index.faiss").unlink(),
        lambda d: (d / "labels.npy").write_bytes(b"not numpy"),
        lambda d: (d / "params.json").write_text("{"),
        lambda d: np.save(d / "labels.npy", np.arange(3)),
        lambda d: np.save(d / "labels.npy", np.arange(100, 110)),
        _corrupt_index,
        _other_dim,
    ],
    ids=["no-params", "no-index", "bad-labels", "bad-json", "few-labels", "foreign-labels", "truncated", "dim"],
)
def test_damaged_directory_raises_index_state_error(tmp_path: Path, damage) -> None:
    directory = _saved(tmp_path)
    damage(directory)
    with pytest.raises(IndexStateError, match="convsearch reindex"):
        HnswIndex.load(directory)


def test_load_checks_expected_dim(tmp_path: Path) -> None:
    with pytest.raises(IndexStateError, match="convsearch reindex"):
        HnswIndex.load(_saved(tmp_path), dim=384)


@pytest.mark.parametrize(
    ("labels", "vectors"),
    [
        (np.array([1, 2]), np.ones((1, DIM), dtype=np.float32)),
        (np.array([1]), np.ones((1, DIM + 1), dtype=np.float32)),
        (np.array([-1]), np.ones((1, DIM), dtype=np.float32)),
        (np.array([1.5]), np.ones((1, DIM), dtype=np.float32)),
        (np.array([1]), np.zeros((1, DIM), dtype=np.float32)),
        (np.array([1]), np.full((1, DIM), np.nan, dtype=np.float32)),
    ],
    ids=["count", "width", "negative", "float-label", "zero", "nan"],
)
def test_add_refuses_bad_input(labels: np.ndarray, vectors: np.ndarray) -> None:
    with pytest.raises(InvalidInputError):
        HnswIndex().add(labels, vectors)


def test_search_refuses_bad_k_and_vectors_refuses_unknown_labels() -> None:
    index = HnswIndex(HnswParams(dim=8))
    index.add(np.array([1]), np.ones((1, 8), dtype=np.float32))
    with pytest.raises(InvalidInputError):
        index.search(np.ones(8, dtype=np.float32), 0)
    for unknown in ([1, 2], [-1], [10**9], [1, 1, 0]):
        with pytest.raises(InvalidInputError):
            index.vectors(np.array(unknown))
    index.remove([1])
    with pytest.raises(InvalidInputError):  # removed
        index.vectors(np.array([1]))
    assert index.vectors(np.zeros(0, np.int64)).shape == (0, 8)
    with pytest.raises(InvalidInputError):  # an index that never held a label
        HnswIndex(HnswParams(dim=8)).vectors(np.array([0]))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 30), max_size=8)), max_size=12))
def test_bookkeeping_matches_a_set(ops: list[tuple[bool, list[int]]]) -> None:
    """Any add/remove sequence leaves exactly the expected live labels, and search sees only them."""
    rng = np.random.default_rng(9)
    index, live = HnswIndex(HnswParams(dim=8), capacity=2), set()
    for is_add, labels in ops:
        if is_add:
            index.add(np.array(labels, dtype=np.int64), _unit(rng, len(labels), dim=8))
            live |= set(labels)
        else:
            index.remove(labels)
            live -= set(labels)
    assert len(index) == len(live) and index.labels().tolist() == sorted(live)
    assert set(index.search(np.ones(8, dtype=np.float32), 40)[0].tolist()) == live


def _save_as_hnswlib(directory: Path, labels: np.ndarray, vectors: np.ndarray, dead: np.ndarray) -> None:
    """The files hnswlib's HnswIndex wrote before the float16 graph: index.bin, live labels, params."""
    import hnswlib

    graph = hnswlib.Index(space="ip", dim=vectors.shape[1])
    graph.init_index(max_elements=len(labels), ef_construction=100, M=16)
    graph.add_items(vectors, labels.astype(np.uint64))
    for label in dead.tolist():
        graph.mark_deleted(label)
    directory.mkdir(parents=True)
    graph.save_index(str(directory / "index.bin"))
    live = np.setdiff1d(labels, dead)
    np.save(directory / "labels.npy", live)
    meta = {"dim": vectors.shape[1], "m": 16, "ef_construction": 100, "ef": 128, "space": "ip", "count": int(live.size)}
    (directory / "params.json").write_text(json.dumps(meta))


def test_a_graph_saved_by_hnswlib_loads_and_is_rewritten(tmp_path: Path) -> None:
    vectors = _unit(np.random.default_rng(10), 120, dim=16)
    labels = np.arange(100, 220, dtype=np.int64)
    _save_as_hnswlib(tmp_path / "old", labels, vectors, dead=labels[:20])
    loaded = HnswIndex.load(tmp_path / "old", dim=16)
    assert loaded.migrated and loaded.labels().tolist() == labels[20:].tolist()
    np.testing.assert_allclose(loaded.vectors(labels[20:]), vectors[20:], atol=F16_ATOL)
    assert loaded.search(vectors[50], 1)[0].tolist() == [150] and 105 not in loaded
    loaded.save(tmp_path / "new")
    again = HnswIndex.load(tmp_path / "new", dim=16)
    assert not again.migrated and again.labels().tolist() == labels[20:].tolist()


def test_a_damaged_hnswlib_graph_raises_index_state_error(tmp_path: Path) -> None:
    vectors = _unit(np.random.default_rng(11), 30, dim=16)
    _save_as_hnswlib(tmp_path / "old", np.arange(30, dtype=np.int64), vectors, dead=np.zeros(0, dtype=np.int64))
    (tmp_path / "old" / "index.bin").write_bytes((tmp_path / "old" / "index.bin").read_bytes()[:40])
    with pytest.raises(IndexStateError, match="convsearch reindex"):
        HnswIndex.load(tmp_path / "old")


def test_dead_slots_never_come_back_and_a_filter_walks_the_graph() -> None:
    """Replaced and removed vectors stay in faiss's graph as dead slots: no search may return them."""
    rng = np.random.default_rng(12)
    n = 6000
    vectors = _unit(rng, n, dim=16)
    index = HnswIndex(HnswParams(dim=16))
    index.add(np.arange(n, dtype=np.int64), vectors)
    index.add(np.arange(0, n, 2, dtype=np.int64), _unit(rng, n // 2, dim=16))  # every even label replaced
    index.remove(range(1, n, 4))
    assert index.slots == n + n // 2 and len(index) == n - n // 4
    allowed = np.arange(n, dtype=np.int64)[np.arange(n) % 3 != 0]  # 2/3 of them: the graph path
    assert allowed.size * 3 // 4 > EXACT_FILTER_MAX
    for query in vectors[:20]:
        labels, _ = index.search(query, 50)
        assert len(labels) == 50 and len(set(labels.tolist())) == 50 and not np.any(labels % 4 == 1)
        labels, _ = index.search(query, 50, allowed=allowed)
        assert len(labels) == 50 and not np.any(labels % 3 == 0) and not np.any(labels % 4 == 1)


def test_compacted_keeps_the_live_vectors_and_drops_the_dead_slots() -> None:
    rng = np.random.default_rng(13)
    vectors = _unit(rng, 400, dim=16)
    index = HnswIndex(HnswParams(dim=16))
    index.add(np.arange(400, dtype=np.int64), vectors)
    index.add(np.arange(0, 400, 2, dtype=np.int64), _unit(rng, 200, dim=16))  # 200 replaced: dead slots
    index.remove(range(1, 400, 4))
    assert index.dead == 300
    fresh = index.compacted()
    assert fresh.dead == 0 and fresh.slots == len(index) == 300
    assert fresh.labels().tolist() == index.labels().tolist()
    np.testing.assert_allclose(fresh.vectors(index.labels()), index.vectors(index.labels()), atol=F16_ATOL)
    for query in vectors[:10]:
        assert fresh.search(query, 10)[0].tolist() == index.search(query, 10)[0].tolist()


def _crowded_by_the_dead(dead: int) -> tuple[HnswIndex, np.ndarray, np.ndarray]:
    """3,000 vectors far from a query and 400 close to it, the first `dead` of those removed: what a
    live conversation leaves where its topic is (its tail window replaced at every message)."""
    rng = np.random.default_rng(7)
    query = rng.standard_normal(32).astype(np.float32)
    query /= np.linalg.norm(query)
    vectors = np.concatenate([rng.standard_normal((3000, 32)), query + 0.05 * rng.standard_normal((400, 32))]).astype(np.float32)
    index = HnswIndex(HnswParams(dim=32, m=8, ef_construction=40, ef=40))
    index.add(np.arange(3400), vectors)
    index.remove(range(3000, 3000 + dead))
    live = np.r_[np.arange(3000), np.arange(3000 + dead, 3400)]
    units = vectors[live] / np.linalg.norm(vectors[live], axis=1, keepdims=True)
    return index, query, live[np.argsort(-(units @ query))[:20]]


def test_a_walk_crowded_by_dead_slots_widens_its_beam_before_scanning_every_vector(monkeypatch):
    """Of the query's 400 neighbours 380 are dead: the walk at ef 40 cannot fill 20 results among
    them, and the exact scan it fell back to decodes every live vector (1.1 s at 100k messages)."""
    index, query, expected = _crowded_by_the_dead(380)
    scanned: list[int] = []
    exact = HnswIndex._search_exact

    def counted(self: HnswIndex, q: np.ndarray, k: int, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scanned.append(slots.size)
        return exact(self, q, k, slots)

    monkeypatch.setattr(HnswIndex, "_search_exact", counted)
    labels, _ = index.search(query, 20)
    assert scanned == [] and len(set(labels.tolist()) & set(expected.tolist())) >= 18


def test_the_exact_scan_decodes_a_block_at_a_time_and_answers_the_same(monkeypatch):
    index, query, expected = _crowded_by_the_dead(300)
    live = np.flatnonzero(index._label_of[: index.slots] >= 0)  # noqa: SLF001
    whole = index._search_exact(query, 20, live)  # noqa: SLF001
    monkeypatch.setattr("indexers.hnsw.EXACT_BLOCK", 64)
    blocks = index._search_exact(query, 20, live)  # noqa: SLF001
    assert whole[0].tolist() == blocks[0].tolist() and set(whole[0].tolist()) == set(expected.tolist())


class _ThreadsSeen:
    """Stands in for the faiss graph: notes faiss's OpenMP threads at each add, then adds."""

    def __init__(self, graph: faiss.Index) -> None:
        self.graph, self.threads = graph, []

    @property
    def ntotal(self) -> int:
        return int(self.graph.ntotal)

    def add(self, rows: np.ndarray) -> None:
        self.threads.append(faiss.omp_get_max_threads())
        self.graph.add(rows)


def test_a_large_add_inserts_on_every_core_and_makes_the_one_thread_graph() -> None:
    """In a thread whose OpenMP setting is one thread (one that opened an engine: engine/blas.py), a
    large batch is inserted on every core and the setting restored; a small one stays on the thread's
    one. The graph is the one faiss makes on a single thread, byte for byte."""
    labels, rows = np.arange(2 * PARALLEL_ADD_MIN), _unit(np.random.default_rng(7), 2 * PARALLEL_ADD_MIN)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        large, small, one_thread = (HnswIndex(HnswParams(dim=DIM)) for _ in range(3))
        large_seen, small_seen = _ThreadsSeen(large._graph), _ThreadsSeen(small._graph)
        large._graph, small._graph = large_seen, small_seen  # type: ignore[assignment]
        large.add(labels, rows)
        small.add(labels[:3], rows[:3])
        assert large_seen.threads == [usable_cores()] and small_seen.threads == [1]
        assert faiss.omp_get_max_threads() == 1
        one_thread._graph.add(_checked_batch(labels, rows, DIM)[1])  # the rows as `add` gives them, one thread
    finally:
        faiss.omp_set_num_threads(before)
    assert bytes(faiss.serialize_index(large_seen.graph)) == bytes(faiss.serialize_index(one_thread._graph))
