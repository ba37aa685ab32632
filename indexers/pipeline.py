"""The indexing pipeline: store -> windows -> embeddings (cached) -> BM25 + HNSW shards.

* `update_lexical` re-chunks only each thread's tail (from its last window on) and adds the new
  windows to BM25 at once: a message is lexically searchable as soon as ingest returns.
* `embed_pending` embeds the windows that have no vector yet (cache first), in batches whose
  results are cached as they come, so an interrupted job loses at most one batch. While
  `paused` is set, embedding stops before its next batch and leaves the rest pending (a server
  stopping with a backlog: the next start takes the batches done from the cache), and a catch-up
  stops before its next piece of a thread (IndexingPausedError), the shard as it was.
* `index` = both + save; `reindex` rebuilds a user's shard from the store in memory, saves it as a
  new version and swaps it in; readers keep the old shard object until the swap.
* Every shard also holds its user's message metadata (`MessageTable`, never saved): loaded from
  the store in one query with the shard, then kept current by `_update_threads` and
  `forget_messages`, so a search builds its hits without SQL.
"""

from __future__ import annotations

import bisect
import logging
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from engine.collector import fewer_collections
from engine.store.core import Store
from indexers.phases import Phases, per_second
from indexers.thread_reads import tables_of_threads, turns_by_thread
from indexers.window_vectors import message_lines_to_embed, put_message_vectors, texts_to_embed, vectors_of
from indexers.bm25 import Bm25Index, Bm25Params
from indexers.chunking import Chunk, ChunkParams, WordPieceCounter, chunk_thread, lines_of
from indexers.heap import release_free_memory
from indexers.embedders import Embedder
from engine.store.embedding_cache import EmbeddingCache, content_hash
from indexers.hnsw import HnswParams
from indexers.lexical import LexicalTokenizer, TokenizerParams
from indexers.manifest import BuildSpec, Manifest
from indexers.parallel_chunks import ChunkWorkers
from indexers.rechunk import rechunk_tails
from indexers.model_files import MODEL_DIM
from indexers.shard import Shard, current_version_dir, shard_dir

__all__ = ["PipelineParams", "IndexReport", "IndexPipeline", "EmbeddingPaused"]

Progress = Callable[[int, int], None]  # (done, total)

log = logging.getLogger("convsearch.index")


@dataclass(frozen=True, slots=True)
class PipelineParams:
    chunk: ChunkParams = ChunkParams()
    tokenizer: TokenizerParams = TokenizerParams()
    bm25: Bm25Params = Bm25Params()
    hnsw: HnswParams = HnswParams()
    build_workers: int = 0  # processes that chunk a long thread beside the engine's (Settings.index_workers)


@dataclass(frozen=True, slots=True)
class IndexReport:
    user_id: str
    messages: int
    chunks_added: int
    chunks_removed: int
    embeddings_reused: int
    embeddings_computed: int
    seconds: float
    messages_per_s: float = 0.0
    windows_per_s: float = 0.0  # windows added (index) or built (reindex) per second of the whole run
    phases_s: Mapping[str, float] = field(default_factory=dict)  # chunk (+ BM25), vectors (cache, model, HNSW), save

    @classmethod
    def of(cls, user_id: str, messages: int, added: int, removed: int, reused: int, computed: int, phase: Phases,
           windows: int) -> "IndexReport":
        seconds = phase.elapsed()
        return cls(user_id, messages, added, removed, reused, computed, seconds, per_second(messages, seconds),
                   per_second(windows, seconds), phase.seconds())


class EmbeddingPaused(Exception):
    """Embedding stopped between batches because `paused` was set; `left` texts were not
    embedded. Caught where the embedding loops start: it never reaches a caller of the engine."""

    def __init__(self, left: int) -> None:
        super().__init__(f"embedding paused with {left} texts left")
        self.left = left


