"""The summarizer's text helpers against the plain rules they speed up."""

from __future__ import annotations

import random
from itertools import repeat

from engine.summaries.text import _ASCII_NOT_ALNUM, count_words, word_count


def test_ascii_word_counts_are_the_words_that_strip_to_something() -> None:
    """A word counts when stripping its non-alphanumeric ends leaves something; the fast path only
    strips words that are not alphanumeric already."""
    rng = random.Random(0)
    alphabet = "ab1Z9 .,-'_!?()\t\n\r\x0b\x0c\x1c\x1f"
    for _ in range(50_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        expected = len([w for w in map(str.strip, text.split(), repeat(_ASCII_NOT_ALNUM)) if w])
        assert count_words(text) == word_count(text) == expected, repr(text)
