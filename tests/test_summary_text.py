"""The summarizer's text helpers against the plain rules they speed up."""

from __future__ import annotations

import random
from itertools import repeat

from engine.summaries.said import _has_letter
from engine.summaries.summarizers import TITLE_PADDING, clamp_title
from engine.summaries.text import (_ASCII_NOT_ALNUM, _LIST_PREFIX, _SENTENCE_END, WORD, ascii_words, count_words, each_sentence,
                                   word_count)


def test_ascii_word_counts_are_the_words_that_strip_to_something() -> None:
    """A word counts when stripping its non-alphanumeric ends leaves something; the fast path only
    strips words that are not alphanumeric already."""
    rng = random.Random(0)
    alphabet = "ab1Z9 .,-'_!?()\t\n\r\x0b\x0c\x1c\x1f"
    for _ in range(50_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        expected = len([w for w in map(str.strip, text.split(), repeat(_ASCII_NOT_ALNUM)) if w])
        assert count_words(text) == word_count(text) == expected, repr(text)


def test_ascii_words_are_the_word_runs_that_strip_to_three_characters_or_more() -> None:
    """One regex scan gives what stripping apostrophes and hyphens off each WORD run, then dropping
    those of two characters or fewer, gives (the summaries' topic and content words)."""
    rng = random.Random(2)
    alphabet = "ab1Z_ '-.,!\t\n"
    for _ in range(50_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        expected = [t for t in map(str.strip, WORD.findall(text.lower()), repeat("'-")) if len(t) > 2]
        assert ascii_words(text) == expected, repr(text)
        assert _has_letter(text) == any(c.isalpha() for c in text), repr(text)


def test_ascii_text_splits_into_the_sentences_the_general_rule_gives() -> None:
    """ASCII text is split by a regex without the CJK full stops' alternative: the same sentences."""
    rng = random.Random(3)
    alphabet = ["ab", "1", " ", ".", "!", "?", "?!", "...", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "- ", "1) "]
    for _ in range(50_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
        expected = [s.strip() for line in text.splitlines() for s in _SENTENCE_END.split(_strip_marker(line)) if s.strip()]
        assert list(each_sentence(text)) == expected, repr(text)


def _strip_marker(line: str) -> str:
    return _LIST_PREFIX.sub("", line).strip()


def test_a_title_reads_no_more_keywords_than_its_padding() -> None:
    """ExtractiveSummarizer.title ranks only the top TITLE_PADDING keywords: clamp_title must give
    the same title from them as from the whole ranking, whatever the title's words collide with."""
    rng = random.Random(1)
    vocab = [f"w{i}" for i in range(12)] + ["the", "and", "to", "DuckDB", "duckdb"]
    for _ in range(20_000):
        base = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 10)))
        ranked = rng.sample([w.lower() for w in vocab[:12]] + ["general", "notes", "duckdb"], rng.randint(0, 15))
        assert clamp_title(base, ranked[:TITLE_PADDING]) == clamp_title(base, ranked), (base, ranked)
