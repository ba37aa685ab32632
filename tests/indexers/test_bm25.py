"""Bm25Index: differential against rank_bm25, search semantics, mutation, persistence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from engine.errors import IndexStateError, InvalidInputError
from indexers.bm25 import Bm25Index, Bm25Params

Corpus = list[list[str]]


def random_corpus(rng: np.random.Generator, n_docs: int, vocab: int = 60) -> Corpus:
    """Zipf-ish words, some empty documents, repeated terms within documents."""
    words = [f"w{i}" for i in range(vocab)]
    weights = 1.0 / np.arange(1, vocab + 1)
    lengths = rng.integers(0, 25, n_docs)
    return [[words[i] for i in rng.choice(vocab, size=n, p=weights / weights.sum())] for n in lengths]


def random_queries(rng: np.random.Generator, n: int, vocab: int = 60) -> Corpus:
    # w-1 never occurs; repeats are allowed on purpose (rank_bm25 counts them twice)
    return [[f"w{i}" for i in rng.integers(-1, vocab, rng.integers(1, 6))] for _ in range(n)]


def build(labels: list[int], corpus: Corpus, params: Bm25Params = Bm25Params(), batch: int = 7) -> Bm25Index:
    index = Bm25Index(params)
    for start in range(0, len(corpus), batch):  # many small adds: exercises segments and merges
        index.add(labels[start : start + batch], corpus[start : start + batch])
    return index


def assert_same_as_rank_bm25(index: Bm25Index, labels: list[int], corpus: Corpus, query: list[str]) -> None:
    p = index.params
    expected = BM25Okapi(corpus, k1=p.k1, b=p.b, epsilon=p.epsilon).get_scores(query)
    assert np.allclose(index.scores_for(query, np.array(labels)), expected)
    got_labels, got_scores = index.search(query, k=len(labels) + 5)
    matching = {label for label, doc in zip(labels, corpus) if set(query) & set(doc)}
    assert set(got_labels.tolist()) == matching  # OR semantics: exactly the documents with a query term
    by_label = dict(zip(labels, expected))
    assert np.allclose(got_scores, [by_label[label] for label in got_labels.tolist()])
    assert np.all(np.diff(got_scores) <= 0)


@pytest.mark.parametrize("params", [Bm25Params(), Bm25Params(k1=1.2, b=0.5, epsilon=0.1), Bm25Params(b=0.0)])
def test_scores_equal_rank_bm25(params: Bm25Params) -> None:
    rng = np.random.default_rng(7)
    corpus = random_corpus(rng, 300)
    labels = list(range(300))
    index = build(labels, corpus, params)
    for query in random_queries(rng, 40):
        assert_same_as_rank_bm25(index, labels, corpus, query)


def test_negative_idf_floor_matches_rank_bm25() -> None:
    # "common" is in 4 of 5 documents: its raw idf is negative and gets epsilon * average idf.
    corpus = [["common", "x"], ["common", "y"], ["common"], ["common", "z", "z"], ["rare"]]
    labels = [10, 20, 30, 40, 50]
    index = build(labels, corpus, batch=2)
    ref = BM25Okapi(corpus)
    assert ref.idf["common"] == pytest.approx(0.25 * ref.average_idf)
    for query in (["common"], ["common", "z"], ["z", "z", "rare"], ["nothing"]):
        assert_same_as_rank_bm25(index, labels, corpus, query)


def test_after_add_and_remove_equals_rank_bm25_on_live_docs() -> None:
    rng = np.random.default_rng(11)
    corpus = random_corpus(rng, 400)
    labels = [int(x) for x in rng.permutation(10_000)[:400]]  # not increasing: the sorted lookup path
    index = build(labels, corpus, batch=13)
    doomed = set(rng.choice(labels, 120, replace=False).tolist())
    index.remove(list(doomed) + [999_999])  # an unknown label is ignored
    index.remove(iter([labels[0], labels[0]]))
    doomed.add(labels[0])
    live = [(label, doc) for label, doc in zip(labels, corpus) if label not in doomed]
    extra = random_corpus(rng, 30)
    index.add(list(range(20_000, 20_030)), extra)
    live += list(zip(range(20_000, 20_030), extra))
    live_labels, live_docs = [lab for lab, _ in live], [doc for _, doc in live]
    assert len(index) == len(live) and labels[0] not in index and 20_000 in index
    for query in random_queries(rng, 40):
        assert_same_as_rank_bm25(index, live_labels, live_docs, query)


@settings(max_examples=120, deadline=None)
@given(
    docs=st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=8), min_size=1, max_size=25),
    removed=st.sets(st.integers(0, 24), max_size=10),
    query=st.lists(st.sampled_from("abcdefghz"), min_size=1, max_size=4),
    batch=st.integers(1, 6),
)
def test_property_equals_rank_bm25(docs: Corpus, removed: set[int], query: list[str], batch: int) -> None:
    labels = list(range(len(docs)))
    index = build(labels, docs, batch=batch)
    index.remove(removed)
    live = [(label, doc) for label, doc in zip(labels, docs) if label not in removed]
    assume(any(doc for _, doc in live))  # rank_bm25 divides by zero on an empty vocabulary
    assert_same_as_rank_bm25(index, [lab for lab, _ in live], [doc for _, doc in live], query)


def test_ties_rank_larger_label_first_even_across_the_cut() -> None:
    index = Bm25Index()
    index.add([5, 3, 9, 1, 7], [["x", "y"]] * 4 + [["x", "y", "x"]])
    index.add(list(range(100, 120)), [["filler", "words"]] * 20)  # keeps idf(x) positive
    labels, scores = index.search(["x"], k=3)
    assert labels.tolist() == [7, 9, 5]
    assert scores[1] == scores[2] < scores[0]


def test_allowed_filters_before_the_top_k_cut() -> None:
    index = Bm25Index()
    index.add([1, 2, 3, 4], [["a", "a", "a"], ["a", "a"], ["a", "b"], ["c"]])
    labels, _ = index.search(["a"], k=1, allowed=np.array([3, 4, 77]))
    assert labels.tolist() == [3]
    assert index.search(["a"], k=5, allowed=np.array([], np.int64))[0].size == 0


def test_or_semantics_and_no_nonmatching_results() -> None:
    index = Bm25Index()
    index.add([1, 2, 3], [["alpha"], ["beta"], ["gamma", "delta"]])
    labels, scores = index.search(["alpha", "beta", "zeta"], k=10)
    assert sorted(labels.tolist()) == [1, 2] and np.all(scores > 0)
    assert index.search(["zeta"], k=10)[0].size == 0
    assert index.search([], k=10)[0].size == 0


def test_scores_for_unmatched_and_unknown_labels_are_zero() -> None:
    index = Bm25Index()
    index.add([1, 2, 3], [["a", "b"], ["c"], ["d"]])
    scores = index.scores_for(["a"], np.array([1, 2, 42]))
    assert scores[0] > 0 and scores[1:].tolist() == [0.0, 0.0]


def test_max_score_bounds_every_score() -> None:
    rng = np.random.default_rng(3)
    corpus = random_corpus(rng, 200)
    index = build(list(range(200)), corpus)
    for query in random_queries(rng, 30):
        _, scores = index.search(query, k=200)
        if scores.size:
            assert np.all(scores / index.max_score(query) < 1.0)
    assert index.max_score(["w1", "w1"]) == pytest.approx(2 * index.max_score(["w1"]))  # repeats count
    assert index.max_score(["w-1"]) == 0.0


def test_add_refuses_present_or_repeated_labels_and_changes_nothing() -> None:
    index = Bm25Index()
    index.add([1, 2], [["a"], ["b"]])
    before = index.search(["a", "b"], k=5)
    with pytest.raises(InvalidInputError):
        index.add([3, 2], [["a"], ["c"]])
    with pytest.raises(InvalidInputError):
        index.add([4, 4], [["a"], ["c"]])
    assert len(index) == 2 and 3 not in index and 4 not in index
    after = index.search(["a", "b"], k=5)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])


@pytest.mark.parametrize(
    "labels, token_lists",
    [([1], "ab"), ([1], ["ab"]), ([1, 2], [["a"]]), (["x"], [["a"]]), ([1.5], [["a"]]), ([1], [[3]])],
)
def test_add_rejects_malformed_input(labels: list[object], token_lists: object) -> None:
    with pytest.raises(InvalidInputError):
        Bm25Index().add(labels, token_lists)  # type: ignore[arg-type]


def test_invalid_query_arguments() -> None:
    index = Bm25Index()
    index.add([1], [["a"]])
    with pytest.raises(InvalidInputError):
        index.search("a", k=1)  # a string, not tokens
    with pytest.raises(InvalidInputError):
        index.search(["a"], k=-1)
    assert index.search(["a"], k=0)[0].size == 0
    with pytest.raises(InvalidInputError):
        index.remove(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        Bm25Params(b=1.5)


def test_removed_label_can_be_added_again() -> None:
    index = Bm25Index()
    index.add([1, 2], [["a"], ["b"]])
    index.remove([1])
    assert 1 not in index and len(index) == 1
    assert index.search(["a"], k=5)[0].size == 0
    index.add([1], [["b", "c"]])
    assert index.search(["b"], k=5)[0].tolist() == [1, 2]


def test_single_document_adds_keep_few_segments() -> None:
    rng = np.random.default_rng(5)
    corpus = random_corpus(rng, 300)
    index = build(list(range(300)), corpus, batch=1)
    assert len(index._segments) <= 8  # merges keep queries from visiting one segment per add
    assert_same_as_rank_bm25(index, list(range(300)), corpus, ["w1", "w5", "w30"])


def test_empty_index() -> None:
    index = Bm25Index()
    assert len(index) == 0 and 1 not in index
    assert index.search(["a"], k=3)[0].size == 0
    assert index.scores_for(["a"], np.array([1])).tolist() == [0.0]
    assert index.max_score(["a"]) == 0.0
    index.remove([1])


def _assert_same_results(a: Bm25Index, b: Bm25Index, queries: Corpus, labels: np.ndarray) -> None:
    for query in queries:
        got_a, got_b = a.search(query, k=20), b.search(query, k=20)
        assert np.array_equal(got_a[0], got_b[0]) and np.array_equal(got_a[1], got_b[1])
        assert np.array_equal(a.scores_for(query, labels), b.scores_for(query, labels))


@pytest.mark.parametrize("stats_from", [10**9, 20])  # no term's stats, or the common terms' made by the load
def test_save_load_round_trip_and_add_after_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 stats_from: int) -> None:
    monkeypatch.setattr("indexers.term_stats.STATS_FROM", stats_from)
    monkeypatch.setattr("indexers.term_stats.COLUMN_FROM", stats_from)
    monkeypatch.setattr("indexers.bm25_query.PRUNE_FROM", 0)
    rng = np.random.default_rng(9)
    corpus = random_corpus(rng, 250)
    params = Bm25Params(k1=1.2, b=0.7, epsilon=0.3)
    index = build(list(range(250)), corpus, params)
    index.remove(range(0, 250, 3))  # leaves vocabulary terms with no live document
    queries = random_queries(rng, 25)
    index.save(tmp_path / "new" / "bm25")
    loaded = Bm25Index.load(tmp_path / "new" / "bm25")
    assert loaded.params == params and len(loaded) == len(index)
    assert bool(loaded._segments[0]._stats) == (stats_from == 20)  # noqa: SLF001
    _assert_same_results(index, loaded, queries, np.arange(260))
    extra = random_corpus(rng, 20)
    for idx in (index, loaded):
        idx.add(list(range(300, 320)), extra)
    _assert_same_results(index, loaded, queries, np.arange(330))
    loaded.save(tmp_path / "new" / "bm25")  # over the files it has memory-mapped
    _assert_same_results(index, Bm25Index.load(tmp_path / "new" / "bm25"), queries, np.arange(330))


def test_a_load_into_memory_scores_as_a_mapped_one_and_maps_nothing(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    build(list(range(120)), random_corpus(rng, 120)).save(tmp_path / "bm25")
    mapped, held = Bm25Index.load(tmp_path / "bm25"), Bm25Index.load(tmp_path / "bm25", mapped=False)
    segment = held._segments[0]  # noqa: SLF001
    assert all(getattr(a, "_mmap", None) is None for a in (segment.terms, segment.ptr, segment.docs, segment.tfs))
    assert getattr(mapped._segments[0].docs, "_mmap", None) is not None  # noqa: SLF001
    _assert_same_results(mapped, held, random_queries(rng, 15), np.arange(130))


def test_empty_index_round_trip(tmp_path: Path) -> None:
    Bm25Index().save(tmp_path)
    loaded = Bm25Index.load(tmp_path)
    assert len(loaded) == 0
    loaded.add([1], [["a"]])
    assert loaded.search(["a"], k=1)[0].tolist() == [1]


def _saved(tmp_path: Path) -> Path:
    index = Bm25Index()
    index.add([1, 2, 3], [["a", "b"], ["b"], ["c", "c"]])
    index.save(tmp_path)
    return tmp_path


@pytest.mark.parametrize("victim", ["params.json", "vocab.json", "docs.npy", "df.npy"])
def test_load_detects_missing_file(tmp_path: Path, victim: str) -> None:
    (_saved(tmp_path) / victim).unlink()
    with pytest.raises(IndexStateError):
        Bm25Index.load(tmp_path)


@pytest.mark.parametrize("victim", ["params.json", "vocab.json", "docs.npy", "ptr.npy", "labels.npy"])
def test_load_detects_truncated_file(tmp_path: Path, victim: str) -> None:
    path = _saved(tmp_path) / victim
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(IndexStateError):
        Bm25Index.load(tmp_path)


def test_load_detects_inconsistent_arrays(tmp_path: Path) -> None:
    directory = _saved(tmp_path)
    np.save(directory / "df.npy", np.array([1, 1, 1], np.int64))  # b is in two documents
    with pytest.raises(IndexStateError):
        Bm25Index.load(directory)
    with pytest.raises(IndexStateError):
        Bm25Index.load(tmp_path / "does-not-exist")


@pytest.mark.parametrize("array, at, value", [("docs", -1, 3), ("docs", 0, -1), ("tfs", -1, 0)])
def test_load_checks_every_block_of_postings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             array: str, at: int, value: int) -> None:
    """The postings are checked a block at a time (2 here): a bad one in any block is found."""
    monkeypatch.setattr("indexers.bm25_files.CHECK_BLOCK", 2)
    directory = _saved(tmp_path)
    assert len(Bm25Index.load(directory)) == 3
    values = np.load(directory / f"{array}.npy")
    values[at] = value  # 3: no such document; -1: negative; a count of 0
    np.save(directory / f"{array}.npy", values)
    with pytest.raises(IndexStateError, match="postings"):
        Bm25Index.load(directory)


@pytest.mark.parametrize("walk_per_id", [0, 16, 10**9])  # every share by binary search, either way, by walking
@pytest.mark.parametrize("stats_from", [10**9, 1])  # no term's stats, or every term's (columns for the common)
def test_top_k_read_from_the_rare_terms_equals_summing_every_posting(monkeypatch: pytest.MonkeyPatch,
                                                                    walk_per_id: int, stats_from: int) -> None:
    """The top list taken from the rarest terms' documents (MaxScore) is the exhaustive one, to the
    float and the tie, however the candidates' shares are found (postings or columns), whatever
    bounds the unread terms (idf x (k1 + 1) or their frontiers) and however many segments hold
    the postings; scores_for by binary search equals the dense sum too."""
    monkeypatch.setattr("indexers.bm25_query.PRUNE_FROM", 0)  # this small index would sum everything
    monkeypatch.setattr("indexers.bm25_query.WALK_PER_ID", walk_per_id)
    monkeypatch.setattr("indexers.term_stats.STATS_FROM", stats_from)
    monkeypatch.setattr("indexers.term_stats.COLUMN_FROM", stats_from)
    rng = np.random.default_rng(5)
    common, rare = [f"c{i}" for i in range(4)], [f"r{i}" for i in range(400)]
    docs = [[w for w in common if rng.random() < 0.5] + list(rng.choice(rare, int(rng.integers(0, 4))))
            + ["c0"] * int(rng.integers(0, 3)) for _ in range(3000)]
    index = Bm25Index()
    for start, end in ((0, 2000), (2000, 2700), (2700, 2950), (2950, 3000)):  # segments of falling size
        index.add(list(range(2 * start, 2 * end, 2)), docs[start:end])
    assert len(index._segments) > 1  # noqa: SLF001
    index.remove(range(0, 600, 6))  # renumbered documents
    pruned = 0
    for _ in range(200):
        query = [str(rng.choice(rare))] + list(rng.choice(common, int(rng.integers(1, 4))))
        match, k = index.match(query), int(rng.integers(1, 30))
        allowed = np.arange(0, 6000, 4) if rng.random() < 0.3 else None
        mask = index.allowed_mask(allowed) if allowed is not None else None
        pruned += match._pruned(k, mask) is not None  # noqa: SLF001
        scores, matched = match._dense()  # noqa: SLF001
        cand = np.flatnonzero(matched if mask is None else matched & mask)
        labels, top = match._best(k, cand, scores[cand])  # noqa: SLF001
        found, found_scores = match.top(k, allowed)
        assert found.tolist() == labels.tolist() and found_scores.tolist() == top.tolist()
        some = np.arange(0, 6000, 7)
        assert match.scores_for(some).tolist() == [scores[i] if i >= 0 else 0.0 for i in index.doc_ids(some)]
    assert pruned > 50  # the rare terms decided most of these top lists
    columns = [s.column for seg in index._segments for s in seg._stats.values()]  # noqa: SLF001
    assert (stats_from == 1) == any(c is not None for c in columns)  # the common terms' shares came from columns


@pytest.mark.parametrize("epsilon", [0.25, -1.0])  # idf floored above 0, or common terms weighing less than nothing
def test_a_term_s_documents_left_out_of_the_top_list_could_not_reach_it(epsilon: float) -> None:
    """`_reaching` leaves out only documents whose exact score is below the k-th of the candidates and
    of the kept ones (so below the final k-th), and it does leave some out; with a negative weight it
    trusts only the candidates' scores."""
    rng = np.random.default_rng(17)
    common, rare = [f"c{i}" for i in range(3)], [f"r{i}" for i in range(40)]
    docs = [[w for w in common if rng.random() < 0.6] + list(rng.choice(rare, int(rng.integers(0, 3))))
            for _ in range(1500)]
    index = build(list(range(1500)), docs, Bm25Params(epsilon=epsilon), batch=500)
    dropped = 0
    for _ in range(60):
        match, k = index.match([str(w) for w in rng.choice(rare, 2)] + [common[0]]), int(rng.integers(1, 20))
        ordered = sorted(match.terms, key=lambda t: t.size)
        dense, _ = match._dense()  # noqa: SLF001
        first = np.concatenate([s.docs for s in ordered[0].slices]).astype(np.int64)
        seen = np.zeros(len(index), bool)
        seen[first] = True
        scores = dense[first]
        rest = sum(match._ceiling(t) for t in ordered[2:])  # noqa: SLF001
        kept = match._reaching(k, ordered[1], seen, scores, rest)  # noqa: SLF001
        fresh = np.setdiff1d(np.concatenate([s.docs for s in ordered[1].slices]), first)
        assert seen[fresh].all() and set(kept.tolist()) <= set(fresh.tolist())
        known = np.concatenate((scores, dense[kept]))
        if len(known) >= k:
            kth = np.sort(known)[-k]
            assert (dense[np.setdiff1d(fresh, kept)] < kth).all()
        dropped += len(fresh) - len(kept)
    assert dropped > 100


