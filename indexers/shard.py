"""One user's index shard: chunk table, BM25 and HNSW, saved as versioned directories.

Layout (per user, so a query can only touch its own user's data and shards can move):

    <root>/<user-slug>/CURRENT           name of the live version, replaced atomically
    <root>/<user-slug>/v000042/          manifest.json, chunks.arrow, bm25/, hnsw/, message_vectors/

A save writes a complete new version and then flips CURRENT with one rename: a crash at any
moment leaves the old version or the new one live, never a mix. Old versions are removed after.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from engine.errors import IndexStateError
from indexers.bm25 import Bm25Index
from indexers.checksums import write_checksums
from indexers.chunk_map import CHUNK_FILE, ChunkMap, read_chunk_columns, read_old_chunks, write_chunks
from indexers.chunking import Chunk
from indexers.encoded_tokens import EncodedTokens
from indexers.hnsw import HnswIndex, HnswParams
from indexers.lexical import LexicalTokenizer
from indexers.manifest import Manifest
from indexers.message_table import MessageTable
from indexers.neighbours import WindowsBySeq
from indexers.heap import release_free_memory
from indexers.label_set import LabelSet, among
from indexers.message_vectors import MessageVectors
from indexers.distinct import distinct

__all__ = ["Shard", "shard_dir", "current_version_dir", "flip_pointer"]

def shard_dir(root: Path, user_id: str) -> Path:
    """A filesystem-safe, collision-free directory name for any user id."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", user_id)[:48]
    return Path(root) / f"{slug}-{hashlib.sha1(user_id.encode()).hexdigest()[:10]}"


def current_version_dir(root: Path, user_id: str) -> Path | None:
    pointer = shard_dir(root, user_id) / "CURRENT"
    if not pointer.exists():
        return None
    return pointer.parent / pointer.read_text(encoding="utf-8").strip()


