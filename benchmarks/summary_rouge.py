"""ROUGE-L of the engine's extractive session summaries against LoCoMo's human-written ones.

    python benchmarks/summary_rouge.py --data /work/shared/data/locomo/locomo_dev.json

Each session's turns (as the importer reads them) go through `ExtractiveSummarizer.summarize`,
the text a session's conversation (and, a session a day, its day) summary holds; headings, bullets,
speaker marks and "none noted" are dropped before scoring. A lead baseline (the session's first
turns, cut to the same number of words) puts the figure in context. Needs the `eval` extra
(`rouge-score`).
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import timezone
from pathlib import Path
from statistics import mean, pstdev
from typing import Sequence

from rouge_score import rouge_scorer

from engine.importers.locomo import load_locomo, locomo_sessions
from engine.models import Message
from engine.summaries.summarizers import NONE_NOTED, ExtractiveSummarizer

__all__ = ["main", "plain"]


def plain(markdown: str) -> str:
    """The words of a template summary, without its scaffolding."""
    lines = [line for line in markdown.splitlines() if line.strip() and not line.startswith("## ")
             and line.strip() != NONE_NOTED]
    text = "\n".join(re.sub(r"^- \*\*([^*]+)\*\*:", r"\1:", line) for line in lines)
    return text.replace(" asked:", ":")


def _messages(user: str, turns) -> list[Message]:
    return [Message(t.message_id or f"m{i}", f"{user}:t", user, i, t.role, t.content, t.created_at,
                    t.created_at.astimezone(timezone.utc).date(), f"{user}:c", speaker=t.speaker)
            for i, t in enumerate(turns, 1)]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True)
    args = p.parse_args(argv)
    samples = load_locomo(args.data)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    summarizer = ExtractiveSummarizer()
    rows: dict[str, list[tuple[float, float, float, float]]] = {}
    human = {s["sample_id"]: s.get("session_summary") or {} for s in samples}
    for user, turns in locomo_sessions(samples):
        reference = human[user].get(f"session_{turns[0].metadata['session']}_summary")
        if not reference:
            continue
        ours = plain(summarizer.summarize(_messages(user, turns)))
        lead = " ".join(" ".join(f"{t.speaker}: {t.content}" for t in turns).split()[: len(ours.split())])
        score, base = scorer.score(reference, ours)["rougeL"], scorer.score(reference, lead)["rougeL"]
        rows.setdefault(user, []).append((score.precision, score.recall, score.fmeasure, base.fmeasure))
    print("conversation  sessions  rougeL P  rougeL R  rougeL F  lead F")
    for user, values in rows.items():
        print(f"{user:<12}  {len(values):>8}  " + "  ".join(f"{mean(v[i] for v in values):8.3f}" for i in range(4)))
    every = [v for values in rows.values() for v in values]
    per_conv = [mean(v[2] for v in values) for values in rows.values()]
    print(f"{'all':<12}  {len(every):>8}  " + "  ".join(f"{mean(v[i] for v in every):8.3f}" for i in range(4)))
    print(f"F1 over conversations: mean {mean(per_conv):.3f}, spread (sd) {pstdev(per_conv):.3f}, "
          f"min {min(per_conv):.3f}, max {max(per_conv):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
