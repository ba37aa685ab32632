"""A saved window's fields read from the chunk file with `pread`, without mapping its pages.

Why apart from `indexers/chunk_map.py`: the map decides which windows live where (saved rows, fresh
objects, memos); this is how one row of the memory-mapped Arrow file becomes a window, and where its
bytes lie in the file (what `indexers/readahead.py` advises).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from engine.errors import IndexStateError
from indexers.chunking import Chunk, line_of, lines_of
from indexers.readahead import advise

__all__ = ["SavedWindow", "BatchReader", "ChunkSource", "TUPLES"]

TUPLES = ("message_ids", "message_seqs", "line_ends")  # the list columns of a window


@dataclass(frozen=True, slots=True)
class SavedWindow:
    """A saved window as a search reads it (`ChunkMap.window`): its chunk id and content hash,
    which only a reindex needs, are not read, and its thread comes from the thread codes held in
    memory. Three of a window's seven reads, half the time a search spends opening it."""

    thread_id: str
    from_seq: int
    to_seq: int
    message_ids: tuple[str, ...]
    message_seqs: tuple[int, ...]
    text: str
    line_ends: tuple[int, ...]

    def message_lines(self) -> tuple[str, ...]:
        return lines_of(self.text, self.line_ends)

    def message_line(self, line: int) -> str:
        return line_of(self.text, self.line_ends, line)


class BatchReader:
    """One row of a record batch as a Chunk. Offsets and small integers are copied into memory
    (~55 bytes a window); texts, ids and seq lists are read with `pread` from the chunk file, so
    no page of it is mapped into the process by a search (mapping a page of a freshly written
    file maps its whole large folio: ~100 us and up to 2 MB per window read)."""

    def __init__(self, batch: pa.RecordBatch, source: "ChunkSource") -> None:
        column = batch.column
        self.ints = {name: np.array(column(name).to_numpy()) for name in ("from_seq", "to_seq", "n_tokens", "part")}
        self.strings = {name: _Strings(column(name), source) for name in ("chunk_id", "thread_id", "text", "content_hash")}
        self.lists = {name: np.array(_offsets(column(name))) for name in TUPLES}
        self.ids = _Strings(column("message_ids").values, source)
        self.seqs = _Int64s(column("message_seqs").values, source)
        self.ends = _Int64s(column("line_ends").values, source)

    def window(self, i: int, thread_id: str) -> SavedWindow:
        ids, seqs, ends = (o[i:i + 2].tolist() for o in (self.lists[n] for n in TUPLES))
        first, last = int(self.ints["from_seq"][i]), int(self.ints["to_seq"][i])
        return SavedWindow(thread_id, first, last, self.ids.run(*ids), self._seqs(first, last, *seqs),
                           self.strings["text"][i], self.ends.run(*ends))

    def chunk(self, i: int) -> Chunk:
        ids, seqs, ends = (o[i:i + 2].tolist() for o in (self.lists[n] for n in TUPLES))
        first, last = int(self.ints["from_seq"][i]), int(self.ints["to_seq"][i])
        return Chunk(
            chunk_id=self.strings["chunk_id"][i], thread_id=self.strings["thread_id"][i],
            from_seq=first, to_seq=last, message_ids=self.ids.run(*ids), message_seqs=self._seqs(first, last, *seqs),
            text=self.strings["text"][i], content_hash=self.strings["content_hash"][i],
            n_tokens=int(self.ints["n_tokens"][i]), part=int(self.ints["part"][i]), line_ends=self.ends.run(*ends),
        )

    def spans(self, i: int) -> tuple[tuple[int, int], ...]:
        """Where `window(i)` reads in the chunk file: its ids, text and line ends (seqs rarely)."""
        ids, ends = self.lists["message_ids"][i:i + 2].tolist(), self.lists["line_ends"][i:i + 2].tolist()
        return self.ids.span(*ids), self.strings["text"].span(i, i + 1), self.ends.span(*ends)

    def _seqs(self, first: int, last: int, start: int, stop: int) -> tuple[int, ...]:
        """A window's seqs rise strictly from its first to its last (chunking's slices of a thread in seq
        order): as many as the span holds are every seq of it, with no read (most windows)."""
        if stop - start == last - first + 1:
            return tuple(range(first, last + 1))
        return self.seqs.run(start, stop)


