"""Deletion deletes: a message, a conversation, a user or a retired conversation leaves the store,
the summaries, the windows, BM25, HNSW and the embedding cache, and no search or reindex brings it back.

Every check first asserts the thing was there (so each test can fail), with the real MiniLM model.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine.api import ConversationEngine
from engine.surfaces.cli import main
from engine.config import Settings
from engine.maintenance.doctor import diagnose
from engine.errors import InvalidInputError, UnknownConversationError, UnknownUserError
from engine.query.summary_index import summary_text
from indexers.embedders import Embedder
from engine.store.embedding_cache import content_hash
from indexers.shard import Shard, shard_dir
from tests.support import real_embedder

pytestmark = [pytest.mark.slow, pytest.mark.model]

WORD = "zebraquartz"
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
FILLER = ("We planned the garden beds for spring.", "The tea was too strong this morning.",
          "Remember to water the tomatoes.", "The bus was late again today.")


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return real_embedder()


def _engine(home: Path, embedder: Embedder, **settings: object) -> ConversationEngine:
    return ConversationEngine(home, embedder=embedder, clock=lambda: T0 + timedelta(days=2),
                              settings=Settings(day_summary_every=3, **settings))


def _conversation(user: str, start: datetime, n: int, *, secret_at: int | None = None, tag: str = "") -> list[dict]:
    """n messages a minute apart; message `secret_at` carries WORD (ids are user-tag-i)."""
    out = []
    for i in range(n):
        text = f"The {WORD} crystal sits on the shelf." if i == secret_at else FILLER[i % len(FILLER)]
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{text} ({tag}{i})",
                    "created_at": (start + timedelta(minutes=i)).isoformat(), "message_id": f"{user}-{tag}{i}"})
    return out


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    """alice: conversation c0 (plain), c1 (holds WORD, ended and summarised), c2 (plain, open);
    bob: one conversation that also holds WORD. Built once; each test gets a copy."""
    home = tmp_path_factory.mktemp("deletion") / "home"
    with _engine(home, embedder) as e:
        for user in ("alice", "bob"):
            e.add_user(user)
        e.ingest("alice", _conversation("alice", T0, 6, tag="c0-"))
        e.ingest("alice", _conversation("alice", T0 + timedelta(hours=2), 6, secret_at=2, tag="c1-"))
        e.end_conversation("alice")
        e.ingest("alice", _conversation("alice", T0 + timedelta(hours=4), 4, tag="c2-"))
        e.ingest("bob", _conversation("bob", T0, 5, secret_at=1, tag="b-"))
        e.index()
        for user in ("alice", "bob"):
            _search_hits(e, user, set())  # embeds the summaries too, so the cache holds their vectors
    return home


@pytest.fixture
def engine(template: Path, tmp_path: Path, embedder: Embedder):
    home = tmp_path / "home"
    shutil.copytree(template, home)
    with _engine(home, embedder) as e:
        yield e


# What "remembers" the word, layer by layer --------------------------------------------------------
def _traces(e: ConversationEngine, user: str, ids: set[str]) -> dict[str, object]:
    """Every place that still holds `ids` or WORD for `user` (empty values: forgotten everywhere)."""
    db = e.store.db
    shard = e.pipeline.shard(user)
    windows = {label: c for label, c in shard.chunks.items() if ids & set(c.message_ids) or WORD in c.text.lower()}
    on_disk = Shard.load(e.pipeline.root, user, e.pipeline.tokenizer)
    disk = on_disk.chunks.values() if on_disk else []
    disk_windows = [c for c in disk if ids & set(c.message_ids) or WORD in c.text.lower()]
    tokens = shard.tokenizer.tokenize(WORD)
    summaries = [s for s in e.store.timeline.summaries_of_user(user) if WORD in summary_text(s).lower()]
    return {
        "messages": db.execute("SELECT message_id FROM messages WHERE user_id = ? AND (list_contains(?, message_id) "
                               "OR strpos(lower(content), ?) > 0)", [user, sorted(ids), WORD]),
        "windows": sorted(windows), "disk_windows": disk_windows,
        "bm25": shard.bm25.search(tokens, 50, None)[0].tolist(),
        "hnsw": [label for label in windows if shard.hnsw is not None and label in shard.hnsw],
        "summaries": [s.summary_id for s in summaries],
        "day_summaries": db.execute("SELECT day_segment_id FROM day_segments WHERE user_id = ? "
                                    "AND strpos(lower(summary_markdown), ?) > 0", [user, WORD]),
        "conversation_briefs": db.execute(
            "SELECT conversation_id FROM conversations WHERE user_id = ? AND "
            "strpos(lower(coalesce(title, '') || coalesce(summary, '')), ?) > 0", [user, WORD]),
        "search": _search_hits(e, user, ids),
    }


def _hashes(e: ConversationEngine, user: str, ids: set[str]) -> list[str]:
    """Content hashes of the windows, message lines and summaries that hold the word: the embedding cache keys."""
    shard = e.pipeline.shard(user)
    windows = [c.content_hash for c in shard.chunks.values() if ids & set(c.message_ids) or WORD in c.text.lower()]
    windows += [content_hash(line) for c in shard.chunks.values() if len(c.message_ids) > 1
                for m, line in zip(c.message_ids, c.message_lines()) if m in ids]
    summaries = [hashlib.sha256(summary_text(s).encode("utf-8")).hexdigest()
                 for s in e.store.timeline.summaries_of_user(user) if WORD in summary_text(s).lower()]
    return windows + summaries


def _cached(e: ConversationEngine, user: str, hashes: list[str]) -> int:
    rows = e.store.db.execute(  # windows' and lines' vectors, and summaries'
        "SELECT count(*) FROM (SELECT user_id, content_hash FROM embedding_cache UNION ALL "
        "SELECT user_id, content_hash FROM summary_embeddings) WHERE user_id = ? AND list_contains(?, content_hash)",
        [user, hashes])
    return int(rows[0][0])


def _search_hits(e: ConversationEngine, user: str, ids: set[str]) -> list[str]:
    found = []
    for mode in ("hybrid", "lexical", "vector"):
        for hit in e.search(user, f"{WORD} crystal", limit=20, mode=mode).results:
            if (hit.message_id in ids or WORD in hit.snippet.lower()
                    or {hit.first_message_id, hit.last_message_id} & ids):
                found.append(f"{mode}:{hit.message_id or hit.summary_id}")
    return found


def _assert_remembered(e: ConversationEngine, user: str, ids: set[str]) -> list[str]:
    """Precondition: every layer holds the word now; returns the cache keys to watch."""
    traces = _traces(e, user, ids)
    for layer in ("messages", "windows", "disk_windows", "bm25", "hnsw", "summaries", "search"):
        assert traces[layer], f"precondition: {layer} should hold {WORD} before deletion"
    hashes = _hashes(e, user, ids)
    assert _cached(e, user, hashes) > 0
    return hashes


def _assert_forgotten(e: ConversationEngine, user: str, ids: set[str], hashes: list[str]) -> None:
    traces = _traces(e, user, ids)
    assert {k: v for k, v in traces.items() if v} == {}
    assert _cached(e, user, hashes) == 0
    shard = e.pipeline.shard(user)
    assert len(shard.bm25) == len(shard.chunks) and set(shard.hnsw.labels().tolist()) <= set(shard.chunks)


def _assert_bob_intact(e: ConversationEngine) -> None:
    hits = e.search("bob", f"{WORD} crystal", limit=5, mode="lexical").results
    assert any(h.message_id == "bob-b-1" for h in hits)
    stored = e.store.db.execute("SELECT message_id FROM messages WHERE user_id = 'bob' AND kind = 'turn' ORDER BY seq")
    assert [r[0] for r in stored] == [f"bob-b-{i}" for i in range(5)]


# Tests --------------------------------------------------------------------------------------------
def test_reindex_is_warm_and_keeps_every_vector_still_in_use(engine: ConversationEngine) -> None:
    summary_hashes = [hashlib.sha256(summary_text(s).encode("utf-8")).hexdigest()
                      for s in engine.store.timeline.summaries_of_user("alice")]
    assert summary_hashes and _cached(engine, "alice", summary_hashes) == len(summary_hashes)
    first = engine.reindex("alice")[0]
    second = engine.reindex("alice")[0]
    # windows, message lines and summaries all come from the cache, the second time too
    assert first.embeddings_computed == 0 and second.embeddings_computed == 0
    assert second.embeddings_reused == first.embeddings_reused > 0
    assert _cached(engine, "alice", summary_hashes) == len(summary_hashes)
    assert engine.pipeline.live_hashes("alice") <= set(_all_cached(engine, "alice"))


def _all_cached(e: ConversationEngine, user: str) -> list[str]:
    return [r[0] for r in e.store.db.execute("SELECT content_hash FROM embedding_cache WHERE user_id = ?", [user])]


def test_delete_message_forgets_it_everywhere_and_reindex_does_not_bring_it_back(engine: ConversationEngine) -> None:
    ids = {"alice-c1-2"}
    hashes = _assert_remembered(engine, "alice", ids)
    assert engine.delete_messages("alice", sorted(ids)) == 1
    _assert_forgotten(engine, "alice", ids, hashes)
    assert engine.stats("alice")["messages"] >= 15  # only that one message went
    engine.reindex()
    _assert_forgotten(engine, "alice", ids, hashes)
    _assert_bob_intact(engine)
    assert diagnose(engine).ok


def test_delete_conversation_forgets_it_everywhere(engine: ConversationEngine) -> None:
    conversation = "alice:continuous:conv:2"
    ids = {f"alice-c1-{i}" for i in range(6)}
    hashes = _assert_remembered(engine, "alice", ids)
    assert engine.delete_conversation("alice", conversation) >= 6
    _assert_forgotten(engine, "alice", ids, hashes)
    assert conversation not in {c.conversation_id for c in engine.list_conversations("alice", 10)}
    with pytest.raises(UnknownConversationError):
        engine.get_conversation("alice", conversation)
    engine.reindex("alice")
    _assert_forgotten(engine, "alice", ids, hashes)
    assert engine.substring_search("alice", "garden")  # the other conversations stay
    assert diagnose(engine).ok


def test_delete_user_forgets_everything(engine: ConversationEngine) -> None:
    hashes = _assert_remembered(engine, "alice", {"alice-c1-2"})
    directory = shard_dir(engine.pipeline.root, "alice")
    assert directory.exists()
    assert engine.delete_user("alice") >= 16
    db = engine.store.db
    for table in ("users", "threads", "messages", "conversations", "day_segments", "summaries", "embedding_cache",
                  "summary_embeddings"):
        assert db.execute(f"SELECT count(*) FROM {table} WHERE user_id = 'alice'")[0][0] == 0, table
    assert not directory.exists() and _cached(engine, "alice", hashes) == 0
    with pytest.raises(UnknownUserError):
        engine.search("alice", WORD)
    engine.reindex()  # every remaining user: alice does not come back
    assert not directory.exists() and [u.user_id for u in engine.iter_users()] == ["bob"]
    _assert_bob_intact(engine)
    assert diagnose(engine).ok


def test_a_user_deleted_and_added_again_is_embedded_again(tmp_path: Path, embedder: Embedder) -> None:
    # the caches must not remember vectors whose rows went with the user: nothing would embed them again
    with _engine(tmp_path / "home", embedder) as e:
        for _ in range(2):
            e.add_user("carol")
            e.ingest("carol", _conversation("carol", T0, 4, secret_at=2))
            e.end_conversation("carol")
            e.index()
            status = e.index_status("carol")
            assert status["not_vector_indexed_messages"] == 0 and status["vector_indexed_chunks"] == status["chunks"]
            assert e.store.db.execute("SELECT count(*) FROM summary_embeddings WHERE user_id = 'carol'")[0][0] > 0
            assert e.search("carol", WORD).mode == "hybrid"
            e.delete_user("carol")


def test_retention_keeps_only_the_newest_ended_conversations(tmp_path: Path, embedder: Embedder) -> None:
    with _engine(tmp_path / "home", embedder, max_conversations_retained=1) as e:
        e.add_user("alice")
        e.ingest("alice", _conversation("alice", T0, 5, secret_at=1, tag="old-"))
        e.end_conversation("alice")
        e.index()
        ids = {f"alice-old-{i}" for i in range(5)}
        hashes = _assert_remembered(e, "alice", ids)
        e.ingest("alice", _conversation("alice", T0 + timedelta(hours=2), 4, tag="mid-"))  # ends nothing yet
        assert e.stats("alice")["conversations"] == 2
        e.ingest("alice", _conversation("alice", T0 + timedelta(hours=4), 4, tag="new-"))  # ends "mid": "old" goes
        _assert_forgotten(e, "alice", ids, hashes)
        assert [c.conversation_id for c in e.list_conversations("alice", 10)] == [
            "alice:continuous:conv:3", "alice:continuous:conv:2"]
        e.reindex()
        _assert_forgotten(e, "alice", ids, hashes)
        assert diagnose(e).ok


def test_another_users_ids_are_ignored(engine: ConversationEngine) -> None:
    assert engine.delete_messages("alice", ["bob-b-1", "bob-b-0", "no-such-id"]) == 0
    with pytest.raises(UnknownConversationError):
        engine.delete_conversation("alice", "bob:continuous:conv:1")
    _assert_bob_intact(engine)
    assert engine.delete_messages("bob", ["alice-c1-2"]) == 0
    assert engine.get("alice", message_id="alice-c1-2").content.startswith(f"The {WORD}")
    with pytest.raises(UnknownUserError):  # a clear error, not "0 deleted"
        engine.delete_messages("nobody", ["alice-c1-2"])
    with pytest.raises(InvalidInputError, match="user_id must be a string"):
        engine.delete_messages(T0, [])  # type: ignore[arg-type]
    assert engine.get("alice", message_id="alice-c1-2").content.startswith(f"The {WORD}")


def test_a_message_after_deleting_the_last_one_is_searchable(engine: ConversationEngine) -> None:
    """Regression: the tail's seq is reused; the index watermark must drop with the tail."""
    assert engine.delete_messages("alice", ["alice-c2-3"]) == 1
    engine.ingest("alice", [{"role": "user", "content": "the okapiflute concert", "message_id": "fresh",
                             "created_at": (T0 + timedelta(hours=5)).isoformat()}])
    hits = engine.search("alice", "okapiflute", limit=3, mode="lexical", kinds=["message"]).results
    assert [h.message_id for h in hits] == ["fresh"]  # (its day's summary, which now quotes it, may lead too)
    engine.index()
    assert diagnose(engine).ok


