"""The cue needles only skip regexes that cannot match: cue_section names the section the four
regexes alone name, on the sample's sentences and on random mixes of cue words, case and punctuation."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from engine.summaries import cues
from engine.summaries.summarizers import split_sentences


def _regexes_alone(text: str) -> str | None:
    return next((name for name, cue in cues._CUES if cue.search(text)), None)


def _phrases() -> list[str]:
    """The literal pieces of the regexes themselves (not the needles under test), and near misses."""
    pieces = set()
    for _, cue in cues._CUES:
        source = re.sub(r"\\b|\\S\+|\(\?:|\)\?|\[\.!\]\?|[$^]", "|", cue.pattern)
        pieces.update(p for p in re.split(r"[|()]", source) if p.strip())
    return sorted(pieces) + ["it", "we", "i", "the", "so", "address", "runner", "musty", "goalkeeper", "demains", "x"]


def test_needles_never_skip_a_match() -> None:
    sample = Path(__file__).resolve().parents[1] / "data" / "sample.jsonl"
    texts = [s for line in sample.read_text().splitlines() for s in split_sentences(json.loads(line)["content"])]
    rng, phrases = random.Random(3), _phrases()
    for _ in range(20_000):
        parts = [rng.choice(phrases) for _ in range(rng.randint(1, 5))]
        glue = rng.choice([" ", ", ", "-", ""])
        text = rng.choice(["", " ", "Then ", "it "]) + glue.join(parts) + rng.choice(["", ".", "!", " ok"])
        texts.append("".join(c.upper() if rng.random() < 0.2 else c for c in text))
    named = [cues.cue_section(t) for t in texts]
    assert named == [_regexes_alone(t) for t in texts]
    assert len(set(named)) == 5  # every section and None were reached


def test_a_message_without_needles_names_the_same_sections() -> None:
    """Asked of a message's sentences joined, `without_needles` lets each sentence skip the needle
    scans: every sentence must get the section it gets alone, on messages of mixed phrases."""
    rng, phrases = random.Random(5), _phrases()
    checked = quiet = 0
    for _ in range(5_000):
        sentences = [(rng.choice(["", "Then ", "Please ", "We "]) + " ".join(rng.choice(phrases + ["cat", "sun", "tea"] * 30)
                      for _ in range(rng.randint(1, 4)))) for _ in range(rng.randint(1, 4))]
        no_needles = cues.without_needles("\n".join(sentences))
        quiet += no_needles
        for text in sentences:
            assert cues.cue_section(text, no_needles=no_needles) == cues.cue_section(text) == _regexes_alone(text)
            checked += 1
    assert quiet > 500 and checked > quiet  # both paths were taken
