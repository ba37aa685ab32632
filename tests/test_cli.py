"""The CLI in-process through `engine.surfaces.cli.main` (JSON and table output, errors), plus real subprocesses:
a `grep` and a `serve` answering HTTP with a token from the environment."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.api import ConversationEngine
from engine.surfaces.cli import main
from indexers.embedders import QUERY_MODEL_NAME
from tests.support import ALICE, BOB, NOW, messages

pytestmark = pytest.mark.model  # see tests/conftest.py (--fast)

CONVSEARCH = str(Path(sys.executable).parent / "convsearch")
DAY = "alice:continuous:day:2024-03-04"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("cli") / "home"
    with ConversationEngine(home, clock=lambda: NOW) as engine:
        for user, zone, rows in (("alice", "Europe/Paris", ALICE), ("bob", "Asia/Tokyo", BOB)):
            engine.add_user(user, zone)
            engine.ingest(user, messages(rows), index=False)
        engine.index()
    return home


def run(capsys: pytest.CaptureFixture[str], home: Path, *argv: str, table: bool = False) -> Any:
    fmt = ["--format", "table"] if table else []
    assert main(["--home", str(home), *fmt, *argv]) == 0
    printed = capsys.readouterr().out
    return printed if table else json.loads(printed)


def test_search_json_and_explain(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    found = run(capsys, home, "search", "--user", "alice", "which database did we choose?", "--explain")
    assert found["mode"] == "hybrid" and all(hit["parts"] for hit in found["results"])
    filtered = run(capsys, home, "search", "--user", "alice", "errors", "--day", "2024-03-05", "--limit", "2")
    assert filtered["results"] and {hit["day_label"] for hit in filtered["results"]} == {"2024-03-05"}
    recent = run(capsys, home, "search", "--user", "alice", "database", "--recency-days", "1")
    assert recent["results"] == []  # the data is from 2024; the CLI's clock is now
    window = run(capsys, home, "search", "--user", "alice", "database", "--start", "2024-03-05T00:00", "--end",
                 "2024-03-06T00:00")
    cited = {hit["message_id"] for hit in window["results"] if hit["kind"] == "message"}
    assert cited and cited <= {"a5", "a6"}


def test_table_output_for_people(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    text = run(capsys, home, "search", "--user", "alice", "PostgreSQL decision", "--explain", table=True)
    header = next(line for line in text.splitlines() if line.startswith("score"))
    assert header.split() == ["score", "kind", "day", "cite", "vector", "lexical", "penalty", "fusion", "snippet"]
    rows = run(capsys, home, "range", "--user", "alice", "1", "3", table=True).splitlines()
    assert rows[0].split() == ["seq", "created_at", "role", "speaker", "message_id", "content"]
    assert rows[1].split()[:3] == ["1", "2024-03-04T08:00:00Z", "user"] and len(rows) == 3


def test_get_and_navigation_commands(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    assert run(capsys, home, "get", "--user", "alice", "--message", "a3")["content"].startswith("Decision")
    assert run(capsys, home, "get", "--user", "alice", "--day", DAY)["message_ids"] == ["a1", "a2", "a3", "a4"]
    part = run(capsys, home, "get", "--user", "alice", "--day", DAY, "--from", "a2", "--to", "a3")
    assert [m["message_id"] for m in part] == ["a2", "a3"]
    since = run(capsys, home, "since", "--user", "alice", "2024-03-04", "--limit", "4", "--no-summaries")
    assert since["truncated"] and since["next_seq"] == 5 and since["summaries"] == []
    around = run(capsys, home, "around", "--user", "alice", "2024-03-04T09:05", "--count", "4",
                 "--before-ratio", "0.25")
    assert [m["message_id"] for m in around["messages"]] == ["a2", "a3", "a4", "a5"]
    assert run(capsys, home, "context", "--user", "alice", "--turns", "2")["turns"][-1]["message_id"] == "a6"
    assert [m["seq"] for m in run(capsys, home, "range", "--user", "alice", "2", "4")] == [2, 3]
    grep = run(capsys, home, "grep", "--user", "alice", "econnreset", "--limit", "1")
    assert [g["message"]["message_id"] for g in grep] == ["a5"]


def test_summary_conversation_and_context_commands(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    assert run(capsys, home, "summarize", "--user", "alice", "1", "5")["to_seq"] == 4
    listed = run(capsys, home, "conversations", "--user", "alice", "--limit", "5")
    first = listed[-1]["conversation_id"]
    assert run(capsys, home, "conversations", "--user", "alice", "--id", first)["messages"][0]["message_id"] == "a1"
    ended = run(capsys, home, "end", "--user", "bob", "--reason", "done")
    assert ended["ended"] and ended["summary"]["kind"] == "conversation"
    assert run(capsys, home, "end", "--user", "bob") == {"conversation_id": None, "summary": None, "ended": False}
    payload = run(capsys, home, "assemble", "--user", "alice", "--max-tokens", "500")
    assert payload["max_tokens"] == 500 and payload["source"] == "today"
    status = run(capsys, home, "status", "--user", "alice")
    assert status["not_vector_indexed_messages"] == 0 and status["embedder"] == status["model"]
    assert status["query_embedder"] == QUERY_MODEL_NAME  # queries: the model's int8 copy


@pytest.mark.parametrize("argv, words, status", [
    (["get", "--user", "alice", "--message", "nope"], "[unknown_message]: unknown message 'nope'", 4),
    (["get", "--user", "alice", "--day", DAY, "--from", "a2"], "both from_message_id and to_message_id", 3),
    (["search", "--user", "carol", "anything"], "[unknown_user]: unknown user 'carol'", 4),
    (["range", "--user", "alice", "4", "2"], "reversed", 3),
    (["status", "--user", "carol"], "unknown user 'carol'", 4),
])
def test_errors_print_one_line_with_their_code(capsys: pytest.CaptureFixture[str], home: Path, argv: list[str],
                                               words: str, status: int) -> None:
    assert main(["--home", str(home), *argv]) == status
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and captured.err.startswith("convsearch: error [")
    assert words in captured.err


@pytest.mark.process
def test_a_real_subprocess(home: Path) -> None:
    done = subprocess.run([CONVSEARCH, "--home", str(home), "grep", "--user", "alice", "A-7731"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [g["message"]["message_id"] for g in json.loads(done.stdout)] == ["a3"]
    failed = subprocess.run([CONVSEARCH, "--home", str(home), "conversations", "--user", "alice", "--id", "nope"],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 4 and failed.stdout == "" and failed.stderr.count("\n") == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.process
def test_serve_answers_http_with_the_token_from_the_environment(home: Path) -> None:
    port = _free_port()
    env = {**os.environ, "CONVSEARCH_API_TOKEN": "t0ken", "CONVSEARCH_EMBEDDING_BACKEND": "none"}
    server = subprocess.Popen([CONVSEARCH, "--home", str(home), "serve", "--port", str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, server.communicate()[1]
                try:
                    assert client.get("/healthz").json()["status"] == "ok"
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "serve did not start"
                    time.sleep(0.1)
            body = {"user_id": "alice", "query": "A-7731", "kinds": ["message"]}
            assert client.post("/api/conversation/search", json=body).status_code == 401
            found = client.post("/api/conversation/search", json=body, headers={"Authorization": "Bearer t0ken"})
            assert found.json()["mode"] == "lexical" and found.json()["results"][0]["message_id"] == "a3"
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert "Finished server process" in err  # a graceful shutdown: the store was closed