def test_cli_delete_prints_what_it_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`convsearch delete` on a lexical-only home (the CLI opens its own engine, here without a model)."""
    monkeypatch.setenv("CONVSEARCH_EMBEDDING_BACKEND", "none")
    home = tmp_path / "home"
    with ConversationEngine(home, embedder=None) as e:
        for user in ("alice", "bob"):
            e.add_user(user)
        e.ingest("alice", _conversation("alice", T0, 6, secret_at=2, tag="c1-"))
        e.ingest("alice", _conversation("alice", T0 + timedelta(hours=2), 3, tag="c2-"))
        e.ingest("bob", _conversation("bob", T0, 3, tag="b-"))
        e.index()
    run = ["--home", str(home), "delete", "--user"]
    assert main([*run, "alice", "--message", "alice-c1-2", "bob-b-1", "nope"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["messages_deleted"] == 1 and printed["message_ids"] == ["alice-c1-2"]
    assert printed["not_found"] == ["bob-b-1", "nope"]
    assert main([*run, "alice", "--conversation", "alice:continuous:conv:2"]) == 0
    assert json.loads(capsys.readouterr().out)["messages_deleted"] == 3
    assert main([*run, "ghost", "--all-of-user"]) == 4 and "unknown user" in capsys.readouterr().err
    assert main([*run, "bob", "--all-of-user"]) == 2 and "pass --yes" in capsys.readouterr().err
    assert main([*run, "bob", "--all-of-user", "--yes"]) == 0
    assert json.loads(capsys.readouterr().out) == {"user_id": "bob", "deleted": "user", "messages_deleted": 3}
    with ConversationEngine(home, embedder=None) as e:
        assert [u.user_id for u in e.iter_users()] == ["alice"]
        assert not e.substring_search("alice", WORD) and e.search("alice", WORD).results == ()
        assert diagnose(e).ok


def test_a_deletion_in_a_fresh_process_drops_the_windows_from_the_saved_shard(tmp_path: Path) -> None:
    """The shard loads before the store loses the messages: loaded after, its catch-up re-chunked the
    tail without them, the deletion found no window to drop, and the saved shard kept their text."""
    home = tmp_path / "home"
    with ConversationEngine(home, embedder=None) as e:
        e.add_user("alice")
        e.ingest("alice", _conversation("alice", T0, 6, tag="c1-"))
        e.ingest("alice", _conversation("alice", T0 + timedelta(hours=2), 3, secret_at=1, tag="c2-"))
        e.index()  # saved with c2 in its tail window
    with ConversationEngine(home, embedder=None) as e:
        e.ingest("alice", _conversation("alice", T0 + timedelta(days=1), 2, tag="c3-"))  # the tail moves, unsaved
    with ConversationEngine(home, embedder=None) as e:
        assert e.delete_conversation("alice", "alice:continuous:conv:2") == 3
    with ConversationEngine(home, embedder=None) as e:
        saved = Shard.load(e.pipeline.root, "alice", e.pipeline.tokenizer)
        assert not [m for c in saved.chunks.values() for m in c.message_ids if m.startswith("alice-c2-")]
        assert not any(WORD in c.text for c in saved.chunks.values())
        assert diagnose(e).ok


def test_a_deletion_reports_the_summaries_it_took_and_wrote_again(engine: ConversationEngine) -> None:
    target = engine.get("alice", message_id="alice-c1-2")
    holding = {s.summary_id for s in engine.store.timeline.summaries(target.thread_id) if s.covers(target.seq)}
    assert len(holding) == 2  # the day's summary and the ended conversation's
    report = engine.delete("alice", message_ids=["alice-c1-2"])
    assert (report["messages_deleted"], report["summaries_deleted"], report["summaries_rewritten"]) == (1, 2, 2)
    again = [s for s in engine.store.timeline.summaries(target.thread_id) if s.summary_id in holding]
    assert len(again) == 2 and not any(WORD in s.markdown for s in again)  # written from what remains
    nothing = engine.delete("alice", message_ids=["alice-c1-2"])
    assert (nothing["messages_deleted"], nothing["summaries_deleted"], nothing["summaries_rewritten"]) == (0, 0, 0)
