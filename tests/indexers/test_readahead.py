"""Readahead: when a search's first read waited for the disk, the rest of its reads are advised to the
kernel together, and exactly the bytes those reads then take; from the page cache nothing is advised."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

import indexers.chunk_map as chunk_map
import indexers.chunk_reads as chunk_reads
import indexers.message_vectors as message_vectors
from indexers import readahead
from indexers.chunk_map import CHUNK_FILE, ChunkMap, write_chunks
from indexers.chunking import Chunk
from indexers.label_set import LabelSet
from tests.support import saved_message_vectors


def _saved_windows(tmp_path: Path, n: int = 12) -> tuple[dict[int, Chunk], ChunkMap]:
    chunks = {}
    for i in range(n):
        lines = [f"Alice: note {i} " + "word " * i, f"Bob: reply é {i}"][: 1 + i % 2]
        text = "\n".join(lines)
        ends = tuple(len("\n".join(lines[:k + 1])) for k in range(len(lines)))
        chunks[i] = Chunk(chunk_id=f"c{i}", thread_id="t1", from_seq=2 * i + 1, to_seq=2 * i + len(lines),
                          message_ids=tuple(f"m{i}-{k}" for k in range(len(lines))),
                          message_seqs=tuple(range(2 * i + 1, 2 * i + 1 + len(lines))), text=text,
                          content_hash=f"h{i}", n_tokens=5, part=0, line_ends=ends)
    write_chunks(ChunkMap(chunks), LabelSet(), tmp_path / CHUNK_FILE)
    return chunks, ChunkMap.open(tmp_path / CHUNK_FILE)


class _Recorder:
    """Every `pread` (offset, length) and every span advised, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, advising: object, timing: object, *, slow: bool) -> None:
        self.reads: list[tuple[int, int]] = []
        self.advised: list[tuple[int, int]] = []
        real_pread = os.pread

        def pread(fd: int, length: int, offset: int) -> bytes:
            self.reads.append((offset, length))
            return real_pread(fd, length, offset)

        monkeypatch.setattr(os, "pread", pread)
        monkeypatch.setattr(advising, "advise", lambda fd, spans: self.advised.extend(s for s in spans if s[1] > 0))
        monkeypatch.setattr(timing, "timed_read", lambda read: (read(), slow))


def test_a_slow_first_window_advises_exactly_what_the_others_read(tmp_path: Path, monkeypatch) -> None:
    chunks, loaded = _saved_windows(tmp_path)
    recorded = _Recorder(monkeypatch, chunk_reads, chunk_map, slow=True)
    loaded.window(5)  # held already: neither read again nor advised
    recorded.reads.clear()
    loaded.prefetch([5, 2, 7, 11, 3])
    assert len(recorded.reads) == 3  # the first window not held, read now: ids, text, line ends
    recorded.reads.clear()
    opened = [loaded.window(label) for label in (2, 7, 11, 3)]
    assert sorted(recorded.reads) == sorted(recorded.advised)  # 2 was read by the prefetch: no read left
    assert len(recorded.advised) == 9
    assert [(w.message_ids, w.text, w.line_ends) for w in opened] == \
        [(chunks[x].message_ids, chunks[x].text, chunks[x].line_ends) for x in (2, 7, 11, 3)]


def test_a_first_window_from_the_cache_advises_nothing(tmp_path: Path, monkeypatch) -> None:
    _, loaded = _saved_windows(tmp_path)
    recorded = _Recorder(monkeypatch, chunk_reads, chunk_map, slow=False)
    loaded.prefetch([4, 6, 8])
    assert recorded.advised == [] and len(recorded.reads) == 3
    loaded.window(4)
    assert len(recorded.reads) == 3  # the first is held now


def test_a_slow_first_vector_advises_the_other_rows(tmp_path: Path, monkeypatch) -> None:
    rng = np.random.default_rng(3)
    vectors, loaded = saved_message_vectors(tmp_path, [f"m{i:03d}" for i in range(50)], 8, rng)
    query = rng.standard_normal(8).astype(np.float32)
    wanted = ["m040", "m003", "m017", "m029"]
    expected = loaded.similarities(wanted, query)
    recorded = _Recorder(monkeypatch, message_vectors, message_vectors, slow=True)
    np.testing.assert_array_equal(loaded.similarities(wanted, query), expected)
    assert len(recorded.reads) == 4 and recorded.advised == recorded.reads[1:]
    np.testing.assert_allclose(expected, vectors[[40, 3, 17, 29]].astype(np.float16).astype(np.float32) @ query,
                               rtol=1e-6)


def test_timed_read_times_the_read_and_advise_skips_empty_spans(monkeypatch) -> None:
    assert readahead.timed_read(lambda: time.sleep(10 * readahead.SLOW_READ_S)) == (None, True)
    assert readahead.timed_read(lambda: b"row") == (b"row", False)
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(readahead, "_ADVISE", lambda fd, start, length, advice: calls.append((fd, start, length)))
    readahead.advise(9, [(0, 0), (4096, 10), (100, 0)])  # a length of 0 would advise the whole file
    assert calls == [(9, 4096, 10)]
