"""One vector per message, used to cite the best message of a window by meaning, not only words.

Windows give recall (context helps the embedding), but a window of four turns must still name
the one turn that answers: comparing the query with each turn's own vector does that. Stored as
float16 (half the memory; cosine changes by < 1e-3), saved as an .npy matrix and its ids.
A loaded matrix stays on disk: a search reads the few rows it cites with `pread` (no page enters
the process); vectors put since the load live in memory until the next save.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO, Iterable, Sequence

import numpy as np

from engine.errors import IndexStateError
from indexers.mapped import release
from indexers.readahead import advise, timed_read
from indexers.distinct import distinct
from indexers.npy_files import load_array

__all__ = ["MessageVectors"]

SAVE_BLOCK = 65_536  # rows a save copies at a time (48 MB at 384 float16 dimensions)


class MessageVectors:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._saved = np.zeros((0, dim), dtype=np.float16)  # memory-mapped once loaded
        # the saved rows' ids as sorted UTF-8 bytes, found by binary search: a million ids take
        # 20-40 MB here against ~120 MB as a dict of strings
        self._ids = np.zeros(0, dtype="S1")
        self._live = np.zeros(0, dtype=bool)  # False: forgotten, or put again, since the load
        self._live_count = 0
        self._fresh: dict[str, np.ndarray] = {}  # put since the load (never also live in _saved)
        self._file: BinaryIO | None = None  # the saved matrix's file, for pread

    def __contains__(self, message_id: object) -> bool:
        return isinstance(message_id, str) and bool(self.has([message_id])[0])

    def __len__(self) -> int:
        return self._live_count + len(self._fresh)

    def has(self, message_ids: Sequence[str]) -> np.ndarray:
        """Whether each message has a vector (one binary search for all of them)."""
        return self._has(message_ids, self._saved_rows_of(message_ids))

    def _has(self, message_ids: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """`has`, given the ids' `_saved_rows_of`."""
        fresh = np.fromiter((m in self._fresh for m in message_ids), dtype=bool, count=len(message_ids))
        return fresh | (rows >= 0)

    def put(self, message_ids: Sequence[str], vectors: np.ndarray) -> None:
        self._drop_saved(message_ids)
        for message_id, vector in zip(message_ids, np.asarray(vectors, dtype=np.float16)):
            self._fresh[message_id] = vector

    def forget(self, message_ids: Iterable[str]) -> None:
        message_ids = list(message_ids)
        self._drop_saved(message_ids)
        for message_id in message_ids:
            self._fresh.pop(message_id, None)

    def _drop_saved(self, message_ids: Sequence[str]) -> None:
        rows = self._saved_rows_of(message_ids)
        rows = distinct(rows[rows >= 0])
        self._live[rows] = False
        self._live_count -= len(rows)

    def _saved_rows_of(self, message_ids: Sequence[str]) -> np.ndarray:
        """Each id's row of the saved matrix; -1 where it has none (never saved, or dropped since)."""
        out = np.full(len(message_ids), -1, dtype=np.int64)
        if not self._live_count or not len(message_ids):
            return out
        keys = np.array([m.encode() for m in message_ids])
        at = np.minimum(np.searchsorted(self._ids, keys), len(self._ids) - 1)
        found = (self._ids[at] == keys) & self._live[at]
        out[found] = at[found]
        return out

    def _matrix(self, message_ids: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """The float16 rows of these (known) ids, in order, given their `_saved_rows_of`."""
        out = np.empty((len(message_ids), self.dim), dtype=np.float16)
        saved = np.flatnonzero(rows >= 0)
        if len(saved):
            out[saved] = self._saved_rows(rows[saved])
        for i, m in enumerate(message_ids):
            if m in self._fresh:
                out[i] = self._fresh[m]
        return out

    def _saved_rows(self, rows: np.ndarray) -> np.ndarray:
        """Rows of the saved matrix: a few (a search's) by `pread`, so no page of the file is mapped
        into the process (one mapped row of a freshly written file maps its whole large folio);
        many (a save) through the mapping, whose pages are dropped after."""
        matrix = self._saved
        if self._file is None or len(rows) > 256:
            found = np.asarray(matrix[rows])
            release(matrix)
            return found
        assert isinstance(matrix, np.memmap)  # loaded from a file, so mapped
        size, start, fd = matrix.itemsize * self.dim, matrix.offset, self._file.fileno()
        at = [start + size * row for row in rows.tolist()]
        first, slow = timed_read(lambda: os.pread(fd, size, at[0]))
        if slow:  # the rest are read together
            advise(fd, [(offset, size) for offset in at[1:]])
        data = b"".join([first, *(os.pread(fd, size, offset) for offset in at[1:])])
        return np.frombuffer(data, dtype=matrix.dtype).reshape(len(rows), self.dim)

    def similarities(self, message_ids: Sequence[str], query: np.ndarray) -> np.ndarray:
        """Cosine of each message with the (normalised) query; NaN where a message has no vector."""
        out = np.full(len(message_ids), np.nan)
        rows = self._saved_rows_of(message_ids)  # one binary search serves both steps
        known = np.flatnonzero(self._has(message_ids, rows))
        if len(known):
            out[known] = self._matrix([message_ids[i] for i in known.tolist()], rows[known]).astype(np.float32) @ query
        return out

    def save(self, directory: Path) -> None:
        """The matrix is written SAVE_BLOCK rows at a time through a mapping of the new file, whose
        pages are dropped after each block. Why: a 1M-message shard's 732 MB matrix gathered whole
        took +1.7 GB at its peak in a serving process (it copied the saved rows twice)."""
        directory.mkdir(parents=True, exist_ok=True)
        saved = [m.decode() for m in self._ids[self._live].tolist()]
        ids = sorted([*saved, *self._fresh])
        out = np.lib.format.open_memmap(directory / "vectors.npy", mode="w+", dtype=np.float16, shape=(len(ids), self.dim))
        for start in range(0, len(ids), SAVE_BLOCK):
            block = ids[start:start + SAVE_BLOCK]
            out[start:start + SAVE_BLOCK] = self._matrix(block, self._saved_rows_of(block))
            release(out, self._saved)
        del out
        (directory / "ids.json").write_text(json.dumps(ids), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, dim: int) -> "MessageVectors":
        loaded = cls(dim)
        if not directory.exists():  # a shard saved before message vectors existed: cite lexically
            return loaded
        try:
            ids = json.loads((directory / "ids.json").read_text(encoding="utf-8"))
            matrix = load_array(directory / "vectors.npy", mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise IndexStateError(f"message vectors in {directory} are unreadable ({exc}): run `convsearch reindex`") from None
        if len(ids) != len(matrix) or (len(ids) and matrix.shape[1:] != (dim,)):
            raise IndexStateError(f"message vectors in {directory} do not match their ids: run `convsearch reindex`")
        keys = np.array([m.encode() for m in ids]) if ids else np.zeros(0, dtype="S1")
        if len(keys) > 1 and not bool(np.all(keys[1:] > keys[:-1])):
            raise IndexStateError(f"message vectors in {directory} are not in id order: run `convsearch reindex`")
        loaded._saved, loaded._ids, loaded._live = matrix, keys, np.ones(len(keys), dtype=bool)
        loaded._live_count = len(keys)
        if isinstance(matrix, np.memmap) and matrix.flags.c_contiguous:
            loaded._file = open(directory / "vectors.npy", "rb")
        return loaded
