"""The engine limits NumPy's BLAS threads as its settings say (engine/blas.py)."""

from __future__ import annotations

from threadpoolctl import threadpool_info, threadpool_limits

from engine.api import ConversationEngine
from engine.config import Settings


def _blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_an_engine_opens_with_one_blas_thread_by_default(tmp_path):
    with threadpool_limits(limits=2, user_api="blas"):  # restored after, whatever the engine set
        with ConversationEngine(tmp_path / "home", embedder=None):
            assert _blas_threads() == {1}


def test_zero_leaves_the_hosts_setting(tmp_path):
    with threadpool_limits(limits=2, user_api="blas"):
        with ConversationEngine(tmp_path / "home", settings=Settings(blas_threads=0), embedder=None):
            assert _blas_threads() == {2}
