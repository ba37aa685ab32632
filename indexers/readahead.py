"""Ask the kernel to read a search's scattered byte spans of a file together, when the disk is waited for.

Why: a search reads ~50 windows and ~70 message vectors from the shard's files, one `pread` after
another. When the page cache has let those pages go (an idle shard; a host that pages out cold
memory), each read waits for the disk in turn: 50 windows took 16 ms, ~0.3 ms each. Advised
first, the disk serves them all at once and the same reads took 3 ms. On cached pages the advice
would cost ~8 us a window (finding its spans, three calls) for nothing, so a reader first reads one
span and times it (`timed_read`), and advises the rest only when that one came from the disk.
The bytes read are the same either way.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterable, TypeVar

__all__ = ["advise", "timed_read", "SLOW_READ_S"]

SLOW_READ_S = 50e-6  # a window read from the page cache takes ~15 us with its decoding, from this VM's disk ~300

T = TypeVar("T")

_ADVISE = getattr(os, "posix_fadvise", None)  # not on macOS or Windows: reads then wait in turn


def advise(fd: int, spans: Iterable[tuple[int, int]]) -> None:
    """Start reading these (offset, length) spans of the open file `fd` into the page cache."""
    if _ADVISE is None:
        return
    for start, length in spans:
        if length > 0:  # a length of 0 would mean "to the end of the file"
            _ADVISE(fd, start, length, os.POSIX_FADV_WILLNEED)


def timed_read(read: Callable[[], T]) -> tuple[T, bool]:
    """Run one read: what it gave, and whether it took as long as a read that waits for the disk."""
    started = time.perf_counter()
    found = read()
    return found, time.perf_counter() - started >= SLOW_READ_S
