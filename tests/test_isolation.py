"""Tenant isolation as a property: whatever the query, the filters or the ids passed, every search,
get, navigation and context call for user A returns nothing of user B, through the Python API, the
HTTP API and an MCP server bound to A. Writes aimed at B's thread with A's user id are refused.

Each user writes only words of its own made-up vocabulary (every word starts with the user's tag),
so a leaked snippet, summary or context line is visible in the serialized answer. The model is the
real MiniLM; one engine serves the module and grows as examples ingest.
"""

from __future__ import annotations

import collections
import itertools
import json
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

import anyio
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.server.mcpserver.exceptions import ToolError

from engine.api import ConversationEngine
from engine.errors import ConvsearchError
from engine.surfaces.mcp.server import build_server
from engine.surfaces.serialize import to_jsonable
from tests.support import live_server, real_embedder

pytestmark = pytest.mark.model  # see tests/conftest.py (--fast)

TAGS = {"alpha": "qal", "bravo": "zeb", "charlie": "wuc"}
USERS = tuple(TAGS)
VOCAB = {u: [tag + a + b for a, b in itertools.product(("ka", "mi", "ru", "te", "so", "vi"), repeat=2)]
         for u, tag in TAGS.items()}
T0 = datetime(2024, 5, 1, 8, 0, tzinfo=timezone.utc)
ISOLATE = settings(max_examples=15, deadline=None, derandomize=True, database=None)
ID_KEYS = {"message_id", "first_message_id", "last_message_id", "message_ids"}
CALLS: collections.Counter[str] = collections.Counter()  # checked answers per surface, printed at the end


class World:
    """What the module engine holds: who owns which message, and every id and time handed out."""

    def __init__(self) -> None:
        self.owner: dict[str, str] = {}
        self.clock = {u: T0 for u in USERS}
        self.days: set[str] = set()

    def ids(self) -> list[str]:
        return sorted(self.owner) or ["none"]

    def threads(self) -> list[str]:
        return [f"{u}:continuous" for u in USERS]


WORLD = World()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversationEngine]:
    home = tmp_path_factory.mktemp("isolation") / "home"
    with ConversationEngine(home, embedder=real_embedder(), clock=lambda: T0 + timedelta(days=30)) as e:
        for n, user in enumerate(USERS):
            e.add_user(user, ("UTC", "Asia/Tokyo", "America/Denver")[n])
            _ingest(e, user, [" ".join(VOCAB[user][i:i + 6]) for i in range(0, 30, 3)], gap_minutes=40, index=True)
        e.end_conversation("alpha")
        yield e
    print("\nisolation calls checked: " + ", ".join(f"{k}={v}" for k, v in sorted(CALLS.items())))


def _ingest(e: ConversationEngine, user: str, texts: list[str], *, gap_minutes: int, index: bool) -> None:
    batch = []
    for i, text in enumerate(texts):
        WORLD.clock[user] += timedelta(minutes=gap_minutes)
        WORLD.days.add(WORLD.clock[user].date().isoformat())
        batch.append({"role": ("user", "assistant")[i % 2], "content": text,
                      "created_at": WORLD.clock[user].isoformat()})
    for message_id in e.ingest(user, batch, index=index).inserted:
        WORLD.owner[message_id] = user


def assert_own(answer: Any, user: str) -> None:
    """Nothing in the answer (ids, text, thread and day ids) belongs to another user."""
    data = _without_echo(to_jsonable(answer))
    text = json.dumps(data, ensure_ascii=False)
    for other, tag in TAGS.items():
        if other != user:
            assert tag not in text and f"{other}:" not in text, f"{user} sees {other}'s data: {text[:300]}"
    for message_id in _ids(data):
        assert WORLD.owner.get(message_id, user) == user, f"{user} got {message_id} of {WORLD.owner[message_id]}"


def _without_echo(data: Any) -> Any:
    """The answer minus the caller's own query echoed back, whole or as its search terms (it may hold
    any user's words)."""
    if isinstance(data, dict):
        return {k: _without_echo(v) for k, v in data.items() if k not in ("query", "requested", "terms")}
    if isinstance(data, list):
        return [_without_echo(v) for v in data]
    return data


