"""An approximate nearest-neighbour index over unit vectors (hnswlib), with deletes and filters.

Space "ip" on vectors normalised here: hnswlib's "cosine" space is the same inner product with a
normalisation hidden in the binding; doing it ourselves keeps one normalisation that also serves
the exact (filtered) path, and similarity is simply 1 - distance.

hnswlib counts deleted elements as present and raises when it cannot fill k results, so live
labels are tracked here and every search that hnswlib cannot answer falls back to exact cosine.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import hnswlib
import numpy as np

from engine.config import default
from engine.errors import IndexStateError, InvalidInputError

__all__ = ["HnswParams", "HnswIndex", "EXACT_FILTER_MAX", "EXACT_FILTER_FRACTION"]

# An `allowed` filter this small is answered by exact cosine over its vectors: that is both exact
# and faster than a graph walk that rejects most of the nodes it visits.
EXACT_FILTER_MAX = 2048
EXACT_FILTER_FRACTION = 0.05

_INDEX_FILE = "index.bin"
_PARAMS_FILE = "params.json"
_LABELS_FILE = "labels.npy"
_REINDEX_HINT = "run `convsearch reindex` to rebuild it"


@dataclass(frozen=True, slots=True)
class HnswParams:
    """HNSW settings; the first three are fixed at build time, `ef` can change at load."""

    dim: int = 384
    """Vector width; must match the embedder. Memory per element ~ dim*4 + m*2*4 + 12 bytes."""
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


class HnswIndex:
    """Labelled unit vectors with add/replace, delete, top-k search (optionally filtered), save/load.

    Thread-safe: one lock serialises all calls, because hnswlib's resize is not safe alongside
    queries and a query is sub-millisecond anyway.
    """

    def __init__(self, params: HnswParams = HnswParams(), capacity: int = 1024) -> None:
        self.params = params
        self._lock = threading.RLock()
        self._live: set[int] = set()
        self._deleted: set[int] = set()  # still stored in the graph (hnswlib only marks them)
        self._index = hnswlib.Index(space="ip", dim=params.dim)
        self._index.init_index(
            max_elements=max(capacity, 1), ef_construction=params.ef_construction, M=params.m
        )
        self._index.set_ef(params.ef)

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, label: object) -> bool:
        return isinstance(label, (int, np.integer)) and int(label) in self._live

    @property
    def capacity(self) -> int:
        """Elements the graph holds before it must grow (deleted ones included)."""
        return int(self._index.get_max_elements())

    def labels(self) -> np.ndarray:
        """Live labels, ascending (int64)."""
        return np.array(sorted(self._live), dtype=np.int64)

    def add(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        """Insert vectors under labels; an existing (or deleted) label gets the new vector."""
        ids, rows = _checked_batch(labels, vectors, self.params.dim)
        if ids.size == 0:
            return
        with self._lock:
            new = sum(1 for label in ids.tolist() if label not in self._live and label not in self._deleted)
            self._reserve(self._index.get_current_count() + new)
            self._index.add_items(rows, ids.astype(np.uint64))
            self._live.update(ids.tolist())
            self._deleted.difference_update(ids.tolist())

    def _reserve(self, needed: int) -> None:
        """Grow geometrically: a copy of the graph per doubling, not one per small add."""
        capacity = self.capacity
        if needed > capacity:
            self._index.resize_index(max(needed, capacity * 2))

    def remove(self, labels: Iterable[int]) -> None:
        """Hide labels from every search; unknown or already removed labels are ignored."""
        with self._lock:
            for label in {int(x) for x in labels}:
                if label in self._live:
                    self._index.mark_deleted(label)
                    self._live.discard(label)
                    self._deleted.add(label)

    def vectors(self, labels: np.ndarray) -> np.ndarray:
        """Stored (normalised) vectors of live labels, in the order given."""
        ids = np.asarray(labels, dtype=np.int64).reshape(-1)
        with self._lock:
            missing = [label for label in ids.tolist() if label not in self._live]
            if missing:
                raise InvalidInputError(f"{len(missing)} label(s) not in the index, e.g. {missing[0]}")
            if ids.size == 0:
                return np.zeros((0, self.params.dim), dtype=np.float32)
            rows = self._index.get_items(ids.astype(np.uint64), return_type="numpy")
        return np.asarray(rows, dtype=np.float32).reshape(ids.size, self.params.dim)

    def search(
        self, vector: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k live labels by cosine, best first: (labels int64, similarities float32).

        `allowed` restricts the candidates before the cut (so k results come from inside it).
        """
        if k < 1:
            raise InvalidInputError(f"k must be at least 1, got {k}")
        query = _unit_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1), 1, self.params.dim)[0]
        with self._lock:
            if allowed is None:
                return self._search_graph(query, k, None, len(self._live))
            pool = self._live.intersection(np.asarray(allowed, dtype=np.int64).reshape(-1).tolist())
            if len(pool) <= EXACT_FILTER_MAX or len(pool) < EXACT_FILTER_FRACTION * len(self._live):
                return self._search_exact(query, k, _as_labels(pool))
            return self._search_graph(query, k, pool.__contains__, len(pool))

    def _search_graph(
        self, query: np.ndarray, k: int, accept: Callable[[int], bool] | None, candidates: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """hnswlib's walk; when it cannot fill k (deletions, a selective filter) answer exactly."""
        k = min(k, candidates)
        if k == 0:
            return _empty()
        self._index.set_ef(max(self.params.ef, k))
        try:
            found, distances = self._index.knn_query(query, k=k, filter=accept)
        except RuntimeError:
            pool = self._live if accept is None else {label for label in self._live if accept(label)}
            return self._search_exact(query, k, _as_labels(pool))
        finally:
            self._index.set_ef(self.params.ef)
        return found[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)

    def _search_exact(self, query: np.ndarray, k: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Brute-force cosine over the stored vectors of live labels `ids`."""
        if ids.size == 0:
            return _empty()
        rows = np.asarray(self._index.get_items(ids.astype(np.uint64), return_type="numpy"), dtype=np.float32)
        sims = rows @ query
        k = min(k, ids.size)
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.lexsort((ids[top], -sims[top]))]  # best first; ties by label, deterministically
        return ids[top], sims[top].astype(np.float32)

    def save(self, directory: Path) -> None:
        """index.bin, labels.npy, then params.json last: a crash never leaves a valid-looking mix."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            meta = asdict(self.params) | {"space": "ip", "count": len(self._live)}
            tmp_index = directory / (_INDEX_FILE + ".tmp")
            self._index.save_index(str(tmp_index))
            os.replace(tmp_index, directory / _INDEX_FILE)
            with open(directory / (_LABELS_FILE + ".tmp"), "wb") as handle:
                np.save(handle, self.labels(), allow_pickle=False)
            os.replace(directory / (_LABELS_FILE + ".tmp"), directory / _LABELS_FILE)
        tmp_params = directory / (_PARAMS_FILE + ".tmp")
        tmp_params.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp_params, directory / _PARAMS_FILE)

    @classmethod
    def load(cls, directory: Path, *, ef: int | None = None, dim: int | None = None) -> HnswIndex:
        """An index saved by `save`; `ef` overrides the saved query beam, `dim` checks the width.

        Any missing, corrupt or mismatched file raises IndexStateError (hnswlib itself would crash
        on a file of another width, so the header is checked before hnswlib reads it).
        """
        directory = Path(directory)
        params, count = _read_params(directory, ef)
        if dim is not None and dim != params.dim:
            raise IndexStateError(f"the vector index in {directory} has dim {params.dim}, not {dim}: {_REINDEX_HINT}")
        labels = _read_labels(directory / _LABELS_FILE, count)
        stored = _check_index_header(directory / _INDEX_FILE, params.dim, count)
        graph = hnswlib.Index(space="ip", dim=params.dim)
        try:
            graph.load_index(str(directory / _INDEX_FILE), max_elements=max(stored, 1))
        except RuntimeError as exc:
            raise IndexStateError(f"the vector index in {directory} is unreadable ({exc}): {_REINDEX_HINT}") from exc
        index = cls(params, capacity=1)
        index._index = graph
        graph.set_ef(params.ef)
        index._live = set(labels.tolist())
        index._deleted = set(graph.get_ids_list()) - index._live
        if len(index._live) + len(index._deleted) != stored:  # a live label the graph does not hold
            raise IndexStateError(f"labels.npy does not match the vector index in {directory}: {_REINDEX_HINT}")
        return index


def _as_labels(labels: set[int]) -> np.ndarray:
    return np.fromiter(labels, dtype=np.int64, count=len(labels))


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)


