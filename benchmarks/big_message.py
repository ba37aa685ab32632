"""How long one big message takes to store and index (embed) on its own: what sets INDEX_CAP_CHARS.

    PYTHONPATH=$PWD python benchmarks/big_message.py --sizes 20000,50000,100000,200000

Prints, per size, wall and process CPU seconds of `engine.ingest(..., index=True)` for one message
in a fresh store with the default (onnx MiniLM) embedder, and the windows it became.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from engine.api import ConversationEngine

WORDS = ("invoice ledger backup schedule rollback PostgreSQL index window replica timeout cache token budget "
         "summary migration deploy pipeline retry latency queue worker shard vector keyword").split()


def text_of(chars: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    out, size = [], 0
    while size < chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + ". "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars]


def measure(chars: int) -> dict:
    with tempfile.TemporaryDirectory() as home, ConversationEngine(Path(home)) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user", "content": "warm up the model"}])  # load outside the timing
        wall, cpu = time.perf_counter(), time.process_time()
        engine.ingest("u", [{"role": "user", "content": text_of(chars)}])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return {"chars": chars, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                "windows": engine.index_status("u")["chunks"] - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20000,50000,100000")
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        print(json.dumps(measure(size)), flush=True)


if __name__ == "__main__":
    main()
