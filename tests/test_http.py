"""The HTTP API on a real uvicorn server over a real store and the real MiniLM model, driven by httpx."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from engine.api import ConversationEngine
from engine.config import Settings
from engine.query.context import ContextPayload, TruncationMarker
from engine.surfaces.http import schemas
from engine.models import Conversation, IngestResult, Message, Summary, User
from engine.query.navigation_results import DayView, MessageView, SummaryView, TurnsAround, TurnsSince, ConversationContext
from engine.query.ranking import ScoreParts
from engine.query.search_types import SearchHit, SearchResponse
from engine.query.conversations import ConversationDetail
from indexers.embedders import Embedder, load_embedder
from indexers.pipeline import IndexReport
from tests.support import ALICE, BOB, NOW, live, messages

pytestmark = pytest.mark.model  # see tests/conftest.py (--fast)

@pytest.fixture(scope="module")
def embedder() -> Embedder:
    loaded = load_embedder("torch")
    assert loaded is not None
    return loaded


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[httpx.Client]:
    """Alice's and Bob's messages ingested over HTTP."""
    with ConversationEngine(tmp_path_factory.mktemp("http") / "home", embedder=embedder, clock=lambda: NOW) as engine:
        for client in live(engine):
            for user, zone, rows in (("alice", "Europe/Paris", ALICE), ("bob", "Asia/Tokyo", BOB)):
                assert ok(client, "/api/users", user_id=user, timezone=zone)["timezone"] == zone
                ingested = ok(client, "/api/messages", user_id=user, messages=messages(rows))
                assert list(ingested["inserted"]) == [row[0] for row in rows]
            yield client


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server with a token and the smallest body limit (lexical only: these tests never search)."""
    settings_ = Settings(api_token="s3cret-token", max_body_bytes=1024)
    with ConversationEngine(tmp_path_factory.mktemp("guarded") / "home", settings=settings_, embedder=None) as engine:
        yield from live(engine)


def post(client: httpx.Client, path: str, **body: Any) -> httpx.Response:
    return client.post(path, json=body)


def ok(client: httpx.Client, path: str, **body: Any) -> Any:
    response = post(client, path, **body)
    assert response.status_code == 200, response.text
    return response.json()


def error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return str(body["error"]["message"])


# Ingest and search ------------------------------------------------------------------------------
def test_health_needs_nothing(api: httpx.Client) -> None:
    health = api.get("/healthz").json()
    assert health["status"] == "ok" and health["details"]["summaries"] == {"pending_retries": 0, "last_error": None}
    assert health["details"]["index"]["steps"] >= 1 and health["details"]["index"]["last_error"] is None


def test_reingest_is_a_no_op(api: httpx.Client) -> None:
    again = ok(api, "/api/messages", user_id="alice", messages=messages(ALICE[:2]))
    assert again["inserted"] == [] and again["duplicates"] == ["a1", "a2"]


def test_search_finds_the_decision_and_explains_it(api: httpx.Client) -> None:
    found = ok(api, "/api/conversation/search", user_id="alice", query="which database did we choose?", explain=True)
    assert found["mode"] == "hybrid" and found["not_vector_indexed"] == 0
    assert found["terms"] == ["databas", "choos"]  # stemmed, without "which", "did", "we"
    first = found["results"][0]
    # the day's summary matches, but less than twice the best turn (summary_lead_margin): the turn leads
    assert first["kind"] == "message" and first["day_label"] == "2024-03-04", found
    assert first["message_id"] in {"a1", "a2", "a3"} and first["from_seq"] <= 3 <= first["to_seq"]
    parts = first["parts"]
    assert parts["lexical"] >= 0 and parts["vector"] is not None and parts["fusion"] == "weighted"
    assert parts["own"] is not None and parts["window"] is not None  # a message's own parts are explained
    summary = ok(api, "/api/conversation/search", user_id="alice", query="which database did we choose?",
                 kinds=["summary"])["results"][0]
    assert summary["kind"] == "summary" and summary["day_label"] == "2024-03-04"


