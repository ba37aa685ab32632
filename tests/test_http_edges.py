"""The HTTP API at its edges: what a client sends wrong gets 422 `invalid_input` (or the documented code)
saying what to send instead, never a 500, an echo of 100 KB or the server's own paths.

A real store in tmp_path, lexical only; a real uvicorn server where the connection or MCP matters
(tests/support.py live_server), FastAPI's TestClient over the same app elsewhere.
"""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote, urlsplit

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient

from engine.api import ConversationEngine
from engine.errors import StoreLockedError
from engine.query.navigation import MAX_LIMIT
from engine.surfaces.http.app import create_app
from engine.surfaces.http.requests import MAX_SEQ, MAX_SEQ_SPAN
from tests.support import live_server

DOCS = Path(__file__).resolve().parents[1] / "docs"
ROWS = [{"message_id": f"m{i}", "role": "user", "content": f"note {i} about papaya", "created_at": f"2024-06-02T10:0{i}"}
        for i in range(3)]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
MCP_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[ConversationEngine]:
    with ConversationEngine(tmp_path / "home", embedder=None) as e:
        e.add_user("alice")
        e.ingest("alice", ROWS)
        yield e


@pytest.fixture
def client(engine: ConversationEngine) -> Iterator[TestClient]:
    with TestClient(create_app(engine, maintain=False), base_url="http://127.0.0.1") as c:
        yield c


def refused(response: Any, status: int = 422, code: str = "invalid_input") -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return str(body["error"]["message"])


# Import: query parameters and names -------------------------------------------------------------
def test_a_nul_in_the_suffix_is_422_and_the_connection_stays_usable(engine: ConversationEngine) -> None:
    with live_server(engine) as url:
        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        connection.request("POST", "/api/import?format=jsonl&suffix=x.%00", body=b"{}\n" * 50_000)
        answer = connection.getresponse()
        body = json.loads(answer.read())
        assert answer.status == 422 and body["error"]["code"] == "invalid_input"
        assert body["error"]["message"].startswith("suffix: the uploaded file's name, or just its extension")
        socket_before = connection.sock
        connection.request("POST", "/api/users/list", body=b"{}", headers={"Content-Type": "application/json"})
        again = connection.getresponse()
        assert again.status == 200 and json.loads(again.read()) == ["alice"]
        assert connection.sock is socket_before  # the same keep-alive connection, not a reconnect
        connection.close()


def test_import_query_parameters_must_be_utf8(client: TestClient, engine: ConversationEngine) -> None:
    line = b'{"role": "user", "content": "x"}\n'
    message = refused(client.post("/api/import?format=jsonl&user_id=%FF%FE", content=line))
    assert "'user_id' is not UTF-8" in message and "%C3%A9" in message
    assert engine.users() == ["alice"]  # no user "\ufffd\ufffd"
    assert "NUL" in refused(client.post("/api/import?format=jsonl&timezone=UTC%00", content=line))


def test_the_import_names_the_file_as_sent_not_the_temp_copy(client: TestClient) -> None:
    line = b'{"role": "user", "content": "x"}\n'
    report = client.post("/api/import?format=jsonl&user_id=bob&suffix=exports/chat.jsonl", content=line).json()
    assert report["path"] == "chat.jsonl" and report["users"] == ["bob"]
    assert client.post("/api/import?format=jsonl&user_id=bob", content=line).json()["path"] == "upload"
    bad = refused(client.post("/api/import?format=parquet&suffix=dump.parquet", content=b"garbage"),
                  code="bad_import_record")
    assert bad.startswith("dump.parquet is not a readable parquet file") and ".upload-" not in bad


