"""The live path: one message at a time into a store that already holds N messages (summaries on).

    python benchmarks/bench_live_ingest.py --n 100000 --calls 200 [--json live.json]

The store is filled through `engine.ingest` in batches of `--batch` (the bulk path, timed too),
indexed, then `--calls` further messages of the same thread (run_scale's generator, seed 0) go in
one per `engine.ingest` call with `index=True`: store, the day policy (a day's summary every ten
turns, a closed day's and an ended conversation's summaries), the lexical update and the vector.
Reported per call: wall and process-CPU p50/p99, and the phases the facade reports (phases_s); and
a search after each call (what a deployment answering while messages arrive sees: the first search
after a summary was written used to rebuild the user's summary index).
Vectors are `SyntheticEmbedder`'s (no model): the figures are the engine's own costs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.generate import SyntheticEmbedder, ThreadParams, iter_messages  # noqa: E402
from engine.api import ConversationEngine  # noqa: E402
from engine.config import Settings  # noqa: E402

USER = "bench-user"
SEARCHES = ("deploy the release", "what did we decide about the database?", "error in the logs", "next steps")


def _p(values: list[float]) -> tuple[float, float]:
    return round(float(np.percentile(values, 50)), 2), round(float(np.percentile(values, 99)), 2)


def run(n: int, calls: int, batch: int, workdir: Path, summarizer: str = "extractive") -> dict[str, Any]:
    messages = iter_messages(ThreadParams(n_messages=n + calls, seed=0, user_id=USER))
    out: dict[str, Any] = {"n": n, "calls": calls, "summarizer": summarizer, "load_start": os.getloadavg()[0]}
    settings = Settings(summarizer=summarizer)
    with ConversationEngine(workdir / f"live-{n}", settings=settings, embedder=SyntheticEmbedder(0)) as engine:
        engine.add_user(USER, "UTC")
        wall = cpu = 0.0
        for _ in range(0, n, batch):
            chunk = list(itertools.islice(messages, min(batch, n - _)))
            w, c = time.perf_counter(), time.process_time()
            engine.ingest(USER, chunk, index=False)
            wall, cpu = wall + time.perf_counter() - w, cpu + time.process_time() - c
        out["bulk"] = {"seconds": round(wall, 2), "cpu_s": round(cpu, 2), "messages_per_s": round(n / wall, 1),
                       "messages_per_cpu_s": round(n / cpu, 1)}
        began = time.perf_counter()
        engine.index(USER)
        out["index_s"] = round(time.perf_counter() - began, 2)
        walls, cpus, phases, search_walls, search_cpus = [], [], [], [], []
        for call, message in enumerate(messages):
            w, c = time.perf_counter(), time.process_time()
            result = engine.ingest(USER, [message])
            walls.append((time.perf_counter() - w) * 1000)
            cpus.append((time.process_time() - c) * 1000)
            phases.append(getattr(result, "phases_s", {"total": walls[-1] / 1000}))  # older engines: no phases
            w, c = time.perf_counter(), time.process_time()
            engine.search(USER, SEARCHES[call % len(SEARCHES)])
            search_walls.append((time.perf_counter() - w) * 1000)
            search_cpus.append((time.process_time() - c) * 1000)
        out["live_ms"] = {"wall_p50_p99": _p(walls), "cpu_p50_p99": _p(cpus),
                          "phases_p50_ms": {k: round(1000 * float(np.median([p.get(k, 0.0) for p in phases])), 2)
                                            for k in phases[0]}}
        out["search_after_ingest_ms"] = {"wall_p50_p99": _p(search_walls), "cpu_p50_p99": _p(search_cpus),
                                         "max": round(max(search_walls), 2)}
    out["load_end"] = os.getloadavg()[0]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="messages stored before the live calls")
    parser.add_argument("--calls", type=int, default=200, help="single-message ingests timed")
    parser.add_argument("--batch", type=int, default=1000, help="messages per engine.ingest call while filling")
    parser.add_argument("--summarizer", choices=("extractive", "none"), default="extractive")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="convsearch-live-") as tmp:
        report = run(args.n, args.calls, args.batch, Path(tmp), args.summarizer)
    print(json.dumps(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