class Shard:
    """In-memory indexes of one user; `lock` serialises writers against readers."""

    def __init__(self, manifest: Manifest, tokenizer: LexicalTokenizer, bm25: Bm25Index,
                 hnsw: HnswIndex | None, chunks: dict[int, Chunk] | ChunkMap, has_vector: LabelSet | Iterable[int],
                 message_vectors: MessageVectors | None = None, messages: MessageTable | None = None) -> None:
        self.manifest = manifest
        self.tokenizer = tokenizer
        self.bm25 = bm25
        self.hnsw = hnsw
        self.chunks = chunks if isinstance(chunks, ChunkMap) else ChunkMap(chunks)
        self.has_vector = has_vector if isinstance(has_vector, LabelSet) else LabelSet(has_vector)
        self.message_vectors = message_vectors or MessageVectors(manifest.spec.dim)
        # what search hits show of each message; the pipeline fills it from the store, it is never saved
        self.messages = messages if messages is not None else MessageTable()
        self.lock = threading.RLock()
        self._arrays: tuple[np.ndarray, ...] | None = None
        # the windows by seq (Shard.neighbours): the saved ones' index lasts as long as `chunks`, the
        # fresh ones' until a change
        self._saved_by_seq: WindowsBySeq | None = None
        self._fresh_by_seq: WindowsBySeq | None = None
        self._pending: int | None = None
        # windows without a vector, kept as they change: a live ingest asks after every message, and
        # comparing every label with has_vector took 7-10 ms at 100k messages (None: not known yet)
        self._unvectored: set[int] | None = None
        self._line_tokens: dict[int, dict[int, frozenset[str]]] = {}  # label -> line -> its tokens
        self.changes = self.saved_changes = 0  # a counter of changes, and its value at the last save

    @property
    def dirty(self) -> bool:
        """Changed since it was loaded or last saved."""
        return self.changes != self.saved_changes

    # Changes --------------------------------------------------------------------------------
    def add(self, chunks: Sequence[Chunk], tokens: EncodedTokens | None = None) -> np.ndarray:
        """Add chunks lexically (searchable at once), with their BM25 tokens where made already
        (indexers/pipeline.py; None: tokenized here); vectors come with `set_vectors`."""
        start = self.manifest.next_label
        labels = np.arange(start, start + len(chunks), dtype=np.int64)
        self.bm25.add(labels.tolist(), tokens if tokens is not None else [self.tokenizer.tokenize(c.text) for c in chunks])
        self.chunks.put_many(labels.tolist(), chunks)
        if self._unvectored is not None:
            self._unvectored.update(labels.tolist())
        self._forget_windows()
        self._pending = None
        self.changes += 1
        self.manifest = _with(self.manifest, next_label=start + len(chunks), chunks=len(self.chunks))
        return labels

    def set_vectors(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        if self.hnsw is None or not len(labels):
            return
        self.hnsw.add(np.asarray(labels, dtype=np.int64), vectors)
        self.has_vector.update(np.asarray(labels, dtype=np.int64))
        if self._unvectored is not None:
            self._unvectored.difference_update(int(x) for x in labels)
        self._pending = None
        self.changes += 1

    def remove(self, labels: Iterable[int]) -> None:
        doomed = [int(x) for x in labels if int(x) in self.chunks]
        if not doomed:
            return
        self.bm25.remove(doomed)
        if self.hnsw is not None:
            self.hnsw.remove([x for x in doomed if x in self.has_vector])
        for label in doomed:
            del self.chunks[label]
            self.has_vector.discard(label)
            if self._unvectored is not None:
                self._unvectored.discard(label)
            self._line_tokens.pop(label, None)
        self._forget_windows()
        self._pending = None
        self.changes += 1
        self.manifest = _with(self.manifest, chunks=len(self.chunks))

    def adopt_saved_vectors(self, root: Path, params: HnswParams) -> bool:
        """Take the saved version's graph and message vectors when it holds exactly these windows,
        each with its vector, from the same model and graph settings; windows take their saved
        labels. Why: a warm reindex (a tokenizer change) then inserts no vector into a new graph,
        which at 100k messages was most of its time. False when it cannot: nothing changed."""
        version = current_version_dir(root, self.manifest.user_id)
        if self.hnsw is None or version is None:
            return False
        try:
            saved = Manifest.load(version / "manifest.json")
            table = read_chunk_columns(version, ["label", "chunk_id", "has_vector"])
            label_of = dict(zip(table.column("chunk_id").to_pylist(), table.column("label").to_pylist()))
            if ((saved.spec.model, saved.spec.dim) != (self.manifest.spec.model, self.manifest.spec.dim)
                    or not all(table.column("has_vector").to_pylist()) or len(label_of) != len(self.chunks)
                    or any(c.chunk_id not in label_of for c in self.chunks.values())):
                return False
            hnsw = HnswIndex.load(version / "hnsw", ef=params.ef, dim=saved.spec.dim)
            vectors = MessageVectors.load(version / "message_vectors", saved.spec.dim)
        except (IndexStateError, OSError, pa.ArrowException):
            return False
        if ((hnsw.params.m, hnsw.params.ef_construction) != (params.m, params.ef_construction)
                or not np.array_equal(hnsw.labels(), np.sort(np.fromiter(label_of.values(), np.int64)))
                or not vectors.has([m for c in self.chunks.values() for m in c.message_ids]).all()):
            return False
        mapping = {label: label_of[c.chunk_id] for label, c in self.chunks.items()}
        self.bm25.relabel(mapping)
        self._use_chunks(ChunkMap({mapping[label]: c for label, c in self.chunks.items()}))
        if hnsw.dead > len(hnsw):  # mostly dead slots (replaced tail windows): rebuild from the live ones
            hnsw = hnsw.compacted()
        self.has_vector, self.hnsw, self.message_vectors = LabelSet(self.chunks), hnsw, vectors
        self._pending, self._unvectored = None, set()
        self._line_tokens.clear()
        self.manifest = _with(self.manifest, next_label=max(self.manifest.next_label, saved.next_label))
        return True

    # Reads ----------------------------------------------------------------------------------
    def labels_from(self, tails: Mapping[str, int]) -> dict[str, list[int]]:
        """The windows of each thread that start at or after its seq in `tails`: one pass over the
        windows for any number of threads."""
        labels, threads, lows, _ = self._chunk_arrays()
        found: dict[str, list[int]] = {thread_id: [] for thread_id in tails}
        codes = {code: thread_id for thread_id in tails if (code := self.chunks.thread_code(thread_id)) >= 0}
        if not codes or not len(labels):
            return found
        floor = np.full(int(threads.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)  # no window of other threads
        floor[list(codes)] = [tails[thread_id] for thread_id in codes.values()]
        picked = np.flatnonzero(lows >= floor[threads])
        for label, code in zip(labels[picked].tolist(), threads[picked].tolist()):
            found[codes[code]].append(label)
        return found

    def labels_touching(self, thread_id: str, seqs: set[int]) -> list[int]:
        if not seqs:
            return []
        labels, threads, lows, highs = self._chunk_arrays()
        near = labels[(threads == self.chunks.thread_code(thread_id)) & (lows <= max(seqs)) & (highs >= min(seqs))]
        return [label for label in near.tolist() if not seqs.isdisjoint(self.chunks[label].message_seqs)]

    def without_vectors(self) -> list[int]:
        if self._unvectored is None:
            labels = np.fromiter(self.chunks, dtype=np.int64, count=len(self.chunks))
            self._unvectored = set(labels[~self.has_vector.flags(labels)].tolist())
        return sorted(self._unvectored)

    def line_tokens(self, label: int, line: int) -> frozenset[str]:
        """The lexical tokens of one message line of a window (memoised). One line, not the window's
        every line: windows overlap, and a search keeps each message from its first window only."""
        lines = self._line_tokens.get(label)
        if lines is None:
            if len(self._line_tokens) > 50_000:  # bound the memo; it refills from hot windows
                self._line_tokens.clear()
            lines = self._line_tokens[label] = {}
        found = lines.get(line)
        if found is None:
            found = lines[line] = frozenset(self.tokenizer.tokenize(self.chunks.window(label).message_line(line)))
        return found

    def pending_messages(self) -> int:
        """Messages in windows without a vector and in no window that has one (cached until a change)."""
        if self._pending is None:
            waiting = {(c.thread_id, s) for label in self.without_vectors() for c in [self.chunks[label]]
                       for s in c.message_seqs}
            if waiting:
                low = min(s for _, s in waiting)
                done = {(c.thread_id, s) for label in self.has_vector for c in [self.chunks[label]]
                        if c.to_seq >= low for s in c.message_seqs}
                waiting -= done
            self._pending = len(waiting)
        return self._pending

    def allowed(self, intervals: Mapping[str, tuple[int, int]]) -> np.ndarray:
        """Labels of chunks overlapping the seq interval [lo, hi] of their thread."""
        labels, threads, lows, highs = self._chunk_arrays()
        keep = np.zeros(len(labels), dtype=bool)
        for thread_id, (lo, hi) in intervals.items():
            keep |= (threads == self.chunks.thread_code(thread_id)) & (lows <= hi) & (highs >= lo)
        return labels[keep]

    def neighbours(self, labels: np.ndarray) -> np.ndarray:
        """The windows holding the turn right before or right after each of these windows, these left out
        (indexers/neighbours.py). A change rebuilds the index of the fresh windows only: the saved ones'
        lasts until the next save, so a live ingest does not make the next search sort every window."""
        if self._saved_by_seq is None:
            self._saved_by_seq = WindowsBySeq.of(*self.chunks.saved_spans())
        if self._fresh_by_seq is None:
            self._fresh_by_seq = WindowsBySeq.of(*self.chunks.fresh_spans())
        labels = np.asarray(labels, dtype=np.int64)
        windows = [self.chunks.window(label) for label in labels.tolist()]
        threads = np.tile(np.array([self.chunks.thread_code(w.thread_id) for w in windows], dtype=np.int64), 2)
        seqs = np.array([w.from_seq - 1 for w in windows] + [w.to_seq + 1 for w in windows], dtype=np.int64)
        found = distinct(np.concatenate((self._saved_by_seq.holding(threads, seqs), self._fresh_by_seq.holding(threads, seqs))))
        live = np.fromiter((label in self.chunks for label in found.tolist()), dtype=bool, count=len(found))
        found = found[live]  # a saved window replaced since: its fresh one is found
        return found[~among(found, labels)]  # sorted and distinct, as np.setdiff1d gives

    def _use_chunks(self, chunks: ChunkMap) -> None:
        """Serve these windows: everything built from the old ones is stale."""
        self.chunks = chunks
        self._saved_by_seq = None
        self._forget_windows()

    def _forget_windows(self) -> None:
        """The windows changed: the arrays and the fresh windows' index built from them are stale."""
        self._arrays = None
        self._fresh_by_seq = None

    def _chunk_arrays(self) -> tuple[np.ndarray, ...]:
        """Labels, thread codes, first and last seqs of the windows (cached until a change)."""
        if self._arrays is None:
            self._arrays = self.chunks.spans()
        return self._arrays

    # Persistence ----------------------------------------------------------------------------
    def save(self, root: Path) -> Path:
        """Write a complete new version, then flip CURRENT to it."""
        with self.lock:
            changes = self.changes
            base = shard_dir(root, self.manifest.user_id)
            base.mkdir(parents=True, exist_ok=True)
            live = current_version_dir(root, self.manifest.user_id)
            number = int(live.name[1:]) + 1 if live is not None else 1
            final = base / f"v{number:06d}"
            staging = base / f".staging-{final.name}"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            self.bm25.save(staging / "bm25")
            if self.hnsw is not None:
                self.hnsw.save(staging / "hnsw")
                self.message_vectors.save(staging / "message_vectors")
            write_chunks(self.chunks, self.has_vector, staging / CHUNK_FILE)
            self.manifest.save(staging / "manifest.json")
            write_checksums(staging)  # for the doctor: bytes that change on disk later are found
            _fsync_tree(staging)
            # a crash between this rename and the flip leaves `final` complete but not live: replace it
            shutil.rmtree(final, ignore_errors=True)
            os.replace(staging, final)
            _flip_pointer(base / "CURRENT", final.name)
            for old in base.iterdir():
                if old.is_dir() and old.name != final.name:
                    shutil.rmtree(old, ignore_errors=True)
            self.saved_changes = changes
            self._map_saved(final)
        release_free_memory()  # what writing every file allocated and freed (searches need not wait for it)
        return final

    def _map_saved(self, version: Path) -> None:
        """Serve the windows and message vectors from the files just written (memory-mapped), so
        what was added since the load stops taking memory; the contents are the same."""
        self._use_chunks(ChunkMap.open(version / CHUNK_FILE))
        if self.hnsw is not None:
            self.message_vectors = MessageVectors.load(version / "message_vectors", self.manifest.spec.dim)

    @classmethod
    def load(cls, root: Path, user_id: str, tokenizer: LexicalTokenizer, *, ef: int | None = None,
             with_vectors: bool = True) -> "Shard | None":
        """The live version of the user's shard, or None when there is none yet."""
        version = current_version_dir(root, user_id)
        if version is None:
            return None
        if not version.is_dir():
            raise IndexStateError(
                f"the index of user {user_id!r} points to a missing version {version.name}: "
                f"run `convsearch reindex --user {user_id}` (or `convsearch doctor --repair`)"
            )
        manifest = Manifest.load(version / "manifest.json")
        vectored = with_vectors and manifest.spec.model is not None
        with ThreadPoolExecutor(1) as reader:  # faiss reads the graph without the GIL: beside the BM25 (1M: 2.3 -> 1.3 s)
            graph = reader.submit(HnswIndex.load, version / "hnsw", ef=ef) if vectored else None
            chunks, has_vector = _read_chunks(version, user_id)
            bm25 = Bm25Index.load(version / "bm25")
            hnsw = graph.result() if graph is not None else None
        message_vectors = MessageVectors.load(version / "message_vectors", manifest.spec.dim) if vectored else None
        if not with_vectors:
            has_vector = LabelSet()
        shard = cls(manifest, tokenizer, bm25, hnsw, chunks, has_vector, message_vectors)
        if hnsw is not None and hnsw.migrated:
            shard.changes += 1  # an older format: the next save (the server's background step) writes the new one
        return shard

    @classmethod
    def empty(cls, manifest: Manifest, tokenizer: LexicalTokenizer, bm25: Bm25Index, hnsw_params: HnswParams | None) -> "Shard":
        return cls(manifest, tokenizer, bm25, HnswIndex(hnsw_params) if hnsw_params else None, {}, LabelSet())


def _read_chunks(version: Path, user_id: str) -> tuple[ChunkMap, LabelSet]:
    """The version's windows (memory-mapped) and the labels of those with a vector."""
    try:
        old = read_old_chunks(version)
        chunks = ChunkMap.open(version / CHUNK_FILE) if old is None else ChunkMap(saved=old)
    except (OSError, ValueError, pa.ArrowException) as exc:  # ValueError: an empty file cannot be mapped
        raise IndexStateError(
            f"the chunk table of user {user_id!r} is unreadable ({exc}): run `convsearch reindex --user {user_id}`"
        ) from None
    return chunks, LabelSet(chunks.saved_flagged())


def _flip_pointer(pointer: Path, target: str) -> None:
    tmp = pointer.with_name("CURRENT.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(target)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, pointer)
    _fsync_dir(pointer.parent)


flip_pointer = _flip_pointer  # also used by indexers/shard_storage.py when it fetches a version


def _fsync_tree(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _with(manifest: Manifest, **changes: Any) -> Manifest:
    return replace(manifest, **changes)
