"""Peers at scale, beside our engine in `benchmarks/run_scale.py --peers lancedb,bm25s`.

The parent writes our shard's windows (texts) and their vectors, and the queries with their
vectors, to a folder once. Each peer then runs in two fresh processes of its own, so neither
inflates the other's memory nor ours: `build` indexes the windows (timed: ingest + index, from
texts and vectors in memory to an index on disk) and `serve` opens the index and answers every
query with its vector given (timed per query after a few warm-up calls), then reports its resident
memory. The child imports only NumPy and the peer's library.

    python -m benchmarks.peers.scale build|serve PEER DATA_DIR INDEX_DIR   (a child; prints one JSON line)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from benchmarks.peers import load

__all__ = ["export", "export_shard", "ours_of", "run_peers", "peer_table", "main"]

WARMUP = 5
# Wall and process-CPU (all threads) time of ingest + index, search p50 / p99 (wall) and p50 (CPU), RSS, disk.
COLUMNS = ("build_s", "build_cpu_s", "p50", "p99", "cpu_p50", "rss_mb", "disk_mb")
ROOT = Path(__file__).resolve().parents[2]


def export(labels: Sequence[int], texts: Sequence[str], vectors: np.ndarray, queries: Sequence[str],
           query_vectors: Mapping[str, np.ndarray], folder: Path) -> Path:
    """The same inputs for every peer: windows (label order), their vectors, the queries'."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "windows.json").write_text(json.dumps({"labels": [int(x) for x in labels], "texts": list(texts)}),
                                         encoding="utf-8")
    np.save(folder / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
    (folder / "queries.json").write_text(json.dumps(list(queries)), encoding="utf-8")
    np.save(folder / "query_vectors.npy", np.stack([query_vectors[q] for q in queries]).astype(np.float32))
    return folder


def export_shard(shard: Any, queries: Sequence[str], query_vectors: Mapping[str, np.ndarray], folder: Path) -> Path:
    """`export` of an engine shard's windows that have a vector (what benchmarks/naive.py takes)."""
    labels = sorted(label for label in shard.chunks if label in shard.has_vector)
    vectors = shard.hnsw.vectors(np.asarray(labels, dtype=np.int64))
    return export(labels, [shard.chunks[label].text for label in labels], vectors, queries, query_vectors, folder)


def ours_of(result: Any) -> dict[str, float]:
    """Our figures from run_scale's SizeResult, under the keys the peers report: ingest + index
    time, engine.search with the query vector given, the serving probe's RSS, store + index."""
    given, cpu = result.latency_ms.get("given", (0.0, 0.0)), result.cpu_ms.get("given", (0.0, 0.0))
    return {"build_s": round(result.ingest_s + result.index_s, 2),
            "build_cpu_s": round(result.ingest_cpu_s + result.index_cpu_s, 2),
            "p50": given[0], "p99": given[1], "cpu_p50": cpu[0],
            "rss_mb": result.serving.get("rss_mb", 0.0), "disk_mb": round(result.index_mb + result.store_mb, 1)}


def run_peers(names: Sequence[str], data: Path, ours: Mapping[str, float], k: int) -> dict[str, dict[str, Any]]:
    """Each peer built and served in its own processes; its figures and their ratios to `ours`
    (keys of COLUMNS). A peer that fails is recorded, not raised."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        index = data.parent / f"{data.name}-{name}"
        try:
            built = _child("build", name, data, index, k)
            served = _child("serve", name, data, index, k)
        except RuntimeError as exc:
            out[name] = {"error": str(exc)}
            continue
        disk = sum(p.stat().st_size for p in index.rglob("*") if p.is_file()) / 2**20
        figures = {**built, **served, "disk_mb": round(disk, 2)}
        figures["ratio"] = {key: round(figures[key] / ours[key], 2) for key in COLUMNS if ours.get(key)}
        out[name] = figures
    return out


def _child(step: str, name: str, data: Path, index: Path, k: int) -> dict[str, Any]:
    args = [sys.executable, "-m", "benchmarks.peers.scale", step, name, str(data), str(index), str(k)]
    # One BLAS thread: on a busy 2-core machine OpenBLAS's idle threads spin-wait, and a brute-force
    # cosine (bm25s's baseline) took 40 ms of wall time for 1 ms of CPU at 3k windows.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(args, capture_output=True, text=True, timeout=6 * 3600, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{name} {step}: " + ((done.stderr.strip().splitlines() or ["no output"])[-1]))
    return json.loads(done.stdout.strip().splitlines()[-1])


def peer_table(size: int, ours: Mapping[str, float], peers: Mapping[str, Mapping[str, Any]]) -> str:
    """One markdown table: ours, then each peer with its ratio to ours in brackets."""
    lines = [f"| {size:,} | ingest + index s | (CPU s) | search p50 ms | p99 ms | p50 CPU ms | RSS MB | disk MB |",
             "|---|---|---|---|---|---|---|---|",
             "| convsearch | " + " | ".join(f"{ours.get(c, float('nan')):.1f}" for c in COLUMNS) + " |"]
    for name, figures in peers.items():
        if "error" in figures:
            lines.append(f"| {name} | failed: {figures['error']} |")
            continue
        cells = [f"{figures[c]:.1f} ({figures['ratio'].get(c, float('nan')):.2f}x)" for c in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The child side ----------------------------------------------------------------------------------
def _rss_mb() -> tuple[float, float]:
    """(current, peak) resident set of this process in MB (the child must not import the engine)."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return round(int(status["VmRSS"].split()[0]) / 1024, 1), round(int(status["VmHWM"].split()[0]) / 1024, 1)


def _build(name: str, data: Path, index: Path) -> dict[str, Any]:
    windows = json.loads((data / "windows.json").read_text(encoding="utf-8"))
    vectors = np.load(data / "vectors.npy")
    index.mkdir(parents=True)
    wall, cpu = time.perf_counter(), time.process_time()
    load(name).build(windows["texts"], vectors, index)
    return {"build_s": round(time.perf_counter() - wall, 2), "build_cpu_s": round(time.process_time() - cpu, 2),
            "build_peak_rss_mb": _rss_mb()[1]}


def _serve(name: str, data: Path, index: Path, k: int) -> dict[str, Any]:
    queries = json.loads((data / "queries.json").read_text(encoding="utf-8"))
    vectors = np.load(data / "query_vectors.npy")
    base = _rss_mb()[0]
    began = time.perf_counter()
    searcher = load(name).open(index)
    searcher.search(queries[0], vectors[0], k)
    first_s = time.perf_counter() - began
    for query, vector in list(zip(queries, vectors))[:WARMUP]:
        searcher.search(query, vector, k)
    wall, cpu = [], []
    for query, vector in zip(queries, vectors):
        w0, c0 = time.perf_counter(), time.process_time()
        searcher.search(query, vector, k)
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    now, peak = _rss_mb()
    return {"p50": round(float(np.percentile(wall, 50)), 2), "p99": round(float(np.percentile(wall, 99)), 2),
            "cpu_p50": round(float(np.percentile(cpu, 50)), 2), "rss_mb": now, "peak_rss_mb": peak,
            "python_base_mb": base, "open_and_first_query_s": round(first_s, 2)}


def main(argv: Sequence[str] | None = None) -> None:
    step, name, data, index, k = argv if argv is not None else sys.argv[1:]
    result = _build(name, Path(data), Path(index)) if step == "build" else _serve(name, Path(data), Path(index), int(k))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
