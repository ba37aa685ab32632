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

__all__ = ["MessageVectors"]


class MessageVectors:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._saved = np.zeros((0, dim), dtype=np.float16)  # memory-mapped once loaded
        self._row: dict[str, int] = {}  # message id -> row of _saved
        self._fresh: dict[str, np.ndarray] = {}  # put since the load (never also in _row)
        self._file: BinaryIO | None = None  # the saved matrix's file, for pread

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._fresh or message_id in self._row

    def __len__(self) -> int:
        return len(self._row) + len(self._fresh)

    def put(self, message_ids: Sequence[str], vectors: np.ndarray) -> None:
        for message_id, vector in zip(message_ids, np.asarray(vectors, dtype=np.float16)):
            self._row.pop(message_id, None)
            self._fresh[message_id] = vector

    def forget(self, message_ids: Iterable[str]) -> None:
        for message_id in message_ids:
            self._row.pop(message_id, None)
            self._fresh.pop(message_id, None)

    def _matrix(self, message_ids: Sequence[str]) -> np.ndarray:
        """The float16 rows of these (known) ids, in order."""
        out = np.empty((len(message_ids), self.dim), dtype=np.float16)
        saved = [(i, self._row[m]) for i, m in enumerate(message_ids) if m in self._row]
        if saved:
            at, rows = zip(*saved)
            out[list(at)] = self._saved_rows(np.asarray(rows))
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
        data = b"".join(os.pread(fd, size, start + size * row) for row in rows.tolist())
        return np.frombuffer(data, dtype=matrix.dtype).reshape(len(rows), self.dim)

    def similarities(self, message_ids: Sequence[str], query: np.ndarray) -> np.ndarray:
        """Cosine of each message with the (normalised) query; NaN where a message has no vector."""
        out = np.full(len(message_ids), np.nan)
        known = [i for i, m in enumerate(message_ids) if m in self]
        if known:
            out[known] = self._matrix([message_ids[i] for i in known]).astype(np.float32) @ query
        return out

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        ids = sorted([*self._row, *self._fresh])
        np.save(directory / "vectors.npy", self._matrix(ids))
        (directory / "ids.json").write_text(json.dumps(ids), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, dim: int) -> "MessageVectors":
        loaded = cls(dim)
        if not directory.exists():  # a shard saved before message vectors existed: cite lexically
            return loaded
        try:
            ids = json.loads((directory / "ids.json").read_text(encoding="utf-8"))
            matrix = np.load(directory / "vectors.npy", mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise IndexStateError(f"message vectors in {directory} are unreadable ({exc}): run `convsearch reindex`") from None
        if len(ids) != len(matrix) or (len(ids) and matrix.shape[1:] != (dim,)):
            raise IndexStateError(f"message vectors in {directory} do not match their ids: run `convsearch reindex`")
        loaded._saved, loaded._row = matrix, {m: i for i, m in enumerate(ids)}
        if isinstance(matrix, np.memmap) and matrix.flags.c_contiguous:
            loaded._file = open(directory / "vectors.npy", "rb")
        return loaded