class ChunkSource:
    """Reads byte ranges of Arrow buffers: with `pread` when they lie in the mapped chunk file,
    else (a table in memory: an older Parquet shard) from the buffer itself."""

    def __init__(self, file: BinaryIO | None = None, base: int = 0) -> None:
        self.fd, self.base = (file.fileno() if file is not None else None), base
        self.file = file  # kept open as long as the readers

    def reader(self, buffer: pa.Buffer | None) -> Callable[[int, int], bytes]:
        if buffer is None:
            return lambda a, b: b""
        if self.fd is None:
            view = memoryview(buffer)
            return lambda a, b: bytes(view[a:b])
        fd, at = self.fd, buffer.address - self.base
        return lambda a, b: os.pread(fd, b - a, at + a)

    def at(self, buffer: pa.Buffer | None) -> int | None:
        """Where a buffer starts in the chunk file; None when it is not read from the file."""
        return None if self.fd is None or buffer is None else buffer.address - self.base

    def advise(self, spans: list[tuple[int, int]]) -> None:
        if self.fd is not None:
            advise(self.fd, spans)


@contextmanager
def _damage_reported() -> Iterator[None]:
    """Text the file holds that is not UTF-8 is a damaged file (the table is read lazily, so only a
    read finds it): an index error that says how to rebuild, not a UnicodeDecodeError."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise IndexStateError(f"a window's text in a saved chunk table is damaged ({exc.reason} at byte {exc.start}): "
                              "run `convsearch doctor --repair` (or `convsearch reindex --user USER`)") from None


def _offsets(array: pa.Array) -> np.ndarray:
    """The value offsets of a (list or string) array with no nulls, zero-copy."""
    return np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset:array.offset + len(array) + 1]


class _Strings:
    def __init__(self, array: pa.Array, source: ChunkSource) -> None:
        self.offsets, self.read = np.array(_offsets(array)), source.reader(array.buffers()[2])
        self.at = source.at(array.buffers()[2])

    def __getitem__(self, i: int) -> str:
        with _damage_reported():
            return str(self.read(int(self.offsets[i]), int(self.offsets[i + 1])), "utf-8")

    def run(self, first: int, stop: int) -> tuple[str, ...]:
        """Strings first..stop-1, read in one go."""
        ends = self.offsets[first:stop + 1].tolist()
        data = self.read(ends[0], ends[-1])
        with _damage_reported():
            return tuple(str(data[a - ends[0]:b - ends[0]], "utf-8") for a, b in zip(ends, ends[1:]))

    def span(self, first: int, stop: int) -> tuple[int, int]:
        """The file's (offset, length) that `run(first, stop)` reads; (0, 0) when not read from a file."""
        if self.at is None:
            return 0, 0
        start = int(self.offsets[first])
        return self.at + start, int(self.offsets[stop]) - start


class _Int64s:
    def __init__(self, array: pa.Array, source: ChunkSource) -> None:
        self.offset, self.read = array.offset, source.reader(array.buffers()[1])
        self.at = source.at(array.buffers()[1])

    def run(self, first: int, stop: int) -> tuple[int, ...]:
        data = self.read(8 * (self.offset + first), 8 * (self.offset + stop))
        return tuple(np.frombuffer(data, dtype=np.int64).tolist())

    def span(self, first: int, stop: int) -> tuple[int, int]:
        """The file's (offset, length) that `run(first, stop)` reads; (0, 0) when not read from a file."""
        return (0, 0) if self.at is None else (self.at + 8 * (self.offset + first), 8 * (stop - first))
