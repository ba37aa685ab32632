"""Bulk loads side by side: one `engine.ingest` call and an import of the same messages as JSONL.

    PYTHONPATH=. python benchmarks/bench_bulk_ingest.py [--n 100000] [--paths ingest,import] [--json F]

run_scale's generator (one user's continuous thread, seed 0), the configured summarizer
(CONVSEARCH_SUMMARIZER, extractive by default), synthetic vectors. Each path runs on a fresh data
directory and prints its wall seconds, messages per second, the process's CPU seconds (the summary
workers' are not in it), its phases, and the first search after it: an index not in memory is
caught up from the store by that search, so the load and the search together are what a user
waits for before a first answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.generate import SyntheticEmbedder, ThreadParams, iter_messages  # noqa: E402
from engine.api import ConversationEngine  # noqa: E402

USER = "bench-user"
PATHS = ("ingest", "import")


def run(path: str, n: int, seed: int = 0) -> dict[str, Any]:
    """One bulk load of `n` generated messages by `path` ("ingest" or "import"), then a first search."""
    messages = list(iter_messages(ThreadParams(n_messages=n, seed=seed, user_id=USER)))
    with tempfile.TemporaryDirectory(prefix="bulk-ingest-") as home:
        source = Path(home) / "messages.jsonl"
        if path == "import":
            source.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
        with ConversationEngine(Path(home) / "data", embedder=SyntheticEmbedder(0)) as engine:
            engine.add_user(USER, "UTC")
            wall, cpu = time.perf_counter(), time.process_time()
            if path == "ingest":
                report: Any = engine.ingest(USER, messages, index=False)
                stored = len(report.inserted)
            else:
                report = engine.import_file(source, fmt="jsonl", user_id=USER)
                stored = report.inserted
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            started = time.perf_counter()
            hits = len(engine.search(USER, messages[n // 2]["content"], limit=10).results)
            first_search_s = time.perf_counter() - started
    return {"path": path, "messages": stored, "seconds": round(wall, 3), "messages_per_s": round(stored / wall, 1),
            "cpu_s": round(cpu, 2), "phases_s": dict(report.phases_s), "first_search_s": round(first_search_s, 3),
            "until_first_answer_s": round(wall + first_search_s, 3), "hits": hits}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--paths", default=",".join(PATHS), help="ingest, import or both, in the order to run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    if not paths or any(p not in PATHS for p in paths):
        parser.error(f"--paths takes {' and '.join(PATHS)}, comma-separated; got {args.paths!r}")
    results = []
    for path in paths:
        result = run(path, args.n, args.seed)
        results.append(result)
        print(f"{path:6s} {result['messages']:>9,} messages  {result['seconds']:7.2f} s  "
              f"{result['messages_per_s']:>9,.0f} msg/s  cpu {result['cpu_s']:6.2f} s  "
              f"first search {result['first_search_s']:6.2f} s  phases {result['phases_s']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
