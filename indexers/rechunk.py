"""Re-chunking threads from their last windows on into a shard, and the shard's BM25 with them.

Pure over the shard (no store): the pipeline catches a shard up with it (indexers/pipeline.py), and
a distributed worker builds a shard from messages it was sent (indexers/shard_build.py).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from indexers.chunking import Chunk, ChunkParams, Turn, WordPieceCounter
from indexers.encoded_tokens import EncodedTokens
from indexers.parallel_chunks import NO_WORKERS, ChunkWorkers, Stop, chunk_here, chunk_in_parallel, never
from indexers.shard import Shard

__all__ = ["rechunk_tails"]


def rechunk_tails(shard: Shard, tails: Mapping[str, tuple[Sequence[Turn], int]], params: ChunkParams,
                  counter: WordPieceCounter, workers: ChunkWorkers = NO_WORKERS, stop: Stop = never) -> tuple[int, int]:
    """Re-chunk threads (thread -> (messages from the manifest's tail to the end, last seq)) from
    their last windows on into the shard and advance its manifest; (added, removed). Each thread is
    chunked alone (a long tail with `workers` processes) and the shard changed once: an import of a
    chat export holds thousands of short threads. When `stop` says so while they are chunked
    (IndexingPausedError), the shard is left as it was."""
    old = shard.labels_from({thread_id: shard.manifest.tails.get(thread_id, 0) for thread_id in tails})
    fresh: list[Chunk] = []
    tokens: list[EncodedTokens] = []
    marks: dict[str, tuple[int, int]] = {}
    for thread_id, (messages, last_seq) in tails.items():
        made, made_tokens = (chunk_in_parallel(messages, params, counter, shard.tokenizer, workers, stop)
                             or chunk_here(messages, params, counter, shard.tokenizer, stop))
        fresh += made
        tokens.append(made_tokens)
        marks[thread_id] = (last_seq, made[-1].from_seq if made else shard.manifest.tails.get(thread_id, 0))
    removed, added = _replace_chunks(shard, [label for labels in old.values() for label in labels], fresh,
                                     EncodedTokens.joined(tokens))
    shard.manifest = shard.manifest.advanced(marks, chunks=len(shard.chunks), next_label=shard.manifest.next_label)
    return added, removed


def _replace_chunks(shard: Shard, old_labels: Sequence[int], fresh: Sequence[Chunk],
                    tokens: EncodedTokens) -> tuple[int, int]:
    """Swap old chunks for fresh ones (with their BM25 tokens), keeping (and not re-embedding)
    those whose id is unchanged."""
    old_ids = {shard.chunks[label].chunk_id: label for label in old_labels}
    fresh_ids = {c.chunk_id for c in fresh}
    doomed = [label for chunk_id, label in old_ids.items() if chunk_id not in fresh_ids]
    shard.remove(doomed)
    new = [i for i, c in enumerate(fresh) if c.chunk_id not in old_ids]
    added = shard.add([fresh[i] for i in new], tokens.take(new))
    return len(doomed), len(added)