def test_search_filters_and_scoping(api: httpx.Client) -> None:
    day = ok(api, "/api/conversation/search", user_id="alice", query="ECONNRESET", day="2024-03-05", limit=3)
    assert day["results"] and all(hit["day_label"] == "2024-03-05" for hit in day["results"])
    assert all(hit["parts"] is None for hit in day["results"])
    leaked = ok(api, "/api/conversation/search", user_id="alice", query="Mochi cat salmon allergy")
    assert all(not (hit["message_id"] or "").startswith("b") for hit in leaked["results"])
    bob = ok(api, "/api/conversation/search", user_id="bob", query="Mochi", kinds=["message"])
    assert bob["results"][0]["message_id"] in {"b1", "b2"}


def test_get_a_message_a_day_and_a_range(api: httpx.Client) -> None:
    message = ok(api, "/api/conversation/get", user_id="alice", message_id="a3")
    assert message["content"].startswith("Decision") and message["seq"] == 3
    day = ok(api, "/api/conversation/get", user_id="alice", day_segment_id=message["day_segment_id"])
    assert day["message_ids"] == ["a1", "a2", "a3", "a4"]
    part = ok(api, "/api/conversation/get", user_id="alice", day_segment_id=message["day_segment_id"],
              from_message_id="a2", to_message_id="a3")
    assert [m["message_id"] for m in part] == ["a2", "a3"]


def test_navigation_routes(api: httpx.Client) -> None:
    since = ok(api, "/api/get_turns_since", user_id="alice", timestamp="2024-03-05T00:00:00")
    assert [m["message_id"] for m in since["messages"]] == ["a5", "a6"] and since["truncated"] is False
    paged = ok(api, "/api/get_turns_since", user_id="alice", timestamp="2024-03-04", limit=4, include_summaries=False)
    assert paged["truncated"] and paged["next_seq"] == 5 and paged["summaries"] == []
    around = ok(api, "/api/get_turns_around", user_id="alice", timestamp="2024-03-04T09:05:00", count=2)
    assert [m["message_id"] for m in around["messages"]] == ["a2", "a3"]
    context = ok(api, "/api/get_conversation_context", user_id="alice", turns=3)
    assert [m["message_id"] for m in context["turns"]][-1] == "a6"
    grep = ok(api, "/api/search_session_history", user_id="alice", text="a-7731")
    assert [(g["message"]["message_id"], g["offset"]) for g in grep] == [("a3", ALICE[2][3].index("A-7731"))]
    seqs = ok(api, "/api/messages/range", user_id="alice", start_seq=2, end_seq=4)
    assert [m["seq"] for m in seqs] == [2, 3]


def test_summaries_conversations_and_context(api: httpx.Client) -> None:
    summary = ok(api, "/api/summarize_range", user_id="alice", start_seq=1, end_seq=5)
    assert summary["kind"] == "range" and (summary["from_seq"], summary["to_seq"]) == (1, 4)
    listed = ok(api, "/api/conversations/list", user_id="alice", limit=5)
    assert listed and listed[0]["last_message_at"] >= listed[-1]["last_message_at"]
    detail = ok(api, "/api/conversations/get", user_id="alice", conversation_id=listed[-1]["conversation_id"])
    assert detail["messages"][0]["message_id"] == "a1"
    sliced = ok(api, "/api/context/slice", user_id="alice", start_seq=1, end_seq=3)
    assert sliced["start_seq"] == 1
    payload = ok(api, "/api/context/assemble", user_id="alice", max_tokens=2000)
    assert payload["source"] == "slice" and [i["message_id"] for i in payload["items"]] == ["a1", "a2"]
    ended = ok(api, "/api/conversation/end", user_id="bob", reason="user left")
    assert ended["ended"] and ended["summary"]["kind"] == "conversation"
    assert ended["conversation_id"] == ended["summary"]["conversation_id"]
    assert ok(api, "/api/conversation/end", user_id="bob") == {"ended": False, "conversation_id": None, "summary": None}


