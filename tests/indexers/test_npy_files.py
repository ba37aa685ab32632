"""NumPy files are read one thread at a time: NumPy parses their headers with `ast.literal_eval`, and
two parses at once in CPython 3.11 can fail with SystemError (indexers/npy_files.py)."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from indexers.npy_files import load_array, load_members


def _most_at_once(monkeypatch: pytest.MonkeyPatch, read: Callable[[], object], threads: int = 4) -> int:
    """The most header parses under way at once while `threads` threads each `read` together (every
    parse made to last 20 ms, so that unguarded reads overlap)."""
    real = ast.literal_eval
    inside, most, guard = [0], [0], threading.Lock()

    def slow(text: str) -> object:
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        try:
            return real(text)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(ast, "literal_eval", slow)
    start = threading.Barrier(threads)
    workers = [threading.Thread(target=lambda: (start.wait(), read())) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return most[0]


def test_no_two_threads_parse_a_header_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    np.save(tmp_path / "a.npy", np.arange(5))
    np.savez(tmp_path / "b.npz", labels=np.arange(3), texts=np.frombuffer(b"abc", np.uint8))
    assert _most_at_once(monkeypatch, lambda: np.load(tmp_path / "a.npy")) > 1  # the check sees an overlap
    assert _most_at_once(monkeypatch, lambda: load_array(tmp_path / "a.npy", mmap_mode="r")) == 1
    assert _most_at_once(monkeypatch, lambda: load_members(tmp_path / "b.npz", ("labels", "texts"))) == 1
    assert load_array(tmp_path / "a.npy").tolist() == [0, 1, 2, 3, 4]
    assert load_members(tmp_path / "b.npz", ("labels",))["labels"].tolist() == [0, 1, 2]
