"""Many short threads re-chunked at once (`rechunk_tails`: an index catching up on a chat export)
make the shard that re-chunking them one at a time makes: same windows under the same labels,
same manifest, same BM25 scores."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np

from engine.models import Message
from indexers.bm25 import Bm25Index
from indexers.chunking import ChunkParams, WordPieceCounter
from indexers.lexical import LexicalTokenizer
from indexers.manifest import BuildSpec, Manifest
from indexers.rechunk import rechunk_tails
from indexers.shard import Shard

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
WORDS = "budget flight hotel garden recipe python rust cache deploy review invoice meeting".split()


def _thread(thread: int, count: int, first_seq: int = 1) -> list[Message]:
    rng = np.random.default_rng(thread)
    return [Message(message_id=f"t{thread}-{seq}", thread_id=f"t{thread}", user_id="u", seq=seq,
                    role="user" if seq % 2 else "assistant",
                    content=" ".join(rng.choice(WORDS, int(rng.integers(3, 60)))),
                    created_at=T0 + timedelta(minutes=seq), day_label=T0.date(), conversation_id=f"t{thread}:conv:1")
            for seq in range(first_seq, first_seq + count)]


def _shard() -> Shard:
    spec = BuildSpec(model="m", dim=8, chunking={}, tokenizer={}, bm25={})
    return Shard.empty(Manifest(user_id="u", spec=spec), LexicalTokenizer(), Bm25Index(), None)


def test_many_threads_rechunked_at_once_make_the_shard_one_at_a_time_makes() -> None:
    params, counter = ChunkParams(), WordPieceCounter()
    threads = {f"t{t}": _thread(t, 1 + t % 9) for t in range(40)}
    later = {f"t{t}": _thread(t, 5, first_seq=1 + t % 9) for t in range(0, 40, 3)}  # some threads grow
    together, alone = _shard(), _shard()
    for batch in (threads, later):
        tails = {t: [m for m in found if m.seq >= together.manifest.tails.get(t, 0)] for t, found in batch.items()}
        rechunk_tails(together, {t: (found, found[-1].seq) for t, found in tails.items()}, params, counter)
        for thread_id, found in batch.items():
            mine = [m for m in found if m.seq >= alone.manifest.tails.get(thread_id, 0)]
            rechunk_tails(alone, {thread_id: (mine, mine[-1].seq)}, params, counter)  # one thread a call
    assert dict(together.chunks) == dict(alone.chunks) and together.manifest == alone.manifest
    labels = np.array(sorted(alone.chunks), dtype=np.int64)
    for query in (["budget", "hotel"], ["rust"], ["garden", "recipe", "deploy"]):
        assert np.allclose(together.bm25.scores_for(query, labels), alone.bm25.scores_for(query, labels))


def test_labels_from_gives_each_threads_windows_from_its_seq_on() -> None:
    shard = _shard()
    rechunk_tails(shard, {f"t{t}": (_thread(t, 30), 30) for t in range(3)}, ChunkParams(window_tokens=60), WordPieceCounter())
    spans = {label: (c.thread_id, c.from_seq) for label, c in shard.chunks.items()}
    asked = {"t0": 10, "t2": 1, "missing": 1}
    assert shard.labels_from(asked) == {t: sorted(label for label, (thread, low) in spans.items()
                                                  if thread == t and low >= asked[t]) for t in asked}
