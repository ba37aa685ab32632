"""The MCP server as a client sees it: `convsearch mcp --user alice` in a subprocess, driven over stdio
by the mcp package's own ClientSession. One session runs every call; the tests read its transcript."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, Tool

from engine.api import ConversationEngine
from engine.surfaces.mcp.server import TOOL_NAMES, nullable_as_type_list
from engine.query.ranking import STRONG_LEXICAL
from tests.support import ALICE, BOB, NOW, messages

pytestmark = [pytest.mark.model, pytest.mark.process]  # see tests/conftest.py (--fast)

REPO = Path(__file__).resolve().parents[1]
CONVSEARCH = Path(sys.executable).parent / "convsearch"
READ_ONLY = {"conversation_search", "conversation_get", "get_conversation_context", "get_turns_since",
             "get_turns_around", "search_session_history", "get_conversation", "assemble_context"}
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "search": ("conversation_search", {"query": "which database did we choose?", "explain": True}),
    "search_bob": ("conversation_search", {"query": "Mochi cat salmon allergy", "kinds": ["message"]}),
    "get": ("conversation_get", {"message_id": "a3"}),
    "get_day": ("conversation_get", {"day_segment_id": "alice:continuous:day:2024-03-04"}),
    "get_bob": ("conversation_get", {"message_id": "b1"}),
    "context": ("get_conversation_context", {"turns": 4}),
    "since": ("get_turns_since", {"timestamp": "2024-03-05T00:00:00"}),
    "around": ("get_turns_around", {"timestamp": "2024-03-04T09:05:00", "count": 2}),
    "grep": ("search_session_history", {"text": "a-7731"}),
    "grep_bob": ("search_session_history", {"text": "Mochi"}),
    "wrong_types": ("conversation_search", {"query": 123, "limit": "lots"}),
    "too_many": ("conversation_search", {"query": "database", "limit": 500}),
    "smuggled_user": ("get_turns_since", {"timestamp": "2024-03-04", "user_id": "bob"}),
    "unknown_mode": ("conversation_search", {"query": "kitten", "mode": "vector"}),
    "no_args": ("get_conversation", {}),
    "both": ("get_conversation", {"conversation_id": "alice:continuous:conv:1", "list_recent": True}),
    "slice": ("request_context_slice", {"start_seq": 1, "end_seq": 3}),
    "assemble": ("assemble_context", {"max_tokens": 2000}),
    "assemble_again": ("assemble_context", {"max_tokens": 2000}),
    "strict": ("conversation_search", {"query": "which database did we choose?", "min_score": 0.99, "explain": True}),
    "rrf": ("conversation_search", {"query": "which database did we choose?", "fusion": "rrf", "explain": True}),
    "summarize": ("summarize_message_range", {"start_seq": 1, "end_seq": 5}),
    "recent": ("get_conversation", {"list_recent": True, "limit": 5}),
    "conversation": ("get_conversation", {"conversation_id": "alice:continuous:conv:1"}),
    "end": ("end_conversation", {"reason": "wrapping up"}),
    "after_errors": ("conversation_search", {"query": "ECONNRESET", "limit": 2}),
    "add": ("add_messages", {"messages": [{"role": "user", "content": "The parking code is 4417.",
                                           "message_id": "a-park"}]}),
    "add_again": ("add_messages", {"messages": [{"role": "user", "content": "The parking code is 4417.",
                                                 "message_id": "a-park"}]}),
    "add_bad": ("add_messages", {"messages": [{"role": "robot", "content": "hi"}]}),
    "find_added": ("search_session_history", {"text": "4417"}),
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Alice's and Bob's messages stored and indexed; the engine is closed before the server starts."""
    home = tmp_path_factory.mktemp("mcp") / "home"
    with ConversationEngine(home, clock=lambda: NOW) as engine:
        for user, zone, rows in (("alice", "Europe/Paris", ALICE), ("bob", "Asia/Tokyo", BOB)):
            engine.add_user(user, zone)
            engine.ingest(user, messages(rows), index=False)
        engine.index()
    return home


