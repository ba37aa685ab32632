"""Another embedding model beside MiniLM on LoCoMo dev: the engine's own harness, same rules.

    python benchmarks/locomo_model.py --data /work/shared/data/locomo/locomo_dev.json            # the shipped MiniLM
    python benchmarks/locomo_model.py --model-dir DIR [--summaries engine --modes messages,default]

`--model-dir` is a sentence-transformers folder (modules.json, weights, tokenizer) that some package
shipped: it embeds both the windows and the queries; without it the engine's own model does (the int8
query copy included). Every ranking rule keeps its default, so what changes is the model alone.
Prints each conversation's figures (as benchmarks/locomo_cv.py counts them), the pooled ones, the
index time and texts embedded a second, and the search p50 (the query's embedding included).
The windows are still cut to MiniLM's 256 word pieces, so a model with a longer limit reads them whole.
all-mpnet-base-v2 is also the engine's own option (`make model-mpnet`, then CONVSEARCH_EMBEDDING_BACKEND=torch
CONVSEARCH_EMBEDDING_MODEL=all-mpnet-base-v2 for any command); its joined folder is in ~/.cache/convsearch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.locomo_cv import MODES, parse_modes, pooled, run_questions  # noqa: E402
from engine.evaluation.locomo import open_corpus  # noqa: E402
from indexers.embedders import SentenceTransformerEmbedder  # noqa: E402

__all__ = ["FolderModel", "main"]


class FolderModel:
    """A sentence-transformers folder as an `Embedder`, counting the time it spends embedding."""

    def __init__(self, folder: Path, *, threads: int) -> None:
        self._model = SentenceTransformerEmbedder(folder=folder, name=folder.name, num_threads=threads)
        self._model.load()
        self.name, self.dim, self.max_tokens = folder.name, self._model.dim, self._model.max_tokens
        self.seconds, self.texts = 0.0, 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        began = time.perf_counter()
        rows = self._model.embed(texts)
        self.seconds += time.perf_counter() - began
        self.texts += len(texts)
        return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    say = lambda text: print(f"model: {text}", file=sys.stderr, flush=True)  # noqa: E731
    model = FolderModel(args.model_dir, threads=args.threads) if args.model_dir else "auto"
    with open_corpus(args.data, progress=say, summaries=args.summaries, embedder=model) as corpus:
        run = run_questions(corpus, {}, say, tuple(args.modes.split(",")))
    report = {"model": corpus.embedder, "summaries": args.summaries, "index_s": corpus.index_seconds,
              "embedded_per_s": round(model.texts / model.seconds, 1) if isinstance(model, FolderModel) else None,
              **run}
    print(_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


def _table(report: dict[str, Any]) -> str:
    convs = report["conversations"]
    names = [k for k in next(iter(convs.values())) if k != "questions"]
    lines = [f"{report['model']} (summaries {report['summaries']}): index {report['index_s']} s, "
             f"{report['embedded_per_s'] or '-'} texts/s embedded, search p50 {report['p50_ms']} ms"]
    lines += [f"{user:<10} {figures['questions']:>4} " + " ".join(f"{figures[n]:.3f}" for n in names)
              for user, figures in sorted(convs.items())]
    lines.append("pooled: " + pooled(report, names))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path("/work/shared/data/locomo/locomo_dev.json"))
    p.add_argument("--model-dir", type=Path, help="a sentence-transformers folder (default: the engine's MiniLM)")
    p.add_argument("--threads", type=int, default=2, help="torch threads for --model-dir (default 2)")
    p.add_argument("--summaries", choices=("dataset", "engine", "none"), default="none")
    p.add_argument("--modes", type=parse_modes, default="bare", help=f"comma separated, of: {', '.join(MODES)}")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p


if __name__ == "__main__":
    sys.exit(main())