def test_a_day_summary_is_regenerated_on_request(api: httpx.Client) -> None:
    summary = ok(api, "/api/days/2024-03-04/summary", user_id="alice")
    assert summary["kind"] == "day" and summary["day_label"] == "2024-03-04" and "## Decisions" in summary["markdown"]
    error(post(api, "/api/days/2023-01-01/summary", user_id="alice"), 404, "unknown_day_segment")
    error(post(api, "/api/days/yesterday/summary", user_id="alice"), 422, "invalid_input")


def test_index_routes(api: httpx.Client) -> None:
    status = ok(api, "/api/index/status", user_id="alice")
    assert status["not_vector_indexed_messages"] == 0 and status["embedder"] == status["model"]
    reports = ok(api, "/api/index", user_id="bob")
    assert reports[0]["user_id"] == "bob"


# Errors -----------------------------------------------------------------------------------------
def test_validation_errors_are_422_json(api: httpx.Client) -> None:
    lots = post(api, "/api/conversation/search", user_id="alice", query="x", limit="lots")
    assert "limit" in error(lots, 422, "invalid_input")
    assert "limit" in error(post(api, "/api/conversation/search", user_id="alice", query="x", limit=99),
                            422, "invalid_input")
    assert "query" in error(post(api, "/api/conversation/search", user_id="alice"), 422, "invalid_input")
    assert "limt" in error(post(api, "/api/conversation/search", user_id="alice", query="x", limt=3), 422,
                           "invalid_input")
    error(api.post("/api/conversation/search", content=b"{not json", headers={"content-type": "application/json"}),
          422, "invalid_input")
    error(post(api, "/api/get_turns_since", user_id="alice", timestamp="yesterday-ish"), 422, "invalid_timestamp")


def test_unknown_ids_are_404_json(api: httpx.Client) -> None:
    error(post(api, "/api/conversation/get", user_id="alice", message_id="nope"), 404, "unknown_message")
    error(post(api, "/api/conversation/get", user_id="alice", message_id="b1"), 404, "unknown_message")
    error(post(api, "/api/conversation/search", user_id="carol", query="x"), 404, "unknown_user")
    error(post(api, "/api/index/status", user_id="carol"), 404, "unknown_user")
    error(post(api, "/api/conversations/get", user_id="alice", conversation_id="nope"), 404, "unknown_conversation")
    error(api.get("/api/nowhere"), 404, "not_found")
    error(api.get("/api/conversation/search"), 405, "method_not_allowed")


READ_ROUTES = {
    "/api/conversation/search": ("query", "day", "recency_days", "start", "end", "limit", "min_score", "kinds"),
    "/api/conversation/get": ("message_id", "day_segment_id", "from_message_id", "to_message_id"),
    "/api/get_turns_since": ("timestamp", "include_summaries", "limit", "from_seq"),
    "/api/get_turns_around": ("timestamp", "count", "before_ratio"),
    "/api/get_conversation_context": ("turns",),
    "/api/search_session_history": ("text", "limit"),
    "/api/messages/range": ("start_seq", "end_seq"),
    "/api/conversations/list": ("limit",),
    "/api/conversations/get": ("conversation_id",),
    "/api/context/assemble": ("max_tokens",),
}
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                          max_size=2), max_leaves=4)
MEANINGFUL = st.sampled_from(["2024-03-05", "2024-03-04T09:00:00", "a3", "3", 3, 0, -1, 0.5, 10**30, ["message"]])


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    route = draw(st.sampled_from(sorted(READ_ROUTES)))
    fields = draw(st.lists(st.sampled_from(READ_ROUTES[route]), unique=True))
    body = {name: draw(MEANINGFUL | VALUES) for name in fields}
    return route, {"user_id": draw(st.sampled_from(["alice", "bob", "nobody"])), **body}


@settings(max_examples=60, deadline=None)
@given(case=bodies())
def test_bad_input_is_never_a_500(api: httpx.Client, case: tuple[str, dict[str, Any]]) -> None:
    route, body = case
    response = api.post(route, json=body)
    if response.status_code != 200:
        assert response.status_code in {404, 422}, (route, body, response.text)
        assert set(response.json()["error"]) == {"code", "message"}