async def _session(home: Path, errlog: Any) -> dict[str, Any]:
    server = StdioServerParameters(command=str(CONVSEARCH), args=["--home", str(home), "mcp", "--user", "alice"],
                                   env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)},
                                   cwd=REPO)  # the SDK passes only a few variables on: name this checkout
    transcript: dict[str, Any] = {}
    async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        transcript["init"] = await session.initialize()
        transcript["tools"] = {tool.name: tool for tool in (await session.list_tools()).tools}
        for key, (name, arguments) in CALLS.items():
            transcript[key] = await session.call_tool(name, arguments)
    return transcript


@pytest.fixture(scope="module")
def transcript(home: Path) -> dict[str, Any]:
    with open(home.parent / "mcp.stderr", "w") as errlog:
        return anyio.run(_session, home, errlog)


def data(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    structured = result.structured_content
    assert structured is not None
    return structured.get("result", structured)  # lists and unions come wrapped as {"result": ...}


def failure(result: CallToolResult) -> str:
    assert result.is_error, result
    return " ".join(getattr(block, "text", "") for block in result.content)


def test_tools_have_schemas_descriptions_and_hints(transcript: dict[str, Any]) -> None:
    tools: dict[str, Tool] = transcript["tools"]
    assert set(tools) == set(TOOL_NAMES)
    assert "alice" in (transcript["init"].instructions or "")
    for name, tool in tools.items():
        assert len(tool.description or "") > 120 and "Use" in (tool.description or ""), name
        properties = tool.input_schema["properties"]
        assert "user_id" not in properties, f"{name} must not take a user"
        assert all(spec.get("description") for spec in properties.values()), name
        assert tool.output_schema is not None, name
        assert tool.annotations is not None and tool.annotations.read_only_hint is (name in READ_ONLY), name
    assert tools["conversation_search"].input_schema["required"] == ["query"]


def _nullable_pairs(schema: Any) -> int:
    """How many `anyOf: [{"type": T}, {"type": "null"}]` the schema holds."""
    if isinstance(schema, list):
        return sum(_nullable_pairs(item) for item in schema)
    if not isinstance(schema, dict):
        return 0
    options = schema.get("anyOf")
    pair = isinstance(options, list) and len(options) == 2 and {"type": "null"} in options and all(
        set(o) == {"type"} for o in options)
    return int(pair) + sum(_nullable_pairs(value) for value in schema.values())


def test_output_schemas_write_nullable_fields_as_type_lists(transcript: dict[str, Any]) -> None:
    """A client that validates every result (the Python SDK does) checks `"type": [T, "null"]` faster
    than pydantic's `anyOf` pair; the stdio client of this transcript validated each result against them."""
    schemas = {name: tool.output_schema for name, tool in transcript["tools"].items()}
    assert sum(_nullable_pairs(s) for s in schemas.values()) == 0
    assert '"null"]' in str(schemas["conversation_search"]).replace("'", '"')


def test_type_lists_accept_what_the_anyof_pairs_accept() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    raw = {"type": "object", "required": ["score", "rank"], "properties": {
        "score": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None},
        "rank": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "hits": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    }}
    compact = nullable_as_type_list(raw)
    assert _nullable_pairs(raw) == 3 and _nullable_pairs(compact) == 0
    assert compact["properties"]["either"] == raw["properties"]["either"]
    for instance in ({"score": 0.5, "rank": 1, "hits": ["a", None], "either": 3}, {"score": None, "rank": None},
                     {"score": "high", "rank": 1}, {"score": 0.5, "rank": 1.5}, {"score": 1, "rank": 1, "hits": [2]},
                     {"rank": 1}, {"score": 1, "rank": 1, "either": None}):
        assert jsonschema.Draft202012Validator(compact).is_valid(instance) == \
            jsonschema.Draft202012Validator(raw).is_valid(instance), instance


def test_search_returns_structured_cited_hits(transcript: dict[str, Any]) -> None:
    found = data(transcript["search"])
    assert found["mode"] == "hybrid" and found["results"][0]["parts"] is not None
    assert any(hit["message_id"] in {"a1", "a2", "a3"} for hit in found["results"])
    later = data(transcript["after_errors"])
    assert {"a5", "a6"} & {hit["message_id"] for hit in later["results"]}


