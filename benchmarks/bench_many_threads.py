"""An import of a chat export of many conversations: the shape of a ChatGPT `conversations.json`.

    PYTHONPATH=. python benchmarks/bench_many_threads.py [--threads 2000] [--per-thread 10] [--json F]

Each conversation becomes a thread of its own, so the import's cost per thread (its store
statements, its summaries' reads and writes) shows here, where run_scale's one long thread hides
it. Prints the import's seconds, messages per second and phases (store, summaries, lexical), with
the configured summarizer (CONVSEARCH_SUMMARIZER, extractive by default), then what follows an
import: the first search (the lexical index catching up on every thread) and a reindex. Seeded:
the same arguments write the same file.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.api import ConversationEngine  # noqa: E402

WORDS = ("database index query budget travel plan report python rust cache memory search vector window summary "
         "decision meeting deploy review schedule invoice garden recipe flight hotel").split()
START = 1_700_000_000  # epoch seconds of the first message
USER = "bench-user"


def export(threads: int, per_thread: int, seed: int = 0) -> list[dict]:
    """`threads` conversations of `per_thread` alternating turns, 30 s apart, each conversation
    ~1.4 hours after the last, as OpenAI's export lists them."""
    rng = random.Random(seed)
    conversations = []
    for c in range(threads):
        messages = [{"role": "user" if i % 2 == 0 else "assistant",
                     "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))) + ".",
                     "create_time": START + c * 5000 + i * 30, "id": f"c{c}-m{i}"} for i in range(per_thread)]
        conversations.append({"id": f"conv{c}", "title": f"Conversation {c}", "messages": messages})
    return conversations


def run(threads: int, per_thread: int, seed: int = 0) -> dict:
    """Import the export into a fresh data directory; the report's figures and the stored counts."""
    with tempfile.TemporaryDirectory(prefix="many-threads-") as home:
        path = Path(home) / "conversations.json"
        path.write_text(json.dumps(export(threads, per_thread, seed)), encoding="utf-8")
        with ConversationEngine(Path(home) / "data", embedder=None) as engine:
            report = engine.import_file(path, fmt="openai", user_id=USER)
            started = time.perf_counter()
            hits = len(engine.search(USER, "budget travel plan").results)
            first_search_s = time.perf_counter() - started
            reindex_s = engine.reindex(USER)[0].seconds
            stats = engine.stats(USER)
    return {"threads": threads, "messages": report.inserted, "seconds": report.seconds,
            "messages_per_s": report.messages_per_s, "phases_s": dict(report.phases_s),
            "summaries": report.summaries, "stored": stats, "first_search_s": round(first_search_s, 3),
            "first_search_hits": hits, "reindex_s": reindex_s}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2000, help="conversations in the export")
    parser.add_argument("--per-thread", type=int, default=10, help="messages per conversation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    figures = run(args.threads, args.per_thread, args.seed)
    print(f"{figures['threads']} threads, {figures['messages']} messages: {figures['seconds']:.1f} s, "
          f"{figures['messages_per_s']:.0f} msg/s; phases " + ", ".join(f"{k} {v:.1f} s" for k, v in
                                                                       figures["phases_s"].items()))
    print(f"then the first search {figures['first_search_s']:.2f} s ({figures['first_search_hits']} hits), "
          f"a reindex {figures['reindex_s']:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
