"""Counting and cutting text in MiniLM's own word pieces: the one token counter of convsearch.

The chunker needs exact counts (a window must fit the model's 256 pieces) and cuts that keep
counts additive: text cut at a word start re-tokenizes on each side as it was. Prompt budgets
(context assembly, the day summary policy) count with the same counter: an LLM's tokens are
estimated either way (no LLM tokenizer is shipped), but WordPiece counts are deterministic and
close for English and French.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from typing import Any, Protocol

import numpy as np

from indexers.greedy_pieces import GreedyPieces
from indexers.model_files import wordpiece_tokenizer

__all__ = ["TokenCounter", "WordPieceCounter", "CHARS_PER_TOKEN", "PROBE_CHARS_PER_TOKEN"]

CHARS_PER_TOKEN = 4  # the rough count: the usual rule of thumb for English text
PROBE_CHARS_PER_TOKEN = 16  # generous: real text rarely needs more characters per piece
# Fewer texts than this are encoded one by one: a batch call starts the Rust thread pool, which cost
# 100 us for five words against 40 us alone, more when the other core is busy (summary workers).
SMALL_BATCH = 32


class TokenCounter(Protocol):
    """What the chunker needs of a counter: word pieces (no special tokens), and text cut into
    pieces of at most max_tokens (WordPieceCounter; tests pass simpler ones). The chunker also uses
    WordPieceCounter's `count_many`, `additive` and `split_counted` where a counter has them: fast
    paths, each with the same result as these two."""

    def count(self, text: str) -> int: ...

    def split(self, text: str, max_tokens: int) -> list[str]: ...


# Plain text: printable ASCII and the white space BERT keeps. On it MiniLM's normalizer only
# lowercases and its pre-tokenizer cuts runs of letters and digits and single punctuation marks,
# so a text's count is the sum of its words' counts, each word tokenized once and remembered.
# The tokenizer's added tokens are matched whole in the raw text first ("[CLS]" is one piece, where
# its three words count three): text holding one is not plain.
ADDED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_UNPLAIN = re.compile(r"[^\t\n\r -~]")
_ADDED = re.compile("|".join(map(re.escape, ADDED_TOKENS)))
_BERT_WORD = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")
_BERT_WORD_SPLIT = re.compile(f"({_BERT_WORD.pattern})")
_MEMO_LIMIT = 200_000  # distinct words remembered (~20 MB at most)


class WordPieceCounter:
    """Counts and splits text in MiniLM's own word pieces (special tokens excluded).

    Counting plain text goes word by word through a memo (5x fewer tokenizer runs on a thread:
    its words repeat); other text, and any tokenizer passed in, goes through the tokenizer whole.
    `rough=True` counts characters / 4 instead (`exact` is False), with no tokenizer at all.
    """

    def __init__(self, tokenizer: Any = None, *, rough: bool = False) -> None:
        self.exact = not rough
        self._tokenizer: Any = None if rough else tokenizer if tokenizer is not None else wordpiece_tokenizer()
        self._word_counts: dict[str, int] | None = {} if tokenizer is None and not rough else None

    def count(self, text: str) -> int:
        if not self.exact:
            return math.ceil(len(text) / CHARS_PER_TOKEN)
        found = self._count_plain(text)
        return found if found is not None else len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_upto(self, text: str, limit: int) -> int:
        """Exact when the count is <= limit; else some number > limit, found from a prefix when possible.

        Why: deciding that a megabyte tool output is over a 4,000-token budget should not tokenise it all.
        """
        probe = PROBE_CHARS_PER_TOKEN * max(limit, 0) + 256
        if len(text) > probe:
            cut = max(text.rfind(c, 0, probe) for c in " \n\t")
            # Whole words only: a prefix of whole words never has more pieces than the full text.
            if cut > 0:
                head = self.count(text[:cut])
                if head > limit:
                    return head
        return self.count(text)

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span of each piece, so text can be cut on piece boundaries."""
        if not self.exact:
            return [(i, min(i + CHARS_PER_TOKEN, len(text))) for i in range(0, len(text), CHARS_PER_TOKEN)]
        return list(self._tokenizer.encode(text, add_special_tokens=False).offsets)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Batch counting (the Rust tokenizer runs it in parallel): for whole threads."""
        texts = list(texts)
        if not self.exact:
            return [self.count(text) for text in texts]
        counts = [self._count_plain(text) for text in texts]
        rest = [i for i, n in enumerate(counts) if n is None]
        if rest:
            for i, n in zip(rest, self._encode_counts([texts[i] for i in rest])):
                counts[i] = n
        return counts  # type: ignore[return-value]

    def count_many_upto(self, texts: Sequence[str], limit: int) -> list[int]:
        """`count_many`, exact for counts up to `limit`; a plain text of more than `limit` words gets
        its word count, some number above `limit` (every word is a piece or more). What the chunker
        needs of a line it will split anyway: the pieces are counted once, by the split."""
        texts = list(texts)
        over = {i: n for i, text in enumerate(texts)
                if len(text) > limit and self.additive(text) and (n := len(text.split())) > limit}
        if not over:
            return self.count_many(texts)
        counted = iter(self.count_many([text for i, text in enumerate(texts) if i not in over]))
        return [over[i] if i in over else next(counted) for i in range(len(texts))]

    def _encode_counts(self, texts: list[str]) -> list[int]:
        if len(texts) < SMALL_BATCH:  # the usual call: a line's new words
            encode_one = self._tokenizer.encode
            return [len(encode_one(text, add_special_tokens=False).ids) for text in texts]
        encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)  # no offsets
        return [len(encoding.ids) for encoding in encode(texts, add_special_tokens=False)]

    def _count_plain(self, text: str) -> int | None:
        """The count of a plain text as the sum of its words' (memoised) counts; None otherwise."""
        if self._word_counts is None or not _plain(text):
            return None
        words = _BERT_WORD.findall(text.lower())
        try:  # every word known (the usual case): sum straight from the memo, no list of counts
            return sum(map(self._word_counts.__getitem__, words))
        except KeyError:
            return sum(self._counts_of(words))

    def _counts_of(self, words: list[str]) -> list[int]:
        """Each word's count, from the memo or counted once (by the WordPiece model in Python, else
        all new words in one tokenizer batch). Only the default counter has a memo, so the model
        is the default tokenizer's."""
        memo = self._word_counts
        assert memo is not None
        counts = list(map(memo.get, words))
        if None in counts:
            fresh = sorted({w for w, n in zip(words, counts) if n is None})
            greedy = _default_greedy()
            learned = dict(zip(fresh, map(greedy.count, fresh) if greedy else self._encode_counts(fresh)))
            _remember(memo, learned)
            counts = [learned[w] if n is None else n for w, n in zip(words, counts)]
        return counts  # type: ignore[return-value]

    def additive(self, text: str) -> bool:
        """Whether `text` counts as the sum of its words' counts (exact, plain text): such texts
        joined by white space count as the sum of their counts, with no need to count the join."""
        return self._word_counts is not None and _plain(text)

    def _token_starts(self, text: str, longest: int | None = None) -> tuple[list[int], list[bool], bool]:
        """Each piece's start offset, whether it starts a word (a cut there re-tokenizes as it was),
        and whether they were read from word counts (plain text).

        Plain text is read word by word from the counts: a word's later pieces get the word's own
        start, which no caller cuts at unless a word counts more than `longest` (None: no limit).
        """
        if not self.exact:  # a rough piece is 4 characters: a cut anywhere counts as it was
            starts = [start for start, _ in self.offsets(text)]
            return starts, [True] * len(starts), False
        plain = self._plain_starts(text, longest) if self.additive(text) else None
        if plain is not None:
            return (*plain, True)
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        word_ids = encoding.word_ids
        return ([start for start, _ in encoding.offsets],
                [k == 0 or word_ids[k] != word_ids[k - 1] for k in range(len(word_ids))], False)

    def _plain_starts(self, text: str, longest: int | None) -> tuple[list[int], list[bool]] | None:
        parts = _BERT_WORD_SPLIT.split(text.lower())  # gap, word, gap, ..., gap; lower() keeps offsets
        counts = np.asarray(self._counts_of(parts[1::2]), dtype=np.int64)
        if longest is not None and len(counts) and counts.max() > longest:
            return None  # a cut inside a word needs the real piece offsets
        word_starts = np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)))[0:-1:2]
        word_start = np.zeros(int(counts.sum()), dtype=bool)
        word_start[np.cumsum(counts) - counts] = True
        return np.repeat(word_starts, counts).tolist(), word_start.tolist()

    def _split_words(self, text: str, max_tokens: int) -> list[tuple[str, int]] | None:
        """`split_counted` of plain text planned word by word: the cuts the token plan
        (`_plain_starts`, `_split_at`) makes, each piece ending where the word holding its
        (max_tokens + 1)-th token starts, without a list of every token's start (a long message
        has thousands). None when a word counts more than max_tokens (or none)."""
        parts = _BERT_WORD_SPLIT.split(text.lower())  # gap, word, gap, ..., gap; lower() keeps offsets
        counts = self._counts_of(parts[1::2])
        if counts and (max(counts) > max_tokens or min(counts) < 1):
            return None
        before = list(itertools.accumulate(counts, initial=0))  # tokens before each word, then the total
        total = before.pop()
        pieces: list[tuple[str, int]] = []
        word = begin = 0
        start = len(parts[0])  # word `word`'s first character, found only at the cuts: not every word's
        while before and before[word] + max_tokens < total:
            cut = bisect.bisect_right(before, before[word] + max_tokens) - 1  # > word: no word is too long
            start += sum(map(len, parts[2 * word + 1:2 * cut + 1]))
            pieces.append((text[begin:start], before[cut] - before[word]))
            word, begin = cut, start
        pieces.append((text[begin:], total - (before[word] if before else 0)))
        return pieces

    def split(self, text: str, max_tokens: int) -> list[str]:
        """Consecutive pieces covering `text`, each <= max_tokens, cut at token starts.

        Cuts prefer word starts (pieces of whole words count the same alone); every piece is
        re-counted. Only a single character that alone counts more (a Hangul syllable is
        three pieces) can exceed a budget below 3.
        """
        return [piece for piece, _ in self.split_counted(text, max_tokens)]

    def split_counted(self, text: str, max_tokens: int) -> list[tuple[str, int]]:
        """`split`'s pieces with their counts (what the chunker needs next).

        Plain text read from word counts is cut at word starts only (no word counts more than
        max_tokens there), so a piece counts the tokens between its cuts: nothing to re-count.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        planned = self._split_words(text, max_tokens) if self.exact and self.additive(text) else None
        if planned is not None:
            return planned
        starts, word_start, summed = self._token_starts(text, longest=max_tokens)
        # Plan on offsets alone and check all pieces in one batch; re-count piece by piece only if
        # some piece re-tokenizes longer (a cut inside a word). Both give the same pieces when all fit.
        pieces = _split_at(text, starts, word_start, max_tokens, lambda piece: True)
        if summed:
            ends = [bisect.bisect_left(starts, end) for end in itertools.accumulate(map(len, pieces))]
            return list(zip(pieces, (b - a for a, b in zip([0, *ends], ends))))
        counts = self.count_many(pieces)
        if max(counts) <= max_tokens:
            return list(zip(pieces, counts))
        pieces = _split_at(text, starts, word_start, max_tokens, lambda piece: self.count(piece) <= max_tokens)
        return list(zip(pieces, self.count_many(pieces)))


@cache
def _default_greedy() -> GreedyPieces | None:
    """MiniLM's WordPiece model in Python for the default counter, read once per process (~40 ms)
    when the first new word is counted; it never changes, so every counter and thread may share it."""
    return GreedyPieces.of(wordpiece_tokenizer())


def _plain(text: str) -> bool:
    return text.isascii() and not _UNPLAIN.search(text) and not ("[" in text and _ADDED.search(text))


def _remember(memo: dict, learned: dict) -> None:
    """Add to a word memo, forgetting everything first when it is full (bounded memory)."""
    if len(memo) > _MEMO_LIMIT:
        memo.clear()
    memo.update(learned)


def _split_at(
    text: str, starts: list[int], word_start: list[bool], max_tokens: int, fits: Callable[[str], bool]
) -> list[str]:
    """Consecutive pieces of `text`, each the longest from its start that `fits`."""
    pieces: list[str] = []
    begin = 0
    while True:
        end = _piece_end(text, begin, starts, word_start, max_tokens, fits)
        pieces.append(text[begin:end])
        if end == len(text):
            return pieces
        begin = end


def _piece_end(
    text: str, begin: int, starts: list[int], word_start: list[bool], max_tokens: int, fits: Callable[[str], bool]
) -> int:
    """End (exclusive) of the longest piece from `begin` that fits, at a word start if possible."""
    first = bisect.bisect_left(starts, begin)
    if first + max_tokens >= len(starts) and fits(text[begin:]):
        return len(text)
    for cut in _cut_candidates(starts, word_start, first, first + max_tokens, begin):
        if fits(text[begin:cut]):
            return cut
    # Even one token from `begin` does not fit (it re-tokenizes into more): cut in characters.
    limit = next((s for s in starts[first:] if s > begin), len(text))
    return next((c for c in range(limit - 1, begin, -1) if fits(text[begin:c])), begin + 1)


def _cut_candidates(starts: list[int], word_start: list[bool], first: int, last: int, begin: int) -> Iterator[int]:
    """Token starts in (begin, ...] from token `last` down: word starts first, then mid-word."""
    indices = [k for k in range(min(last, len(starts) - 1), first - 1, -1) if starts[k] > begin]
    yield from (starts[k] for k in indices if word_start[k])
    yield from (starts[k] for k in indices if not word_start[k])
