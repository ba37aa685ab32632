"""What every summary reads of a message's sentences, worked out once per message text.

A message is read by its day's summary, its conversation's summary and title and the day's
progress updates. Each used to look up, sentence by sentence, its words, size, question mark and
cue in a memo apiece; now one memo lookup per message gives its quotable sentences as records, so
a summary only assembles them. Pure functions of the text: the selection rules are unchanged.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from engine.summaries.cues import cue_section, without_needles
from engine.summaries.text import CHAT_WORDS, STOPWORDS, ascii_words, content_words, count_words, memo, sentences_in

__all__ = ["Said", "said_in", "topic_words", "QUESTION", "MAX_QUOTE_WORDS"]

MAX_QUOTE_WORDS = 30
QUESTION = re.compile(r"[?？][\s*_)\]\"'”’»!?！？]*$")  # a question mark, then only closing marks ("?)", "?**", "?!")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_NOT_TOPIC = STOPWORDS | CHAT_WORDS


def topic_words(text: str) -> list[str]:
    """Content words that can name a topic (no chat filler like "awesome"; CJK runs stay bigrams)."""
    return [w for w in content_words(text) if w not in CHAT_WORDS]


class Said(NamedTuple):
    """One quotable sentence and what the summary rules read of it. A NamedTuple, not a dataclass:
    a tuple of plain values leaves the garbage collector's tracked set, so the memo of 16k
    messages' records does not make every later collection (and so the lexical update) slower."""

    text: str
    size: int  # words of its quote (a quote is cut at MAX_QUOTE_WORDS)
    # its distinct topic words, sorted: a score sums their weights in one order, so equal scores
    # tie the same way in every process (a set's order follows the hash seed)
    topics: tuple[str, ...]
    norm: float  # sqrt(len(topics)): what a covering score divides by (0.0 with no topics)
    question: bool
    lead_in: bool  # ends with a colon ("the plan:"): never a covering quote
    cue: str | None  # a statement's section by its cue words (a question's depends on the answers)

    @classmethod
    def of(cls, text: str, words: int, *, no_needles: bool = False) -> "Said":
        """The record of a sentence of `words` words (count_words); `no_needles` as `cue_section` takes it."""
        topics = _topics(text)
        question = QUESTION.search(text) is not None
        return cls(text, min(words, MAX_QUOTE_WORDS), topics, math.sqrt(len(topics)) if topics else 0.0,
                   question, text.endswith((":", "：")), None if question else cue_section(text, no_needles=no_needles))


@memo
def said_in(content: str) -> tuple[Said, ...]:
    """The sentences of a message a summary may quote (three words or more, some letters), as records."""
    sentences = sentences_in(content)
    quiet = without_needles("\n".join(sentences))  # most messages: no sentence needs the cue needles
    out: list[Said] = []
    for text in sentences:
        words = count_words(text)
        if words >= 3 and _has_letter(text):
            out.append(Said.of(text, words, no_needles=quiet))
    return tuple(out)


def _has_letter(text: str) -> bool:
    """Whether some character is a letter (one regex scan on ASCII text)."""
    if text.isascii():
        return _ASCII_LETTER.search(text) is not None
    return any(c.isalpha() for c in text)


def _topics(text: str) -> tuple[str, ...]:
    """The distinct topic words of a sentence, sorted. On ASCII text, the words of `content_words`
    less the stop and chat words at once."""
    if text.isascii():
        return tuple(sorted(set(ascii_words(text)) - _NOT_TOPIC))
    return tuple(sorted(set(topic_words(text))))