# Seqs -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("route, body", [
    ("/api/context/slice", {"start_seq": 1, "end_seq": 2**200}),
    ("/api/summarize_range", {"start_seq": 1, "end_seq": 2**200}),
    ("/api/messages/range", {"start_seq": 2**63, "end_seq": 2**63 + 1}),
    ("/api/get_turns_since", {"timestamp": "2024-06-01", "from_seq": 2**200}),
])
def test_a_seq_beyond_the_store_is_refused_at_the_edge(client: TestClient, route: str, body: dict[str, Any]) -> None:
    message = refused(client.post(route, json={"user_id": "alice", **body}))
    assert f"seqs start at 1 (a thread's first message) and are at most {MAX_SEQ}" in message
    assert "DuckDB" not in message and "128-bit" not in message
    assembled = client.post("/api/context/assemble", json={"user_id": "alice"})
    assert assembled.status_code == 200 and assembled.json()["source"] == "today"  # no slice was kept


def test_seq_lower_bounds_say_the_same_on_every_route(client: TestClient) -> None:
    said = {refused(client.post(route, json={"user_id": "alice", "start_seq": 0, "end_seq": 2}))
            for route in ("/api/messages/range", "/api/summarize_range", "/api/context/slice")}
    assert len(said) == 1 and "got 0" in said.pop()
    at_the_top = client.post("/api/messages/range", json={"user_id": "alice", "start_seq": MAX_SEQ - 1,
                                                          "end_seq": MAX_SEQ})
    assert at_the_top.status_code == 200 and at_the_top.json() == []


def test_a_slice_is_no_wider_than_a_range_read(client: TestClient) -> None:
    assert MAX_SEQ_SPAN == MAX_LIMIT  # the edge's number is the engine's
    wide = refused(client.post("/api/context/slice", json={"user_id": "alice", "start_seq": 1,
                                                           "end_seq": MAX_SEQ_SPAN + 2}))
    assert f"spans more than {MAX_SEQ_SPAN} seqs" in wide and "/api/messages/range" in wide
    fits = client.post("/api/context/slice", json={"user_id": "alice", "start_seq": 1, "end_seq": MAX_SEQ_SPAN + 1})
    assert fits.status_code == 200
    assert client.post("/api/context/assemble", json={"user_id": "alice"}).json()["source"] == "slice"


# Bodies -----------------------------------------------------------------------------------------
JSON_TYPE = {"Content-Type": "application/json"}


def test_an_unreadable_body_says_what_to_send(client: TestClient) -> None:
    not_utf8 = refused(client.post("/api/users", content=b'{"user_id": "\xff"}', headers=JSON_TYPE))
    assert "not UTF-8 (byte 0xff at offset 13)" in not_utf8 and "application/json" in not_utf8
    deep = refused(client.post("/api/users", content=b"[" * 100_000, headers=JSON_TYPE))
    assert "nests arrays or objects too deeply" in deep
    broken = refused(client.post("/api/users", content=b'{"user_id": "x",\n }', headers=JSON_TYPE))
    assert "not valid JSON" in broken and "line 2 column 2, character 18" in broken
    plain = refused(client.post("/api/users", content=b'{"user_id": "x"}', headers={"Content-Type": "text/plain"}))
    assert "Content-Type: text/plain" in plain and "application/json" in plain
    assert "JSON object" in refused(client.post("/api/users", json=["x"]))
    assert "needs a body" in refused(client.post("/api/users"))


