"""Reindex on Ray against the single-process reindex, on generated threads (docs/scaling.md).

Per size (messages, split evenly over --users users): ingest once, then time
* cold (only up to --cold-max): an empty embedding cache, so everything is embedded by the real
  model: `engine.reindex()` and `engine.reindex_on_ray()` each on its own copy of the home;
* warm: the cache holds every vector, the shards are gone; the job is chunking, BM25, HNSW, shard
  writes and Ray's overhead. The cache is filled first by a cheap synthetic embedder stored
  under the real model's name (the values do not matter to the timing).
Ray starts once per run, timed apart (`ray_start_s`). The CPU is shared: note /proc/loadavg.

    PYTHONPATH=$PWD python benchmarks/bench_reindex_ray.py --sizes 10000,100000 --users 10
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.generate import SyntheticEmbedder, ThreadParams, iter_messages
from engine.api import ConversationEngine
from engine.config import Settings
from indexers.embedders import ONNX_MODEL_NAME


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" tasks")[0].rsplit(" ", 2)[0]


def make_home(home: Path, size: int, users: int) -> None:
    settings = Settings(summarizer="none")
    with ConversationEngine(home, settings=settings, embedder=None) as engine:
        for u in range(users):
            user = f"bench-{u}"
            engine.add_user(user)
            messages = iter_messages(ThreadParams(n_messages=size // users, seed=u, user_id=user))
            while chunk := list(itertools.islice(messages, 5000)):
                engine.ingest(user, chunk, index=False)


def warm_cache(home: Path) -> None:
    """Every vector cached under the real model's name, from a cheap stand-in (timing only)."""
    stand_in = SyntheticEmbedder()
    stand_in.name = ONNX_MODEL_NAME
    with ConversationEngine(home, embedder=stand_in) as engine:
        engine.reindex()
    shutil.rmtree(home / "indexes")


def timed(run: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = run()
    return round(time.perf_counter() - started, 2), result


def measure(home: Path, work: Path, label: str) -> dict[str, Any]:
    """Single-process and Ray reindex of copies of `home`; seconds and the Ray driver's split."""
    out: dict[str, Any] = {"load_before": loadavg()}
    for executor in ("single", "ray"):
        copy = work / f"{label}-{executor}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(home, copy)
        with ConversationEngine(copy) as engine:
            if executor == "single":
                out["single_s"], reports = timed(engine.reindex)
                out["embedded"] = sum(r.embeddings_computed for r in reports)
            else:
                out["ray_s"], report = timed(engine.reindex_on_ray)
                out["ray_driver_s"] = report.driver_seconds
                out["ray_embedded"] = sum(r.embeddings_computed for r in report.rebuilt)
        shutil.rmtree(copy)
    out["load_after"] = loadavg()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000", help="total messages, comma-separated")
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--cold-max", type=int, default=10000, help="largest size measured with an empty cache")
    args = parser.parse_args(argv)
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    results: dict[str, Any] = {"ray_start_s": round(time.perf_counter() - started, 2), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        work = Path(tmp)
        for size in (int(s) for s in args.sizes.split(",")):
            home = work / f"home-{size}"
            ingest_s, _ = timed(lambda: make_home(home, size, args.users))
            row: dict[str, Any] = {"users": args.users, "ingest_s": ingest_s}
            if size <= args.cold_max:
                row["cold"] = measure(home, work, f"cold-{size}")
            warm_cache(home)
            row["warm"] = measure(home, work, f"warm-{size}")
            results["sizes"][size] = row
            print(json.dumps({size: row}), file=sys.stderr, flush=True)
    ray.shutdown()
    print(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
