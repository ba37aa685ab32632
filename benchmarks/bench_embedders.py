"""torch vs ONNX int8 MiniLM on LoCoMo: load time, latency, throughput, agreement.

    python benchmarks/bench_embedders.py [--locomo PATH] [--queries 50] [--threads 1 2]

Each backend runs in its own fresh process, one after the other: both runtimes keep their worker
threads spinning after a call, so measuring them side by side in one process slows whichever runs
next. Load time includes the imports. Throughput is the best of 3 runs (the least disturbed by
other processes on a shared machine). Agreement: per-text cosine between the two backends'
vectors, and the overlap of the top-10 turns each retrieves for the LoCoMo questions (within each
question's own conversation), plus each backend's evidence hit rate @10.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

__all__ = ["Conversation", "load_locomo", "main"]

DEFAULT_LOCOMO = Path("/work/shared/data/locomo/locomo_dev.json")
WINDOW_TURNS = 8
PARTS = ("turns", "windows", "questions")


@dataclass(frozen=True, slots=True)
class Conversation:
    turns: tuple[str, ...]
    dia_ids: tuple[str, ...]
    questions: tuple[str, ...]
    evidence: tuple[frozenset[str], ...]


def load_locomo(path: Path) -> list[Conversation]:
    """Turns in session order and the QA items of each LoCoMo conversation."""
    out = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:]))
        turns = [t for key in sessions for t in conv[key]]
        out.append(
            Conversation(
                turns=tuple(t["text"] for t in turns),
                dia_ids=tuple(t["dia_id"] for t in turns),
                questions=tuple(q["question"] for q in sample["qa"]),
                evidence=tuple(frozenset(q.get("evidence", [])) for q in sample["qa"]),
            )
        )
    return out


def texts(convs: list[Conversation]) -> dict[str, list[str]]:
    """All turns, windows of WINDOW_TURNS consecutive turns (per conversation), all questions."""
    return {
        "turns": [t for c in convs for t in c.turns],
        "windows": [
            " ".join(c.turns[i : i + WINDOW_TURNS]) for c in convs for i in range(0, len(c.turns), WINDOW_TURNS)
        ],
        "questions": [q for c in convs for q in c.questions],
    }


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def worker(backend: str, locomo: Path, n_queries: int, threads: int | None, out: Path | None) -> dict[str, float]:
    """Measure one backend in this (fresh) process; save its vectors to `out` when given."""
    started = time.perf_counter()
    from indexers.embedders import OnnxEmbedder, SentenceTransformerEmbedder

    cls = SentenceTransformerEmbedder if backend == "torch" else OnnxEmbedder
    embedder = cls(num_threads=threads)
    embedder.load()
    result = {"load_s": time.perf_counter() - started}
    data = texts(load_locomo(locomo))
    questions = data["questions"]
    embedder.embed(questions[:5])  # warm-up: first calls allocate
    latencies = [timed(lambda q=q: embedder.embed([q])) for q in questions[:n_queries]]
    result["query_p50_ms"] = 1000 * statistics.median(latencies)
    if out is None:
        return result
    for part, sample in (("turns", data["turns"][:512]), ("windows", data["windows"][:64])):
        best = min(timed(lambda: embedder.embed(sample)) for _ in range(3))
        result[f"{part}_per_s"] = len(sample) / best
    for part in PARTS:
        np.save(out / f"{backend}_{part}.npy", embedder.embed(data[part]))
    return result


def measure(backend: str, args: argparse.Namespace, threads: int | None, out: Path | None) -> dict[str, float]:
    command = [sys.executable, __file__, "--worker", backend, "--locomo", str(args.locomo)]
    command += ["--queries", str(args.queries)]
    command += ["--worker-threads", str(threads)] if threads else []
    command += ["--out", str(out)] if out else []
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def top10(queries: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    return np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :10]


def agreement(convs: list[Conversation], vecs: dict[str, dict[str, np.ndarray]]) -> dict[str, float]:
    """Top-10 overlap between the backends and each backend's evidence hit rate @10."""
    overlaps: list[float] = []
    hits = dict.fromkeys(vecs, 0)
    t0 = q0 = 0
    for conv in convs:
        t1, q1 = t0 + len(conv.turns), q0 + len(conv.questions)
        tops = {name: top10(v["questions"][q0:q1], v["turns"][t0:t1]) for name, v in vecs.items()}
        a, b = tops.values()
        overlaps += [len(set(x) & set(y)) / 10 for x, y in zip(a, b)]
        for name, top in tops.items():
            hits[name] += sum(bool(ev & {conv.dia_ids[j] for j in row}) for row, ev in zip(top, conv.evidence))
        t0, q0 = t1, q1
    return {"top-10 overlap": float(np.mean(overlaps))} | {f"evidence hit@10 {n}": h / q0 for n, h in hits.items()}


def report(args: argparse.Namespace) -> None:
    from indexers.model_files import wordpiece_tokenizer

    convs = load_locomo(args.locomo)
    data, tok = texts(convs), wordpiece_tokenizer()
    mean_tokens = {part: np.mean([len(tok.encode(t).ids) for t in data[part]]) for part in PARTS}
    print(f"LoCoMo: {len(convs)} conversations, {len(data['turns'])} turns (mean {mean_tokens['turns']:.0f} "
          f"word pieces), {len(data['windows'])} windows of {WINDOW_TURNS} turns (mean {mean_tokens['windows']:.0f}, "
          f"cut at 256), {len(data['questions'])} questions")
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("torch", "onnx"):
            r = measure(backend, args, None, Path(tmp))
            print(f"[{backend}] load {r['load_s']:.2f} s (fresh process, imports included); query p50 "
                  f"{r['query_p50_ms']:.1f} ms; turns {r['turns_per_s']:.0f}/s; windows {r['windows_per_s']:.1f}/s")
        vecs = {b: {p: np.load(Path(tmp) / f"{b}_{p}.npy") for p in PARTS} for b in ("torch", "onnx")}
    for part in PARTS:
        cos = np.sum(vecs["torch"][part] * vecs["onnx"][part], axis=1)
        print(f"cosine torch vs onnx, {part}: mean {cos.mean():.4f}, min {cos.min():.4f}")
    for key, value in agreement(convs, vecs).items():
        print(f"{key}: {value:.3f}")
    for backend in ("torch", "onnx"):
        for threads in args.threads:
            r = measure(backend, args, threads, None)
            print(f"[{backend} threads={threads}] query p50 {r['query_p50_ms']:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2], help="intra-op threads to compare")
    parser.add_argument("--worker", choices=("torch", "onnx"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-threads", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.locomo, args.queries, args.worker_threads, args.out)))
    else:
        report(args)


if __name__ == "__main__":
    main()
