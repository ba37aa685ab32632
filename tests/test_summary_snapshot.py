"""A large user's summary index is saved for the next start: a restart tokenizes only the summaries
written since, scores as a build from the store does, ignores a snapshot it cannot trust, and a
deletion leaves none behind (real DuckDB file, hash embedder; the size floor lowered to 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine.query.summary_index as summary_index
from engine.api import ConversationEngine
from engine.config import Settings
from engine.query.summary_index import SummaryIndex, SummaryMatches
from engine.store.timeline import summary_order
from indexers.shard import shard_dir
from tests.support import HashEmbedder, assert_same_matches, batch, open_engine

QUERY = ["topic3", "theme5", "message", "lastof2"]


@pytest.fixture
def tokenized(monkeypatch) -> list[str]:
    """The ids of the summaries each build tokenizes, with every user's index saved."""
    monkeypatch.setattr(summary_index, "SNAPSHOT_MIN", 1)
    seen: list[str] = []
    tokens = SummaryIndex._tokens

    def counted(self: SummaryIndex, summaries):
        seen.extend(s.summary_id for s in summaries)
        return tokens(self, summaries)
    monkeypatch.setattr(SummaryIndex, "_tokens", counted)
    return seen


def _match(engine: ConversationEngine) -> SummaryMatches:
    return engine.summary_index.match("alice", QUERY, None, with_vectors=True)


def _from_store(engine: ConversationEngine) -> SummaryMatches:
    return SummaryIndex(engine.pipeline).match("alice", QUERY, None, with_vectors=True)


def _snapshot(home: Path) -> Path:
    return shard_dir(home / "summary_index", "alice")


def _started(home: Path, batches: range) -> None:
    """alice's summaries of these batches, and her index built once (which saves it)."""
    with open_engine(home) as engine:
        engine.add_user("alice", "UTC")
        for k in batches:
            engine.ingest("alice", batch(k, 40))
        assert _match(engine).summaries


def _next_start_reads_it_all(home: Path, tokenized: list[str]) -> None:
    """A restart's build takes every summary's text from the snapshot."""
    tokenized.clear()
    with open_engine(home) as engine:
        _match(engine)
    assert tokenized == []


def test_a_restart_reads_the_snapshot_and_tokenizes_nothing(tmp_path: Path, tokenized: list[str]):
    home = tmp_path / "home"
    _started(home, range(3))
    assert tokenized and (_snapshot(home) / "meta.json").exists()
    tokenized.clear()
    with open_engine(home) as engine:
        restarted = _match(engine)
        assert tokenized == []
        assert_same_matches(restarted, _from_store(engine))


def test_summaries_written_since_the_snapshot_are_the_only_ones_tokenized(tmp_path: Path, tokenized: list[str]):
    home = tmp_path / "home"
    _started(home, range(3))
    with open_engine(home, summaries=True) as engine:
        saved = {s.summary_id: (s.title, s.markdown) for s in engine.store.timeline.summaries_of_user("alice")}
        engine.ingest("alice", batch(3, 40))  # a new day: summaries written, the open day's rewritten
        doomed = sorted(engine.store.timeline.summaries_of_user("alice"), key=summary_order)[0]
        engine.store.timeline.delete_summaries([doomed.summary_id])
        now = engine.store.timeline.summaries_of_user("alice")
    changed = {s.summary_id for s in now if saved.get(s.summary_id) != (s.title, s.markdown)}  # new or rewritten
    assert changed and len(changed) < len(now)
    tokenized.clear()
    with open_engine(home) as engine:
        restarted = _match(engine)
        assert set(tokenized) == changed  # each once: the unchanged texts come from the snapshot
        assert len(tokenized) == len(changed)
        assert doomed.summary_id not in {s.summary_id for s in restarted.summaries}
        assert_same_matches(restarted, _from_store(engine))
    _next_start_reads_it_all(home, tokenized)  # the build saved what it read


def test_a_damaged_snapshot_is_ignored_and_replaced(tmp_path: Path, tokenized: list[str]):
    home = tmp_path / "home"
    _started(home, range(3))
    docs = _snapshot(home) / "docs.npz"
    docs.write_bytes(docs.read_bytes()[: docs.stat().st_size // 2])  # torn
    crashed = [_snapshot(home).with_name(f".{_snapshot(home).name}.{n}") for n in ("12-34", "12-34.old")]
    for leftover in crashed:  # what a save killed between its renames leaves
        (leftover / "bm25").mkdir(parents=True)
    tokenized.clear()
    with open_engine(home) as engine:
        rebuilt = _match(engine)
        assert len(tokenized) == len(rebuilt.summaries)
        assert_same_matches(rebuilt, _from_store(engine))
    assert not any(leftover.exists() for leftover in crashed)
    assert sorted(p.name for p in (home / "summary_index").iterdir()) == [_snapshot(home).name]
    _next_start_reads_it_all(home, tokenized)


def test_a_snapshot_of_another_tokenizer_is_not_used(tmp_path: Path, tokenized: list[str]):
    home = tmp_path / "home"
    _started(home, range(3))
    meta = _snapshot(home) / "meta.json"
    made = json.loads(meta.read_text())
    meta.write_text(json.dumps({**made, "probe": made["probe"][:-1]}))  # a tokenizer that gave other tokens
    tokenized.clear()
    with open_engine(home) as engine:
        assert len(_match(engine).summaries) == len(tokenized)
    assert json.loads(meta.read_text()) == made
    tokenized.clear()
    settings = Settings(future_tolerance_hours=24 * 366, stemming=not made["tokenizer"]["stemming"])
    with ConversationEngine(home, embedder=HashEmbedder(), settings=settings) as engine:
        assert len(_match(engine).summaries) == len(tokenized)


def test_deleting_messages_or_the_user_leaves_no_snapshot(tmp_path: Path, tokenized: list[str]):
    home = tmp_path / "home"
    _started(home, range(3))
    with open_engine(home) as engine:
        assert engine.delete_messages("alice", ["b0001-00003"]) == 1
        assert not _snapshot(home).exists()  # it held the tokens of summaries quoting the deleted message
        _match(engine)
        assert _snapshot(home).exists()
        engine.delete_user("alice")
        assert not _snapshot(home).exists()


def test_a_small_user_is_not_saved(tmp_path: Path):
    home = tmp_path / "home"
    _started(home, range(3))
    assert not (home / "summary_index").exists()
