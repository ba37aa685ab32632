"""Fixtures shared by the test modules: the sample data file and a throwaway on-disk store."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.store import Store

SAMPLE_PATH = Path(__file__).resolve().parent.parent / "data" / "sample.jsonl"


@pytest.fixture
def sample_path() -> Path:
    """data/sample.jsonl: two users (alice in Europe/Paris, bob in Asia/Tokyo); see data/README.md."""
    return SAMPLE_PATH


@pytest.fixture
def store(tmp_path):
    """A real DuckDB file under tmp_path, closed after the test."""
    with Store(tmp_path / "store.duckdb") as s:
        yield s
