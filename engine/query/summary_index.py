"""Summaries as search candidates: a small per-user BM25 and vector set, rebuilt when they change.

A user has few summaries (one a day or conversation), so exact scoring of all of them is cheaper
than keeping an ANN graph; the vectors come from the same cache as the windows'. The write paths
embed new summaries (`embed_pending`); a search only reads the cache, so it never embeds or writes,
and a summary without a vector yet is scored lexically, as a window without one is.
"""

from __future__ import annotations

import bisect
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence, TypeVar

import numpy as np

from engine.models import Summary
from engine.query.packed_texts import PackedTexts
from engine.query.summary_records import SummaryRecords
from engine.query.summary_snapshot import SNAPSHOT_MIN, Reuse, SummarySnapshots, restored_bm25, restored_markdown
from engine.query.summary_spans import CoverPairs, Spans
from indexers.bm25 import Bm25Index
from indexers.bm25_query import reaching_kth
from indexers.heap import release_free_memory
from engine.store.embedding_cache import content_hash
from engine.store.timeline import summary_order
from indexers.pipeline import EmbeddingPaused, IndexPipeline
from indexers.distinct import distinct

__all__ = ["SummaryIndex", "SummaryMatches", "SummarySlice", "packed_markdown",
           "summary_text", "summary_key"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SummaryMatches:
    """Summaries as scored, without their Markdown (`markdown=""`): their texts are in `markdown`,
    packed (`packed_markdown`), and `full` gives a summary back whole, for the few a search shows."""

    summaries: SummaryRecords
    lexical_raw: np.ndarray
    matched: np.ndarray  # shares a term with the query
    vectors: np.ndarray | None  # of these summaries (NaN rows: no vector yet); None: not asked for, or none
    spans: "Spans"  # of these summaries, as arrays
    markdown: PackedTexts  # of these summaries

    def full(self, row: int) -> Summary:
        """The summary of this row with its Markdown."""
        return replace(self.summaries[row], markdown=self.markdown.text(row))

    def cosine(self, query_vector: np.ndarray | None) -> np.ndarray | None:
        """Each summary's cosine with the query (NaN: no vector yet); None without both vectors."""
        return None if query_vector is None or self.vectors is None else self.vectors @ query_vector

    def take(self, rows: np.ndarray) -> "SummaryMatches":
        """These rows only (ascending)."""
        return _rows_of(self, rows, self.lexical_raw[rows], self.matched[rows])

    def candidates(self, thread_ids: Sequence[str], seqs: Sequence[int], depth: int
                   ) -> tuple["SummaryMatches", "CoverPairs"]:
        """The summaries a search scores, as windows are scored: the `depth` best by BM25 (with any tied
        with the last) and every one covering a candidate message (whose context it gives), with which
        of them covers which message.
        A summary close to the query in meaning covers messages the vector side found; the others are
        not read, so the cosines cost what the candidates do, not what the user's summaries do (a
        1M-message user has ~59,000: 8 ms a search). A user with no more summaries than a list holds
        has them all scored."""
        at, over = self.spans.covering_pairs(thread_ids, seqs)
        if len(self.summaries) > depth:
            lexical = np.flatnonzero(self.matched)
            if len(lexical) > depth:
                lexical = lexical[reaching_kth(self.lexical_raw[lexical], depth)]
            rows = distinct(np.concatenate((lexical, over)))
            if len(rows) < len(self.summaries):  # the rows kept, renumbered
                return self.take(rows), CoverPairs(len(seqs), at, np.searchsorted(rows, over))
        return self, CoverPairs(len(seqs), at, over)


def _rows_of(every: SummaryMatches, rows: np.ndarray, lexical_raw: np.ndarray, matched: np.ndarray) -> SummaryMatches:
    """The matches of these rows (ascending) of `every`, given their scores."""
    return SummaryMatches(every.summaries.take(rows), lexical_raw, matched,
                          every.vectors[rows] if every.vectors is not None else None, every.spans.take(rows),
                          every.markdown.take(rows))


def packed_markdown(summaries: Sequence[Summary], reuse: Reuse | None = None) -> tuple[SummaryRecords, PackedTexts]:
    """The summaries without their Markdown, as columns, and their Markdown packed (a snapshot's bytes
    where `reuse` has them): a search reads only the text of the summaries it shows
    (engine.query.packed_texts and summary_records say what they save)."""
    return SummaryRecords.of(summaries), restored_markdown(reuse, summaries)


@dataclass(frozen=True, slots=True)
class _Entry:
    revision: int  # of the user's summaries, as read
    summaries: SummaryRecords  # in summary_order, without their Markdown
    markdown: PackedTexts  # each one's (`packed_markdown`)
    keys: tuple[str, ...]  # each one's summary_key
    labels: np.ndarray  # each one's document in `bm25`: kept across updates, never reused
    next_label: int
    bm25: Bm25Index  # shared by the user's successive entries: changed and read under `lock`
    lock: threading.Lock
    vectors: np.ndarray | None  # NaN rows: not embedded yet
    spans: Spans


class SummaryIndex:
    """Per user, kept to the store's revision of the user's summaries: one user's write leaves
    every other user's index as it is, and a write re-reads only the summaries it touched."""

    def __init__(self, pipeline: IndexPipeline, saved_in: Path | None = None) -> None:
        """`saved_in`: where each large user's BM25 and packed Markdown are saved for the next start
        (None: never saved)."""
        self.pipeline = pipeline
        self.snapshots = (SummarySnapshots(saved_in, pipeline.tokenizer, pipeline.params.bm25)
                          if saved_in is not None else None)
        self.cache = pipeline.store.summary_embedding_cache(pipeline.embedder.name) if pipeline.embedder else None
        self._entries: dict[str, _Entry] = {}
        self._embedded: dict[str, int] = {}  # user -> the summary revision whose summaries all have vectors
        self._lock = threading.Lock()  # guards `_user_locks`
        # one lock per user for building, updating and replacing that user's entry: a build takes seconds
        # for a large user (57,613 summaries at 1M: ~10 s), and must not hold back other users' searches
        self._user_locks: dict[str, threading.Lock] = {}

    def embeds_pending(self, user_id: str) -> bool:
        """Whether this process wrote summaries of the user since `embed_pending` last ran for them
        (what the background step asks, without reading the store)."""
        return self.cache is not None and self._embedded.get(user_id, 0) != self._revision(user_id)

    def embed_pending(self, user_id: str, *, limit: int | None = None) -> int:
        """Embed the user's summaries that have no vector yet (the write paths call this, never a
        search), at most `limit` a call; returns how many texts were embedded. Paused (a stopping server),
        none: still pending, and the user's index is not built only to embed nothing."""
        if self.pipeline.paused.is_set():
            return 0
        planned = self.plan_slice(user_id, limit)
        if planned is None or not self._embed_keyed(user_id, planned.keys, planned.texts):
            return 0  # none left, or paused: still pending, the next call embeds the rest
        if limit is None or len(planned.keys) < limit:  # none left
            self._embedded[user_id] = planned.revision
        return len(planned.keys)

    def plan_slice(self, user_id: str, limit: int | None) -> "SummarySlice | None":
        """Under the user's lock: up to `limit` of the user's summaries the cache lacks (None: none
        left, and the user is marked done). Read from the user's entry, which a write updates with
        the summaries it touched: a backlog's slices no longer read all the user's summaries each
        (at 5,911 summaries 154 ms a slice then, 15 now, after a first of 2.2 s that builds the entry)."""
        revision, done = self._revision(user_id), self._embedded.get(user_id)
        if self.cache is None or done == revision:
            return None
        entry = self._entry(user_id, with_vectors=True)  # the slices fill its vectors in: no rebuild for a search
        missing = self.cache.missing(user_id, entry.keys)[:limit]
        if not missing:
            self._embedded[user_id] = entry.revision
            return None
        row_of = {key: row for row, key in enumerate(entry.keys)}
        texts = [_text(entry.summaries.titles[row_of[key]], entry.markdown.text(row_of[key])) for key in missing]
        return SummarySlice(user_id, entry.revision, tuple(missing), tuple(texts))

    def keep_slice(self, planned: "SummarySlice", made: Mapping[str, np.ndarray]) -> int:
        """Under the user's lock again, after the model ran without it: cache and give the entry the
        vectors of the planned summaries that are still the user's (a summary rewritten or deleted
        meanwhile leaves no vector of its old text); returns how many."""
        assert self.cache is not None
        live = set(self._entry(planned.user_id, with_vectors=False).keys)
        kept = [key for key in planned.keys if key in live and key in made]
        if kept:
            self.cache.put(planned.user_id, kept, np.stack([made[key] for key in kept]).astype(np.float32))
            self._fill_vectors(planned.user_id, {key: made[key] for key in kept})
        return len(kept)

    def embed_written(self, user_id: str, summaries: Sequence[Summary]) -> int:
        """Embed these summaries (a live ingest's own) and leave any other pending ones to
        `embed_pending` (the background step): an import's hundreds are not a live call's to wait for.
        The user's entry, once a search built it, takes them here: the next search no longer pays
        for the update (at 5,911 summaries it took 39.8 ms of CPU against 9.1 for the one after).
        Returns how many texts were embedded (0 when paused)."""
        entry = self._entries.get(user_id)
        if summaries and entry is not None:
            self._entry(user_id, with_vectors=entry.vectors is not None)
        texts = {summary_key(s): summary_text(s) for s in summaries}
        if self.cache is None or not texts:
            return 0
        missing = self.cache.missing(user_id, list(texts))
        return len(missing) if self._embed_keyed(user_id, missing, [texts[h] for h in missing]) else 0

    def _embed_keyed(self, user_id: str, keys: Sequence[str], texts: Sequence[str]) -> bool:
        """Embed these texts the cache lacks (cached a batch at a time as they come) and give the
        entry their vectors; False when embedding paused before all were embedded."""
        if not keys:
            return True
        try:
            vectors, _ = self.pipeline.cached_vectors(user_id, keys, texts, cache=self.cache)
        except EmbeddingPaused:
            return False
        self._fill_vectors(user_id, dict(zip(keys, vectors)))
        return True

    def match(self, user_id: str, query_tokens: list[str], intervals: dict[str, tuple[int, int]] | None, *,
              with_vectors: bool) -> SummaryMatches:
        """Every summary of the user the filters allow, with its raw BM25 (and its vector, for the
        query's cosine once the query's vector is known: `SummaryMatches.cosine`)."""
        entry = self._entry(user_id, with_vectors=with_vectors)
        rows = entry.spans.overlapping(intervals) if intervals is not None else None
        with entry.lock:
            raw, matched = entry.bm25.match(query_tokens).scored(entry.labels if rows is None else entry.labels[rows])
        every = SummaryMatches(entry.summaries, raw, matched, entry.vectors if with_vectors else None, entry.spans,
                               entry.markdown)  # no copy of the matrix
        return every if rows is None else _rows_of(every, rows, raw, matched)

    def built_beside(self, user_id: str, load: Callable[[], T], *, with_vectors: bool) -> T:
        """`load()` while the user's entry is built in another thread: a cold start's first search
        loads the user's index and reads the user's summaries, and much of both waits on files, the
        store or faiss, not on the interpreter (a first search at 1M: 5.8-8.1 s one after the other,
        5.1-6.3 side by side; docs/benchmarks.md round 36). A failed build raises here, as `match` would."""
        with ThreadPoolExecutor(1, thread_name_prefix="summary-index") as beside:
            building = beside.submit(self._entry, user_id, with_vectors=with_vectors)
            loaded = load()
            building.result()
        return loaded

    def spans(self, user_id: str) -> Spans:
        """Where all the user's summaries lie: which messages they cover, for the search penalty."""
        return self._entry(user_id, with_vectors=False).spans

    def forget(self, user_id: str) -> None:
        """Drop the user's index and its snapshot (after a deletion, the deleted text is in neither)."""
        with self._user_lock(user_id):
            self._entries.pop(user_id, None)
            if self.snapshots is not None:
                self.snapshots.forget(user_id)

    def _user_lock(self, user_id: str) -> threading.Lock:
        with self._lock:
            return self._user_locks.setdefault(user_id, threading.Lock())

    def _revision(self, user_id: str) -> int:
        return self.pipeline.store.timeline.revision(user_id)

    def _entry(self, user_id: str, *, with_vectors: bool) -> _Entry:
        revision = self._revision(user_id)  # read before the store: a write meanwhile is caught next time
        with self._user_lock(user_id):
            entry = self._entries.get(user_id)
            lexical_only = entry is not None and entry.vectors is None and bool(entry.summaries)
            if with_vectors and lexical_only and self.cache is not None:
                entry = None  # built for lexical use only: read again with the vectors (when there can be any)
            if entry is not None and entry.revision == revision:
                return entry
            changed = None if entry is None else self.pipeline.store.timeline.changes.since(user_id, entry.revision)
            entry = (self._build(user_id, revision, with_vectors) if entry is None or changed is None
                     else self._updated(user_id, entry, revision, changed))
            self._entries[user_id] = entry
            return entry

    def _build(self, user_id: str, revision: int, with_vectors: bool) -> _Entry:
        # in Python's order of the same key (the store's is the same): updates merge into it
        summaries = tuple(sorted(self.pipeline.store.timeline.summaries_of_user(user_id), key=summary_order))
        self.pipeline.store.release_buffers()  # the blocks that read cached: gone before the tokens are made
        keys = tuple(summary_key(s) for s in summaries)
        snapshots = self.snapshots if len(summaries) >= SNAPSHOT_MIN else None
        saved = snapshots.load(user_id) if snapshots is not None else None
        reuse = saved.reuse(keys) if saved is not None else None
        with ThreadPoolExecutor(1) as packer:  # zlib lets go of the GIL: the texts pack while the tokens are made
            packing = packer.submit(packed_markdown, summaries, reuse)
            bm25, labels, next_label = restored_bm25(reuse, summaries, self.pipeline.params.bm25, self._tokens)
            vectors = self._cached_vectors(user_id, keys) if with_vectors else None
            bare, markdown = packing.result()
        if snapshots is not None and (reuse is None or not reuse.exact):  # the next start reads this build
            snapshots.save(user_id, keys, labels, markdown, bm25)
        del summaries  # the Markdown strings: what was read of the user's summaries is ours now
        self.pipeline.store.release_buffers()  # and the vectors' read
        release_free_memory()
        return _Entry(revision, bare, markdown, keys, labels, next_label, bm25, threading.Lock(), vectors,
                      Spans.of(bare, ordered=True))

    def _updated(self, user_id: str, entry: _Entry, revision: int, changed: frozenset[str]) -> _Entry:
        """The entry with the `changed` summaries (written, rewritten or deleted) read again: the
        rest keep their documents, tokens and vectors (the same scores as a rebuild: BM25 of the
        same documents, the same vectors)."""
        fresh = tuple(self.pipeline.store.timeline.summaries_of_user(user_id, changed))
        keep = [i for i, summary_id in enumerate(entry.summaries.ids) if summary_id not in changed]
        gone = [int(label) for summary_id, label in zip(entry.summaries.ids, entry.labels) if summary_id in changed]
        added = np.arange(entry.next_label, entry.next_label + len(fresh), dtype=np.int64)
        tokens = self._tokens(fresh)
        with entry.lock:
            entry.bm25.remove(gone)
            entry.bm25.add(added.tolist(), tokens)
        kept = entry.summaries.take(keep)  # still in order: the fresh ones go between them
        at = [bisect.bisect_right(kept, summary_order(s), key=summary_order) for s in fresh]
        order = np.insert(np.arange(len(kept)), at, np.arange(len(kept), len(kept) + len(fresh))).tolist()
        keys = [entry.keys[i] for i in keep] + [summary_key(s) for s in fresh]
        bare, packed = packed_markdown(fresh)
        summaries, markdown = kept.joined(bare).take(order), entry.markdown.take(keep).joined(packed).take(order)
        vectors: np.ndarray | None = None
        fresh_vectors = self._cached_vectors(user_id, keys[len(keep):]) if entry.vectors is not None else None
        if entry.vectors is not None and fresh_vectors is not None:
            vectors = np.concatenate((entry.vectors[keep], fresh_vectors))[order]
        return _Entry(revision, summaries, markdown, tuple(keys[i] for i in order),
                      np.concatenate((entry.labels[keep], added))[order],
                      entry.next_label + len(fresh), entry.bm25, entry.lock, vectors, Spans.of(summaries, ordered=True))

    def _tokens(self, summaries: Sequence[Summary]) -> list[list[str]]:
        return [self.pipeline.tokenizer.tokenize(summary_text(s)) for s in summaries]

    def _fill_vectors(self, user_id: str, found: dict[str, np.ndarray]) -> None:
        """Give the user's entry the vectors just embedded, in a new matrix (a search may be
        reading the old one), instead of building the entry again."""
        with self._user_lock(user_id):
            entry = self._entries.get(user_id)
            if entry is None or entry.vectors is None:
                return
            rows = [i for i, key in enumerate(entry.keys) if key in found]
            if rows:
                vectors = entry.vectors.copy()
                vectors[rows] = np.stack([found[entry.keys[i]] for i in rows])
                self._entries[user_id] = replace(entry, vectors=vectors)

    def _cached_vectors(self, user_id: str, keys: Sequence[str]) -> np.ndarray | None:
        """The vectors of these summary keys as the cache holds them, NaN rows for those it does
        not (read only); None without an embedder."""
        embedder, cache = self.pipeline.embedder, self.cache
        if embedder is None or cache is None:
            return None
        found = cache.get(user_id, keys) if keys else {}
        vectors = np.full((len(keys), embedder.dim), np.nan, dtype=np.float32)
        for row, key in enumerate(keys):
            if key in found:
                vectors[row] = found[key]
        return vectors


@dataclass(frozen=True, slots=True)
class SummarySlice:
    """Summaries whose vectors a background step makes outside the user's lock."""

    user_id: str
    revision: int  # of the user's summaries when planned
    keys: tuple[str, ...]
    texts: tuple[str, ...]

    def missing(self) -> list[tuple[str, str]]:
        """(key, text) of each: what `indexers.vector_slices.embed_slice` embeds."""
        return list(zip(self.keys, self.texts))


def summary_text(summary: Summary) -> str:
    """What a summary is indexed and embedded as."""
    return _text(summary.title, summary.markdown)


def _text(title: str | None, markdown: str) -> str:
    return f"{title}\n{markdown}" if title else markdown


def summary_key(summary: Summary) -> str:
    """The embedding cache's key of a summary's vector."""
    return content_hash(summary_text(summary))
