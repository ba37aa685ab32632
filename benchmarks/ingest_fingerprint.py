"""A fingerprint of everything ingest writes, to show a speed change keeps the output.

    PYTHONPATH=. python benchmarks/ingest_fingerprint.py [--n 3000]

Run it on the base commit and on the change and compare the SHA-1s (they do not depend on the
hash seed: summaries sum scores in a fixed order). Ingested with summaries on (extractive) and a
fixed clock: run_scale's generator with every fifth message replaced by one of EXTRA (cues,
questions, French, Japanese, code fences, lists, a 700-character word) for two users, one through
`engine.ingest` in batches of 700 (`--batch`) and then 700 messages one at a time, the other imported from
JSONL. Hashed per part: messages (notes without their random ids), conversations, day segments,
summaries (no wall-clock times), windows (label, seqs, text, count, part, line ends), the BM25
index as saved (vocabulary, document frequencies, labels, lengths, postings), and the top 50 of
300 one-word queries.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["CONVSEARCH_SUMMARIZER"] = "extractive"

from benchmarks.generate import ThreadParams, iter_messages  # noqa: E402
from engine.api import ConversationEngine  # noqa: E402

EXTRA = [
    "Can you help me set up DuckDB for the analytics pipeline? I need it by Friday.",
    "We decided to use Parquet files for the export. Next step: write the loader.",
    "I will send the report tomorrow. Let's make sure the tests pass first!",
    "Open question: should we shard by user or by day? Not sure yet.",
    "My goal is to finish the migration this week. TODO: update the docs.",
    "Nous avons décidé d'utiliser Postgres. Je vais écrire le script demain. Pourquoi pas SQLite ?",
    "明日までにレポートを送ります。データベースはDuckDBに決めました。次は何をしますか？",
    "Here is the code:\n```python\nprint('hi')\nfor i in range(3): pass\n```\nDoes that look right?",
    "a" * 700 + " then " + "b" * 350 + " and more words here.",
    "- first item in the list\n- second item, we agreed on this\n1. numbered step to do next\n> quoted remark here",
    "Wow, that's so cool, thanks! Really great stuff.",
    "Hi, can you please help me plan the trip to Kyoto? I'd like to see temples and gardens.",
    "The plan:",
    "Remind me to call the bank about the mortgage rate on Monday.",
    "Don\u2019t forget the\u00a0deadline is next Tuesday; we should prioritise the API work.",
]
TABLES = [
    ("messages", "seq, thread_id, user_id, role, content, created_at, day_label, conversation_id, speaker, tools_used, "
                 "metadata, external_id, kind, CASE WHEN kind = 'note' THEN '' ELSE message_id END", "user_id, seq"),
    ("conversations", "conversation_id, thread_id, user_id, ordinal, started_at, last_message_at, first_seq, last_seq, "
                      "ended_at, end_reason, title, summary", "conversation_id"),
    ("day_segments", "day_segment_id, user_id, thread_id, day_label, starts_at_seq, ends_at_seq, summary_markdown",
     "day_segment_id"),
    ("summaries", "summary_id, thread_id, user_id, kind, from_seq, to_seq, markdown, day_label, conversation_id, title, "
                  "message_count", "summary_id"),
]


def messages(n: int, seed: int, user: str) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i, m in enumerate(iter_messages(ThreadParams(n_messages=n, seed=seed, user_id=user))):
        if i % 5 == 0 and m["role"] != "tool":
            m["content"] = rng.choice(EXTRA) + (" " + m["content"] if rng.random() < 0.5 else "")
        out.append(m)
    return out


def clock() -> datetime:
    return datetime(2031, 1, 1, tzinfo=timezone.utc)


def dump(engine: ConversationEngine, users: list[str]) -> dict[str, str]:
    """SHA-1 of each part of what ingest wrote."""
    h = {name: hashlib.sha1() for name in [t[0] for t in TABLES] + ["windows", "bm25", "scores"]}
    for table, columns, order in TABLES:
        h[table].update(repr(engine.store.db.execute(f"SELECT {columns} FROM {table} ORDER BY {order}")).encode())
    for user in users:
        shard = engine.pipeline.shard(user)
        for label in sorted(shard.chunks):
            c = shard.chunks[label]
            h["windows"].update(repr((label, c.thread_id, c.from_seq, c.to_seq, c.message_seqs, c.text, c.n_tokens,
                                      c.part, c.line_ends)).encode())
        with tempfile.TemporaryDirectory() as saved:  # the index as saved: vocabulary, df, labels, lengths, postings
            shard.bm25.save(Path(saved))
            terms = json.loads((Path(saved) / "vocab.json").read_text(encoding="utf-8"))
            h["bm25"].update(repr(terms).encode())
            for name in ("labels", "doc_len", "df", "terms", "ptr", "docs", "tfs"):
                h["bm25"].update(np.load(Path(saved) / f"{name}.npy").tobytes())
        for term in random.Random(1).sample(sorted(terms), min(300, len(terms))):
            labels, scores = shard.bm25.search([term], 50)
            h["scores"].update(repr((term, labels.tolist(), scores.tolist())).encode())
    return {name: digest.hexdigest() for name, digest in h.items()}


def fingerprint(n: int, size: int = 700) -> dict[str, str]:
    home = tempfile.mkdtemp(prefix="fingerprint-")
    try:
        with ConversationEngine(home, embedder=None, clock=clock) as engine:
            engine.add_user("u1", "UTC")
            batch = messages(n, 3, "u1")
            for start in range(0, len(batch) - 700, size):
                engine.ingest("u1", batch[start:start + size], index=False)
            for m in batch[-700:]:
                engine.ingest("u1", [m], index=False)
            path = Path(home) / "import.jsonl"
            path.write_text("".join(json.dumps(m) + "\n" for m in messages(n, 4, "u2")), encoding="utf-8")
            engine.import_file(path, fmt="jsonl", user_id="u2", timezone="Europe/Paris")
            return dump(engine, ["u1", "u2"])
    finally:
        shutil.rmtree(home)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000, help="messages per user")
    parser.add_argument("--batch", type=int, default=700, help="messages per engine.ingest call before the last 700")
    args = parser.parse_args(argv)
    parts = fingerprint(args.n, args.batch)
    total = hashlib.sha1("".join(parts.values()).encode())
    for name, digest in parts.items():
        print(name, digest)
    print("TOTAL", total.hexdigest())


if __name__ == "__main__":
    main()
