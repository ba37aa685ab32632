"""Fewer garbage collections while the engine writes.

A bulk ingest or an index build allocates hundreds of thousands of containers that live on
(memoised text records, rows, index entries). At CPython's default first threshold (700 new
containers) each write triggers hundreds of young collections, and every tenth of those promotes
into the older generations, which are walked again and again as they grow: measured, a tenth of a
20k-message ingest's CPU (`gc.callbacks`: 1.1 s of collection in 8 full passes, 0.3 s with the
first threshold at 20,000). The threshold goes back when the last writer leaves, so a server's
reads collect as before; collections put off during a write run right after it.

Who raises it: every facade write (engine/facade_edges.py), an import, an index's catch-up from the
store (a load's too: it is a build, whoever asked), a distributed build's task, and a worker process
for its whole life (engine/subprocesses.py: it only runs a write's work).
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["WRITE_THRESHOLD", "fewer_collections"]

WRITE_THRESHOLD = 20_000
"""New containers between young collections while a write runs (CPython's default is 700)."""

_lock = threading.Lock()
_writers = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def fewer_collections(threshold: int = WRITE_THRESHOLD) -> Iterator[None]:
    """Raise the collector's first threshold for the duration (process-wide; nested and concurrent
    writers share one raise, the first in saves the thresholds, the last out restores them)."""
    global _writers, _saved
    with _lock:
        if _writers == 0:
            _saved = gc.get_threshold()
            if _saved[0] < threshold:
                gc.set_threshold(threshold, *_saved[1:])
        _writers += 1
    try:
        yield
    finally:
        with _lock:
            _writers -= 1
            if _writers == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