def test_get_and_navigation_tools(transcript: dict[str, Any]) -> None:
    assert data(transcript["get"])["content"].startswith("Decision")
    assert data(transcript["get_day"])["message_ids"] == ["a1", "a2", "a3", "a4"]
    assert [m["message_id"] for m in data(transcript["context"])["turns"]][-1] == "a6"
    assert [m["message_id"] for m in data(transcript["since"])["messages"]] == ["a5", "a6"]
    assert [m["message_id"] for m in data(transcript["around"])["messages"]] == ["a2", "a3"]
    assert [g["message"]["message_id"] for g in data(transcript["grep"])] == ["a3"]


def test_writing_and_conversation_tools(transcript: dict[str, Any]) -> None:
    assert data(transcript["slice"])["end_seq"] == 3
    assert data(transcript["summarize"])["kind"] == "range"
    recent = data(transcript["recent"])
    assert [c["conversation_id"] for c in recent][-1] == "alice:continuous:conv:1"
    assert data(transcript["conversation"])["messages"][0]["message_id"] == "a1"
    ended = data(transcript["end"])
    assert ended["ended"] and ended["summary"]["kind"] == "conversation"
    assert ended["conversation_id"] == ended["summary"]["conversation_id"]


def test_bad_calls_are_tool_errors_not_crashes(transcript: dict[str, Any]) -> None:
    wrong = failure(transcript["wrong_types"])
    assert "query" in wrong and "limit" in wrong
    assert "invalid_input" in failure(transcript["too_many"])
    assert "not both" in failure(transcript["both"])
    assert "role" in failure(transcript["add_bad"])
    assert not transcript["after_errors"].is_error  # the server lived through them


def test_another_users_history_is_unreachable(transcript: dict[str, Any]) -> None:
    found = data(transcript["search_bob"])
    assert all(not (hit["message_id"] or "").startswith("b") for hit in found["results"])
    assert all("Mochi" not in hit["snippet"] for hit in found["results"])
    assert data(transcript["grep_bob"]) == []
    assert "unknown_message" in failure(transcript["get_bob"])
    smuggled = failure(transcript["smuggled_user"])  # the session's user is fixed: user_id is no argument
    assert "invalid_input: get_turns_since has no argument user_id" in smuggled and "timestamp" in smuggled
    assert "invalid_input: conversation_search has no argument mode" in failure(transcript["unknown_mode"])


def test_logs_go_to_stderr_only(transcript: dict[str, Any], home: Path) -> None:
    log = (home.parent / "mcp.stderr").read_text()
    assert '"jsonrpc"' not in log


def test_added_messages_are_alices_stored_once_and_found(transcript: dict[str, Any]) -> None:
    assert data(transcript["add"])["inserted"] == ["a-park"]
    assert data(transcript["add_again"])["duplicates"] == ["a-park"]  # a retry never doubles
    found = data(transcript["find_added"])
    assert [m["message"]["message_id"] for m in found] == ["a-park"] and found[0]["message"]["role"] == "user"


def test_assemble_context_honours_a_pending_slice_once(transcript: dict[str, Any]) -> None:
    sliced = data(transcript["assemble"])
    assert sliced["source"] == "slice" and [i["message_id"] for i in sliced["items"]] == ["a1", "a2"]
    assert data(transcript["assemble_again"])["source"] == "today"


def test_search_takes_min_score_and_fusion(transcript: dict[str, Any]) -> None:
    every = data(transcript["search"])["results"]
    strict = data(transcript["strict"])["results"]
    assert len(strict) < len(every)  # a floor never drops a strong keyword hit (engine.query.ranking.passes_floor)
    assert all(hit["score"] >= 0.99 or hit["parts"]["lexical"] >= STRONG_LEXICAL for hit in strict)
    assert {hit["parts"]["fusion"] for hit in data(transcript["rrf"])["results"] if hit["kind"] == "message"} == {"rrf"}


def test_get_conversation_without_arguments_lists_recent_ones(transcript: dict[str, Any]) -> None:
    listed = data(transcript["no_args"])
    assert listed and listed[:5] == data(transcript["recent"])
