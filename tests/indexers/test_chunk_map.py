"""ChunkMap: saved windows read back from the memory-mapped file equal the objects written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from indexers.chunk_map import CHUNK_FILE, ChunkMap, SavedWindow, read_chunk_columns, write_chunks
from indexers.label_set import LabelSet
from indexers.chunking import Chunk


def _chunk(i: int, thread: str = "t1") -> Chunk:
    lines = [f"Alice: message {i} é", f"Bob: reply {i}"]
    text = "\n".join(lines)
    return Chunk(chunk_id=f"c{i}", thread_id=thread, from_seq=2 * i + 1, to_seq=2 * i + 2,
                 message_ids=(f"m{2 * i}", f"m{2 * i + 1}"), message_seqs=(2 * i + 1, 2 * i + 2), text=text,
                 content_hash=f"h{i}", n_tokens=7 + i, part=0, line_ends=(len(lines[0]), len(text)))


def _saved(tmp_path: Path, n: int = 10) -> tuple[dict[int, Chunk], ChunkMap]:
    chunks = {label: _chunk(label, "t1" if label % 3 else "t2") for label in range(n)}
    write_chunks(ChunkMap(chunks), LabelSet(x for x in chunks if x % 2 == 0), tmp_path / CHUNK_FILE)
    return chunks, ChunkMap.open(tmp_path / CHUNK_FILE)


def test_saved_windows_read_back_equal(tmp_path: Path) -> None:
    chunks, loaded = _saved(tmp_path)
    assert len(loaded) == 10 and sorted(loaded) == list(range(10))
    assert all(loaded[label] == chunk for label, chunk in chunks.items())
    assert loaded[3].message_lines() == chunks[3].message_lines()
    assert sorted(loaded.saved_flagged()) == [0, 2, 4, 6, 8]
    assert 10 not in loaded and "3" not in loaded
    with pytest.raises(KeyError):
        loaded[10]


def test_a_windows_seqs_read_back_with_or_without_a_gap(tmp_path: Path) -> None:
    """A window's seqs are read only when they skip one (a note between two turns); the others are its span."""
    def gapped(i: int) -> Chunk:
        chunk = _chunk(i)
        seqs = (2 * i + 1, 2 * i + 3, 2 * i + 4) if i % 2 else (2 * i + 1, 2 * i + 2, 2 * i + 3)
        return Chunk(chunk_id=chunk.chunk_id, thread_id="t1", from_seq=seqs[0], to_seq=seqs[-1],
                     message_ids=(*chunk.message_ids, f"x{i}"), message_seqs=seqs, text=chunk.text + "\nCarol: ok",
                     content_hash=chunk.content_hash, n_tokens=9, part=0, line_ends=(*chunk.line_ends, len(chunk.text) + 10))
    chunks = {label: gapped(label) for label in range(8)}
    write_chunks(ChunkMap(chunks), LabelSet(), tmp_path / CHUNK_FILE)
    loaded = ChunkMap.open(tmp_path / CHUNK_FILE)
    assert [loaded.window(label).message_seqs for label in chunks] == [c.message_seqs for c in chunks.values()]
    assert all(loaded[label] == chunk for label, chunk in chunks.items())


def _as_read(window: object) -> tuple:
    fields = ("thread_id", "from_seq", "to_seq", "message_ids", "message_seqs", "text", "line_ends")
    return tuple(getattr(window, name) for name in fields) + (window.message_lines(),)  # type: ignore[attr-defined]


def test_a_search_reads_what_the_window_holds_and_never_a_stale_one(tmp_path: Path) -> None:
    """`window` gives a saved window's place, messages and text (its thread from the codes held in
    memory) and a fresh one as it is; a deleted or replaced label is never served from the memo."""
    chunks, loaded = _saved(tmp_path)
    for label, chunk in chunks.items():
        saved = loaded.window(label)
        assert isinstance(saved, SavedWindow) and _as_read(saved) == _as_read(chunk)
        assert loaded.window(label) is saved  # kept for the next search
    del loaded[4]
    loaded[5] = _chunk(50, "t3")
    loaded[13] = _chunk(13, "t2")
    with pytest.raises(KeyError):
        loaded.window(4)
    assert loaded.window(5) == _chunk(50, "t3") and loaded.window(13) == _chunk(13, "t2")
    with pytest.raises(KeyError):
        loaded.window(99)


