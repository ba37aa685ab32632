"""Memory-mapped files whose pages stay out of the process after a pass over all of them.

Why: a load that checks every posting, or builds columns from a whole file, faults the file in,
and the pages then count as the process's resident memory though a search reads few of them (a
freshly written file sits in the page cache in large folios, so even one read maps up to 2 MB).
Dropping them changes nothing but what the process holds: the page cache keeps them, the next
read maps them back, and readers at the same time just fault them in again (clean file pages).
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["release", "drop_pages"]


def drop_pages(mapping: mmap.mmap | None) -> None:
    """Unmap the resident pages of a read-only file mapping."""
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)


def release(*arrays: np.ndarray) -> None:
    """`drop_pages` for memory-mapped numpy arrays (np.load(mmap_mode=...)); others are left alone."""
    for array in arrays:
        mapping = getattr(array, "_mmap", None)  # numpy.memmap and its views
        if isinstance(mapping, mmap.mmap):
            drop_pages(mapping)
