"""A search that finds the user's index not loaded reads the user's summaries beside the loading,
and answers as a search on a warm engine does (real DuckDB file, hash embedder)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.query.summary_index import SummaryIndex
from tests.support import batch, open_engine

QUERY = "topic3 theme5 message"


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread each build of a user's summary entry runs in."""
    seen: list[str] = []
    build = SummaryIndex._build

    def spied(self: SummaryIndex, *args, **kwargs):
        seen.append(threading.current_thread().name)
        return build(self, *args, **kwargs)
    monkeypatch.setattr(SummaryIndex, "_build", spied)
    return seen


def test_a_cold_search_reads_the_summaries_beside_the_index(tmp_path: Path, builds: list[str]) -> None:
    with open_engine(tmp_path) as engine:
        engine.add_user("alice", "UTC")
        for k in range(3):
            engine.ingest("alice", batch(k, 40))
        engine.index("alice")
        warm = engine.search("alice", QUERY, explain=True)
    assert any(hit.parts is not None and hit.parts.summary for hit in warm.results)  # the summaries took part
    builds.clear()
    with open_engine(tmp_path) as engine:
        cold = engine.search("alice", QUERY, explain=True)
        engine.search("alice", "lastof2")  # loaded now: nothing is built again
    assert len(builds) == 1 and builds[0].startswith("summary-index") and builds[0] != threading.current_thread().name
    assert cold.results == warm.results
