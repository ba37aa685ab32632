"""Another user's live writes while a large import runs: what a server's other users wait for.

    PYTHONPATH=. python benchmarks/bench_import_beside.py [--n 100000] [--every 0.2] [--json F]

One engine (synthetic vectors, the configured summarizer), run_scale's generator written as JSONL
for the user "big" and imported in a thread; meanwhile the main thread sends the user "small" one
message every `--every` seconds, each an `engine.ingest` (embedded, as HTTP and MCP writes are),
until the import returns. Prints the import's seconds and phases and the writes' latencies: all of
them, and those that started during the import's store phase (its file's transaction).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.generate import SyntheticEmbedder, ThreadParams, iter_messages  # noqa: E402
from engine.api import ConversationEngine  # noqa: E402

BIG, SMALL = "big", "small"


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"count": 0}
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"count": len(ordered), "p50_ms": round(pick(0.5) * 1000, 1), "p99_ms": round(pick(0.99) * 1000, 1),
            "max_ms": round(ordered[-1] * 1000, 1)}


def run(n: int, every: float, seed: int = 0) -> dict[str, Any]:
    """Import `n` generated messages for BIG while SMALL writes one message every `every` seconds."""
    messages = list(iter_messages(ThreadParams(n_messages=n, seed=seed, user_id=BIG)))
    with tempfile.TemporaryDirectory(prefix="import-beside-") as home:
        source = Path(home) / "messages.jsonl"
        source.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
        with ConversationEngine(Path(home) / "data", embedder=SyntheticEmbedder(0)) as engine:
            engine.add_user(BIG, "UTC")
            engine.add_user(SMALL, "UTC")
            engine.ingest(SMALL, [{"role": "user", "content": "a first line of the small user"}])
            outcome: dict[str, Any] = {}

            def load() -> None:
                started = time.perf_counter()
                outcome["report"] = engine.import_file(source, fmt="jsonl", user_id=BIG)
                outcome["seconds"] = time.perf_counter() - started

            importer = threading.Thread(target=load)
            begun = time.perf_counter()
            importer.start()
            writes: list[tuple[float, float]] = []  # (start since the import began, seconds)
            while importer.is_alive():
                time.sleep(every)
                started = time.perf_counter()
                engine.ingest(SMALL, [{"role": "user", "content": f"live note {len(writes)} about the deploy"}])
                writes.append((started - begun, time.perf_counter() - started))
            importer.join()
            found = len(engine.substring_search(SMALL, "about the deploy", limit=len(writes) + 1))
    report = outcome["report"]
    store_s = report.phases_s.get("store", 0.0)
    return {"messages": report.inserted, "import_s": round(outcome["seconds"], 3), "phases_s": dict(report.phases_s),
            "writes": _quantiles([s for _, s in writes]),
            "writes_during_store": _quantiles([s for at, s in writes if at < store_s]),
            "writes_found": found, "writes_sent": len(writes)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--every", type=float, default=0.2, help="seconds between the small user's writes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run(args.n, args.every, args.seed)
    print(f"import {result['messages']:,} messages in {result['import_s']:.2f} s, phases {result['phases_s']}")
    print(f"another user's writes: {result['writes']}; during the store phase: {result['writes_during_store']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
