"""Counting and cutting text in MiniLM's own word pieces, and capping long tool outputs.

The chunker needs exact counts (a window must fit the model's 256 pieces) and cuts that keep
counts additive: text cut at a word start re-tokenizes on each side as it was.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from indexers.model_files import wordpiece_tokenizer

__all__ = ["TokenCounter", "WordPieceCounter", "cap_tool_output"]


class TokenCounter(Protocol):
    """Counts word pieces (no special tokens) and cuts text into pieces of at most max_tokens."""

    def count(self, text: str) -> int: ...

    def split(self, text: str, max_tokens: int) -> list[str]: ...

    def _token_starts(self, text: str) -> tuple[list[int], list[bool]]:
        """Each piece's start offset, and whether it starts a word (a cut there re-tokenizes as it was)."""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        word_ids = encoding.word_ids
        return ([start for start, _ in encoding.offsets],
                [k == 0 or word_ids[k] != word_ids[k - 1] for k in range(len(word_ids))])

    def prefix_within(self, text: str, max_tokens: int) -> str: ...

    def suffix_within(self, text: str, max_tokens: int) -> str: ...


# Plain text: printable ASCII and the white space BERT keeps. On it MiniLM's normalizer only
# lowercases and its pre-tokenizer cuts runs of letters and digits and single punctuation marks,
# so a text's count is the sum of its words' counts, each word tokenized once and remembered.
_UNPLAIN = re.compile(r"[^\t\n\r -~]")
_BERT_WORD = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")
_BERT_WORD_SPLIT = re.compile(f"({_BERT_WORD.pattern})")
_MEMO_LIMIT = 200_000  # distinct words remembered (~20 MB at most)


