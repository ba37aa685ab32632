"""The LoCoMo dev-split harness of `convsearch eval locomo`, run over other libraries.

    PYTHONPATH=$PWD python -m benchmarks.peers.locomo --data ../shared/data/locomo/locomo_dev.json \
        --peers lancedb,lancedb-fts,txtai,bm25s [--json out.json]

One corpus (`engine.evaluation.locomo.open_corpus`, summaries "none": no peer has any) gives the
questions, their evidence and the turns. Each peer indexes one document per turn, the line our
engine indexes for it ("Speaker: text"), one index per conversation (our engine's per-user
shard), with the vectors our engine's MiniLM computed once for all peers. Each question is one
search in its own conversation with `limit` 20; its hits become message hits covering exactly
their turn, and the harness's own `hit_coverage`, `score_question` and grouping score them, so
the figures are those of the engine's rows. Our engine runs the same questions in the same
process (messages only), so its latency is taken under the same load. Latency includes the
query's embedding (the engine's own path), as the engine's does; "search" is the peer alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks.peers import load, parse_names
from engine.evaluation.locomo import (Corpus, RunConfig, _groups, _latency, hit_coverage, open_corpus, run,
                                      score_question)
from engine.search_types import SearchHit
from engine.serialize import to_jsonable
from indexers.chunking import render_line

__all__ = ["Turn", "turns_of", "run_peer", "main"]

Turn = tuple[str, int, str]  # thread_id, seq, indexed line
METRICS = (("turn", "recall_any@10", "t.any@10"), ("turn", "ndcg@10", "NDCG@10"),
           ("session", "recall_any@5", "s.any@5"))


def turns_of(corpus: Corpus, user: str) -> list[Turn]:
    """Every turn of one conversation, in order, as the engine indexes its line."""
    store = corpus.engine.store
    return [(m.thread_id, m.seq, render_line(m)) for thread in store.threads_of(user)
            for m in store.messages_in_range(thread.thread_id, 0)]


def _hit(turn: Turn, rank: int) -> SearchHit:
    """A peer's row as a message hit covering exactly its turn (score: its rank, never read)."""
    thread_id, seq, line = turn
    return SearchHit(kind="message", score=-float(rank), thread_id=thread_id, day_label=None, day_segment_id=None,
                     snippet=line, covered_by_summary=False, from_seq=seq, to_seq=seq, seq=seq)


def run_peer(name: str, corpus: Corpus, vectors: dict[str, np.ndarray], turns: dict[str, list[Turn]],
             workdir: Path, config: RunConfig) -> dict[str, Any]:
    """Build the peer per conversation, ask every question, score it as the engine's rows are."""
    peer, searchers, build_s = load(name), {}, 0.0
    for user, rows in turns.items():
        path = workdir / name / user
        path.mkdir(parents=True)
        began = time.perf_counter()
        peer.build([line for _, _, line in rows], vectors[user], path)
        searchers[user] = peer.open(path)
        build_s += time.perf_counter() - began
    embed = corpus.engine.searcher.query_embedder
    per_item, total_ms, search_ms = [], [], []
    for item in corpus.items:
        began = time.perf_counter()
        query = embed.embed([item.question])[0]
        middle = time.perf_counter()
        found = searchers[item.user_id].search(item.question, query, config.limit)
        ended = time.perf_counter()
        total_ms.append((ended - began) * 1000)
        search_ms.append((ended - middle) * 1000)
        hits = [_hit(turns[item.user_id][row], rank) for rank, row in enumerate(found)]
        coverage = hit_coverage(hits, corpus.turns, item.evidence)
        per_item.append((item.category, score_question(*coverage, item.evidence, config.ks)))
    disk = sum(p.stat().st_size for p in (workdir / name).rglob("*") if p.is_file())
    return {"label": name, "groups": _groups(per_item), "latency_ms": _latency(total_ms),
            "search_ms": _latency(search_ms), "build_s": round(build_s, 2), "disk_mb": round(disk / 2**20, 2)}


def _embed_turns(corpus: Corpus) -> tuple[dict[str, list[Turn]], dict[str, np.ndarray], float]:
    """Turns per conversation and their vectors, computed once by the engine's embedder."""
    model = corpus.engine.pipeline.embedder
    if model is None:
        raise SystemExit("the peers need the MiniLM model: set the embedding backend to 'onnx' or 'torch'")
    turns = {user: turns_of(corpus, user) for user in corpus.conversations}
    began = time.perf_counter()
    vectors = {user: model.embed([line for _, _, line in rows]) for user, rows in turns.items()}
    return turns, vectors, time.perf_counter() - began


def row(label: str, result: dict[str, Any]) -> str:
    overall = result["groups"]["overall"]
    cells = [f"{overall[level][metric]:.3f}" for level, metric, _ in METRICS]
    search = result.get("search_ms", {}).get("p50")
    return (f"| {label} | " + " | ".join(cells) + f" | {result['latency_ms']['p50']:.1f} ms | "
            + (f"{search:.1f} ms |" if search is not None else "- |"))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = parse_names(args.peers)
    say = lambda text: print(f"peers: {text}", file=sys.stderr, flush=True)  # noqa: E731
    config = RunConfig(summaries=False)
    load_before = os.getloadavg()[0]
    report: dict[str, Any] = {"data": str(args.data), "runs": {}}
    with open_corpus(args.data, progress=say, summaries="none", limit_conversations=args.conversations,
                     max_questions=args.questions) as corpus, \
            tempfile.TemporaryDirectory(prefix="convsearch-peers-") as tmp:
        turns, vectors, embed_s = _embed_turns(corpus)
        say(f"embedded {sum(map(len, turns.values()))} turns once for all peers in {embed_s:.1f} s")
        ours = run(corpus, config, progress=say)
        report["runs"]["convsearch"] = {"groups": ours.groups, "latency_ms": ours.latency_ms,
                                        "build_s": corpus.import_seconds + corpus.index_seconds}
        for name in names:
            say(f"{name}: building and searching")
            report["runs"][name] = run_peer(name, corpus, vectors, turns, Path(tmp), config)
    report["load_avg"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print("| system | " + " | ".join(short for *_, short in METRICS) + " | p50 (query embedding incl.) | p50 search alone |")
    print("|---|---|---|---|---|---|")
    for label, result in report["runs"].items():
        print(row(label, result))
    print(f"load average (1 min) {report['load_avg'][0]} -> {report['load_avg'][1]} on {os.cpu_count()} cores")
    if args.json:
        args.json.write_text(json.dumps(to_jsonable(report), indent=1) + "\n", encoding="utf-8")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="the LoCoMo dev split (locomo_dev.json)")
    p.add_argument("--peers", default="lancedb,lancedb-fts,txtai,bm25s", help="comma-separated peer names")
    p.add_argument("--conversations", type=int, default=None, help="only the first N conversations (a quick look)")
    p.add_argument("--questions", type=int, default=None, help="only the first N questions of each (a quick look)")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    return p


if __name__ == "__main__":
    sys.exit(main())
