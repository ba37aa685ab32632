"""Durable writes on the live path: what a server acknowledged survives `kill -9`, and after a restart it
is found in hybrid mode (vectors come back from the embedding cache; the background step embeds the rest)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.api import ConversationEngine
from tests.deployment import ADMIN, environment, serve

USER = "erin"
N = 200
TOPICS = ("sailing", "violin", "tomatoes", "volcano", "chess")


def _message(i: int) -> dict[str, Any]:
    topic = TOPICS[i % len(TOPICS)]
    return {"message_id": f"m{i:03d}", "role": "user" if i % 2 == 0 else "assistant",
            "created_at": f"2024-06-01T{8 + i // 60:02d}:{i % 60:02d}:00",
            "content": f"Note {i}: today I spent time on {topic}; detail number {i * 7}."}


def _search(client: httpx.Client, query: str) -> dict[str, Any]:
    response = client.post("/api/conversation/search", json={"user_id": USER, "query": query, "explain": True,
                                                             "kinds": ["message"], "limit": 20})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.mark.slow
def test_acknowledged_messages_survive_kill_9_and_come_back_hybrid(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with ConversationEngine(home, embedder=None) as engine:
        engine.add_user(USER, "UTC")
    # No background save while it runs: what survives is what `ingest` made durable before answering.
    served = serve(home, environment(CONVSEARCH_INDEX_INTERVAL_S="3600"))
    acknowledged: list[str] = []
    try:
        with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as client:
            for start in range(0, N, 5):
                batch = [_message(i) for i in range(start, start + 5)]
                index = start < N - 20  # the last 20 without vectors: the background step must embed them
                response = client.post("/api/messages", json={"user_id": USER, "messages": batch, "index": index})
                assert response.status_code == 200, response.text
                acknowledged += response.json()["inserted"]
    finally:
        served.kill()  # right after the last 200 OK
    assert len(acknowledged) == N

    served = serve(home, environment(CONVSEARCH_INDEX_INTERVAL_S="0.5"))
    try:
        with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as client:
            stored = client.post("/api/messages/range", json={"user_id": USER, "start_seq": 1, "end_seq": 10_000})
            assert sorted(m["message_id"] for m in stored.json()) == sorted(acknowledged)  # each exactly once
            deadline = time.monotonic() + 60
            # Until the background step has embedded them (or when a query embedding misses its deadline
            # on a busy machine) search answers lexically and says why; then hybrid, with no notice.
            while (found := _search(client, "volcano"))["not_vector_indexed"] or found["mode"] != "hybrid":
                assert found["notice"], found
                if found["not_vector_indexed"]:
                    assert str(found["not_vector_indexed"]) in found["notice"]
                assert time.monotonic() < deadline, "the background step did not embed the pending messages"
                time.sleep(0.25)
            assert found["mode"] == "hybrid" and found["notice"] is None
            hits = _search(client, "a volcano story")["results"]
            assert hits and all(h["parts"]["vector"] is not None for h in hits)
            for i in (0, 150, 179, 180, 199):  # from the cache (indexed before the kill) and the background step
                top = _search(client, _message(i)["content"])["results"][0]
                assert top["message_id"] == f"m{i:03d}" and (top["parts"]["vector"] or 0) > 0.5, top
    finally:
        served.stop()


@pytest.mark.model  # see tests/conftest.py (--fast)
def test_the_python_quickstart_is_found_by_meaning_in_the_next_process(tmp_path: Path) -> None:
    """The issue's case: ingest with the Python API, then search from a new engine on the same home.
    No shard was saved; the new engine takes the vectors back from the embedding cache at load."""
    home = tmp_path / "home"
    with ConversationEngine(home) as engine:
        engine.add_user("alice", "Europe/Paris")
        engine.ingest("alice", [
            {"role": "user", "content": "Shall we use PostgreSQL 15.4 or MySQL?", "created_at": "2024-03-04T10:00"},
            {"role": "assistant", "content": "PostgreSQL 15.4: we need JSONB.", "created_at": "2024-03-04T10:01"},
        ])
        assert not (home / "indexes").exists() or not any((home / "indexes").rglob("CURRENT"))
    with ConversationEngine(home) as engine:
        embedded = engine.pipeline.embedder
        calls = []
        original = embedded.embed
        embedded.embed = lambda texts: calls.append(len(texts)) or original(texts)  # type: ignore[method-assign]
        assert engine.pipeline.pending_vector_messages("alice") == 0 and calls == []  # from the cache, no model call
        found = engine.search("alice", "what did we decide about the database?", explain=True)
    assert found.mode == "hybrid" and found.not_vector_indexed == 0 and found.notice is None
    assert found.results and all(h.parts.vector is not None for h in found.results if h.kind == "message")
