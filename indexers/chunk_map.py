"""The windows of one shard by label: saved ones stay in a memory-mapped Arrow file.

At a million messages the windows held as Python objects (text, ids, hashes, tuples) took about
1.5 KB each, as much as the rest of the shard. Saved windows are therefore read from the version's
uncompressed Arrow IPC file: it is memory-mapped to find its buffers, and a search reads the few
windows it cites with `pread`, so no page of it stays in the process. Windows added since the load
(or the last save) live in a dict until the next save. Where each window lies (thread, first and
last seq) is kept as numpy columns, so the filters and the re-chunking of a thread's tail never
build a Chunk per window.
"""

from __future__ import annotations

import mmap
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from indexers.chunk_reads import TUPLES, BatchReader, ChunkSource, SavedWindow
from indexers.chunking import Chunk, Window
from indexers.label_set import LabelSet
from indexers.mapped import drop_pages
from indexers.readahead import timed_read

__all__ = ["CHUNK_SCHEMA", "CHUNK_FILE", "ChunkMap", "SavedWindow", "Spans", "write_chunks", "read_chunk_columns"]

CHUNK_FILE = "chunks.arrow"
_OLD_CHUNK_FILE = "chunks.parquet"  # shards saved before the chunk file was memory-mapped

CHUNK_SCHEMA = pa.schema([
    ("label", pa.int64()), ("chunk_id", pa.string()), ("thread_id", pa.string()),
    ("from_seq", pa.int64()), ("to_seq", pa.int64()), ("message_ids", pa.list_(pa.string())),
    ("message_seqs", pa.list_(pa.int64())), ("text", pa.string()), ("content_hash", pa.string()),
    ("n_tokens", pa.int32()), ("part", pa.int32()), ("line_ends", pa.list_(pa.int64())), ("has_vector", pa.bool_()),
])
_FIELDS = ("chunk_id", "thread_id", "from_seq", "to_seq", "message_ids", "message_seqs", "text", "content_hash",
           "n_tokens", "part", "line_ends")
_BATCH = 65_536  # rows per record batch: string offsets stay 32-bit at any size
_MEMO = 4096  # saved windows kept as objects once read (the hot ones of recent searches)

Spans = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # labels, thread codes, from_seq, to_seq
_Read = TypeVar("_Read", Chunk, "SavedWindow")  # what a saved row is read as


