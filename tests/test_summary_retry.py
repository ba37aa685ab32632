"""A summarizer failure never fails an ingest: the message is stored once, the summary is retried, and
the failure shows in `/healthz` and `convsearch status`. The summarizer is a tiny real OpenAI-compatible
server on loopback that answers 500, then 200."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.summaries.policy import day_summary_id
from engine.summaries.retries import RETRY_AFTER_S
from tests.deployment import ADMIN, cli, environment, serve

SUMMARY = "## Decisions\n- The fake summarizer says the team chose the blue boat.\n"


class FakeLLM:
    """POST /v1/chat/completions: 500 while `down`, else a fixed completion. Counts the calls."""

    def __init__(self) -> None:
        self.down, self.calls = True, 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                self.rfile.read(int(self.headers.get("content-length", 0)))
                fake.calls += 1
                status, body = (500, {"error": "overloaded"}) if fake.down else \
                    (200, {"choices": [{"message": {"role": "assistant", "content": SUMMARY}}]})
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    fake = FakeLLM()
    yield fake
    fake.close()


@contextmanager
def _engine(tmp_path: Path, llm: FakeLLM, *, day_summary_every: int) -> Iterator[tuple[ConversationEngine, list[float]]]:
    """An engine summarising with the fake LLM, and the retry queue's clock (`now[0]`, in seconds)."""
    settings = Settings(summarizer="openai", llm_url=llm.url, llm_model="fake", day_summary_every=day_summary_every)
    with ConversationEngine(tmp_path / "home", settings=settings, embedder=None) as engine:
        now = [0.0]
        engine.summaries.retries.clock = lambda: now[0]
        yield engine, now


def _turns(*ids: str) -> list[dict[str, Any]]:
    return [{"message_id": m, "role": "user", "content": f"turn {m}: shall we take the blue boat?",
             "created_at": f"2024-07-01T10:0{i}:00"} for i, m in enumerate(ids)]


def test_an_ingest_succeeds_while_the_summarizer_is_down_and_the_summary_follows(tmp_path: Path, llm: FakeLLM) -> None:
    with _engine(tmp_path, llm, day_summary_every=2) as (engine, now):
        engine.add_user("ann", "UTC")
        first = engine.ingest("ann", _turns("t1", "t2"))
        assert first.inserted == ("t1", "t2") and llm.calls == 1
        status = engine.index_status("ann")["summaries"]
        assert status["pending_retries"] == 1 and "HTTP 500" in status["last_error"]
        again = engine.ingest("ann", _turns("t1", "t2"))  # the client retries the same request
        assert again.inserted == () and again.duplicates == ("t1", "t2") and llm.calls == 1  # not due yet
        assert engine.stats("ann")["messages"] == 2
        llm.down = False
        now[0] += RETRY_AFTER_S
        engine.maintain()  # what the server's background step runs
        summary = engine.store.timeline.get_summary(day_summary_id("ann:continuous", date(2024, 7, 1)),
                                                    user_id="ann")
        assert "blue boat" in summary.markdown and summary.to_seq >= 2
        assert engine.summaries.retry_status() == {"pending_retries": 0, "last_error": None}


def test_an_end_the_summarizer_fails_says_it_ended_and_the_summary_follows(tmp_path: Path, llm: FakeLLM) -> None:
    with _engine(tmp_path, llm, day_summary_every=50) as (engine, now):
        engine.add_user("ann", "UTC")
        engine.ingest("ann", _turns("t1", "t2"))
        ended = engine.end_conversation("ann")
        assert ended.ended and ended.conversation_id == "ann:continuous:conv:1" and ended.summary is None
        assert not engine.end_conversation("ann").ended  # nothing open now: a different answer
        assert [c.summary for c in engine.list_conversations("ann")] == [None]
        llm.down, now[0] = False, RETRY_AFTER_S
        engine.maintain()
        (conversation,) = engine.list_conversations("ann")
        assert conversation.summary is not None and "2 messages" in conversation.summary


def test_the_retries_of_several_users_each_land_in_their_own_user(tmp_path: Path, llm: FakeLLM) -> None:
    """The background step retries every user's failed summaries at once: each is written, with
    its day's note, for its own user and thread."""
    with _engine(tmp_path, llm, day_summary_every=2) as (engine, now):
        for user in ("ann", "bob"):
            engine.add_user(user, "UTC")
            engine.ingest(user, _turns(f"{user}1", f"{user}2"))
        assert engine.summaries.retry_status()["pending_retries"] == 2
        llm.down = False
        now[0] += RETRY_AFTER_S
        engine.maintain()
        assert engine.summaries.retry_status() == {"pending_retries": 0, "last_error": None}
        for user in ("ann", "bob"):
            summary = engine.store.timeline.get_summary(day_summary_id(f"{user}:continuous", date(2024, 7, 1)),
                                                        user_id=user)
            assert summary is not None and "blue boat" in summary.markdown
            *_, note = engine.store.messages_in_range(f"{user}:continuous", 1)
            assert note.kind == "note" and note.user_id == user


@pytest.mark.slow
def test_the_server_reports_the_failure_and_retries_by_itself(tmp_path: Path, llm: FakeLLM) -> None:
    home = tmp_path / "home"
    with ConversationEngine(home, embedder=None) as engine:
        engine.add_user("ann", "UTC")
    env = environment(CONVSEARCH_SUMMARIZER="openai", CONVSEARCH_LLM_URL=llm.url, CONVSEARCH_LLM_MODEL="fake",
                      CONVSEARCH_DAY_SUMMARY_EVERY="2", CONVSEARCH_INDEX_INTERVAL_S="0.5",
                      CONVSEARCH_EMBEDDING_BACKEND="none")
    served = serve(home, env)
    try:
        with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as client:
            body = {"user_id": "ann", "messages": _turns("t1", "t2")}
            for _ in range(2):  # the same request twice: stored once
                assert client.post("/api/messages", json=body).status_code == 200
            health = client.get("/healthz").json()["details"]["summaries"]
            assert health["pending_retries"] == 1 and "HTTP 500" in health["last_error"]
            status = json.loads(cli(home, env, "status", "--user", "ann").stdout)  # through the server
            assert status["summaries"]["pending_retries"] == 1
            llm.down = False
            deadline = time.monotonic() + 30
            while client.get("/healthz").json()["details"]["summaries"]["pending_retries"]:
                assert time.monotonic() < deadline, "the summary was not retried"
                time.sleep(0.2)
            found = client.post("/api/conversation/search", json={"user_id": "ann", "query": "blue boat",
                                                                   "kinds": ["summary"]}).json()["results"]
            stored = client.post("/api/stats", json={"user_id": "ann"}).json()
    finally:
        served.stop()
    assert found and found[0]["summary_kind"] == "day" and "blue boat" in found[0]["snippet"]
    assert stored["messages"] >= 2 and llm.calls >= 2
