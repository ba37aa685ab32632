"""How many threads NumPy's BLAS may use in this process: set when an engine opens.

Why: OpenBLAS starts a thread per core and splits even a 6,000 x 384 matrix-vector product between
them; on a small machine the second thread waits for a core that the query embedding (onnxruntime's
own thread) or another request holds, and a 0.2 ms product took 6 ms of CPU. Every product a search
makes is that small, so one thread is the engine's default (`Settings.blas_threads`).
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits

__all__ = ["limit_blas_threads"]


def limit_blas_threads(threads: int) -> None:
    """Limit BLAS to `threads` threads process-wide (0: leave the host's setting)."""
    if threads > 0:
        threadpool_limits(limits=threads, user_api="blas")
