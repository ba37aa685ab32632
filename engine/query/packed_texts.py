"""Texts kept zlib-packed in a few shared buffers, for the few of them a search shows.

Why: a 1M-message user's 57,616 summaries held 178 MB of Markdown as Python strings, though a
search reads the text of at most a page of hits; packed (level 1, ~26 us a text) they take 46 MB.
One buffer per build, not an object per text: tens of thousands of freed strings between small
live objects would leave the heap's pages resident (see indexers.heap). Rows of other views share
the buffers; a merge that leaves more buffers than `MAX_BUFFERS` copies the live rows into one.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

__all__ = ["PackedTexts"]

MAX_BUFFERS = 8  # small buffers a run of live updates adds before one repack into a single buffer


@dataclass(frozen=True, slots=True)
class PackedTexts:
    buffers: tuple[bytes, ...]
    at: np.ndarray  # (n, 3) int64: buffer, start, end of each text

    @classmethod
    def of(cls, texts: Iterable[str]) -> "PackedTexts":
        packed, at = bytearray(), []
        for text in texts:
            start = len(packed)
            packed += zlib.compress(text.encode(), 1)
            at.append((0, start, len(packed)))
        return cls((bytes(packed),), np.array(at, dtype=np.int64).reshape(-1, 3))

    def __len__(self) -> int:
        return len(self.at)

    def text(self, row: int) -> str:
        buffer, start, end = self.at[row].tolist()
        return zlib.decompress(self.buffers[buffer][start:end]).decode()

    def take(self, rows: Sequence[int] | np.ndarray) -> "PackedTexts":
        """These rows, in this order (sharing the buffers)."""
        return PackedTexts(self.buffers, self.at[np.asarray(rows, dtype=np.int64)].reshape(-1, 3))

    def joined(self, other: "PackedTexts") -> "PackedTexts":
        """These rows, then the other's."""
        moved = other.at.copy()
        moved[:, 0] += len(self.buffers)
        merged = PackedTexts(self.buffers + other.buffers, np.concatenate((self.at, moved)))
        return merged if len(merged.buffers) <= MAX_BUFFERS else merged.in_one_buffer()

    def in_one_buffer(self) -> "PackedTexts":
        """The same rows with their packed bytes copied into one buffer, none unpacked (57,616
        summaries: tens of ms, where unpacking and packing again took seconds)."""
        views = [memoryview(buffer) for buffer in self.buffers]
        joined = b"".join(views[buffer][start:end] for buffer, start, end in self.at.tolist())
        lengths = self.at[:, 2] - self.at[:, 1]
        ends = np.cumsum(lengths)
        return PackedTexts((joined,), np.column_stack((np.zeros(len(self), np.int64), ends - lengths, ends)))
