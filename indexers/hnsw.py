"""An approximate nearest-neighbour index over unit vectors (faiss HNSW, float16 codes), with deletes and filters.

Why faiss's IndexHNSWSQ and not hnswlib: hnswlib keeps each vector as float32 inside its graph
(1.82 KB a 384-d window at M 16: ~1.95 GB of a 1M-message shard's ~3.2 GB in memory) and has no
smaller store; the same graph over float16 codes holds about half. A float16 cosine differs from
the float32 one by under 1e-3 (docs/benchmarks.md, issue 18's fifth round).

Space "ip" on vectors normalised here, so one normalisation serves the graph and the exact
(filtered) path, and a similarity is the inner product itself.

faiss numbers vectors 0, 1, 2... in insertion order ("slots") and cannot delete from a graph. The
shard's labels (non-negative ints, handed out in increasing order) map to slots through two numpy
arrays; a removed or replaced vector's slot stays in the graph, dead, and searches pass a bitmap of
the slots they may return. When the walk cannot fill k results, it walks again with a wider beam,
and then answers exactly.
"""

from __future__ import annotations

import json
import os
import threading
import zlib
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np

from engine.config import default
from engine.errors import IndexStateError, InvalidInputError
from indexers.distinct import distinct, all_distinct
from indexers.npy_files import load_array
from indexers.openmp_threads import every_core

__all__ = ["HnswParams", "HnswIndex", "EXACT_FILTER_MAX", "EXACT_FILTER_FRACTION", "STORE", "REINDEX_HINT", "read_label_file"]

# An `allowed` filter this small is answered by exact cosine over its vectors: that is both exact
# and faster than a graph walk that rejects most of the nodes it visits.
EXACT_FILTER_MAX = 2048
EXACT_FILTER_FRACTION = 0.05
# When the walk cannot fill k (dead slots crowd the query's neighbourhood: a live conversation
# replaces its tail window at every message, and the dead versions sit where its topic is), it is
# walked again with a beam this many times wider before the exact scan of every live vector (1.1 s
# at 100k messages).
WIDER_BEAMS = (4, 16)
PARALLEL_ADD_MIN = 1024  # vectors an add inserts on every core (fewer, the live path's: on the caller's threads)
EXACT_BLOCK = 65_536  # vectors an exact scan decodes at a time: memory bounded at 1M (2 GB at once)

STORE = "faiss-hnsw-fp16"  # params.json's "store": what wrote index.faiss (absent: hnswlib's index.bin)
_INDEX_FILE = "index.faiss"
_PARAMS_FILE = "params.json"
_LABELS_FILE = "labels.npy"  # the label of each slot, -1 for a dead one
REINDEX_HINT = "run `convsearch reindex` to rebuild it"


@dataclass(frozen=True, slots=True)
class HnswParams:
    """HNSW settings; the first three are fixed at build time, `ef` can change at load."""

    dim: int = 384
    """Vector width; must match the embedder. Memory per element ~ dim*2 + m*2*4 + 40 bytes."""
    m: int = default("hnsw_m")
    """Links per node (2*m on the base layer): higher recall and memory, slower build. 12-48 is usual."""
    ef_construction: int = default("hnsw_ef_construction")
    """Build-time beam: a better graph (recall) for a slower build; no effect on query cost."""
    ef: int = default("hnsw_ef")
    """Query-time beam, between k and N: higher is better recall and slower queries (raised to k)."""

    def __post_init__(self) -> None:
        for field in ("dim", "m", "ef_construction", "ef"):
            if getattr(self, field) < (2 if field == "m" else 1):
                raise InvalidInputError(f"HnswParams.{field} is too small: {getattr(self, field)}")


def new_graph(params: HnswParams) -> faiss.IndexHNSWSQ:
    """An empty inner-product HNSW graph over float16 codes (nothing to train)."""
    fp16 = faiss.ScalarQuantizer.QT_fp16  # faiss's SWIG stubs type it as the class, not the int it is
    graph = faiss.IndexHNSWSQ(params.dim, fp16, params.m, faiss.METRIC_INNER_PRODUCT)  # type: ignore[arg-type]
    graph.hnsw.efConstruction = params.ef_construction
    graph.hnsw.efSearch = params.ef
    return graph


