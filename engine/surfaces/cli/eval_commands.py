"""Evaluation commands: `convsearch eval locomo`, retrieval quality on the LoCoMo benchmark.

The command always works in a fresh temporary store (the global --home is not touched) and
prints its own report: a table per level, then with --json the whole result as one JSON object
on the last line, for scripts (`... --json | tail -n 1`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping

from engine.surfaces.cli.common import progress_bar
from engine.errors import InvalidInputError
from engine.evaluation.locomo import SUMMARY_SOURCES, RunConfig, RunResult, open_corpus, parse_ks, run
from engine.surfaces.serialize import to_jsonable

__all__ = ["register", "format_report"]

LEVELS = {
    "turn": "turn level: a hit is a cited message whose dia_id is evidence (summaries hold a rank, never count)",
    "window": "window level: an evidence turn lies inside a message hit's window (from_seq..to_seq)",
    "session": "session level: an evidence turn's session is among the hits' sessions (summaries: their span's)",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="measure retrieval quality on a benchmark")
    bench = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    q = bench.add_parser("locomo", help="LoCoMo: each QA item's question searched in its conversation, "
                                        "scored against its evidence turns (in a fresh temporary store)")
    q.add_argument("--data", type=Path, required=True, help="a LoCoMo JSON file (e.g. locomo10.json)")
    q.add_argument("--k", default="1,5,10,20", help="cut-offs, comma-separated, each 1..20 (default 1,5,10,20)")
    q.add_argument("--mode", choices=("hybrid", "lexical", "vector"), default="hybrid",
                   help="search mode (lexical skips loading the embedding model)")
    q.add_argument("--fusion", choices=("weighted", "rrf"), help="hybrid fusion (default: the settings')")
    q.add_argument("--summaries", choices=SUMMARY_SOURCES, default="engine",
                   help="where summaries come from: the engine's own, made while every turn is replayed "
                        "through live ingest (default: what a deployment gets), the file's human-written "
                        "session summaries (dataset), or none")
    q.add_argument("--no-summaries", action="store_true", help="search messages only (kinds=message)")
    q.add_argument("--no-penalty", action="store_true", help="do not down-weight messages covered by a summary")
    q.add_argument("--no-summary-context", action="store_true",
                   help="score messages without the score of the summary covering them")
    q.add_argument("--limit-conversations", type=int, metavar="N", help="only the file's first N conversations")
    q.add_argument("--max-questions", type=int, metavar="N", help="only the first N QA items of each conversation")
    q.add_argument("--json", action="store_true", help="also print the result as one JSON object on the last line")
    q.set_defaults(handler=locomo)


def locomo(args: argparse.Namespace) -> None:
    if not Path(args.data).is_file():
        raise InvalidInputError(f"no such file: {args.data}: give the LoCoMo JSON file with --data")
    try:
        config = RunConfig(mode=args.mode, fusion=args.fusion, summaries=not args.no_summaries,
                           penalty=not args.no_penalty, summary_context=not args.no_summary_context,
                           ks=parse_ks(args.k))
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    for name in ("limit_conversations", "max_questions"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InvalidInputError(f"--{name.replace('_', '-')} must be 1 or more")

    def say(text: str) -> None:
        print(f"eval: {text}", file=sys.stderr, flush=True)

    # Lexical runs need no vectors: skip the model and the embedding pass entirely.
    embedder = None if args.mode == "lexical" else "auto"
    with open_corpus(args.data, limit_conversations=args.limit_conversations, max_questions=args.max_questions,
                     embedder=embedder, progress=say, bar=progress_bar, summaries=args.summaries) as corpus:
        result = run(corpus, config, progress=say, bar=progress_bar)
    print(format_report(result))
    if args.json:
        print(json.dumps(to_jsonable(result), ensure_ascii=False, separators=(",", ":")))


def format_report(result: RunResult) -> str:
    """A header, one table per level (a row per group), and the evidence repairs."""
    facts, latency = result.corpus, result.latency_ms
    lines = [
        f"LoCoMo retrieval: {result.label} (limit {result.config.limit})",
        f"corpus: {len(facts.get('conversations', []))} conversations, {facts.get('turns')} turns, "
        f"{facts.get('questions')} questions scored; embedder {facts.get('embedder') or 'none'}; "
        f"summaries: {facts.get('summary_source')} ({facts.get('summaries')} stored)",
        f"index build {facts.get('index_seconds')} s (import or replay {facts.get('import_seconds')} s); search latency "
        f"p50 {latency.get('p50')} ms, p99 {latency.get('p99')} ms over {latency.get('searches')} searches",
        f"modes used: {dict(result.modes_used)}" + "".join(f"\nnotice: {n}" for n in result.notices),
    ]
    for level, title in LEVELS.items():
        lines += ["", title, _level_table(result.groups, level)]
    lines += ["", _evidence_text(facts.get("evidence"))]
    return "\n".join(lines)


def _level_table(groups: Mapping[str, Mapping[str, Any]], level: str) -> str:
    metrics = next((list(g[level]) for g in groups.values() if level in g), [])
    heads = ["group", "n"] + [m.replace("recall_", "") for m in metrics]
    rows = [[name, str(g["questions"])] + [f"{g[level][m]:.3f}" if level in g else "-" for m in metrics]
            for name, g in groups.items()]
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(len(heads))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in [heads, *rows])


def _evidence_text(log: Any) -> str:
    if log is None:
        return "evidence: (not recorded)"
    head = (f"evidence ids: {log.raw_ids} read, {log.malformed} malformed (repaired or dropped), "
            f"{log.not_in_conversation} naming no turn (dropped); {log.questions_without_evidence} "
            f"questions without usable evidence (skipped)")
    return "\n".join([head, *(f"  - {note}" for note in log.notes)])
