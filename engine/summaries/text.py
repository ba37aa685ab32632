"""The extractive summarizer's text helpers: sentences, word counts and content words, memoised
by text. Pure functions of the text, kept apart from the summary rules that use them."""

from __future__ import annotations

import re
from functools import lru_cache, wraps
from typing import Callable, Iterator, TypeVar

__all__ = ["split_sentences", "sentences_in", "each_sentence", "word_count", "count_words", "WORD", "ascii_words",
           "content_words", "spaced_words", "memo", "normalise", "MEMO_SIZE", "MEMO_MAX_CHARS",
           "CJK", "STOPWORDS", "CHAT_WORDS"]

T = TypeVar("T")

MEMO_SIZE = 1 << 14  # texts each memo keeps (`memo`)
MEMO_MAX_CHARS = 4000  # and the longest it keeps

_CODE_FENCE = re.compile(r"(```|~~~).*?(?:\1|$)", re.S)  # Markdown's two fences
# after . ! ? … with white space; after CJK full stops with or without it
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])\s*")
# the same on ASCII text, which holds neither … nor a CJK stop: 2.5x faster, as the regex no longer
# tries an alternative that may match nothing at every position (13.6 -> 5.5 us a message)
_ASCII_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LIST_PREFIX = re.compile(r"^\s*(?:[-*+>#・•]+|\d+[.)])\s*")
WORD = re.compile(r"[\w'-]+", re.U)
# What `strip("'-")` leaves of a WORD match when three characters or more remain: within a run of
# word characters, apostrophes and hyphens, the longest match runs from its first to its last \w.
_WORD_OVER_TWO = re.compile(r"\w[\w'-]+\w")
_ASCII_NOT_ALNUM = "".join(chr(c) for c in range(128) if not chr(c).isalnum())
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
STOPWORDS = frozenset(
    "a an and are as at be but by can could do does for from had has have how i if in into is it its "
    "just let me my no not of on or our so that the their them then there these this to up was we "
    "what when where which who why will with would you your yes ok okay about also should shall "
    "since because while before after than very really "
    "le la les un une des du de et est en que qui pour pas sur dans avec ce cette ces je tu il elle "
    "nous vous ils on mais ou donc au aux se sa son ses mon ma mes ton ta tes plus très bien".split()
)


# Words that carry no topic in chat ("Wow, that's so cool, thanks!"): never a topic, never covered.
CHAT_WORDS = frozenset(
    "really great thanks thank love cool awesome glad wow hey good nice sounds sound know think yeah totally "
    "feel feels felt lot lots time times much things thing something anything everything one get got getting "
    "like make makes made going gonna want way well sure see seen look looks looking amazing awesome hope "
    "happy super pretty always never ever even still been being did done doing say said tell told "
    "definitely absolutely especially actually maybe kind kinda stuff right now today day yesterday "
    "all any some more most other others own same such too here how's what's that's it's i'm you're "
    "don't can't didn't i've you've we're they're let's i'll you'll there's must glad cheers bye soon "
    "merci vraiment super génial trop c'est j'ai".split()
)


def normalise(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u00a0", " ")


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` (CJK full stops too), code blocks removed, list markers stripped (lines never join)."""
    return list(sentences_in(text))


def each_sentence(text: str) -> Iterator[str]:
    """`split_sentences` one at a time, for a reader of the first few (a conversation's brief)."""
    text = _CODE_FENCE.sub(" ", normalise(text))
    split = _ASCII_SENTENCE_END.split if text.isascii() else _SENTENCE_END.split
    for line in text.splitlines():
        line = _LIST_PREFIX.sub("", line).strip()
        yield from (s.strip() for s in split(line) if s.strip())


def memo(fn: Callable[[str], T]) -> Callable[[str], T]:
    """fn with its results memoised for texts up to 4,000 characters (at most 16k of them, ~64 MB
    at worst): a message is read by its day's summary, its conversation's summary and title and
    the day's progress updates, and each sentence's words are looked at several times."""
    cached = lru_cache(maxsize=MEMO_SIZE)(fn)

    @wraps(fn)
    def memoised(text: str) -> T:
        return cached(text) if len(text) <= MEMO_MAX_CHARS else fn(text)
    return memoised


def sentences_in(text: str) -> tuple[str, ...]:
    """Not memoised: its one bulk caller, `said_in`, is, under the same key and size, so a memo here
    never hit (0 of 94,786 calls in a 100k ingest's summaries)."""
    return tuple(each_sentence(text))


def count_words(text: str) -> int:
    """Words, counting two CJK characters as one (CJK text has no spaces between words); `word_count`
    is the memoised one."""
    if text.isascii():  # a word with a letter or digit is one that stripping the rest leaves
        words = text.split()  # only a word with other characters can strip to nothing
        return len(words) - len([w for w in words if not w.isalnum() and not w.strip(_ASCII_NOT_ALNUM)])
    cjk = len(CJK.findall(text))
    return sum(any(c.isalnum() for c in w) for w in CJK.sub(" ", text).split()) + (cjk + 1) // 2


word_count = memo(count_words)


def ascii_words(text: str) -> list[str]:
    """An ASCII text's lower-cased words over two letters, stop words included (lower-casing ASCII
    keeps every word's bounds: one lower() for the text), found by one regex scan."""
    return _WORD_OVER_TWO.findall(text.lower())


@memo
def content_words(text: str) -> tuple[str, ...]:
    """Lower-cased content words; a CJK run gives its character bigrams (it has no spaces to split at)."""
    if text.isascii():
        return tuple(t for t in ascii_words(text) if t not in STOPWORDS)
    words: list[str] = []
    cjk = CJK.search(text) is not None  # else no token can hold CJK: one search instead of one a token
    for token in (t.lower().strip("'-") for t in WORD.findall(text)):
        if cjk and CJK.search(token):
            words += [token[i:i + 2] for i in range(max(len(token) - 1, 1))]
        elif len(token) > 2 and token not in STOPWORDS:
            words.append(token)
    return tuple(words)


@memo
def spaced_words(text: str) -> tuple[str, ...]:
    """The content words of a text that are not CJK bigrams (title keywords)."""
    if text.isascii():  # no CJK to leave out
        return content_words(text)
    return tuple(w for w in content_words(text) if not CJK.search(w))
