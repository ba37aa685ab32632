"""Big messages: only the first INDEX_CAP_CHARS are indexed (the whole text is stored and grep finds
the rest), and a write for one user never waits on another user's indexing (per-user locks)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from benchmarks.big_message import text_of
from engine.api import ConversationEngine
from engine.locks import WriterLocks
from indexers.chunking import INDEX_CAP_CHARS


def test_a_long_message_is_stored_whole_indexed_capped_and_grep_finds_its_end(tmp_path: Path) -> None:
    body = text_of(INDEX_CAP_CHARS * 15) + " the marker ZEBRA-9931 is at the very end"
    with ConversationEngine(tmp_path / "home", embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user", "content": body, "message_id": "big"}], index=False)
        assert engine.store.get_message("big", user_id="u").content == body
        windows = engine.pipeline.shard("u").chunks.values()
        assert sum(len(c.text) for c in windows) < INDEX_CAP_CHARS * 1.3  # not 15 times the cap
        found = engine.substring_search("u", "zebra-9931")
        assert [(m.message_id, offset) for offset, m in found] == [("big", body.index("ZEBRA-9931"))]


@pytest.mark.model  # see tests/conftest.py (--fast)
def test_one_users_write_does_not_wait_for_another_users_indexing(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home") as engine:
        for user in ("slow", "quick"):
            engine.add_user(user, "UTC")
        engine.ingest("quick", [{"role": "user", "content": "warm the model up"}])
        done: dict[str, float] = {}

        def index_a_big_message() -> None:
            engine.ingest("slow", [{"role": "user", "content": text_of(INDEX_CAP_CHARS)}])  # ~45 windows to embed
            done["slow"] = time.monotonic()

        worker = threading.Thread(target=index_a_big_message)
        worker.start()
        while not engine.locks._busy and worker.is_alive():  # the slow user's writer is in
            time.sleep(0.001)
        engine.ingest("quick", [{"role": "user", "content": "a short note"}], index=False)
        done["quick"] = time.monotonic()
        worker.join(120)
        assert done["quick"] < done["slow"], "the quick user's write waited for the slow user's indexing"


def test_everyone_waits_for_user_writers_and_holds_new_ones_off() -> None:
    locks, order = WriterLocks(), []
    entered = threading.Event()

    def writer() -> None:
        with locks.user("a"):
            entered.set()
            time.sleep(0.2)
            order.append("a")

    thread = threading.Thread(target=writer)
    thread.start()
    entered.wait(5)
    with locks.everyone():
        order.append("all")
        with locks.user("b"):  # re-entrant in its own thread
            order.append("b")
    thread.join(5)
    assert order == ["a", "all", "b"]


def test_several_users_locks_are_taken_while_everyone_waits_for_the_first() -> None:
    """An import holds each of its users' locks, one after another: an everyone() arriving between two
    waited for the import's first lock while the import waited for everyone() to end."""
    locks, order = WriterLocks(), []
    first_held, everyone_waits = threading.Event(), threading.Event()
    real_user = locks.user

    def user(user_id: str):  # type: ignore[no-untyped-def]
        if user_id == "b":  # between the import's two locks, everyone() comes
            first_held.set()
            assert everyone_waits.wait(5)
            time.sleep(0.1)
        return real_user(user_id)

    locks.user = user  # type: ignore[method-assign]

    def importer() -> None:
        with locks.users(["b", "a"]):
            order.append("import")

    def everyone() -> None:
        assert first_held.wait(5)
        everyone_waits.set()
        with locks.everyone():
            order.append("all")

    threads = [threading.Thread(target=importer), threading.Thread(target=everyone)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads), "the import and everyone() waited on each other"
    assert order == ["import", "all"]


def test_message_text_is_capped_everywhere_and_paged_by_offset(tmp_path: Path) -> None:
    import anyio
    from mcp import Client

    from engine.surfaces.mcp.server import build_server
    from engine.query.navigation_results import VIEW_CAP_CHARS
    from tests.support import live

    body = text_of(VIEW_CAP_CHARS * 2 + 500)
    with ConversationEngine(tmp_path / "home", embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user", "content": body, "message_id": "big",
                             "created_at": "2024-05-01T10:00"}], index=False)
        since = engine.turns_since("u", "2024-05-01T00:00").messages[0]
        assert len(since.content) == VIEW_CAP_CHARS and since.content_truncated and since.content_chars == len(body)
        pages, offset = [], 0
        while True:
            part = engine.get("u", message_id="big", offset=offset)
            pages.append(part.content)
            if not part.content_truncated:
                break
            offset = part.content_offset + len(part.content)
        assert "".join(pages) == body and len(pages) == 3
        for client in live(engine):
            got = client.post("/api/conversation/get", json={"user_id": "u", "message_id": "big",
                                                             "offset": 2 * VIEW_CAP_CHARS}).json()
            assert got["content"] == body[2 * VIEW_CAP_CHARS:] and not got["content_truncated"]
            since = client.post("/api/get_turns_since", json={"user_id": "u", "timestamp": "2024-05-01"}).json()
            assert len(since["messages"][0]["content"]) == VIEW_CAP_CHARS

        async def call() -> object:
            async with Client(build_server(engine, "u")) as client:
                return await client.call_tool("get_turns_since", {"timestamp": "2024-05-01"})

        result = anyio.run(call)
        assert len(result.structured_content["messages"][0]["content"]) == VIEW_CAP_CHARS
        assert sum(len(getattr(b, "text", "")) for b in result.content) < 3 * VIEW_CAP_CHARS


def test_a_whole_conversation_caps_each_message_and_says_how_to_get_the_rest(tmp_path: Path) -> None:
    from engine.query.navigation_results import VIEW_CAP_CHARS

    body = text_of(VIEW_CAP_CHARS + 1234)
    with ConversationEngine(tmp_path / "home", embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user", "content": "short", "message_id": "s"},
                            {"role": "assistant", "content": body, "message_id": "long"}], index=False)
        conversation = engine.list_conversations("u")[0].conversation_id
        shown = {m.message_id: m.content for m in engine.get_conversation("u", conversation).messages}
        assert shown["s"] == "short" and shown["long"].startswith(body[:VIEW_CAP_CHARS])
        assert shown["long"].endswith(f"[... 1234 more characters: get message 'long' with offset={VIEW_CAP_CHARS} "
                                      "for the rest]")
        assert engine.get("u", message_id="long", offset=VIEW_CAP_CHARS).content == body[VIEW_CAP_CHARS:]
