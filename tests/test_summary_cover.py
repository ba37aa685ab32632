"""The Summary section's covering quotes: the lazy greedy picks what re-scoring every sentence each
round (plain SumBasic) picks, ties and word budget included."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from engine.summaries import summarizers as s
from engine.summaries.said import MAX_QUOTE_WORDS, QUESTION, Said, topic_words
from engine.summaries.text import count_words


def _naive_covering(sentences: list[s._Sentence], budget: int) -> list[s._Sentence]:
    """SumBasic as first written: every round re-scores the whole pool."""
    words = [sorted(set(topic_words(x.text))) for x in sentences]  # summed in the engine's order
    counts = Counter(w for ws in words for w in ws)
    total = sum(counts.values())
    weight = {w: c / total for w, c in counts.items()}
    first = {x.text: i for i, x in reversed(list(enumerate(sentences)))}  # a text repeated is quoted once
    pool = [i for i, x in enumerate(sentences)
            if words[i] and not QUESTION.search(x.text) and not x.text.endswith((":", "：")) and first[x.text] == i]
    size = [min(count_words(x.text), MAX_QUOTE_WORDS) for x in sentences]
    chosen: list[int] = []
    while pool:
        best = max(pool, key=lambda i: (sum(weight[w] for w in words[i]) / math.sqrt(len(words[i])), -i))
        left = budget - sum(size[i] for i in chosen)
        if size[best] > left:
            pool = [i for i in pool if size[i] <= left]
            continue
        pool.remove(best)
        chosen.append(best)
        for w in words[best]:
            weight[w] **= 2
    return [sentences[i] for i in sorted(chosen)]


def _sentence(text: str, index: int) -> s._Sentence:
    return s._Sentence(Said.of(text, count_words(text)), "User", index, "user")


def test_lazy_covering_chooses_what_rescoring_everything_chooses() -> None:
    rng = random.Random(7)
    vocab = [f"topic{i}" for i in range(40)] + ["the", "and", "thanks", "awesome"]
    for _ in range(300):
        words = vocab[: rng.choice([4, 12, 44])]  # few words: many exact ties
        sentences = [
            _sentence(" ".join(rng.choice(words) for _ in range(rng.choice([0, 1, 3, 6, 20, 40])))
                      + rng.choice([".", "?", ":", "!"]), i)
            for i in range(rng.choice([1, 5, 30, 120]))
        ]
        budget = rng.choice([0, 12, 60, 200])
        assert s._covering(sentences, budget) == _naive_covering(sentences, budget)


_SUMMARISE_SAMPLE_DAYS = """
import json, sys
from datetime import datetime
from engine.models import Message
from engine.summaries.summarizers import ExtractiveSummarizer
days = {}
for line in open("data/sample.jsonl", encoding="utf-8"):
    row = json.loads(line)
    days.setdefault((row["user_id"], row["created_at"][:10]), []).append(row)
when = datetime(2024, 3, 4)
for _, rows in sorted(days.items()):
    turns = [Message(str(i), "t", "u", i + 1, r["role"], r["content"], when, when.date(), "c") for i, r in enumerate(rows)]
    sys.stdout.write(ExtractiveSummarizer().summarize(turns))
"""


@pytest.mark.process
def test_the_same_day_gets_the_same_summary_in_every_process() -> None:
    """Scores summed in a set's order (which follows the hash seed) broke ties differently from one
    process to the next: the sample's days were summarised two ways under these seeds."""
    root = Path(__file__).resolve().parents[1]
    outputs = {subprocess.run([sys.executable, "-c", _SUMMARISE_SAMPLE_DAYS], cwd=root, capture_output=True, text=True,
                              check=True, env=os.environ | {"PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}).stdout
               for seed in ("1", "2", "6")}
    assert len(outputs) == 1 and "## Summary" in next(iter(outputs))
