"""The collector's first threshold is raised while the engine writes, and always restored."""

from __future__ import annotations

import gc
import threading

import pytest

from engine.collector import WRITE_THRESHOLD, fewer_collections


@pytest.fixture
def default_thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def _thresholds_seen(monkeypatch, owner, name: str) -> list[int]:
    """The collector's first threshold at each call of `owner.name` from now on."""
    seen: list[int] = []
    original = getattr(owner, name)

    def spy(*args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return seen


def test_threshold_is_raised_inside_and_restored_after_an_error(default_thresholds):
    with pytest.raises(RuntimeError):
        with fewer_collections():
            assert gc.get_threshold() == (WRITE_THRESHOLD, 10, 10)
            with fewer_collections():  # nested: still raised, and not restored by the inner exit
                pass
            assert gc.get_threshold() == (WRITE_THRESHOLD, 10, 10)
            raise RuntimeError("a failed write")
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_writers_restore_only_when_the_last_leaves(default_thresholds):
    inside, leave = threading.Event(), threading.Event()

    def writer():
        with fewer_collections():
            inside.set()
            leave.wait(5)

    other = threading.Thread(target=writer)
    other.start()
    inside.wait(5)
    with fewer_collections():
        pass
    assert gc.get_threshold()[0] == WRITE_THRESHOLD  # the other writer is still inside
    leave.set()
    other.join(5)
    assert gc.get_threshold() == (700, 10, 10)


def test_an_engine_write_runs_under_the_raised_threshold(default_thresholds, tmp_path, monkeypatch):
    from engine.api import ConversationEngine
    from tests.support import HashEmbedder

    with ConversationEngine(tmp_path / "home", embedder=HashEmbedder()) as engine:
        engine.add_user("u", "UTC")
        seen = _thresholds_seen(monkeypatch, engine.ingestor, "add_messages")
        engine.ingest("u", [{"role": "user", "content": "hello"}], index=False)
    assert seen == [WRITE_THRESHOLD]
    assert gc.get_threshold() == (700, 10, 10)


def test_a_catch_up_on_load_chunks_under_the_raised_threshold(default_thresholds, tmp_path, monkeypatch):
    """A search that loads an index behind the store builds it as a write would: at the default
    threshold, a 100k-message catch-up spent 1.45 s of its ~11 s collecting (9 full collections)."""
    import indexers.pipeline
    from engine.api import ConversationEngine
    from tests.support import HashEmbedder

    with ConversationEngine(tmp_path / "home", embedder=HashEmbedder()) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user", "content": "hello there"}], index=False)  # not loaded: left behind
        seen = _thresholds_seen(monkeypatch, indexers.pipeline, "rechunk_tails")
        assert engine.search("u", "hello").results
    assert seen == [WRITE_THRESHOLD]
    assert gc.get_threshold() == (700, 10, 10)


def test_a_distributed_build_chunks_under_the_raised_threshold(default_thresholds, tmp_path, monkeypatch):
    """A Ray task's lexical build (indexers/shard_build.build_lexical) runs in a worker process, outside
    any write of the engine: it raises the threshold itself."""
    import indexers.shard_build
    from engine.api import ConversationEngine
    from indexers.distributed import _job
    from tests.support import HashEmbedder

    with ConversationEngine(tmp_path / "home", embedder=HashEmbedder()) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user", "content": "hello there"}], index=False)
        seen = _thresholds_seen(monkeypatch, indexers.shard_build, "rechunk_tails")
        build = indexers.shard_build.build_lexical(_job(engine.store, "u"), engine.store.messages_arrow("u"),
                                                   engine.pipeline.params, engine.pipeline.spec())
    assert seen == [WRITE_THRESHOLD] and len(build.chunks) == 1
    assert gc.get_threshold() == (700, 10, 10)
