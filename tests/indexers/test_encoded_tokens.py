"""Encoded BM25 tokens (indexers/encoded_tokens.py) stand for the token lists they were made from,
and the index built from them is the one built from the lists, file for file."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from engine.errors import InvalidInputError
from indexers.bm25 import Bm25Index
from indexers.encoded_tokens import EncodedTokens
import indexers.lexical as lexical
from indexers.lexical import LexicalTokenizer

WORDS = [f"w{i}" for i in range(40)] + ["shared", "a-7731", "café"]


def _documents(rng: random.Random, n: int) -> list[list[str]]:
    return [[rng.choice(WORDS) for _ in range(rng.randint(0, 12))] for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_taken_and_joined_parts_stand_for_their_lists(seed: int) -> None:
    rng = random.Random(seed)
    parts = [_documents(rng, rng.randint(0, 30)) for _ in range(3)]
    encoded = [EncodedTokens.of(part) for part in parts]
    assert [e.lists() for e in encoded] == parts
    assert all(len(set(e.terms)) == len(e.terms) for e in encoded)
    whole = EncodedTokens.joined(encoded)
    assert whole.lists() == [doc for part in parts for doc in part]
    rows = sorted(rng.sample(range(len(whole)), len(whole) // 2))
    assert whole.take(rows).lists() == [whole.lists()[row] for row in rows]
    assert whole.take(range(0)).lists() == []


def test_take_refuses_documents_out_of_order() -> None:
    encoded = EncodedTokens.of([["a"], ["b"], ["c"]])
    with pytest.raises(ValueError):
        encoded.take([2, 0])


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.mark.parametrize("seed", range(3))
def test_an_index_added_encoded_is_the_one_added_as_lists(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    batches = [_documents(rng, 25) for _ in range(3)]
    as_lists, encoded = Bm25Index(), Bm25Index()
    label = 0
    for batch in batches:  # later batches meet known and new terms
        labels = list(range(label, label + len(batch)))
        label += len(batch)
        as_lists.add(labels, batch)
        halves = [EncodedTokens.of(batch[:10]), EncodedTokens.of(batch[10:])]  # a term in both halves
        encoded.add(labels, EncodedTokens.joined(halves))
    for query in (["shared"], ["w3", "a-7731"], ["café", "w1", "nothing"]):
        assert np.array_equal(as_lists.scores_for(query, np.arange(label)), encoded.scores_for(query, np.arange(label)))
    as_lists.save(tmp_path / "lists")
    encoded.save(tmp_path / "encoded")
    assert _files(tmp_path / "lists") == _files(tmp_path / "encoded")


def test_encoded_tokens_that_point_past_their_terms_are_refused() -> None:
    index = Bm25Index()
    bad = EncodedTokens(["a"], np.array([0, 1], np.int32), np.array([2], np.int64))
    with pytest.raises(InvalidInputError):
        index.add([1], bad)
    assert len(index) == 0


TEXTS = ["The café at 15.4 km — A-7731 was the answer.", "", "the and of", "東京タワーに行きました and back",
         "path /usr/local/bin_x:8080 user@host", "Ünïcödé ΣΊΣΥΦΟΣ straße", "the", "running runs ran runner"]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("block", [7, 4096])
def test_encode_many_gives_the_tokens_of_tokenize(monkeypatch: pytest.MonkeyPatch, seed: int, block: int) -> None:
    monkeypatch.setattr(lexical, "_ENCODE_BLOCK", block)  # 7: terms met again in later blocks
    rng = random.Random(seed)
    words = " ".join(TEXTS).split() + ["", "the", "a"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 30))) for _ in range(40)] + TEXTS
    rng.shuffle(texts)
    tokenizer = LexicalTokenizer()
    encoded = tokenizer.encode_many(texts)
    assert encoded.lists() == [LexicalTokenizer().tokenize(text) for text in texts]
    assert len(set(encoded.terms)) == len(encoded.terms) and "" not in encoded.terms
    assert tokenizer.encode_many([]).lists() == []