@pytest.mark.parametrize("walk_per_id", [0, 10**9])  # a few labels' shares by binary search, or by walking
def test_scored_by_binary_search_and_by_the_dense_sum_agree_to_the_float(monkeypatch: pytest.MonkeyPatch,
                                                                         walk_per_id: int) -> None:
    """A few labels are scored one by one, many by summing the postings once: both give every
    label the dense sum's float, and say which query terms it holds (even scoring <= 0)."""
    monkeypatch.setattr("indexers.bm25_query.WALK_PER_ID", walk_per_id)
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(60)]
    index = Bm25Index()
    docs = {label: list(rng.choice(words, int(rng.integers(1, 9)))) for label in range(0, 1600, 2)}
    index.add(list(docs), list(docs.values()))
    index.remove(range(0, 200, 4))
    live = {label: set(words) for label, words in docs.items() if label >= 200 or label % 4}
    for _ in range(100):
        match = index.match(list(rng.choice(words, int(rng.integers(1, 4)))) + ["unknown"])
        dense, _ = match._dense()  # noqa: SLF001
        every = index.labels_at(np.arange(len(index)))  # every label in order (as the summary index asks)
        for labels in (rng.choice(1700, 3), np.array([6, 6, 10]), np.arange(0, 1700), every):  # searched, dense
            ids = index.doc_ids(labels)
            scores, held = match.scored_by_term(labels)
            assert scores.tolist() == [dense[i] if i >= 0 else 0.0 for i in ids]
            assert held.tolist() == [[t in live.get(int(label), ()) for t in match.tokens] for label in labels]
            assert match.scored(labels)[0].tolist() == scores.tolist()
            assert match.scored(labels)[1].tolist() == held.any(axis=1).tolist()


