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
process (messages only), so its latency is taken under the same load: end to end (the query's
embedding by the engine's own model path included) and with the query's vector given, each as
wall time and as process CPU time (the better estimate on a shared machine). "index s" is ours
from import to searchable (embedding included), a peer's from texts and vectors to searchable
(the shared embedding of the turns is reported once, `peer_embedding_s`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from benchmarks.peers import Searcher, load, parse_names
from engine.evaluation.locomo import (Corpus, RunConfig, metric_groups, latency_summary, hit_coverage, open_corpus, run,
                                      score_question)
from engine.query.search_types import SearchHit
from engine.surfaces.serialize import to_jsonable
from indexers.chunking import render_line
from indexers.embedders import DeadlineEmbedder

__all__ = ["Turn", "turns_of", "run_peer", "run_ours", "main"]

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
    searchers, build_s = _build(name, vectors, turns, workdir / name)
    embed = corpus.engine.searcher.query_embedder
    per_item, total_ms, search_ms, total_cpu, search_cpu = [], [], [], [], []
    for item in corpus.items:
        began, began_cpu = time.perf_counter(), time.process_time()
        query = embed.embed([item.question])[0]
        middle, middle_cpu = time.perf_counter(), time.process_time()
        found = searchers[item.user_id].search(item.question, query, config.limit)
        ended, ended_cpu = time.perf_counter(), time.process_time()
        total_ms.append((ended - began) * 1000)
        search_ms.append((ended - middle) * 1000)
        total_cpu.append((ended_cpu - began_cpu) * 1000)
        search_cpu.append((ended_cpu - middle_cpu) * 1000)
        hits = [_hit(turns[item.user_id][row], rank) for rank, row in enumerate(found)]
        coverage = hit_coverage(hits, corpus.turns, item.evidence)
        per_item.append((item.category, score_question(*coverage, item.evidence, config.ks)))
    disk = sum(p.stat().st_size for p in (workdir / name).rglob("*") if p.is_file())
    return {"label": name, "groups": metric_groups(per_item), "latency_ms": latency_summary(total_ms),
            "cpu_ms": latency_summary(total_cpu), "given_ms": latency_summary(search_ms),
            "given_cpu_ms": latency_summary(search_cpu), "build_s": round(build_s, 2), "disk_mb": round(disk / 2**20, 2)}


def _build(name: str, vectors: dict[str, np.ndarray], turns: dict[str, list[Turn]], folder: Path
           ) -> tuple[dict[str, Searcher], float]:
    """One index per conversation (our per-user shard), opened for search; the seconds it took."""
    peer, searchers, seconds = load(name), {}, 0.0
    for user, rows in turns.items():
        path = folder / user
        path.mkdir(parents=True)
        began = time.perf_counter()
        peer.build([line for _, _, line in rows], vectors[user], path)
        searchers[user] = peer.open(path)
        seconds += time.perf_counter() - began
    return searchers, seconds


def run_ours(corpus: Corpus, config: RunConfig, say: Callable[[str], None]) -> dict[str, Any]:
    """The engine on the same questions, end to end and with each query's vector given (computed
    beforehand by the same model), each with the process CPU time of every `engine.search`."""
    engine, cpu = corpus.engine, []
    search = engine.search

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.process_time()
        try:
            return search(*args, **kwargs)
        finally:
            cpu.append((time.process_time() - began) * 1000)

    engine.search = timed  # type: ignore[method-assign]  (on the instance, for this run only)
    try:
        e2e = run(corpus, config, progress=say)
        e2e_cpu, cpu[:] = list(cpu), []
        questions = [item.question for item in corpus.items]
        known = dict(zip(questions, engine.pipeline.embedder.embed(questions)))  # no deadline: a batch
        saved, engine.searcher.query_embedder = engine.searcher.query_embedder, DeadlineEmbedder(_Given(known))
        try:
            given = run(corpus, config, progress=say)
        finally:
            engine.searcher.query_embedder.close()
            engine.searcher.query_embedder = saved
    finally:
        del engine.search
    if given.groups != e2e.groups:
        say("warning: the engine ranked differently with the vectors given")
    return {"groups": e2e.groups, "latency_ms": e2e.latency_ms, "cpu_ms": latency_summary(e2e_cpu),
            "given_ms": given.latency_ms, "given_cpu_ms": latency_summary(cpu),
            "build_s": round(corpus.import_seconds + corpus.index_seconds, 2)}


class _Given:
    """An Embedder that answers from vectors computed beforehand (the query's embedding is given)."""

    def __init__(self, known: dict[str, np.ndarray]) -> None:
        self.known, self.name, self.dim, self.max_tokens = known, "given", len(next(iter(known.values()))), 256

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.known[text] for text in texts])


def _embed_turns(corpus: Corpus) -> tuple[dict[str, list[Turn]], dict[str, np.ndarray], float]:
    """Turns per conversation and their vectors, computed once by the engine's embedder."""
    model = corpus.engine.pipeline.embedder
    if model is None:
        raise SystemExit("the peers need the MiniLM model: set the embedding backend to 'onnx' or 'torch'")
    turns = {user: turns_of(corpus, user) for user in corpus.conversations}
    began = time.perf_counter()
    vectors = {user: model.embed([line for _, _, line in rows]) for user, rows in turns.items()}
    return turns, vectors, time.perf_counter() - began


HEADER = ("| system | " + " | ".join(short for *_, short in METRICS)
          + " | p50 ms, query embedding incl. (CPU) | p50 ms, vector given (CPU) | index s |\n|---|---|---|---|---|---|---|")


def row(label: str, result: dict[str, Any]) -> str:
    overall = result["groups"]["overall"]
    cells = [f"{overall[level][metric]:.3f}" for level, metric, _ in METRICS]
    cells += [f"{result[wall]['p50']:.1f} ({result[cpu]['p50']:.1f})"
              for wall, cpu in (("latency_ms", "cpu_ms"), ("given_ms", "given_cpu_ms"))]
    return f"| {label} | " + " | ".join(cells) + f" | {result['build_s']:.1f} |"


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
        report["peer_embedding_s"] = round(embed_s, 2)
        report["runs"]["convsearch"] = run_ours(corpus, config, say)
        for name in names:
            say(f"{name}: building and searching")
            report["runs"][name] = run_peer(name, corpus, vectors, turns, Path(tmp), config)
    report["load_avg"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(HEADER)
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
