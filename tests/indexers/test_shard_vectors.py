"""Which windows of a shard still need a vector (`Shard.without_vectors`), kept as the shard changes."""

from __future__ import annotations

import numpy as np

from indexers.bm25 import Bm25Index
from indexers.chunking import Chunk
from indexers.hnsw import HnswParams
from indexers.lexical import LexicalTokenizer
from indexers.manifest import BuildSpec, Manifest
from indexers.shard import Shard


def _chunk(seq: int) -> Chunk:
    return Chunk(chunk_id=f"c{seq}", thread_id="t", from_seq=seq, to_seq=seq, message_ids=(f"m{seq}",),
                 message_seqs=(seq,), text=f"word{seq} text", content_hash=f"h{seq}", n_tokens=2)


def test_without_vectors_follows_adds_vectors_and_removals() -> None:
    rng = np.random.default_rng(4)
    spec = BuildSpec(model="m", dim=8, chunking={}, tokenizer={}, bm25={})
    shard = Shard.empty(Manifest(user_id="u", spec=spec), LexicalTokenizer(), Bm25Index(), HnswParams(dim=8))
    seq = 0
    for step in range(300):
        action = rng.integers(0, 3)
        if action == 0 or not len(shard.chunks):
            shard.add([_chunk(seq + i) for i in range(int(rng.integers(1, 4)))])
            seq += 4
        elif action == 1 and (todo := shard.without_vectors()):
            some = np.array(rng.choice(todo, int(rng.integers(1, len(todo) + 1)), replace=False), dtype=np.int64)
            shard.set_vectors(some, rng.normal(size=(len(some), 8)).astype(np.float32))
        else:
            shard.remove(rng.choice(list(shard.chunks), min(len(shard.chunks), 2), replace=False).tolist())
        if step == 150:
            shard._unvectored = None  # noqa: SLF001  as after a load: worked out again from the labels
        assert shard.without_vectors() == sorted(set(shard.chunks) - set(shard.has_vector))
