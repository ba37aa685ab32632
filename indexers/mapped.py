"""Memory-mapped arrays that stay out of the resident set after a pass over all of them."""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["release", "drop_pages"]


def release(*arrays: np.ndarray) -> None:
    """Drop the pages of these memory-mapped arrays from this process's resident memory.

    Why: a load checks every posting (or reads every label), which faults the whole file in; the
    pages then count as resident though a search reads few of them. The page cache keeps them and
    the next read maps them back, so nothing changes but what the process holds. Arrays that are
    not memory-mapped are left alone."""
    for array in arrays:
        mapping = getattr(array, "_mmap", None)  # numpy.memmap and its views
        if isinstance(mapping, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            mapping.madvise(mmap.MADV_DONTNEED)


def drop_pages(mapping: mmap.mmap | None) -> None:
    """Unmap the resident pages of a read-only file mapping (the next read maps them back from
    the page cache). Why after every read of a few rows: the page cache holds a freshly written
    file in large folios, and a fault maps a whole folio (up to 2 MB) for one 768-byte row, so
    without this a few searches made most of the file resident in the process. Safe with
    concurrent readers: the pages are clean and file-backed, a reader faults them in again."""
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)