class WordPieceCounter:
    """Counts and splits text in MiniLM's own word pieces (special tokens excluded).

    Counting plain text goes word by word through a memo (5x fewer tokenizer runs on a thread:
    its words repeat); other text, and any tokenizer passed in, goes through the tokenizer whole.
    """

    def __init__(self, tokenizer: Any = None) -> None:
        self._tokenizer = tokenizer if tokenizer is not None else wordpiece_tokenizer()
        self._word_counts: dict[str, int] | None = {} if tokenizer is None else None

    def count(self, text: str) -> int:
        found = self._count_plain(text)
        return found if found is not None else len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Batch counting (the Rust tokenizer runs it in parallel): for whole threads."""
        texts = list(texts)
        counts = [self._count_plain(text) for text in texts]
        rest = [i for i, n in enumerate(counts) if n is None]
        if rest:
            for i, n in zip(rest, self._encode_counts([texts[i] for i in rest])):
                counts[i] = n
        return counts  # type: ignore[return-value]

    def _encode_counts(self, texts: list[str]) -> list[int]:
        encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)  # no offsets
        return [len(encoding.ids) for encoding in encode(texts, add_special_tokens=False)]

    def _count_plain(self, text: str) -> int | None:
        """The count of a plain text as the sum of its words' (memoised) counts; None otherwise."""
        if self._word_counts is None or not _plain(text):
            return None
        return sum(self._counts_of(_BERT_WORD.findall(text.lower())))

    def _counts_of(self, words: list[str]) -> list[int]:
        """Each word's count, from the memo or tokenized (once, all new words in one batch)."""
        memo = self._word_counts
        assert memo is not None
        counts = list(map(memo.get, words))
        if None in counts:
            fresh = sorted({w for w, n in zip(words, counts) if n is None})
            learned = dict(zip(fresh, self._encode_counts(fresh)))
            _remember(memo, learned)
            counts = [learned[w] if n is None else n for w, n in zip(words, counts)]
        return counts  # type: ignore[return-value]

    def _token_starts(self, text: str, longest: int | None = None) -> tuple[list[int], list[bool]]:
        """Each piece's start offset, and whether it starts a word (a cut there re-tokenizes as it was).

        Plain text is read word by word from the counts: a word's later pieces get the word's own
        start, which no caller cuts at unless a word counts more than `longest` (None: no limit).
        """
        plain = self._plain_starts(text, longest) if self._word_counts is not None and _plain(text) else None
        if plain is not None:
            return plain
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        word_ids = encoding.word_ids
        return ([start for start, _ in encoding.offsets],
                [k == 0 or word_ids[k] != word_ids[k - 1] for k in range(len(word_ids))])

    def _plain_starts(self, text: str, longest: int | None) -> tuple[list[int], list[bool]] | None:
        parts = _BERT_WORD_SPLIT.split(text.lower())  # gap, word, gap, ..., gap; lower() keeps offsets
        counts = np.asarray(self._counts_of(parts[1::2]), dtype=np.int64)
        if longest is not None and len(counts) and counts.max() > longest:
            return None  # a cut inside a word needs the real piece offsets
        word_starts = np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)))[0:-1:2]
        word_start = np.zeros(int(counts.sum()), dtype=bool)
        word_start[np.cumsum(counts) - counts] = True
        return np.repeat(word_starts, counts).tolist(), word_start.tolist()

    def prefix_within(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` ending at a word start and counting 1..max_tokens pieces
        ('' if none). A cut at a word start re-tokenizes each side as it was, so the counts add up."""
        starts, word_start = self._token_starts(text)
        if len(starts) <= max_tokens:
            return text
        cut = next((k for k in range(max_tokens, 0, -1) if word_start[k]), None)
        return "" if cut is None else text[: starts[cut]]

    def suffix_within(self, text: str, max_tokens: int) -> str:
        """The longest suffix of `text` starting at a word and counting at most max_tokens pieces ('' if none)."""
        starts, word_start = self._token_starts(text)
        first = next((k for k in range(max(0, len(starts) - max_tokens), len(starts)) if word_start[k]), None)
        return "" if first is None else text[starts[first]:]

    def split(self, text: str, max_tokens: int) -> list[str]:
        """Consecutive pieces covering `text`, each <= max_tokens, cut at token starts.

        Cuts prefer word starts (pieces of whole words count the same alone); every piece is
        re-counted. Only a single character that alone counts more (a Hangul syllable is
        three pieces) can exceed a budget below 3.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        starts, word_start = self._token_starts(text, longest=max_tokens)
        # Plan on offsets alone and check all pieces in one batch; re-count piece by piece only if
        # some piece re-tokenizes longer (a cut inside a word). Both give the same pieces when all fit.
        pieces = _split_at(text, starts, word_start, max_tokens, lambda piece: True)
        if max(self.count_many(pieces)) <= max_tokens:
            return pieces
        return _split_at(text, starts, word_start, max_tokens, lambda piece: self.count(piece) <= max_tokens)


def _plain(text: str) -> bool:
    return text.isascii() and not _UNPLAIN.search(text)


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


def _placeholder(omitted: int) -> str:
    return f"\n[… {omitted} tokens of tool output omitted …]\n"


def cap_tool_output(text: str, cap_tokens: int, counter: TokenCounter) -> str:
    """Head + placeholder + tail within `cap_tokens`; `text` unchanged when it already fits.

    Tool outputs (logs, JSON, pages) are long and repetitive: their start says what was fetched,
    their end what came of it, so both ends are kept.
    """
    total = counter.count(text)
    if total <= cap_tokens:
        return text
    room = cap_tokens - counter.count(_placeholder(total))
    while room >= 2:  # the placeholder's number may tokenize longer than estimated: retry smaller
        head = _head(text, room - room // 2, counter)
        tail = _tail(text[len(head) :], room // 2, counter)
        omitted = max(0, total - counter.count(head) - counter.count(tail))
        capped = head + _placeholder(omitted) + tail
        if counter.count(capped) <= cap_tokens:
            return capped
        room -= 1
    return counter.split(text, cap_tokens)[0]  # a cap too small for the placeholder: head only


# Planning the two ends on the whole tool output cost ~12 ms a message. Each end is now cut at a
# word start (where both sides re-tokenize as they were) in a stretch of text cut at white space
# that holds far more than its budget; the whole text is used only when that stretch is too short.
_CHARS_PER_PIECE = 16
_SPACE = re.compile(r"\s")
_LAST_SPACE = re.compile(r"\s\S*\Z")  # with an end position: the last white space before it


def _head(text: str, budget: int, counter: TokenCounter) -> str:
    """The longest prefix of `text` ending at a word start within `budget` pieces."""
    near = text[: _space_after(text, _CHARS_PER_PIECE * (budget + 1))]
    head = counter.prefix_within(near, budget)
    if head == near and len(near) < len(text):
        head = counter.prefix_within(text, budget)
    return head or counter.split(text, budget)[0]  # no word start in reach: cut inside the word


def _tail(text: str, budget: int, counter: TokenCounter) -> str:
    """The longest suffix of `text` starting at a word within `budget` pieces."""
    near = text[_space_before(text, len(text) - _CHARS_PER_PIECE * (budget + 1)) :]
    tail = counter.suffix_within(near, budget)
    if tail == near and len(near) < len(text):
        tail = counter.suffix_within(text, budget)
    return tail or counter.split(text, budget)[-1]


def _space_after(text: str, at: int) -> int:
    """The first white-space position at or after `at` (len(text) if none)."""
    if at >= len(text):
        return len(text)
    match = _SPACE.search(text, at)
    return match.start() if match else len(text)


def _space_before(text: str, at: int) -> int:
    """The last position at or before `at` just after white space (0 if none)."""
    if at <= 0:
        return 0
    match = _LAST_SPACE.search(text, 0, at)
    return match.start() + 1 if match else 0
