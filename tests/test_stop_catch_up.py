"""A server stopping while its background step catches up a long thread (after an import) leaves
that catch-up between two pieces: it used to wait for the whole of it, 8-13 s after a 100k import
here and minutes at 1M, which a container manager's stop turns into a kill -9."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import indexers.parallel_chunks as parallel_chunks
from engine.errors import IndexingPausedError
from indexers.shard import current_version_dir
from tests.support import HashEmbedder, batch, live_server, open_engine


def ranked(response):
    return [(hit.message_id, round(hit.score, 6)) for hit in response.results]


def _pieces_held_at(monkeypatch: pytest.MonkeyPatch, engines: list, hold_at: int) -> list[int]:
    """Count the pieces chunked; the `hold_at`-th (0: none) waits, 5 s at most, until the engine is paused."""
    monkeypatch.setattr(parallel_chunks, "OWN_PIECE", 100)
    made: list[int] = []
    real = parallel_chunks.chunk_thread

    def counted(*args):
        made.append(1)
        if len(made) == hold_at and engines:
            deadline = time.monotonic() + 5
            while not engines[0].pipeline.paused.is_set() and time.monotonic() < deadline:
                time.sleep(0.01)
        return real(*args)

    monkeypatch.setattr(parallel_chunks, "chunk_thread", counted)
    return made


def test_a_stopping_server_leaves_a_long_catch_up_and_the_next_start_does_it_whole(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch):
    engines: list = []
    made = _pieces_held_at(monkeypatch, engines, hold_at=3)
    with open_engine(tmp_path / "stopped", HashEmbedder(), summaries=False) as engine:
        engines.append(engine)
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 1500), index=False)  # not loaded: the background step catches it up
        with live_server(engine):
            deadline = time.monotonic() + 30
            while len(made) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
        assert len(made) == 3  # of 15 pieces: none after the stop began, none in the step run at stop
        assert engine.pipeline.loaded("u") is None  # nothing half caught up was published
        assert current_version_dir(engine.pipeline.root, "u") is None  # nor saved
        assert not engine.pipeline.paused.is_set()
        engines.clear()
        got = engine.search("u", "topic7 theme3", limit=10)  # its next load catches up from the store
    with open_engine(tmp_path / "whole", HashEmbedder(), summaries=False) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 1500), index=False)
        expected = engine.search("u", "topic7 theme3", limit=10)
    assert ranked(got) == ranked(expected) and got.results


def test_a_search_that_must_load_an_index_while_paused_says_to_try_again(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch):
    """Requests are drained before a server's stop pauses indexing; one that still comes gets a clear 503."""
    _pieces_held_at(monkeypatch, [], hold_at=0)
    with open_engine(tmp_path, HashEmbedder(), summaries=False) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 300), index=False)
        with engine.indexing_paused(), pytest.raises(IndexingPausedError) as raised:
            engine.search("u", "topic7", limit=5)
        assert raised.value.http_status == 503 and raised.value.code == "indexing_paused"
        assert engine.search("u", "topic7", limit=5).results  # after the pause, the same search answers