@pytest.mark.parametrize("sort_below", [0, 10**9])  # every query's postings summed in an array of every document, or sorted
def test_summing_postings_by_document_equals_adding_them_into_every_document(monkeypatch: pytest.MonkeyPatch,
                                                                              sort_below: int) -> None:
    """Either way of summing a query's postings gives each matching document the float that adding its
    shares one by one, in ascending term id, gives; with several segments, removed documents, repeated
    and unknown query terms."""
    from indexers.bm25_query import contributions

    monkeypatch.setattr("indexers.bm25_query.SORT_BELOW", sort_below)
    rng = np.random.default_rng(13)
    index = build(list(range(900)), random_corpus(rng, 900), batch=150)
    index.remove(range(0, 900, 5))
    assert len(index._segments) > 1  # noqa: SLF001
    norm, k1 = index.length_norm(), index.params.k1
    for query in random_queries(rng, 60):
        match = index.match(query)
        every = np.zeros(len(index))
        for term in match.terms:
            for part in term.slices:
                np.add.at(every, part.docs, contributions(term.weight, part.tfs, part.docs, norm, k1))
        touched = np.zeros(len(index), bool)
        for term in match.terms:
            for part in term.slices:
                touched[part.docs] = True
        docs, sums = match._summed()  # noqa: SLF001
        assert docs.tolist() == np.flatnonzero(touched).tolist()
        assert sums.tolist() == every[docs].tolist()


def test_the_scores_reaching_the_kth_are_found_from_a_sample_or_from_all() -> None:
    """`reaching_kth` gives the positions of every score at least the k-th largest, ties included,
    whether the sample's guess holds k of them (random scores, the best between the sampled
    positions) or not (the best all sampled), and for lists too short to sample."""
    from indexers.bm25_query import SAMPLE_FROM, SAMPLE_STEP, reaching_kth

    rng = np.random.default_rng(19)
    for n in (3, 100, SAMPLE_FROM, 3 * SAMPLE_FROM + 5):
        for k in (1, 2, 3, 17, 50, 100, 400):
            if k > n:
                continue
            for scores in (rng.random(n), rng.integers(0, 5, n).astype(float), np.zeros(n)):
                hidden, sampled = scores.copy(), scores.copy()
                hidden[1::SAMPLE_STEP] += 10  # the best are never sampled
                sampled[::SAMPLE_STEP] += 10  # the best are all sampled: few reach the guess
                for s in (scores, hidden, sampled):
                    expected = np.flatnonzero(s >= np.sort(s)[-k])
                    assert reaching_kth(s, k).tolist() == expected.tolist()
