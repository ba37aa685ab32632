"""Reads a vector index saved by hnswlib (shards written before issue 18's fifth round).

Why keep it: a served shard saved before the switch to faiss's float16 graph must still load
without a reindex; `HnswIndex.load` rebuilds it from these vectors once and the next save writes
the new format. hnswlib itself would crash on a file of another width, so the header is checked
before hnswlib reads it.
"""

from __future__ import annotations

import struct
from pathlib import Path

import hnswlib
import numpy as np

from engine.errors import IndexStateError
from indexers.hnsw import REINDEX_HINT, read_label_file

__all__ = ["read_hnswlib"]


def read_hnswlib(directory: Path, dim: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(live labels ascending, their float32 vectors) of hnswlib's index.bin + labels.npy."""
    path = directory / "index.bin"
    labels = np.sort(read_label_file(directory / "labels.npy", count, "labels"))
    stored = _header_count(path, dim, count)
    graph = hnswlib.Index(space="ip", dim=dim)
    try:
        graph.load_index(str(path), max_elements=max(stored, 1))
    except RuntimeError as exc:
        raise IndexStateError(f"the vector index in {directory} is unreadable ({exc}): {REINDEX_HINT}") from exc
    if not set(labels.tolist()) <= set(graph.get_ids_list()):
        raise IndexStateError(f"labels.npy does not match the vector index in {directory}: {REINDEX_HINT}")
    if labels.size == 0:
        return labels, np.zeros((0, dim), dtype=np.float32)
    rows = np.asarray(graph.get_items(labels.astype(np.uint64), return_type="numpy"), dtype=np.float32)
    return labels, rows.reshape(labels.size, dim)


def _header_count(path: Path, dim: int, count: int) -> int:
    """The element count in hnswlib's header, after checking its vector width.

    The header starts with six size_t: offsetLevel0, max_elements, cur_element_count,
    size_data_per_element, label_offset, offsetData; a vector is label_offset - offsetData bytes.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(48)
    except OSError as exc:
        raise IndexStateError(f"{path} is missing ({exc}): {REINDEX_HINT}") from exc
    if len(head) < 48:
        raise IndexStateError(f"{path} is truncated: {REINDEX_HINT}")
    _, _, stored, _, label_offset, data_offset = struct.unpack("<6Q", head)
    if label_offset - data_offset != dim * 4:
        raise IndexStateError(f"{path} holds vectors of another width than dim {dim}: {REINDEX_HINT}")
    if stored < count:
        raise IndexStateError(f"{path} holds {stored} vectors, fewer than the {count} labels: {REINDEX_HINT}")
    return stored
