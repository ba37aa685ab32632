"""Where summaries come from, on LoCoMo: dataset vs the engine's own vs none, per conversation.

    python benchmarks/locomo_summaries.py --data /work/shared/data/locomo/locomo_dev.json \
        --sources dataset,none,engine --out benchmarks/results/locomo_summaries.json

For each source one corpus is built (`open_corpus(summaries=...)`; "engine" replays every turn
through live ingest), then two configurations are searched (default: summaries + messages;
messages only), over all questions and over each conversation apart (the per-conversation
figures are what a leave-one-conversation-out choice of a weight needs). Prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from engine.evaluation.locomo import SUMMARY_SOURCES, RunConfig, open_corpus, run
from engine.surfaces.serialize import to_jsonable

__all__ = ["CONFIGS", "main"]

CONFIGS = {"default": RunConfig(summaries=True), "messages only": RunConfig(summaries=False)}
METRICS = (("turn", "recall_any@5"), ("turn", "recall_any@10"), ("turn", "mrr"), ("session", "recall_any@5"))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    say = lambda text: print(f"summaries: {text}", file=sys.stderr, flush=True)  # noqa: E731
    document: dict[str, Any] = {"data": str(args.data), "mode": args.mode, "runs": {}}
    for source in args.sources.split(","):
        if source not in SUMMARY_SOURCES:
            raise SystemExit(f"unknown source {source!r}: use {', '.join(SUMMARY_SOURCES)}")
        embedder = None if args.mode == "lexical" else "auto"
        with open_corpus(args.data, embedder=embedder, progress=say, summaries=source) as corpus:
            for name, config in CONFIGS.items():
                config = replace(config, mode=args.mode)
                whole = run(corpus, config, progress=say)
                per = {user: run(replace(corpus, items=tuple(i for i in corpus.items if i.user_id == user)),
                                 config).groups["overall"] for user in corpus.conversations}
                document["runs"][f"{source} / {name}"] = {
                    "overall": whole.groups["overall"], "per_conversation": per, "corpus": whole.corpus}
                print(_row(f"{source} / {name}", whole.groups["overall"], per), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(to_jsonable(document), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


def _row(label: str, overall: dict, per: dict) -> str:
    cells = " ".join(f"{level[0]}.{metric.replace('recall_', '')}={overall[level][metric]:.3f}"
                     for level, metric in METRICS)
    convs = " ".join(f"{user}={group['turn']['recall_any@10']:.3f}" for user, group in per.items())
    return f"{label}: {cells} | turn any@10 per conversation: {convs}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--sources", default=",".join(SUMMARY_SOURCES))
    p.add_argument("--mode", choices=("hybrid", "lexical", "vector"), default="hybrid")
    p.add_argument("--out", type=Path)
    return p


if __name__ == "__main__":
    sys.exit(main())
