"""OpenMP threads for faiss's batch inserts, set for the calling thread alone.

Why: faiss inserts a batch on as many OpenMP threads as the calling thread's setting allows. In a
thread that opened an engine that is one: the engine limits BLAS to one thread (engine/blas.py), and
faiss's own OpenBLAS is built on OpenMP, so the limit lands on OpenMP's thread count too (one per
thread: others keep theirs). A large insert then used one core of two (40k vectors: 20.7 s against
9.4 s on both). The graph faiss makes is the same either way (tests/indexers/test_hnsw.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import faiss

from engine.subprocesses import usable_cores

__all__ = ["every_core"]


@contextmanager
def every_core() -> Iterator[None]:
    """faiss on every core this process may use, in this thread, for the duration."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(usable_cores())
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)
