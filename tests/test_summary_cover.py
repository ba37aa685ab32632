"""The Summary section's covering quotes: the lazy greedy picks what re-scoring every sentence each
round (plain SumBasic) picks, ties and word budget included."""

from __future__ import annotations

import math
import random
from collections import Counter

from engine.summaries import summarizers as s


def _naive_covering(sentences: list[s._Sentence], budget: int) -> list[s._Sentence]:
    """SumBasic as first written: every round re-scores the whole pool."""
    words = [set(s._topic_words(x.text)) for x in sentences]
    counts = Counter(w for ws in words for w in ws)
    total = sum(counts.values())
    weight = {w: c / total for w, c in counts.items()}
    pool = [i for i, x in enumerate(sentences)
            if words[i] and not s._QUESTION.search(x.text) and not x.text.endswith((":", "："))]
    size = [min(s.word_count(x.text), s.MAX_QUOTE_WORDS) for x in sentences]
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


def test_lazy_covering_chooses_what_rescoring_everything_chooses() -> None:
    rng = random.Random(7)
    vocab = [f"topic{i}" for i in range(40)] + ["the", "and", "thanks", "awesome"]
    for _ in range(300):
        words = vocab[: rng.choice([4, 12, 44])]  # few words: many exact ties
        sentences = [
            s._Sentence(" ".join(rng.choice(words) for _ in range(rng.choice([0, 1, 3, 6, 20, 40])))
                        + rng.choice([".", "?", ":", "!"]), "User", i, "user")
            for i in range(rng.choice([1, 5, 30, 120]))
        ]
        budget = rng.choice([0, 12, 60, 200])
        assert s._covering(sentences, budget) == _naive_covering(sentences, budget)
