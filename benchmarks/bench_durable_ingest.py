"""What a durable single-message ingest costs, two ways, on a user with N messages already indexed.

* `cache`: what `ingest` does: store the message (one DuckDB transaction), chunk it, embed it
  into the embedding cache (a DuckDB table: the durable record of every vector); the shard file
  is saved by the server's background step every few seconds, and a shard loaded after a crash
  takes back every cached vector (`IndexPipeline.shard`, `only_cached`), no model call.
* `save`: the same, then save the whole shard (a new version, fsynced, CURRENT flipped) after
  every call (`index`, which finds nothing left to embed).

It also times the restart: loading a shard whose last save is `--backlog` messages behind (the
first `index_status`).
Vectors come from `SyntheticEmbedder` (no model) so the figures are the storage costs; the real
model's cost for one short message is printed separately with `--model`.

    python benchmarks/bench_durable_ingest.py --n 1000 10000 --calls 40 --model
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.generate import SyntheticEmbedder, generate  # noqa: E402
from engine.api import ConversationEngine  # noqa: E402
from engine.config import Settings  # noqa: E402

USER = "u"


def _engine(home: Path) -> ConversationEngine:
    return ConversationEngine(home, settings=Settings(summarizer="none"), embedder=SyntheticEmbedder())


def _timed(calls: int, step: Callable[[int], Any]) -> dict[str, float]:
    wall, cpu = [], []
    for i in range(calls):
        w, c = time.perf_counter(), time.process_time()
        step(i)
        wall.append((time.perf_counter() - w) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    wall.sort()
    return {"p50_ms": round(statistics.median(wall), 2), "p95_ms": round(wall[int(0.95 * (len(wall) - 1))], 2),
            "cpu_p50_ms": round(statistics.median(cpu), 2)}


def run(n: int, calls: int, backlog: int) -> dict[str, Any]:
    messages = generate(n + 2 * calls + backlog, seed=3)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        with _engine(home) as engine:
            engine.add_user(USER)
            for start in range(0, n, 2000):
                engine.ingest(USER, messages[start:min(start + 2000, n)], index=False)
            engine.index(USER)
            rest = iter(messages[n:])
            cache = _timed(calls, lambda i: engine.ingest(USER, [next(rest)]))

            def and_save(i: int) -> None:
                engine.ingest(USER, [next(rest)])
                engine.index(USER)  # nothing left to embed: the shard is saved

            save = _timed(calls, and_save)
            for _ in range(backlog):
                engine.ingest(USER, [next(rest)])  # acknowledged, never saved: the crash case
        with _engine(home) as engine:
            began = time.perf_counter()
            pending = engine.index_status(USER)["not_vector_indexed_messages"]  # loads the shard
            restore_ms = (time.perf_counter() - began) * 1000
    return {"n": n, "cache": cache, "save": save, "restart_backlog": backlog,
            "restart_load_ms": round(restore_ms, 1), "pending_after_restart": pending}


def model_cost(calls: int) -> dict[str, float]:
    from indexers.embedders import load_embedder

    embedder = load_embedder(Settings().embedding_backend)
    embedder.embed(["warm up"])
    text = "Let's meet at the station at nine, and bring the tickets for the ferry."
    return _timed(calls, lambda i: embedder.embed([f"{text} ({i})"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000], help="messages already indexed")
    parser.add_argument("--calls", type=int, default=40, help="single-message ingests timed per mode")
    parser.add_argument("--backlog", type=int, default=200, help="unsaved messages before the restart")
    parser.add_argument("--model", action="store_true", help="also time the real model on one message")
    args = parser.parse_args()
    with open("/proc/loadavg") as handle:
        print(f"load: {handle.read().split()[:3]}")
    for n in args.n:
        print(run(n, args.calls, args.backlog), flush=True)
    if args.model:
        print({"model_one_message": model_cost(args.calls)})


if __name__ == "__main__":
    main()
