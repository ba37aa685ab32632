"""A plain word's WordPiece count worked out in Python equals the tokenizer's."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from indexers.greedy_pieces import GreedyPieces
from indexers.model_files import wordpiece_tokenizer
from indexers import wordpieces
from indexers.wordpieces import _BERT_WORD, ADDED_TOKENS, WordPieceCounter

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample.jsonl"


def _words(vocab: list[str]) -> list[str]:
    """The sample's plain words, every ASCII punctuation mark, the vocabulary's plain entries alone
    and in pairs (the longest pieces), and seeded random words of 1 to 120 characters (over
    max_input_chars_per_word, 100, a word is one [UNK]), some of rare letters."""
    text = " ".join(json.loads(line)["content"] for line in SAMPLE.read_text(encoding="utf-8").splitlines())
    words = set(_BERT_WORD.findall(text.lower())) | {chr(c) for c in range(33, 127) if not chr(c).isalnum()}
    entries = [e.removeprefix("##") for e in vocab if re.fullmatch(r"(##)?[a-z0-9]+", e)]
    rng = random.Random(7)
    words |= set(entries) | {rng.choice(entries) + rng.choice(entries) for _ in range(5000)}
    for alphabet in ("abcdefghijklmnopqrstuvwxyz0123456789", "qxzjkvw9", "eariotnslc"):
        words |= {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120))) for _ in range(1500)}
    return sorted(words)


def test_a_plain_words_count_is_the_tokenizers() -> None:
    tokenizer = wordpiece_tokenizer()
    greedy = GreedyPieces.of(tokenizer)
    assert greedy is not None
    words = _words(list(tokenizer.get_vocab()))
    assert any(len(w) > 100 for w in words) and len(words) > 30_000
    assert [greedy.count(w) for w in words] == [len(tokenizer.encode(w, add_special_tokens=False).ids) for w in words]


def test_the_counter_learns_the_same_counts_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter with the Python model and one asking the tokenizer for each new word agree."""
    texts = [json.loads(line)["content"] for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    fast = WordPieceCounter()
    fast_counts = fast.count_many(texts)
    monkeypatch.setattr(wordpieces, "_default_greedy", lambda: None)  # every new word to the tokenizer
    slow = WordPieceCounter()
    assert fast_counts == slow.count_many(texts)
    assert fast._word_counts == slow._word_counts and fast._word_counts


def test_a_tokenizer_that_is_not_bert_wordpiece_has_no_python_model() -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    assert GreedyPieces.of(Tokenizer(BPE())) is None


def test_text_holding_an_added_token_counts_as_the_tokenizer_counts_it() -> None:
    """The tokenizer matches its added tokens whole in the raw text ("[CLS]" is one piece, "[cls]"
    three): such text is not counted word by word. Hypothesis found "[PAD]" in the property test."""
    tokenizer = wordpiece_tokenizer()
    assert {t["content"] for t in json.loads(tokenizer.to_str())["added_tokens"]} == set(ADDED_TOKENS)
    whole, counter = WordPieceCounter(tokenizer), WordPieceCounter()
    texts = [f"a {token} b" for token in ADDED_TOKENS] + ["0[PAD]0", "[pad] [Cls]", "x [y] z"]
    assert counter.count_many(texts) == whole.count_many(texts) and counter.count_many(texts)[0] == 3
    assert [counter.split(t, 2) for t in texts] == [whole.split(t, 2) for t in texts]
