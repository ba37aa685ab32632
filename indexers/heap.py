"""Giving freed memory back to the system after a large transient read or build.

Why: allocators keep what is freed for reuse. glibc's malloc keeps pages whose blocks were freed
between blocks still in use (a user's summary Markdown, read to be tokenized and packed), and
Arrow's pool keeps the buffers of a large query result (a user's summary vectors: ~90 MB at 1M
messages). A serving process does such a read once per user, so what it freed would stay
resident. `malloc_trim` releases every free page, not only the heap's top; without glibc (musl,
macOS) that part is skipped.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Callable

import pyarrow as pa

__all__ = ["release_free_memory"]


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)  # the C library the interpreter runs on
    except OSError:
        return None


def release_free_memory() -> None:
    """Return Arrow's unused buffers and the C heap's free pages to the system."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
