"""Reading NumPy's .npy and .npz files from any thread.

NumPy reads a file's header with `ast.literal_eval`, and CPython 3.11 keeps the AST constructor's
recursion depth per interpreter, not per thread: a parse that a garbage collection's finalizer
pauses, while another thread parses, fails with SystemError "AST constructor recursion depth
mismatch" (python/cpython#106905). A shard's load reads its graph's labels on a thread beside its
BM25 arrays, and a server may load two users' indexes at once: the fresh-clone CI of 2405e66 failed
on it once, in a shard load after a Ray reindex. Every read here goes under one lock; the large
arrays are memory-mapped, so the lock is held for their headers and little more.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Literal

import numpy as np

__all__ = ["load_array", "load_members"]

_READING = threading.Lock()


def load_array(path: Path, *, mmap_mode: Literal["r"] | None = None) -> np.ndarray:
    """`np.load` of one .npy file (no pickles), one thread at a time."""
    with _READING:
        return np.load(path, allow_pickle=False, mmap_mode=mmap_mode)


def load_members(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """These arrays of one .npz file (no pickles), read into memory one thread at a time."""
    with _READING, np.load(path, allow_pickle=False) as members:
        return {name: members[name] for name in names}