class ChunkMap(MutableMapping[int, Chunk]):
    """label -> Chunk; the saved rows are read on demand, the fresh ones are objects."""

    def __init__(self, fresh: dict[int, Chunk] | None = None, saved: pa.Table | None = None,
                 source: "ChunkSource | None" = None) -> None:
        self._fresh: dict[int, Chunk] = {}
        # the fresh windows' spans, appended as they come (a row per put; replaced ones marked dead),
        # so `spans` after each ingest costs array copies, not a pass over every fresh object
        self._fresh_spans = np.zeros((0, 4), dtype=np.int64)  # label, thread code, from_seq, to_seq
        self._fresh_live = np.zeros(0, dtype=bool)
        self._fresh_at: dict[int, int] = {}  # fresh label -> its row in _fresh_spans
        self._fresh_n = 0
        self._batches: list[pa.RecordBatch] = [] if saved is None else saved.to_batches()
        sizes = [b.num_rows for b in self._batches]
        self._starts: list[int] = np.cumsum([0, *sizes])[:-1].tolist()  # a list: bisect is ~10x a searchsorted's call
        def column(name: str) -> np.ndarray:
            batches = self._batches
            return np.concatenate([b.column(name).to_numpy() for b in batches]) if batches else np.zeros(0, np.int64)

        labels = column("label")
        self._row_of = _row_index(labels)
        self._order = np.argsort(labels, kind="stable") if self._row_of is None else None
        self._sorted = labels[self._order] if self._order is not None else None
        self._labels, self._from, self._to = labels, column("from_seq"), column("to_seq")
        self._alive = np.ones(len(labels), dtype=bool)
        self._threads: dict[str, int] = {}
        self._thread_names: list[str] = []  # code -> thread id
        self._thread_codes = np.concatenate([self._codes(b.column("thread_id")) for b in self._batches]) \
            if self._batches else np.zeros(0, np.int32)
        self._count = len(labels)
        self._top = int(labels.max()) if len(labels) else -1  # the largest label put or saved so far
        self._memo: dict[int, Chunk] = {}
        self._window_memo: dict[int, SavedWindow] = {}
        self._source = source or ChunkSource()  # holds the chunk file open for the readers' pread
        self._readers = [BatchReader(batch, self._source) for batch in self._batches]
        self._mapping: mmap.mmap | None = None
        fresh = fresh or {}
        self.put_many(list(fresh), list(fresh.values()))

    @classmethod
    def open(cls, path: Path) -> "ChunkMap":
        """The windows of a saved chunk file, memory-mapped (raises OSError or ArrowException)."""
        handle = open(path, "rb")
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        whole = pa.py_buffer(mapping)
        loaded = cls(saved=pa.ipc.open_file(whole).read_all(), source=ChunkSource(handle, whole.address))
        loaded._mapping = mapping
        drop_pages(mapping)  # building the spans and readers read whole columns; searches use pread
        return loaded

    def _codes(self, threads: pa.Array) -> np.ndarray:
        encoded = threads.dictionary_encode()
        names = encoded.dictionary.to_pylist()
        remap = np.array([self._code(n) for n in names], dtype=np.int32)
        return remap[encoded.indices.to_numpy()] if len(names) else np.zeros(len(threads), np.int32)

    def _code(self, thread_id: str) -> int:
        """The thread's code in `spans`, given on first sight."""
        code = self._threads.get(thread_id)
        if code is None:
            code = self._threads[thread_id] = len(self._thread_names)
            self._thread_names.append(thread_id)
        return code

    # Mapping --------------------------------------------------------------------------------
    def _row(self, label: int) -> int:
        """The saved row of a live saved label, or -1."""
        if self._row_of is not None:
            row = int(self._row_of[label]) if 0 <= label < len(self._row_of) else -1
        else:  # sparse labels: a binary search
            assert self._sorted is not None and self._order is not None
            at = int(np.searchsorted(self._sorted, label))
            row = int(self._order[at]) if at < len(self._sorted) and self._sorted[at] == label else -1
        return row if row >= 0 and self._alive[row] else -1

    def __getitem__(self, label: int) -> Chunk:
        found = self._fresh.get(label)
        if found is not None:
            return found
        found = self._memo.get(label)
        return found if found is not None else self._from_file(label, self._memo, self._read)

    def window(self, label: int) -> Window:
        """The window as a search reads it: a saved one as a `SavedWindow` (KeyError if absent)."""
        found: Window | None = self._fresh.get(label) or self._memo.get(label) or self._window_memo.get(label)
        return found if found is not None else self._from_file(label, self._window_memo, self._read_window)

    def prefetch(self, labels: Iterable[int]) -> None:
        """Open these windows soon. The first one not held is read now; when it had to wait for the disk
        (the page cache let the file go), the rest are asked of the kernel together (`indexers/readahead.py`),
        so a search's reads do not each wait in turn. From the cache, nothing more is done."""
        unread = (label for label in labels if not self._holds(label) and self._row(label) >= 0)
        first = next(unread, None)
        if first is None or not timed_read(lambda: self.window(first))[1]:
            return
        spans: list[tuple[int, int]] = []
        for label in unread:
            reader, at = self._reader_of(self._row(label))
            spans.extend(reader.spans(at))
        self._source.advise(spans)

    def _holds(self, label: int) -> bool:
        return label in self._fresh or label in self._window_memo or label in self._memo

    def _from_file(self, label: int, memo: dict[int, _Read], read: Callable[[int], _Read]) -> _Read:
        """A saved window read from the file (KeyError if there is none live) and kept in `memo`,
        which forgets everything when full."""
        row = self._row(label) if isinstance(label, (int, np.integer)) else -1
        if row < 0:
            raise KeyError(label)
        if len(memo) >= _MEMO:
            memo.clear()
        found = memo[int(label)] = read(row)
        return found

    def _read(self, row: int) -> Chunk:
        reader, at = self._reader_of(row)
        return reader.chunk(at)

    def _read_window(self, row: int) -> SavedWindow:
        reader, at = self._reader_of(row)
        return reader.window(at, self._thread_names[int(self._thread_codes[row])])

    def _reader_of(self, row: int) -> tuple[BatchReader, int]:
        """The reader of the batch holding a saved row, and the row's place in it."""
        batch_no = bisect_right(self._starts, row) - 1
        return self._readers[batch_no], row - self._starts[batch_no]

    def __contains__(self, label: object) -> bool:
        if label in self._fresh:
            return True
        return isinstance(label, (int, np.integer)) and self._row(int(label)) >= 0

    def __setitem__(self, label: int, chunk: Chunk) -> None:
        self.put_many([label], [chunk])

    def put_many(self, labels: Sequence[int], chunks: Sequence[Chunk]) -> None:
        """Put windows by label (a label held already has its window replaced), their spans appended
        as one block: a 100k build puts 130k windows, which one at a time took 0.16 s (now 0.06)."""
        if len(labels) != len(chunks):
            raise ValueError(f"put_many() got {len(labels)} labels but {len(chunks)} windows")
        keys = [int(label) for label in labels]
        last = dict(zip(keys, range(len(keys))))
        if len(last) < len(keys):  # a label given twice: its last window is the one put
            keys, chunks = list(last), [chunks[at] for at in last.values()]
        if keys and min(keys) <= self._top:  # a build's labels are all past every label put before
            for label in [label for label in keys if label in self]:
                del self[label]
        self._top = max([self._top, *keys])
        start, count = self._fresh_n, len(keys)
        if start + count > len(self._fresh_live):  # grow geometrically: amortised O(1) a put
            grown = max(1024, 2 * start, start + count)
            self._fresh_spans = np.resize(self._fresh_spans, (grown, 4))
            self._fresh_live = np.concatenate((self._fresh_live, np.zeros(grown - len(self._fresh_live), dtype=bool)))
        block = self._fresh_spans[start:start + count]
        block[:, 0] = keys
        block[:, 1] = np.fromiter(map(self._code, (chunk.thread_id for chunk in chunks)), np.int64, count)
        block[:, 2] = np.fromiter((chunk.from_seq for chunk in chunks), np.int64, count)
        block[:, 3] = np.fromiter((chunk.to_seq for chunk in chunks), np.int64, count)
        self._fresh_live[start:start + count] = True
        self._fresh.update(zip(keys, chunks))
        self._fresh_at.update(zip(keys, range(start, start + count)))
        self._fresh_n += count

    def __delitem__(self, label: int) -> None:
        if not self._drop_fresh(label) and not self._drop_saved(label):
            raise KeyError(label)

    def _drop_fresh(self, label: object) -> bool:
        if self._fresh.pop(label, None) is None:  # type: ignore[call-overload]
            return False
        self._fresh_live[self._fresh_at.pop(label)] = False  # type: ignore[call-overload]
        return True

    def _drop_saved(self, label: int) -> bool:
        row = self._row(int(label)) if isinstance(label, (int, np.integer)) else -1
        if row < 0:
            return False
        self._alive[row] = False
        self._count -= 1
        self._memo.pop(int(label), None)
        self._window_memo.pop(int(label), None)
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(self._labels[self._alive].tolist() + list(self._fresh))

    def __len__(self) -> int:
        return self._count + len(self._fresh)

    # Columns --------------------------------------------------------------------------------
    def saved_flagged(self) -> np.ndarray:
        """Labels of the live saved windows whose has_vector column is set."""
        if not self._batches:
            return np.zeros(0, dtype=np.int64)
        flags = np.concatenate([b.column("has_vector").to_numpy(zero_copy_only=False) for b in self._batches])
        return self._labels[flags & self._alive]

    def thread_code(self, thread_id: str) -> int:
        """The code of a thread in `spans`, -1 for a thread without windows here."""
        return self._threads.get(thread_id, -1)

    def spans(self) -> Spans:
        """Labels, thread codes, first and last seq of every window, by ascending label."""
        saved = (column[self._alive] for column in self.saved_spans())
        labels, codes, lows, highs = (np.concatenate(pair) for pair in zip(saved, self.fresh_spans()))
        order = np.argsort(labels, kind="stable")
        return labels[order], codes[order], lows[order], highs[order]

    def saved_spans(self) -> Spans:
        """`spans` of every saved row, removed ones included, in file order: they stay as they are for
        the map's life, so what is built from them outlives the changes (a removed label is not `in` it)."""
        return self._labels, self._thread_codes, self._from, self._to

    def fresh_spans(self) -> Spans:
        """`spans` of the live windows put since the map was made, in the order they came."""
        fresh = self._fresh_spans[:self._fresh_n][self._fresh_live[:self._fresh_n]]
        return fresh[:, 0], fresh[:, 1].astype(np.int32), fresh[:, 2], fresh[:, 3]

    def batches(self, has_vector: LabelSet) -> Iterator[pa.RecordBatch]:
        """Every window as record batches of CHUNK_SCHEMA: the saved rows still live, then the fresh."""
        for start, batch in zip(self._starts, self._batches):
            alive = self._alive[start:start + batch.num_rows]
            if alive.any():
                kept = batch.filter(pa.array(alive)).drop_columns(["has_vector"])
                vector = has_vector.flags(kept.column("label").to_numpy())
                yield pa.RecordBatch.from_arrays([*kept.columns, pa.array(vector)], schema=CHUNK_SCHEMA)
                drop_pages(self._mapping)  # a save reads every saved window: keep one batch resident at most
        items = sorted(self._fresh.items())
        for start in range(0, len(items), _BATCH):
            part = items[start:start + _BATCH]
            columns: dict[str, list] = {"label": [k for k, _ in part]}
            for name in _FIELDS:
                columns[name] = [list(getattr(c, name)) if name in TUPLES else getattr(c, name) for _, c in part]
            columns["has_vector"] = [k in has_vector for k, _ in part]
            yield pa.RecordBatch.from_pydict(columns, schema=CHUNK_SCHEMA)

    def columns(self, names: tuple[str, ...]) -> Iterator[dict[str, list]]:
        """These fields of every live window, a batch at a time as Python lists. Why: a pass over
        all windows (the cache's live hashes after a reindex) reads whole Arrow columns instead of
        one `pread` per field per window (at 1M windows: ~35 s of a reindex's 330)."""
        for start, batch in zip(self._starts, self._batches):
            alive = pa.array(self._alive[start:start + batch.num_rows])
            yield {name: batch.column(name).filter(alive).to_pylist() for name in names}
            drop_pages(self._mapping)
        fresh = list(self._fresh.values())
        if fresh:
            yield {name: [getattr(c, name) for c in fresh] for name in names}