class IndexPipeline:
    def __init__(self, store: Store, root: Path, params: PipelineParams, embedder: Embedder | None) -> None:
        self.store = store
        self.root = Path(root)
        self.params = _sized_for(params, embedder)
        self.embedder = embedder
        self.tokenizer = LexicalTokenizer(params.tokenizer)
        self.counter = WordPieceCounter()
        self.cache = store.embedding_cache(embedder.name) if embedder else None
        self._shards: dict[str, Shard] = {}
        self._loading: dict[str, threading.Lock] = {}  # per user: readers never see a half-loaded
        self._loading_guard = threading.Lock()  # shard, and one user's load never holds up another's
        self.paused = threading.Event()

    @contextmanager
    def paused_while(self) -> Iterator[None]:
        """Inside: embedding stops before its next batch of texts and leaves the rest pending, and a
        catch-up before its next piece of a thread (IndexingPausedError)."""
        self.paused.set()
        try:
            yield
        finally:
            self.paused.clear()

    def spec(self) -> BuildSpec:
        return BuildSpec(
            model=self.embedder.name if self.embedder else None,
            dim=self.embedder.dim if self.embedder else MODEL_DIM,
            chunking=asdict(self.params.chunk), tokenizer=asdict(self.params.tokenizer), bm25=asdict(self.params.bm25),
        )

    # Shards ---------------------------------------------------------------------------------
    def shard(self, user_id: str) -> Shard:
        """The user's live shard: loaded (or created), checked, and caught up with the store once.

        After that, writers keep it current (the engine calls `refresh` after each ingest), so a
        search costs no store round-trip here.
        """
        shard = self._shards.get(user_id)
        return shard if shard is not None else self._loaded(user_id)[0]

    def _loaded(self, user_id: str) -> tuple[Shard, tuple[int, int, int], int]:
        """The user's shard, what catching it up chunked (messages, added, removed) and how many
        vectors it took from the cache. A shard is published only once caught up with the store and
        the cache, so a search meanwhile waits instead of finding it empty or without its vectors."""
        with self._load_lock(user_id):
            shard = self._shards.get(user_id)
            if shard is not None:
                return shard, (0, 0, 0), 0
            shard = self._load_or_create(user_id)
            counts = self._catch_up(shard)
            reused, _ = self._embed_shard(user_id, shard, None, only_cached=True)
            self._shards[user_id] = shard
            return shard, counts, reused

    def _load_lock(self, user_id: str) -> threading.Lock:
        with self._loading_guard:
            return self._loading.setdefault(user_id, threading.Lock())

    def unload(self, user_id: str) -> None:
        """Forget the loaded shard: its next use loads the live version (another process published it)."""
        with self._load_lock(user_id):  # a load in flight may have read the version before it
            self._shards.pop(user_id, None)

    def refresh(self, user_id: str) -> None:
        """Catch a loaded shard up with the store (an unloaded one catches up when it loads; one
        loading meanwhile may have read the store before this write, so it is waited for)."""
        with self._load_lock(user_id):
            loaded = user_id in self._shards
        if loaded:
            self.update_lexical(user_id)

    def _load_or_create(self, user_id: str) -> Shard:
        lexical_only = self.embedder is None
        loaded = Shard.load(self.root, user_id, self.tokenizer, ef=self.params.hnsw.ef, with_vectors=not lexical_only)
        if loaded is None:
            return self._fresh_shard(user_id)
        loaded.manifest.check_compatible(self.spec(), lexical_only=lexical_only)
        loaded.messages.put_arrow(self.store.message_metadata(user_id))
        self.store.release_buffers()  # what was read of the user's messages and windows is the shard's now
        release_free_memory()
        return loaded

    def _fresh_shard(self, user_id: str) -> Shard:
        """An empty shard; its message table starts full, so a search can show any stored message."""
        manifest = Manifest(user_id=user_id, spec=self.spec())
        hnsw_params = self.params.hnsw if self.embedder else None
        shard = Shard.empty(manifest, self.tokenizer, Bm25Index(self.params.bm25), hnsw_params)
        shard.messages.put_arrow(self.store.message_metadata(user_id))
        return shard

    def forget_user(self, user_id: str) -> None:
        """Drop the user's shard from memory and disk, and what the cache knew of its embeddings
        (their rows went with the user's: `Store.delete_user`)."""
        import shutil

        self.unload(user_id)  # after a load in flight, which publishes first
        shutil.rmtree(shard_dir(self.root, user_id), ignore_errors=True)
        if self.cache is not None:
            self.cache.deleted_with_user(user_id)

    # Incremental ----------------------------------------------------------------------------
    def update_lexical(self, user_id: str) -> tuple[int, int, int]:
        """Chunk every thread's new messages into the shard; (messages, added, removed)."""
        return self._catch_up(self.shard(user_id))

    def _catch_up(self, shard: Shard) -> tuple[int, int, int]:
        """Index what the store holds past each thread's watermark (threads behind read together)."""
        totals = [0, 0, 0]
        with shard.lock, fewer_collections():  # as a write's: most of what a catch-up makes lives on
            for counts in self._update_threads(shard, self.store.last_seqs(shard.manifest.user_id)):
                totals = [a + b for a, b in zip(totals, counts)]
        return totals[0], totals[1], totals[2]

    def _update_threads(self, shard: Shard, last_seqs: Mapping[str, int]) -> Iterator[tuple[int, int, int]]:
        """For the threads past their watermarks, a read's worth at a time: their messages from
        their tails on put into the shard and re-chunked; (messages, windows added, removed). While
        `paused` is set, IndexingPausedError leaves what is not chunked yet (a stopping server)."""
        behind = {thread_id: (shard.manifest.tails.get(thread_id, 0), last_seq) for thread_id, last_seq in last_seqs.items()
                  if last_seq > shard.manifest.watermarks.get(thread_id, 0)}
        with ChunkWorkers(self.params.build_workers) as workers:
            workers.start_for(last_seq - tail for tail, last_seq in behind.values())  # they start during the read
            for threads, table in tables_of_threads(self.store, behind):
                messages = sum(behind[t][1] - shard.manifest.watermarks.get(t, 0) for t in threads)
                shard.messages.put_arrow(table)
                read = turns_by_thread(threads, table)
                del table  # its texts are the turns' now: a long thread's would be held twice
                added, removed = rechunk_tails(shard, {t: (found, behind[t][1]) for t, found in read.items()},
                                               self.params.chunk, self.counter, workers, self.paused.is_set)
                yield messages, added, removed

    def embed_pending(self, user_id: str, *, progress: Progress | None = None, from_label: int = 0,
                      limit: int | None = None) -> tuple[int, int]:
        """Give the live shard's windows without a vector their vector; (reused, computed). Only
        labels from `from_label` on (a live ingest's own windows: `next_label` before it), and at
        most `limit` windows (a background step's slice)."""
        return self._embed_shard(user_id, self.shard(user_id), progress, from_label=from_label, limit=limit)

    def next_label(self, user_id: str) -> int:
        """The label the user's next window gets: windows added later have this one or higher."""
        return self.shard(user_id).manifest.next_label

    def _embed_shard(self, user_id: str, shard: Shard, progress: Progress | None, block: int = 4096, *,
                     only_cached: bool = False, from_label: int = 0, limit: int | None = None) -> tuple[int, int]:
        """Vectors for the shard's windows without one, a block at a time: one cache lookup per
        block (it scans the cache table), embedding in batches within it. `only_cached` takes the
        windows the cache has and embeds none: how a shard loaded after a crash gets back the
        vectors of messages embedded since its last save (the cache is their durable record)."""
        if self.embedder is None or self.cache is None:
            return 0, 0
        with shard.lock:
            labels = shard.without_vectors()  # sorted
            labels = labels[bisect.bisect_left(labels, from_label):][:limit]
            if only_cached and labels:
                known = self.cache.get(user_id, [shard.chunks[x].content_hash for x in labels])
                labels = [x for x in labels if shard.chunks[x].content_hash in known]
        reused = computed = 0
        for start in range(0, len(labels), block):
            part = np.asarray(labels[start:start + block], dtype=np.int64)
            with shard.lock:
                part = part[[int(x) in shard.chunks for x in part]]  # a concurrent update may have replaced some
                chunks = [shard.chunks[int(x)] for x in part]
            try:
                hits, texts = self._embed_block(user_id, shard, part, chunks)
            except EmbeddingPaused as paused:
                log.info("embedding.paused user=%s windows_left=%d texts_left=%d", user_id, len(labels) - start, paused.left)
                break
            reused, computed = reused + hits, computed + texts - hits
            if progress:
                progress(min(start + block, len(labels)), len(labels))
        return reused, computed

    def _embed_block(self, user_id: str, shard: Shard, part: np.ndarray, chunks: Sequence[Chunk]) -> tuple[int, int]:
        """The windows' vectors, and each of their messages' own (a one-message window lends its
        own, the others' lines are embedded): one cache read, one model call per batch and one cache
        write for both, which on the live path is a statement and a model call less a message.
        Returns (vectors found in the cache, vectors asked for)."""
        own, lines = message_lines_to_embed(chunks, shard.message_vectors.has)
        ids, hashes, texts = texts_to_embed(chunks, lines)
        vectors, hits = self.cached_vectors(user_id, hashes, texts)
        window_vectors, line_vectors = vectors[:len(chunks)], vectors[len(chunks):]
        with shard.lock:
            live = np.array([int(x) in shard.chunks for x in part], dtype=bool)
            shard.set_vectors(part[live], window_vectors[live])
            put_message_vectors(shard, own, window_vectors, ids, line_vectors)
        return hits, len(vectors)

    def cached_vectors(self, user_id: str, hashes: Sequence[str], texts: Sequence[str], batch: int = 256,
                       cache: EmbeddingCache | None = None) -> tuple[np.ndarray, int]:
        """Vectors of texts keyed by content hash, from the cache (default: the windows') where it
        has them; (vectors, hits). What is missing is embedded and cached `batch` texts at a time:
        a crash loses one batch, and `paused` raises EmbeddingPaused between batches."""
        cache = cache or self.cache
        if self.embedder is None or cache is None:
            raise ValueError("no embedder is configured")
        if not hashes:
            return np.zeros((0, self.embedder.dim), dtype=np.float32), 0
        known = cache.get(user_id, hashes)
        hits = sum(1 for h in hashes if h in known)
        missing = sorted({h: t for h, t in zip(hashes, texts) if h not in known}.items())
        for start in range(0, len(missing), batch):
            if self.paused.is_set():
                raise EmbeddingPaused(len(missing) - start)
            part = missing[start:start + batch]
            vectors = self.embedder.embed([text for _, text in part])
            cache.put(user_id, [h for h, _ in part], vectors)
            known.update(zip((h for h, _ in part), vectors))
        return np.stack([known[h] for h in hashes]).astype(np.float32), hits

    def live_hashes(self, user_id: str) -> set[str]:
        """The content hashes the user's shard still uses: its windows' and its message lines'."""
        shard = self.shard(user_id)
        live: set[str] = set()
        with shard.lock:
            for part in shard.chunks.columns(("content_hash", "text", "line_ends")):
                live.update(part["content_hash"])
                live.update(content_hash(line) for text, ends in zip(part["text"], part["line_ends"]) if len(ends) > 1
                            for line in lines_of(text, ends))
        return live

    def index(self, user_id: str, *, progress: Progress | None = None) -> IndexReport:
        """Incremental: chunk new messages, embed what is new, save the shard."""
        phase = Phases()
        with phase("chunk"):
            shard, loaded, from_cache = self._loaded(user_id)
            messages, added, removed = (a + b for a, b in zip(loaded, self.update_lexical(user_id)))
        with phase("vectors"):
            reused, computed = self.embed_pending(user_id, progress=progress)
            reused += from_cache
        with phase("save"):
            shard.save(self.root)
        return IndexReport.of(user_id, messages, added, removed, reused, computed, phase, added)

    def reindex(self, user_id: str, *, progress: Progress | None = None) -> IndexReport:
        """Rebuild from the store into a new version and swap it in (warm cache: nothing re-embedded)."""
        phase = Phases()
        with phase("chunk"):
            shard = self._fresh_shard(user_id)
            messages = sum(counts[0] for counts in self._update_threads(shard, self.store.last_seqs(user_id)))
        with phase("vectors"):
            if self.embedder is not None and shard.adopt_saved_vectors(self.root, self.params.hnsw):
                reused, computed = vectors_of(shard.chunks.values()), 0
            else:
                reused, computed = self._embed_shard(user_id, shard, progress)
        with phase("save"):
            shard.save(self.root)
        with self._load_lock(user_id):  # the swap, after any load in flight: readers had the old shard until now
            self._shards[user_id] = shard
        with phase("catch_up"):
            self.update_lexical(user_id)  # messages that arrived during the rebuild
        return IndexReport.of(user_id, messages, len(shard.chunks), 0, reused, computed, phase, len(shard.chunks))

    def forget_messages(self, user_id: str, thread_id: str, seqs: set[int]) -> int:
        """After messages left the store: drop every window that held them, forget their cached
        embeddings, re-chunk the survivors of that stretch, embed those windows and save. Returns
        windows dropped."""
        shard = self.shard(user_id)
        with shard.lock:
            shard.messages.forget(thread_id, seqs)
            doomed = shard.labels_touching(thread_id, seqs)
            if not doomed:
                return 0
            lo = min(shard.chunks[label].from_seq for label in doomed)
            hi = max(shard.chunks[label].to_seq for label in doomed)
            hashes = [shard.chunks[label].content_hash for label in doomed]
            shard.message_vectors.forget(m for label in doomed for m, q in
                                         zip(shard.chunks[label].message_ids, shard.chunks[label].message_seqs) if q in seqs)
            shard.remove(doomed)
            if self.cache is not None:
                self.cache.forget(user_id, hashes)
            survivors = chunk_thread(self.store.messages_in_range(thread_id, lo, hi + 1), self.params.chunk, self.counter)
            live_ids = {c.chunk_id for c in shard.chunks.values() if c.thread_id == thread_id}
            rebuilt = shard.manifest.next_label
            shard.add([c for c in survivors if c.chunk_id not in live_ids])
            tail = max((c.from_seq for c in shard.chunks.values() if c.thread_id == thread_id), default=0)
            shard.manifest = shard.manifest.advanced({thread_id: (shard.manifest.watermarks.get(thread_id, 0), tail)},
                                                     chunks=len(shard.chunks), next_label=shard.manifest.next_label)
        self.embed_pending(user_id, from_label=rebuilt)  # those windows only: a backlog is the background step's
        shard.save(self.root)
        return len(doomed)

    def loaded_users(self) -> set[str]:
        return set(self._shards)

    def loaded(self, user_id: str) -> Shard | None:
        """The user's live shard if loaded (no load)."""
        return self._shards.get(user_id)

    def needs_index(self, user_id: str) -> bool:
        """The loaded shard changed since its last save or has windows without vectors; or the
        saved one (not loaded) lacks turns the store holds. Notes alone add no window: the scheduled
        close writes one for each user it closes, and a restart's first step loaded every such user."""
        shard = self._shards.get(user_id)
        if shard is not None:
            with shard.lock:
                return shard.dirty or (self.embedder is not None and bool(shard.without_vectors()))
        version = current_version_dir(self.root, user_id)
        saved = Manifest.load(version / "manifest.json").watermarks if version and version.is_dir() else {}
        return any(last > saved.get(thread_id, 0) for thread_id, last in self.store.last_turn_seqs(user_id).items())

    def rewrite_messages(self, user_id: str, thread_id: str, seqs: set[int]) -> int:
        """After messages' text changed in the store (same seqs): their windows are re-chunked and
        re-embedded, and the message table shows the new text. Returns windows replaced."""
        dropped = self.forget_messages(user_id, thread_id, seqs)
        shard = self.shard(user_id)
        with shard.lock:
            shard.messages.put(self.store.messages_in_range(thread_id, min(seqs), max(seqs) + 1))
        return dropped

    def pending_vector_messages(self, user_id: str) -> int:
        """Messages lexically searchable but not yet in the vector index."""
        shard = self.shard(user_id)
        return 0 if self.embedder is None else shard.pending_messages()


def _sized_for(params: PipelineParams, embedder: Embedder | None) -> PipelineParams:
    """The vector index as wide as the model's vectors: a larger model needs no HNSW setting of its own."""
    if embedder is None or params.hnsw.dim == embedder.dim:
        return params
    return replace(params, hnsw=replace(params.hnsw, dim=embedder.dim))