def _ids(data: Any) -> Iterator[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            if key in ID_KEYS:
                yield from (value if isinstance(value, list) else [value]) if value else []
            else:
                yield from _ids(value)
    elif isinstance(data, list):
        for value in data:
            yield from _ids(value)


# Strategies ------------------------------------------------------------------------------------
def pick(draw: st.DrawFn, items: list[str]) -> str:
    """An item of a list that grows between examples: drawn by index, so every example draws alike."""
    return items[draw(st.integers(0, 10_000)) % len(items)]


ALL_WORDS = [w for words in VOCAB.values() for w in words]
QUERY = st.one_of(st.lists(st.sampled_from(ALL_WORDS), min_size=1, max_size=6).map(" ".join),
                  st.text(min_size=1, max_size=30), st.sampled_from(["bravo", "alpha:continuous", "%", "*"]))
MOMENT = st.one_of(st.builds(lambda d: (T0 + timedelta(hours=d)).isoformat(), st.integers(-24, 24 * 40)),
                   st.sampled_from(["2024-05-01", "2024-05-02T09:00:00"]))
THREAD = st.one_of(st.none(), st.sampled_from(WORLD.threads()))


@st.composite
def filters(draw: st.DrawFn) -> dict[str, Any]:
    chosen: dict[str, Any] = {}
    if draw(st.booleans()):
        chosen["day"] = pick(draw, sorted(WORLD.days) or ["2024-05-01"])
    if draw(st.booleans()):
        chosen["recency_days"] = draw(st.sampled_from([1, 7, 45, 36500]))
    if draw(st.booleans()):
        chosen["start"] = draw(MOMENT)
    chosen["mode"] = draw(st.sampled_from(["hybrid", "lexical", "vector"]))
    chosen["kinds"] = draw(st.sampled_from([["message"], ["summary"], ["summary", "message"]]))
    return chosen


def api_calls(draw: st.DrawFn) -> list[tuple[str, Callable[[ConversationEngine, str], Any]]]:
    """One of each reading call, with drawn queries, filters, moments and (anyone's) ids."""
    some_id, moment, thread = pick(draw, WORLD.ids()), draw(MOMENT), draw(THREAD)
    query, opts = draw(QUERY), draw(filters())
    day_id = f"{draw(st.sampled_from(WORLD.threads()))}:day:{pick(draw, sorted(WORLD.days))}"
    conversation = f"{draw(st.sampled_from(WORLD.threads()))}:conv:{draw(st.integers(1, 4))}"
    return [
        ("search", lambda e, u: e.search(u, query, limit=20, **opts)),
        ("get_message", lambda e, u: e.get(u, message_id=some_id)),
        ("get_day", lambda e, u: e.get(u, day_segment_id=day_id)),
        ("get_range", lambda e, u: e.get(u, day_segment_id=day_id, from_message_id=some_id, to_message_id=some_id)),
        ("turns_since", lambda e, u: e.turns_since(u, moment, thread_id=thread)),
        ("turns_around", lambda e, u: e.turns_around(u, moment, count=30, thread_id=thread)),
        ("context", lambda e, u: e.conversation_context(u, 50, thread_id=thread)),
        ("range", lambda e, u: e.messages_range(u, 1, 5000, thread_id=thread)),
        ("grep", lambda e, u: e.substring_search(u, query[:20] or "x", thread_id=thread)),
        ("conversations", lambda e, u: e.list_conversations(u, 50)),
        ("conversation", lambda e, u: e.get_conversation(u, conversation)),
        ("assemble", lambda e, u: e.assemble_context(u)),
        ("status", lambda e, u: e.index_status(u)),
    ]


# Python API --------------------------------------------------------------------------------------
@ISOLATE
@given(data=st.data(), writer=st.sampled_from(USERS), n=st.integers(1, 3), index=st.booleans())
def test_python_api_never_crosses_users(engine: ConversationEngine, data: st.DataObject, writer: str, n: int,
                                        index: bool) -> None:
    sentence = st.lists(st.sampled_from(VOCAB[writer]), min_size=2, max_size=8)
    words = data.draw(st.lists(sentence, min_size=n, max_size=n))
    _ingest(engine, writer, [" ".join(w) for w in words], gap_minutes=data.draw(st.sampled_from([1, 45, 60 * 20])),
            index=index)
    for user in USERS:
        for _name, call in api_calls(data.draw):
            CALLS["python"] += 1
            try:
                answer = call(engine, user)
            except ConvsearchError:
                continue  # another user's id is answered like an unknown one
            assert_own(answer, user)


@ISOLATE
@given(user=st.sampled_from(USERS), victim=st.sampled_from(USERS), seq=st.integers(1, 20))
def test_writes_aimed_at_another_users_thread_are_refused(engine: ConversationEngine, user: str, victim: str,
                                                          seq: int) -> None:
    if user == victim:
        return
    thread, before = f"{victim}:continuous", engine.stats(victim)
    attempts = [lambda: engine.ingest(user, [{"role": "user", "content": TAGS[user] + "x"}], thread_id=thread),
                lambda: engine.end_conversation(user, thread_id=thread),
                lambda: engine.summarize_range(user, 1, seq + 1, thread_id=thread)]
    for attempt in attempts:
        CALLS["refused_writes"] += 1
        with pytest.raises(ConvsearchError):
            attempt()
    assert engine.stats(victim) == before
    assert_own(engine.conversation_context(victim, 200), victim)


# HTTP --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def http(engine: ConversationEngine) -> Iterator[httpx.Client]:
    with live_server(engine) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


def http_calls(draw: st.DrawFn) -> list[tuple[str, dict[str, Any]]]:
    some_id, moment, query = pick(draw, WORLD.ids()), draw(MOMENT), draw(QUERY)
    opts = {k: v for k, v in draw(filters()).items() if k != "mode"}
    day_id = f"{draw(st.sampled_from(WORLD.threads()))}:day:{pick(draw, sorted(WORLD.days))}"
    conversation = f"{draw(st.sampled_from(WORLD.threads()))}:conv:{draw(st.integers(1, 4))}"
    return [("/api/conversation/search", {"query": query, "limit": 20, **opts}),
            ("/api/conversation/get", {"message_id": some_id}), ("/api/conversation/get", {"day_segment_id": day_id}),
            ("/api/get_turns_since", {"timestamp": moment}),
            ("/api/get_turns_around", {"timestamp": moment, "count": 30}),
            ("/api/get_conversation_context", {"turns": 50}), ("/api/search_session_history", {"text": query[:20]}),
            ("/api/messages/range", {"start_seq": 1, "end_seq": 5000}), ("/api/conversations/list", {"limit": 50}),
            ("/api/conversations/get", {"conversation_id": conversation}), ("/api/context/assemble", {}),
            ("/api/index/status", {})]


@settings(ISOLATE, max_examples=8)
@given(data=st.data())
def test_http_never_crosses_users(http: httpx.Client, data: st.DataObject) -> None:
    for user in USERS:
        for route, body in http_calls(data.draw):
            CALLS["http"] += 1
            response = http.post(route, json={"user_id": user, **body})
            assert response.status_code < 500, (route, body, response.text[:300])
            if response.status_code == 200:
                assert_own(response.json(), user)


# MCP: a server bound to one user ---------------------------------------------------------------------
def mcp_calls(draw: st.DrawFn) -> list[tuple[str, dict[str, Any]]]:
    some_id, moment, query = pick(draw, WORLD.ids()), draw(MOMENT), draw(QUERY)
    day_id = f"{draw(st.sampled_from(WORLD.threads()))}:day:{pick(draw, sorted(WORLD.days))}"
    conversation = f"{draw(st.sampled_from(WORLD.threads()))}:conv:{draw(st.integers(1, 4))}"
    return [("conversation_search", {"query": query, "limit": 20}), ("conversation_get", {"message_id": some_id}),
            ("conversation_get", {"day_segment_id": day_id}), ("get_turns_since", {"timestamp": moment}),
            ("get_turns_around", {"timestamp": moment, "count": 30}), ("get_conversation_context", {"turns": 50}),
            ("search_session_history", {"text": query[:20]}), ("get_conversation", {"conversation_id": conversation}),
            ("get_conversation", {"list_recent": True, "limit": 50})]


@settings(ISOLATE, max_examples=8)
@given(data=st.data())
def test_mcp_server_bound_to_a_user_never_reaches_another(engine: ConversationEngine, data: st.DataObject) -> None:
    """In-process MCPServer.call_tool; the stdio transport is covered by tests/test_mcp.py."""
    for user in USERS:
        server = build_server(engine, user)
        for tool, arguments in mcp_calls(data.draw):
            CALLS["mcp"] += 1
            try:
                answer = anyio.run(server.call_tool, tool, arguments)
            except ToolError as exc:  # unknown (or another user's) ids are tool errors with the engine's code
                assert ":" in str(exc)
                continue
            if answer.is_error:
                continue
            assert_own(answer.structured_content, user)
            for block in answer.content:  # the same answer as JSON text for clients without structured output
                assert_own(json.loads(block.text), user)