def _row_index(labels: np.ndarray) -> np.ndarray | None:
    """label -> saved row (-1: none) as a dense int32 array: a shard hands labels out consecutively
    from 0, so it is about as long as the number of windows (4 bytes each) and a lookup is one
    index, not a binary search. None when the labels are too sparse for that."""
    if len(labels) and int(labels.max()) > 4 * len(labels) + 65_536:
        return None
    index = np.full(int(labels.max()) + 1 if len(labels) else 0, -1, dtype=np.int32)
    index[labels] = np.arange(len(labels), dtype=np.int32)
    return index


def write_chunks(chunks: ChunkMap, has_vector: LabelSet, path: Path) -> None:
    """The chunk file: uncompressed Arrow IPC (so a load can memory-map it), in bounded batches."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, CHUNK_SCHEMA) as writer:
        for batch in chunks.batches(has_vector):
            for start in range(0, batch.num_rows, _BATCH):
                writer.write_batch(batch.slice(start, _BATCH))


def read_chunk_columns(version: str | Path, columns: list[str], filesystem: pafs.FileSystem | None = None) -> pa.Table:
    """Some columns of a version's chunk file (an older version's Parquet table too), local or remote."""
    fs = filesystem or pafs.LocalFileSystem()
    path = f"{version}/{CHUNK_FILE}"
    if fs.get_file_info(path).type == pafs.FileType.File:
        if filesystem is None:  # memory-mapped: only the pages of these columns are read
            return pa.ipc.open_file(pa.memory_map(path, "r")).read_all().select(columns)
        with fs.open_input_file(path) as source:
            return pa.ipc.open_file(source).read_all().select(columns)
    return pq.read_table(f"{version}/{_OLD_CHUNK_FILE}", columns=columns, filesystem=fs)


def read_old_chunks(version: Path) -> pa.Table | None:
    """The Parquet chunk table of a version saved before CHUNK_FILE existed, None if it has none."""
    path = Path(version) / _OLD_CHUNK_FILE
    return pq.read_table(path) if path.exists() and not (Path(version) / CHUNK_FILE).exists() else None