def test_a_time_at_the_edge_of_the_calendar_is_invalid_input(api: httpx.Client) -> None:
    for route in ("/api/get_turns_since", "/api/get_turns_around"):
        response = post(api, route, user_id="alice", timestamp="9999-12-31T23:59:59-12:00")
        error(response, 422, "invalid_timestamp")


def test_token_guards_every_route_but_healthz(guarded: httpx.Client) -> None:
    assert guarded.get("/healthz").status_code == 200
    error(post(guarded, "/api/users", user_id="alice"), 401, "unauthorized")
    wrong = guarded.post("/api/users", json={"user_id": "alice"}, headers={"Authorization": "Bearer nope"})
    assert error(wrong, 401, "unauthorized") and wrong.headers["www-authenticate"] == "Bearer"
    error(guarded.get("/openapi.json"), 401, "unauthorized")
    right = {"Authorization": "Bearer s3cret-token"}
    assert guarded.post("/api/users", json={"user_id": "alice"}, headers=right).json()["user_id"] == "alice"
    assert "HTTPBearer" in guarded.get("/openapi.json", headers=right).json()["components"]["securitySchemes"]


def test_oversized_bodies_are_413(guarded: httpx.Client) -> None:
    right = {"Authorization": "Bearer s3cret-token"}
    big = {"user_id": "alice", "messages": [{"role": "user", "content": "x" * 2000}]}
    assert "1024 bytes" in error(guarded.post("/api/messages", json=big, headers=right), 413, "body_too_large")
    streamed = guarded.post("/api/messages", content=iter([b'{"user_id": "alice", "x": "', b"y" * 1500, b'"}']),
                            headers={**right, "content-type": "application/json"})
    error(streamed, 413, "body_too_large")


# The documents ----------------------------------------------------------------------------------
def test_openapi_lists_every_route_with_documented_fields(api: httpx.Client) -> None:
    document = api.get("/openapi.json").json()
    routes = {"/healthz", "/api/users", "/api/messages", "/api/conversation/end", "/api/conversation/search",
              "/api/conversation/get", "/api/get_turns_since", "/api/get_turns_around", "/api/get_conversation_context",
              "/api/search_session_history", "/api/messages/range", "/api/summarize_range", "/api/days/{day}/summary",
              "/api/summarize", "/api/summarize/finalize", "/api/conversations/list",
              "/api/conversations/get", "/api/context/slice", "/api/context/assemble", "/api/index/status",
              "/api/index", "/api/reindex", "/api/users/list", "/api/users/describe", "/api/stats", "/api/delete",
              "/api/import", "/api/threads"}
    assert set(document["paths"]) == routes
    for name, schema in document["components"]["schemas"].items():
        for field, spec in schema.get("properties", {}).items():
            if name not in {"ValidationError", "HTTPValidationError"}:
                assert spec.get("description"), f"{name}.{field} has no description"


MIRRORS = {
    schemas.UserOut: User, schemas.IngestOut: IngestResult, schemas.ScorePartsOut: ScoreParts,
    schemas.SearchHitOut: SearchHit, schemas.SearchOut: SearchResponse, schemas.MessageOut: MessageView,
    schemas.DayOut: DayView, schemas.SummaryViewOut: SummaryView, schemas.TurnsSinceOut: TurnsSince,
    schemas.TurnsAroundOut: TurnsAround, schemas.ContextOut: ConversationContext, schemas.SummaryOut: Summary,
    schemas.ConversationOut: Conversation, schemas.StoredMessageOut: Message,
    schemas.ConversationDetailOut: ConversationDetail, schemas.TruncationMarkerOut: TruncationMarker,
    schemas.PayloadOut: ContextPayload, schemas.IndexReportOut: IndexReport,
}


@pytest.mark.parametrize("model", list(MIRRORS), ids=lambda m: m.__name__)
def test_response_models_mirror_the_engine_records(model: type[BaseModel]) -> None:
    assert list(model.model_fields) == [f.name for f in dataclasses.fields(MIRRORS[model])]


def test_index_status_model_mirrors_the_facade(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home", embedder=None) as engine:
        engine.add_user("alice")
        assert list(schemas.IndexStatusOut.model_fields) == list(engine.index_status("alice"))