def _checked_batch(labels: np.ndarray, vectors: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative unique int64 labels (last vector wins) and unit float32 rows, or InvalidInputError."""
    ids = np.asarray(labels).reshape(-1)
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise InvalidInputError(f"labels must be integers, got {ids.dtype}")
    if ids.size and ids.min() < 0:
        raise InvalidInputError("labels must be non-negative")  # hnswlib stores them as uint64
    rows = np.asarray(vectors, dtype=np.float32)
    rows = rows.reshape(1, -1) if rows.ndim == 1 and ids.size == 1 else rows  # one label, one flat vector
    rows = _unit_rows(rows, ids.size, dim)
    ids = ids.astype(np.int64)
    _, last = np.unique(ids[::-1], return_index=True)  # hnswlib races on duplicate labels in one batch
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


def _read_params(directory: Path, ef: int | None) -> tuple[HnswParams, int]:
    try:
        meta = json.loads((directory / _PARAMS_FILE).read_text(encoding="utf-8"))
        params = HnswParams(
            dim=int(meta["dim"]),
            m=int(meta["m"]),
            ef_construction=int(meta["ef_construction"]),
            ef=int(meta["ef"] if ef is None else ef),
        )
        count = int(meta["count"])
    except (OSError, ValueError, KeyError, TypeError, InvalidInputError) as exc:
        raise IndexStateError(f"{directory / _PARAMS_FILE} is missing or corrupt ({exc}): {_REINDEX_HINT}") from exc
    if meta.get("space", "ip") != "ip":
        raise IndexStateError(f"the vector index in {directory} uses space {meta.get('space')!r}: {_REINDEX_HINT}")
    return params, count


def _read_labels(path: Path, count: int) -> np.ndarray:
    try:
        labels = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise IndexStateError(f"{path} is missing or corrupt ({exc}): {_REINDEX_HINT}") from exc
    if labels.ndim != 1 or labels.size != count or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise IndexStateError(f"{path} does not hold the {count} labels params.json promises: {_REINDEX_HINT}")
    return labels.astype(np.int64)


def _check_index_header(path: Path, dim: int, count: int) -> int:
    """The element count stored in hnswlib's header, after checking its vector width.

    The header starts with six size_t: offsetLevel0, max_elements, cur_element_count,
    size_data_per_element, label_offset, offsetData; a vector is label_offset - offsetData bytes.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(48)
    except OSError as exc:
        raise IndexStateError(f"{path} is missing ({exc}): {_REINDEX_HINT}") from exc
    if len(head) < 48:
        raise IndexStateError(f"{path} is truncated: {_REINDEX_HINT}")
    _, _, stored, _, label_offset, data_offset = struct.unpack("<6Q", head)
    if label_offset - data_offset != dim * 4:
        raise IndexStateError(f"{path} holds vectors of another width than dim {dim}: {_REINDEX_HINT}")
    if stored < count:
        raise IndexStateError(f"{path} holds {stored} vectors, fewer than the {count} labels: {_REINDEX_HINT}")
    return stored