def test_a_wrong_method_names_the_one_to_use(client: TestClient) -> None:
    response = client.get("/api/users")
    assert "GET is not allowed on /api/users: use POST" in refused(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "POST"


def test_a_long_bad_value_is_not_echoed_whole(client: TestClient) -> None:
    assert len(refused(client.post("/api/users", json={"user_id": "\n" * 100_000}))) < 200
    assert len(refused(client.post("/api/conversation/search", json={"user_id": "x" * 100_000, "query": "q"}))) < 200


def test_describe_takes_no_body(client: TestClient) -> None:
    refused(client.post("/api/users/describe", content=b"garbage", headers=JSON_TYPE))
    assert "x: Extra inputs" in refused(client.post("/api/users/describe", json={"x": 1}))
    empty: list[dict[str, Any] | None] = [{}, None]
    for sent in empty:
        answer = client.post("/api/users/describe", json=sent)
        assert answer.status_code == 200 and [u["user_id"] for u in answer.json()] == ["alice"]


@pytest.mark.parametrize("message", [{"content": "a\x00b"}, {"content": "x", "speaker": "a\x00b"},
                                     {"content": "x", "tools_used": ["t\x00"]},
                                     {"content": "x", "metadata": {"k": [{"deep\x00": 1}]}}])
def test_no_text_field_takes_a_nul(client: TestClient, engine: ConversationEngine, message: dict[str, Any]) -> None:
    said = refused(client.post("/api/messages", json={"user_id": "alice", "messages": [{"role": "user", **message}]}))
    field = next(name for name in message if name != "content" or len(message) == 1)
    assert said == f"messages.0.{field}: holds a NUL character (\\u0000), which no text takes: remove it"
    assert len(engine.messages_range("alice", 1, 100)) == len(ROWS)


# MCP sessions: who the header names, and a deleted user -----------------------------------------
def _open(url: str, user: bytes) -> httpx.Response:
    return httpx.post(f"{url}/mcp", content=json.dumps(INIT),
                      headers=[*((k.encode(), v.encode()) for k, v in MCP_ACCEPT.items()), (b"X-Convsearch-User", user)],
                      timeout=30)


def test_a_non_ascii_user_is_named_percent_encoded(engine: ConversationEngine) -> None:
    engine.add_user("é😀")
    engine.add_user("50%")
    with live_server(engine) as url:
        assert _open(url, quote("é😀").encode()).status_code == 200
        assert _open(url, b"50%25").status_code == 200
        hint = refused(_open(url, "é😀".encode("utf-8")), 404, "unknown_user")
        assert "percent-encoded as UTF-8 ('é😀' is %C3%A9%F0%9F%98%80)" in hint
        assert "%C3%A9" in refused(_open(url, b"%FF"))
        assert "percent" not in refused(_open(url, b"nobody"), 404, "unknown_user")


def test_a_deleted_users_mcp_sessions_are_refused(engine: ConversationEngine) -> None:
    with live_server(engine) as url:
        opened = _open(url, b"alice")
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        deleted = httpx.post(f"{url}/api/delete", json={"user_id": "alice", "all_of_user": True}, timeout=30)
        assert deleted.status_code == 200, deleted.text
        refused(_open(url, b"alice"), 404, "unknown_user")
        listed = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, timeout=30,
                            headers={**MCP_ACCEPT, "X-Convsearch-User": "alice", "mcp-session-id": session})
        refused(listed, 404, "unknown_user")
        engine.add_user("alice")  # the same id again: a new user, with a new manager
        assert _open(url, b"alice").status_code == 200


# The documents ----------------------------------------------------------------------------------
def test_every_import_parameter_is_documented(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    parameters = [p["name"] for p in document["paths"]["/api/import"]["post"]["parameters"]]
    section = (DOCS / "reference" / "http.md").read_text(encoding="utf-8").split("### `POST /api/import`")[1]
    assert parameters and [name for name in parameters if f"`{name}`" not in section] == []


def test_reliability_gives_the_clis_exit_code_for_a_locked_store() -> None:
    text = (DOCS / "reliability.md").read_text(encoding="utf-8")
    said = re.findall(r"`store_locked`, HTTP 423, exit code (\d+)", text)
    assert said == [str(StoreLockedError.exit_code)]


def test_an_upload_cut_short_by_the_client_is_not_a_server_error(engine: ConversationEngine,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A client that drops the connection mid-upload: logged as its refusal, not http.internal_error."""
    app = create_app(engine, maintain=False)
    arrivals = iter([{"type": "http.request", "body": b'{"role": "user", "content": "half', "more_body": True},
                     {"type": "http.disconnect"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(arrivals, {"type": "http.disconnect"})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/api/import", "raw_path": b"/api/import", "query_string": b"format=jsonl&user_id=alice",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/octet-stream")],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80), "root_path": ""}
    with caplog.at_level("INFO"):
        anyio.run(app, scope, receive, send)
    assert "http.internal_error" not in caplog.text
    assert sent and sent[0]["status"] == 422
    assert b"the upload stopped after" in b"".join(m.get("body", b"") for m in sent)
    assert not list(engine.home.glob(".upload-*"))  # nothing left behind
