"""One vector per message, used to cite the best message of a window by meaning, not only words.

Windows give recall (context helps the embedding), but a window of four turns must still name
the one turn that answers: comparing the query with each turn's own vector does that. Stored as
float16 (half the memory; cosine changes by < 1e-3), saved as an .npy matrix and its ids.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from engine.errors import IndexStateError

__all__ = ["MessageVectors"]


class MessageVectors:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._rows: dict[str, np.ndarray] = {}

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def put(self, message_ids: Sequence[str], vectors: np.ndarray) -> None:
        for message_id, vector in zip(message_ids, np.asarray(vectors, dtype=np.float16)):
            self._rows[message_id] = vector

    def forget(self, message_ids: Iterable[str]) -> None:
        for message_id in message_ids:
            self._rows.pop(message_id, None)

    def similarities(self, message_ids: Sequence[str], query: np.ndarray) -> np.ndarray:
        """Cosine of each message with the (normalised) query; NaN where a message has no vector."""
        out = np.full(len(message_ids), np.nan)
        known = [i for i, m in enumerate(message_ids) if m in self._rows]
        if known:
            matrix = np.stack([self._rows[message_ids[i]] for i in known]).astype(np.float32)
            out[known] = matrix @ query
        return out

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        ids = sorted(self._rows)
        matrix = np.stack([self._rows[m] for m in ids]) if ids else np.zeros((0, self.dim), dtype=np.float16)
        np.save(directory / "vectors.npy", matrix)
        (directory / "ids.json").write_text(json.dumps(ids), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, dim: int) -> "MessageVectors":
        loaded = cls(dim)
        if not directory.exists():  # a shard saved before message vectors existed: cite lexically
            return loaded
        try:
            ids = json.loads((directory / "ids.json").read_text(encoding="utf-8"))
            matrix = np.load(directory / "vectors.npy")
        except (OSError, ValueError) as exc:
            raise IndexStateError(f"message vectors in {directory} are unreadable ({exc}): run `convsearch reindex`") from None
        if len(ids) != len(matrix):
            raise IndexStateError(f"message vectors in {directory} do not match their ids: run `convsearch reindex`")
        loaded._rows = dict(zip(ids, matrix))
        return loaded