def test_changes_after_load_and_spans(tmp_path: Path) -> None:
    chunks, loaded = _saved(tmp_path)
    del loaded[4]
    loaded[5] = _chunk(50)  # a saved label given a new window
    loaded[12] = _chunk(12, "t3")
    with pytest.raises(KeyError):
        del loaded[4]
    assert 4 not in loaded and loaded[5] == _chunk(50) and len(loaded) == 10
    labels, threads, lows, highs = loaded.spans()
    assert labels.tolist() == [0, 1, 2, 3, 5, 6, 7, 8, 9, 12]
    assert (threads == loaded.thread_code("t3")).sum() == 1 and loaded.thread_code("nope") == -1
    assert lows.tolist() == [loaded[x].from_seq for x in labels] and highs.tolist() == [loaded[x].to_seq for x in labels]
    write_chunks(loaded, LabelSet([0, 12]), tmp_path / "again.arrow")
    again = ChunkMap.open(tmp_path / "again.arrow")
    assert {x: again[x] for x in again} == {x: loaded[x] for x in loaded}
    assert sorted(again.saved_flagged()) == [0, 12]


def test_a_batch_put_is_the_same_as_putting_one_at_a_time(tmp_path: Path) -> None:
    """A batch that replaces a saved window and a fresh one, adds new ones past the arrays' first
    size and repeats a label leaves the map as single puts do."""
    _, one_by_one = _saved(tmp_path)
    batched = ChunkMap.open(tmp_path / CHUNK_FILE)
    for loaded in (one_by_one, batched):
        loaded[11] = _chunk(11)
    puts = [(5, _chunk(50)), (11, _chunk(110, "t3")), *((label, _chunk(label, "t4")) for label in range(20, 1500)),
            (20, _chunk(200))]
    for label, chunk in puts:
        one_by_one[label] = chunk
    batched.put_many([label for label, _ in puts], [chunk for _, chunk in puts])
    assert {x: batched[x] for x in batched} == {x: one_by_one[x] for x in one_by_one} and len(batched) == len(one_by_one)
    assert all(np.array_equal(a, b) for a, b in zip(batched.spans(), one_by_one.spans()))
    assert batched.thread_code("t4") == one_by_one.thread_code("t4") >= 0
    with pytest.raises(ValueError, match="2 labels but 1 windows"):
        batched.put_many([1, 2], [_chunk(1)])


def test_large_files_are_written_in_batches(tmp_path: Path) -> None:
    chunks = {label: _chunk(label) for label in range(70_000)}
    write_chunks(ChunkMap(chunks), LabelSet(), tmp_path / CHUNK_FILE)
    reader = pa.ipc.open_file(pa.memory_map(str(tmp_path / CHUNK_FILE), "r"))
    assert reader.num_record_batches == 2
    loaded = ChunkMap.open(tmp_path / CHUNK_FILE)
    assert loaded[69_999] == chunks[69_999] and loaded[65_536] == chunks[65_536]
    table = read_chunk_columns(tmp_path, ["label"])
    assert np.array_equal(table.column("label").to_numpy(), np.arange(70_000))


def test_sparse_labels_are_found_too(tmp_path: Path) -> None:
    chunks = {label: _chunk(i) for i, label in enumerate([3, 10**9, 2**40])}
    write_chunks(ChunkMap(chunks), LabelSet(), tmp_path / CHUNK_FILE)
    loaded = ChunkMap.open(tmp_path / CHUNK_FILE)
    assert all(loaded[label] == chunk for label, chunk in chunks.items())
    assert 4 not in loaded and sorted(loaded) == sorted(chunks)


def test_columns_give_every_live_window_once_saved_and_fresh(tmp_path: Path) -> None:
    _, loaded = _saved(tmp_path)
    del loaded[4]
    loaded[5] = _chunk(50)  # the saved row of label 5 is dead, its new window fresh
    loaded[12] = _chunk(12, "t3")
    rows = [(h, text, tuple(ends)) for part in loaded.columns(("content_hash", "text", "line_ends"))
            for h, text, ends in zip(part["content_hash"], part["text"], part["line_ends"])]
    expected = [(c.content_hash, c.text, c.line_ends) for c in (loaded[x] for x in loaded)]
    assert sorted(rows) == sorted(expected) and len(rows) == 10
    assert "h4" not in {h for h, _, _ in rows} and "h5" not in {h for h, _, _ in rows}
