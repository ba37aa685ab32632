"""Fixtures shared by the test modules (the sample data file, a throwaway on-disk store) and the
`--fast` inner loop: it deselects tests marked slow, model or process, and fails any other test
that loads the MiniLM model or starts a process, naming the marker to add."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from engine.store.core import Store

SAMPLE_PATH = Path(__file__).resolve().parent.parent / "data" / "sample.jsonl"
FAST_SKIPS = ("slow", "model", "process")

# The int8 query model is derived once per test session into a directory of its own (the processes
# the tests start inherit it): tests never write to the user's ~/.cache. Set before any Settings.
_MODELS = tempfile.mkdtemp(prefix="convsearch-test-models-")
os.environ.setdefault("CONVSEARCH_MODEL_CACHE_DIR", _MODELS)
atexit.register(shutil.rmtree, _MODELS, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help="inner loop: no model, no subprocess (deselects tests marked " + ", ".join(FAST_SKIPS) + ")")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--fast"):
        return
    dropped = [item for item in items if any(item.get_closest_marker(name) for name in FAST_SKIPS)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture(scope="session", autouse=True)
def _fast_guard(request: pytest.FixtureRequest) -> object:
    """Under --fast, loading the model or starting a process fails the test with the marker to add."""
    if not request.config.getoption("--fast"):
        yield
        return
    from indexers.embedders import _LazyModel

    def no_model(self: object) -> None:
        pytest.fail("this test loads the MiniLM model: mark it @pytest.mark.model (or use tests.support.HashEmbedder)")

    def no_process(self: object, *args: object, **kwargs: object) -> None:
        pytest.fail("this test starts a process: mark it @pytest.mark.process")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_LazyModel, "_get", no_model)
        patch.setattr(subprocess.Popen, "__init__", no_process)
        # Bulk ingests and imports make their summaries in the engine's process (the same summaries;
        # tests/test_summary_workers.py, marked process, covers the workers).
        patch.setenv("CONVSEARCH_SUMMARY_WORKERS", "0")
        patch.setenv("CONVSEARCH_INDEX_WORKERS", "0")  # and long threads are chunked there alone (the same
        # windows; tests/indexers/test_parallel_chunks.py, marked process, covers the workers)
        yield


@pytest.fixture
def sample_path() -> Path:
    """data/sample.jsonl: two users (alice in Europe/Paris, bob in Asia/Tokyo); see data/README.md."""
    return SAMPLE_PATH


@pytest.fixture
def store(tmp_path):
    """A real DuckDB file under tmp_path, closed after the test."""
    with Store(tmp_path / "store.duckdb") as s:
        yield s