class HnswIndex:
    """Labelled unit vectors with add/replace, delete, top-k search (optionally filtered), save/load.

    Thread-safe: one lock serialises all calls, because faiss's add is not safe alongside queries
    and a query is sub-millisecond anyway.
    """

    def __init__(self, params: HnswParams = HnswParams(), capacity: int = 1024) -> None:
        self.params = params
        self.migrated = False  # loaded from an older format: the next save writes this one
        self._lock = threading.RLock()
        self._graph = new_graph(params)
        size = max(capacity, 1)
        self._label_of = np.full(size, -1, dtype=np.int64)  # slot -> label (-1: dead or unused)
        self._slot_of = np.full(size, -1, dtype=np.int64)  # label -> live slot (-1: none)
        self._live_count = 0
        self._live_filter: _SlotFilter | None = None  # the live slots, until the next change

    def __len__(self) -> int:
        return self._live_count

    def __contains__(self, label: object) -> bool:
        if not isinstance(label, (int, np.integer)) or not 0 <= int(label) < self._slot_of.size:
            return False
        return bool(self._slot_of[int(label)] >= 0)

    @property
    def capacity(self) -> int:
        """Slots the bookkeeping holds before it must grow (dead ones included)."""
        return int(self._label_of.size)

    @property
    def slots(self) -> int:
        """Vectors in the graph, dead ones included."""
        return int(self._graph.ntotal)

    def labels(self) -> np.ndarray:
        """Live labels, ascending (int64)."""
        return np.flatnonzero(self._slot_of >= 0).astype(np.int64)

    @property
    def dead(self) -> int:
        """Slots of removed or replaced vectors: still in the graph, skipped by every search."""
        return self.slots - self._live_count

    def compacted(self) -> HnswIndex:
        """A new graph of the live vectors only. Why: faiss cannot delete, so a shard that lived
        through many replaced tail windows carries their slots; a reindex that adopts the saved
        graph sheds them here instead of keeping them forever."""
        with self._lock:
            labels = self.labels()
            rows = self._rows(self._slot_of[labels])
        fresh = HnswIndex(self.params, capacity=labels.size)
        fresh.add(labels, rows)
        return fresh

    def add(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        """Insert vectors under labels; an existing (or deleted) label gets the new vector."""
        ids, rows = _checked_batch(labels, vectors, self.params.dim)
        if ids.size == 0:
            return
        with self._lock:
            first = self.slots
            self._reserve(first + ids.size, int(ids.max()) + 1)
            with every_core() if ids.size >= PARALLEL_ADD_MIN else nullcontext():
                self._graph.add(rows)
            self._drop(ids)
            self._label_of[first : first + ids.size] = ids
            self._slot_of[ids] = np.arange(first, first + ids.size)
            self._live_count += ids.size

    def _reserve(self, slots: int, labels: int) -> None:
        """Grow the two maps geometrically: a copy per doubling, not one per small add."""
        if slots > self._label_of.size:
            self._label_of = _grown(self._label_of, max(slots, 2 * self._label_of.size))
        if labels > self._slot_of.size:
            self._slot_of = _grown(self._slot_of, max(labels, 2 * self._slot_of.size))

    def _drop(self, ids: np.ndarray) -> None:
        """Kill the live slots of labels `ids` (known to be within the label map)."""
        slots = self._slot_of[ids]
        slots = slots[slots >= 0]
        self._label_of[slots] = -1
        self._slot_of[ids] = -1
        self._live_count -= slots.size
        self._live_filter = None

    def remove(self, labels: Iterable[int]) -> None:
        """Hide labels from every search; unknown or already removed labels are ignored."""
        ids = np.fromiter((int(x) for x in labels), dtype=np.int64)
        with self._lock:
            self._drop(distinct(ids[(ids >= 0) & (ids < self._slot_of.size)]))

    def vectors(self, labels: np.ndarray) -> np.ndarray:
        """Stored (normalised, float16-rounded) vectors of live labels, in the order given."""
        ids = np.asarray(labels, dtype=np.int64).reshape(-1)
        with self._lock:
            slots = np.full(ids.size, -1, dtype=np.int64)  # one gather, not a membership test per label
            inside = (ids >= 0) & (ids < self._slot_of.size)
            slots[inside] = self._slot_of[ids[inside]]
            missing = ids[slots < 0]
            if len(missing):
                raise InvalidInputError(f"{len(missing)} label(s) not in the index, e.g. {int(missing[0])}")
            return self._rows(slots)

    def _rows(self, slots: np.ndarray) -> np.ndarray:
        if slots.size == 0:
            return np.zeros((0, self.params.dim), dtype=np.float32)
        return np.asarray(self._graph.reconstruct_batch(slots), dtype=np.float32).reshape(slots.size, self.params.dim)

    def search(
        self, vector: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k live labels by cosine, best first: (labels int64, similarities float32).

        `allowed` restricts the candidates before the cut (so k results come from inside it).
        """
        if k < 1:
            raise InvalidInputError(f"k must be at least 1, got {k}")
        query = _unit_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1), 1, self.params.dim)
        with self._lock:
            if allowed is None:
                if self._live_count == self.slots:  # nothing dead: no bitmap to check
                    return self._search_graph(query, k, None, self._live_count)
                return self._search_graph(query, k, self._live_slots(), self._live_count)
            pool = self._pool(np.asarray(allowed, dtype=np.int64).reshape(-1))
            size = int(np.count_nonzero(pool))
            if size <= EXACT_FILTER_MAX or size < EXACT_FILTER_FRACTION * self._live_count:
                return self._search_exact(query[0], k, np.flatnonzero(pool))
            return self._search_graph(query, k, _SlotFilter.of(pool), size)

    def _pool(self, allowed: np.ndarray) -> np.ndarray:
        """Which slots are live and allowed (bools over the slots: no sort of the allowed labels)."""
        slots = self._slot_of[allowed[(allowed >= 0) & (allowed < self._slot_of.size)]]
        pool = np.zeros(self.slots, dtype=bool)
        pool[slots[slots >= 0]] = True
        return pool

    def _live_slots(self) -> _SlotFilter:
        if self._live_filter is None:
            self._live_filter = _SlotFilter.of(self._label_of[: self.slots] >= 0)
        return self._live_filter

    def _search_graph(
        self, query: np.ndarray, k: int, among: _SlotFilter | None, candidates: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """faiss's walk; when it cannot fill k (dead slots, a selective filter) answer exactly."""
        k = min(k, candidates)
        if k == 0:
            return _empty()
        beam = max(self.params.ef, k)
        for ef in (beam, *(beam * wider for wider in WIDER_BEAMS)):
            params = faiss.SearchParametersHNSW(efSearch=ef)  # type: ignore[attr-defined]
            if among is not None:
                params.sel = among.selector
            sims, slots = self._graph.search(query, k, params=params)
            if not np.any(slots[0] < 0):
                return self._label_of[slots[0]], sims[0].astype(np.float32)
        return self._search_exact(query[0], k, np.flatnonzero((among or self._live_slots()).bits))

    def _search_exact(self, query: np.ndarray, k: int, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Brute-force cosine over the stored vectors of live `slots`, EXACT_BLOCK at a time."""
        if slots.size == 0:
            return _empty()
        sims = np.concatenate([self._rows(slots[at:at + EXACT_BLOCK]) @ query for at in range(0, slots.size, EXACT_BLOCK)])
        ids = self._label_of[slots]
        k = min(k, slots.size)
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.lexsort((ids[top], -sims[top]))]  # best first; ties by label, deterministically
        return ids[top], sims[top].astype(np.float32)

    def save(self, directory: Path) -> None:
        """index.faiss, labels.npy, then params.json last: a crash never leaves a valid-looking mix."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            labels = self._label_of[: self.slots].copy()
            meta = asdict(self.params) | {"space": "ip", "store": STORE, "count": self._live_count,
                                          "slots": self.slots, "labels_crc32": _crc(labels)}
            faiss.write_index(self._graph, str(directory / (_INDEX_FILE + ".tmp")))
            os.replace(directory / (_INDEX_FILE + ".tmp"), directory / _INDEX_FILE)
        with open(directory / (_LABELS_FILE + ".tmp"), "wb") as handle:
            np.save(handle, labels, allow_pickle=False)
        os.replace(directory / (_LABELS_FILE + ".tmp"), directory / _LABELS_FILE)
        tmp_params = directory / (_PARAMS_FILE + ".tmp")
        tmp_params.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp_params, directory / _PARAMS_FILE)

    @classmethod
    def load(cls, directory: Path, *, ef: int | None = None, dim: int | None = None) -> HnswIndex:
        """An index saved by `save`; `ef` overrides the saved query beam, `dim` checks the width.

        Any missing, corrupt or mismatched file raises IndexStateError. A graph saved by hnswlib
        (before issue 18) is read and rebuilt in this format once (`migrated`).
        """
        directory = Path(directory)
        meta = _read_meta(directory)
        params = _params_of(meta, ef, directory)
        if dim is not None and dim != params.dim:
            raise IndexStateError(f"the vector index in {directory} has dim {params.dim}, not {dim}: {REINDEX_HINT}")
        if "store" not in meta:
            from indexers.hnsw_legacy import read_hnswlib

            labels, rows = read_hnswlib(directory, params.dim, _count(meta, "count", directory))
            index = cls(params, capacity=labels.size)
            index.add(labels, rows)
            index.migrated = True
            return index
        return cls._from_files(directory, params, meta)

    @classmethod
    def _from_files(cls, directory: Path, params: HnswParams, meta: dict[str, object]) -> HnswIndex:
        if meta["store"] != STORE:
            raise IndexStateError(f"the vector index in {directory} was written by {meta['store']!r}: {REINDEX_HINT}")
        count, slots = _count(meta, "count", directory), _count(meta, "slots", directory)
        labels = _read_labels(directory / _LABELS_FILE, slots, meta.get("labels_crc32"))
        live = labels[labels >= 0]
        if live.size != count or not all_distinct(live):
            raise IndexStateError(f"{directory / _LABELS_FILE} does not hold the {count} labels params.json "
                                  f"promises: {REINDEX_HINT}")
        index = cls(params, capacity=max(slots, 1))
        index._graph = _read_graph(directory / _INDEX_FILE, params, slots)
        index._graph.hnsw.efSearch = params.ef
        index._reserve(slots, int(live.max()) + 1 if live.size else 0)
        index._label_of[:slots] = labels
        index._slot_of[live] = np.flatnonzero(labels >= 0)
        index._live_count = count
        return index


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    grown = np.full(size, -1, dtype=array.dtype)
    grown[: array.size] = array
    return grown


@dataclass(frozen=True, slots=True)
class _SlotFilter:
    """The slots a search may return, as bools and as the faiss selector that reads their packed
    copy (held here: faiss keeps only a pointer to it)."""

    bits: np.ndarray
    packed: np.ndarray
    selector: faiss.IDSelectorBitmap

    @classmethod
    def of(cls, bits: np.ndarray) -> _SlotFilter:
        packed = np.packbits(bits, bitorder="little")
        return cls(bits, packed, faiss.IDSelectorBitmap(bits.size, faiss.swig_ptr(packed)))


def _crc(labels: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(labels, dtype="<i8").tobytes())


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)


def _checked_batch(labels: np.ndarray, vectors: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative unique int64 labels (last vector wins) and unit float32 rows, or InvalidInputError."""
    ids = np.asarray(labels).reshape(-1)
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise InvalidInputError(f"labels must be integers, got {ids.dtype}")
    if ids.size and ids.min() < 0:
        raise InvalidInputError("labels must be non-negative")
    rows = np.asarray(vectors, dtype=np.float32)
    rows = rows.reshape(1, -1) if rows.ndim == 1 and ids.size == 1 else rows  # one label, one flat vector
    rows = _unit_rows(rows, ids.size, dim)
    ids = ids.astype(np.int64)
    _, last = np.unique(ids[::-1], return_index=True)  # one slot per label: the batch's last vector
    keep = np.sort(ids.size - 1 - last)
    return ids[keep], rows[keep]


def _unit_rows(rows: np.ndarray, n: int, dim: int) -> np.ndarray:
    """(n, dim) rows scaled to unit length; zero, NaN or misshapen input is refused."""
    if rows.shape != (n, dim):
        raise InvalidInputError(f"expected {n} vector(s) of dim {dim}, got shape {rows.shape}")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise InvalidInputError("vectors must be finite and non-zero")
    return np.ascontiguousarray(rows / norms)


def _read_meta(directory: Path) -> dict[str, object]:
    try:
        meta = json.loads((directory / _PARAMS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexStateError(f"{directory / _PARAMS_FILE} is missing or corrupt ({exc}): {REINDEX_HINT}") from exc
    if not isinstance(meta, dict) or meta.get("space", "ip") != "ip":
        raise IndexStateError(f"the vector index in {directory} is not an inner-product index: {REINDEX_HINT}")
    return meta


def _params_of(meta: dict[str, object], ef: int | None, directory: Path) -> HnswParams:
    try:
        return HnswParams(dim=int(meta["dim"]), m=int(meta["m"]),  # type: ignore[call-overload]
                          ef_construction=int(meta["ef_construction"]),  # type: ignore[call-overload]
                          ef=int(meta["ef"] if ef is None else ef))  # type: ignore[call-overload]
    except (ValueError, KeyError, TypeError, InvalidInputError) as exc:
        raise IndexStateError(f"{directory / _PARAMS_FILE} is missing or corrupt ({exc}): {REINDEX_HINT}") from exc


def _count(meta: dict[str, object], key: str, directory: Path) -> int:
    value = meta.get(key)
    if not isinstance(value, int) or value < 0:
        raise IndexStateError(f"{directory / _PARAMS_FILE} has no valid {key!r}: {REINDEX_HINT}")
    return value


def read_label_file(path: Path, size: int, what: str) -> np.ndarray:
    """labels.npy as int64, checked to hold `size` integers (`what`: "slots" or "labels", for the error)."""
    try:
        labels = load_array(path)
    except (OSError, ValueError, EOFError) as exc:
        raise IndexStateError(f"{path} is missing or corrupt ({exc}): {REINDEX_HINT}") from exc
    if labels.ndim != 1 or labels.size != size or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise IndexStateError(f"{path} does not hold the {size} {what} params.json promises: {REINDEX_HINT}")
    return labels.astype(np.int64)


def _read_labels(path: Path, slots: int, crc: object) -> np.ndarray:
    labels = read_label_file(path, slots, "slots")
    if crc != _crc(labels):  # the labels of another save (or edited): the graph's slots would lie
        raise IndexStateError(f"{path} is not the one saved with its vector index: {REINDEX_HINT}")
    return labels


def _read_graph(path: Path, params: HnswParams, slots: int) -> faiss.IndexHNSWSQ:
    """faiss's file, checked against params.json: its type, width, metric, degree and size."""
    if not path.is_file():
        raise IndexStateError(f"{path} is missing: {REINDEX_HINT}")
    try:
        graph = faiss.read_index(str(path))
    except RuntimeError as exc:
        raise IndexStateError(f"the vector index {path} is unreadable ({exc}): {REINDEX_HINT}") from exc
    if not isinstance(graph, faiss.IndexHNSWSQ) or (graph.d, graph.ntotal, graph.metric_type, _degree(graph)) != (
            params.dim, slots, faiss.METRIC_INNER_PRODUCT, params.m):
        raise IndexStateError(f"the vector index {path} does not match its params.json: {REINDEX_HINT}")
    return graph


def _degree(graph: faiss.IndexHNSWSQ) -> int:
    """M: the links a node keeps above the base layer (faiss's stubs omit nb_neighbors)."""
    return int(graph.hnsw.nb_neighbors(1))  # type: ignore[attr-defined]
