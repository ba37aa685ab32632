"""A plain word's WordPiece count, worked out in Python from MiniLM's vocabulary.

Why: the word counter (indexers/wordpieces.py) learns each new word's count once. Asking the
tokenizer costs ~17 us a word, batch or not (it normalises, pre-tokenizes and builds an Encoding
with offsets), and a cold 30k-message thread has ~43k distinct words, a 1M-message one over a
million. For a plain word (lower-case ASCII letters and digits, or one punctuation mark: what the
normaliser and pre-tokenizer leave as is) the count is the WordPiece model's alone: from each
position the longest vocabulary entry ("##" inside the word); a word it cannot cover, or longer
than `max_input_chars_per_word`, is one [UNK]. tests/indexers/test_greedy_pieces.py checks it
against the tokenizer.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["GreedyPieces"]


class GreedyPieces:
    """Counts a plain word's pieces as the tokenizer's WordPiece model would cut it."""

    def __init__(self, vocab: set[str], prefix: str, max_chars: int) -> None:
        self._vocab = vocab
        self._prefix = prefix
        self._max_chars = max_chars
        self._longest = max(len(entry.removeprefix(prefix)) for entry in vocab)  # no piece is longer

    @classmethod
    def of(cls, tokenizer: Any) -> "GreedyPieces | None":
        """The model of a BERT-style WordPiece tokenizer that lower-cases; None for any other (the
        caller then asks the tokenizer)."""
        spec = json.loads(tokenizer.to_str())
        model, normalizer, pre = spec.get("model") or {}, spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
        if (model.get("type") != "WordPiece" or normalizer.get("type") != "BertNormalizer"
                or not normalizer.get("lowercase") or pre.get("type") != "BertPreTokenizer"):
            return None
        return cls(set(model["vocab"]), model["continuing_subword_prefix"], model["max_input_chars_per_word"])

    def count(self, word: str) -> int:
        """Pieces of one plain word (greedy longest match, as wordpiece.rs)."""
        if len(word) > self._max_chars:
            return 1
        vocab, pieces, start = self._vocab, 0, 0
        while start < len(word):
            end = min(len(word), start + self._longest)
            head = self._prefix if start else ""
            while end > start and head + word[start:end] not in vocab:
                end -= 1
            if end == start:
                return 1  # no entry covers this position: the whole word is [UNK]
            pieces, start = pieces + 1, end
        return pieces
