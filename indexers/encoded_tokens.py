"""Many documents' BM25 tokens as ids into a list of their distinct terms.

Why: a worker that chunks part of a long thread (indexers/parallel_chunks.py) sends its windows'
tokens back as two arrays and one short list instead of millions of strings, and the index
(indexers/bm25.py) looks up each distinct term once instead of every occurrence.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import numpy as np

__all__ = ["EncodedTokens"]


@dataclass(frozen=True, slots=True)
class EncodedTokens:
    """Document d's tokens are terms[ids[k]] for k in its span: the documents' spans follow one
    another, `lengths[d]` tokens each. A term may appear twice in `terms` (parts joined)."""

    terms: list[str]
    ids: np.ndarray  # int32, into terms
    lengths: np.ndarray  # int64, tokens per document

    @classmethod
    def of(cls, token_lists: Sequence[Sequence[str]]) -> EncodedTokens:
        flat = list(chain.from_iterable(token_lists))
        terms = list(dict.fromkeys(flat))  # first-seen order: C-speed passes, no Python loop per token
        position = dict(zip(terms, range(len(terms))))
        return cls(terms, np.fromiter(map(position.__getitem__, flat), np.int32, len(flat)),
                   np.fromiter(map(len, token_lists), np.int64, len(token_lists)))

    def __len__(self) -> int:
        return len(self.lengths)

    def lists(self) -> list[list[str]]:
        """Each document's tokens (what `of` was given)."""
        ends = np.cumsum(self.lengths).tolist()
        tokens = [self.terms[i] for i in self.ids.tolist()]
        return [tokens[end - n:end] for end, n in zip(ends, self.lengths.tolist())]

    def take(self, documents: Sequence[int] | np.ndarray) -> EncodedTokens:
        """The tokens of these documents, in this order (increasing: a selection or a slice)."""
        rows = np.asarray(documents, dtype=np.int64)
        if len(rows) > 1 and not bool(np.all(np.diff(rows) > 0)):
            raise ValueError("take() needs increasing document numbers")
        keep = np.zeros(len(self), bool)
        keep[rows] = True
        return EncodedTokens(self.terms, self.ids[np.repeat(keep, self.lengths)], self.lengths[rows])

    @staticmethod
    def joined(parts: Sequence[EncodedTokens]) -> EncodedTokens:
        """The parts' documents one after another."""
        offsets = np.cumsum([0, *(len(part.terms) for part in parts)])
        ids = [part.ids + np.int32(offset) for part, offset in zip(parts, offsets.tolist())]
        return EncodedTokens(list(chain.from_iterable(part.terms for part in parts)),
                             np.concatenate(ids) if ids else np.zeros(0, np.int32),
                             np.concatenate([part.lengths for part in parts]) if parts else np.zeros(0, np.int64))
