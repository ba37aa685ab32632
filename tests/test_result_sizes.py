"""Results stay small enough to send: titles and end reasons are short, long lists page (or share one
answer's room), and over MCP's streamable HTTP every tool's default call fits the SDK's 1 MiB event."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from engine.api import ConversationEngine
from engine.errors import InvalidInputError
from engine.query.navigation_results import ANSWER_CAP_CHARS, VIEW_CAP_CHARS
from engine.text_rules import TITLE_CAP_CHARS
from engine.store.timeline import MAX_REASON_CHARS
from engine.summaries.summarizers import clamp_title
from engine.surfaces.mcp.server import TOOL_NAMES
from tests.support import HashEmbedder, live_server

NOW = datetime(2024, 5, 3, 12, 0, tzinfo=timezone.utc)
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


def _turns(prefix: str, count: int, chars: int, start: datetime) -> list[dict[str, str]]:
    return [{"message_id": f"{prefix}{i}", "role": "user" if i % 2 == 0 else "assistant",
             "content": f"{prefix} line {i} " + "w" * chars, "created_at": (start + timedelta(seconds=i)).isoformat()}
            for i in range(count)]


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as opened:
        opened.add_user("u", "UTC")
        yield opened


# Titles and reasons ------------------------------------------------------------------------------
def test_a_title_is_short_whatever_the_first_message(engine: ConversationEngine) -> None:
    engine.ingest("u", [{"message_id": "z", "role": "user", "content": "z" * 1_100_000,
                         "created_at": T0.isoformat()}])
    title = engine.end_conversation("u").summary.title
    assert title is not None and len(title) == TITLE_CAP_CHARS and title.endswith("…")
    assert [len(c.title or "") for c in engine.list_conversations("u")] == [TITLE_CAP_CHARS]
    assert engine.get("u", message_id="z").content_chars == 1_100_000  # the message itself is whole
    words = clamp_title("Supercalifragilistic " * 3 + "expialidocious" * 20)
    assert len(words) <= TITLE_CAP_CHARS and words.endswith("Supercalifragilistic…")  # cut at a word


def test_a_title_stored_before_the_cap_is_shown_short(engine: ConversationEngine) -> None:
    engine.ingest("u", _turns("a", 2, 10, T0))
    engine.end_conversation("u")
    conversation_id = engine.list_conversations("u")[0].conversation_id
    engine.store.timeline.set_conversation_summary(conversation_id, "y" * 500_000, "brief")  # an older store's
    assert len(engine.list_conversations("u")[0].title or "") == TITLE_CAP_CHARS
    assert len(engine.get_conversation("u", conversation_id).conversation.title or "") == TITLE_CAP_CHARS


def test_a_reason_over_the_cap_is_refused_and_changes_nothing(engine: ConversationEngine) -> None:
    engine.ingest("u", _turns("a", 2, 10, T0))
    with pytest.raises(InvalidInputError, match=f"at most {MAX_REASON_CHARS} characters, got 100000"):
        engine.end_conversation("u", reason="r" * 100_000)
    assert engine.list_conversations("u")[0].ended_at is None  # still open
    engine.end_conversation("u", reason="r" * MAX_REASON_CHARS)
    assert engine.list_conversations("u")[0].end_reason == "r" * MAX_REASON_CHARS


# Paging and sharing --------------------------------------------------------------------------------
def test_a_long_conversation_pages_and_continue_with_reads_the_rest_once(engine: ConversationEngine) -> None:
    engine.ingest("u", _turns("a", 400, 1000, T0))
    conversation_id = engine.list_conversations("u")[0].conversation_id
    first = engine.get_conversation("u", conversation_id)
    assert first.truncated and 0 < len(first.messages) < 400 and first.next_seq == len(first.messages) + 1
    assert sum(len(m.content) for m in first.messages) <= ANSWER_CAP_CHARS
    assert f"from_seq={first.next_seq}" in (first.continue_with or "")
    seen, from_seq = [m.message_id for m in first.messages], first.next_seq
    while from_seq is not None:  # as continue_with says: get_turns_since from the conversation's start
        page = engine.turns_since("u", first.conversation.started_at, from_seq=from_seq, include_summaries=False,
                                  thread_id=first.conversation.thread_id)
        seen += [m.message_id for m in page.messages]
        from_seq = page.next_seq
    assert seen == [f"a{i}" for i in range(400)]


def test_turns_since_pages_by_size_at_its_default_limit(engine: ConversationEngine) -> None:
    engine.ingest("u", _turns("a", 1200, 500, T0))
    page = engine.turns_since("u", "2020-01-01")
    assert page.truncated and len(page.messages) < 1000 and page.next_seq == len(page.messages) + 1
    assert sum(len(m.content) + 400 for m in page.messages) <= ANSWER_CAP_CHARS


def test_results_that_cannot_page_share_the_answer(engine: ConversationEngine) -> None:
    long = [{"message_id": f"log{i}", "role": "tool", "content": f"needle {i} " + "x" * 30_000,
             "created_at": (T0 + timedelta(seconds=i)).isoformat()} for i in range(50)]
    engine.ingest("u", [{"message_id": "short", "role": "user", "content": "needle, short",
                         "created_at": (T0 - timedelta(seconds=1)).isoformat()}, *long])
    found = engine.substring_search("u", "needle")
    views = [view for _, view in found]
    assert len(views) == 50 and views[0].content == "needle, short" and not views[0].content_truncated
    assert all(v.content_truncated and v.content_chars > len(v.content) for v in views[1:])
    assert sum(len(v.content) for v in views) <= ANSWER_CAP_CHARS
    around = engine.turns_around("u", (T0 + timedelta(seconds=20)).isoformat())
    assert len(around.messages) == 40 and sum(len(v.content) for v in around.messages) <= ANSWER_CAP_CHARS
    alone = engine.get("u", message_id="log3")
    assert len(alone.content) == VIEW_CAP_CHARS  # one message alone still pages at the view cap


# Over MCP's streamable HTTP ----------------------------------------------------------------------
DEFAULT_CALLS: dict[str, dict[str, Any]] = {
    "conversation_search": {"query": "line"}, "conversation_get": {"message_id": "z"},
    "get_conversation_context": {}, "get_turns_since": {"timestamp": "2020-01-01"},
    "get_turns_around": {"timestamp": (T0 + timedelta(days=1, seconds=30)).isoformat()},
    "search_session_history": {"text": "line"}, "get_conversation": {}, "assemble_context": {},
    "request_context_slice": {"start_seq": 1, "end_seq": 3}, "summarize_message_range": {"start_seq": 2, "end_seq": 40},
    "end_conversation": {}, "add_messages": {"messages": [{"role": "user", "content": "last"}]},
}


async def _sizes(url: str, conversation_id: str) -> dict[str, int]:
    """Each call's result as the server sends it (JSON-RPC result: text content and structuredContent)."""
    sizes: dict[str, int] = {}
    headers = {"X-Convsearch-User": "u"}
    async with create_mcp_http_client(headers=headers) as http, \
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        calls = [*DEFAULT_CALLS.items(), ("get_conversation", {"conversation_id": conversation_id})]
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            assert not result.is_error, (name, result.content[0])
            sizes[name if name not in sizes else "get_conversation(id)"] = len(
                result.model_dump_json(by_alias=True, exclude_none=True).encode())
    return sizes


def test_every_tools_default_call_fits_one_event(tmp_path: Path) -> None:
    settings_home = tmp_path / "home"
    with ConversationEngine(settings_home, embedder=HashEmbedder(), clock=lambda: NOW) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"message_id": "z", "role": "user", "content": "z" * 1_100_000,
                             "created_at": T0.isoformat()}])
        engine.end_conversation("u")  # a conversation titled from a 1.1 MB message
        engine.ingest("u", _turns("b", 1100, 500, T0 + timedelta(days=1)))  # today: ~0.5 KB turns
        conversation_id = engine.list_conversations("u")[0].conversation_id
        with live_server(engine) as url:
            sizes = anyio.run(_sizes, url, conversation_id)
    assert set(sizes) == {*TOOL_NAMES, "get_conversation(id)"}
    assert max(sizes.values()) < 600_000, sizes  # the client's limit is 1 MiB an event
