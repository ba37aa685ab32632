"""Bad values on every surface: scores and ratios in 0..1, strict integer types, lone surrogates and a
full disk, each a clear error (CLI: one line and exit 2; HTTP: 422/507 with a code; MCP: `code: ...`)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import anyio
import httpx
import pytest
from mcp import Client

from engine.api import ConversationEngine
from engine.surfaces.cli import main
from engine.errors import InvalidInputError
from engine.surfaces.mcp.server import build_server
from tests.support import ALICE, NOW, live, messages

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversationEngine]:
    with ConversationEngine(tmp_path_factory.mktemp("valid") / "home", embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("alice", "Europe/Paris")
        engine.ingest("alice", messages(ALICE), index=False)
        yield engine


@pytest.fixture(scope="module")
def api(engine: ConversationEngine) -> Iterator[httpx.Client]:
    yield from live(engine)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("valid-cli") / "home"
    with ConversationEngine(home, embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("alice", "Europe/Paris")
        engine.ingest("alice", messages(ALICE), index=False)
    return home


def refused(client: httpx.Client, path: str, body: dict[str, Any], words: str) -> None:
    answer = client.post(path, content=json.dumps({"user_id": "alice", **body}),
                         headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"].startswith("invalid") and words in answer.json()["error"]["message"]


def mcp_error(engine: ConversationEngine, tool: str, arguments: dict[str, Any]) -> str:
    async def call() -> Any:
        async with Client(build_server(engine, "alice")) as client:
            return await client.call_tool(tool, arguments)

    result = anyio.run(call)
    assert result.is_error, result
    return result.content[0].text


def cli_error(capsys: pytest.CaptureFixture[str], home: Path, *argv: str) -> str:
    code = main(["--home", str(home), *argv])
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1, err  # invalid input
    return err


# min_score --------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 2, -5, True])
def test_min_score_outside_0_to_1_is_refused_in_python(engine: ConversationEngine, value: Any) -> None:
    with pytest.raises(InvalidInputError, match="min_score must be a number from 0 to 1"):
        engine.search("alice", "database", min_score=value)


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "2", "-5", '"0.5"', "true"])
def test_min_score_outside_0_to_1_is_refused_over_http(api: httpx.Client, raw: str) -> None:
    body = '{"user_id": "alice", "query": "database", "min_score": %s}' % raw
    answer = api.post("/api/conversation/search", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422 and "min_score" in answer.json()["error"]["message"], answer.text


# before_ratio -----------------------------------------------------------------------------------
def test_before_ratio_outside_0_to_1_everywhere(engine: ConversationEngine, api: httpx.Client, home: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    refused(api, "/api/get_turns_around", {"timestamp": "2024-03-04T09:05", "before_ratio": 2}, "before_ratio")
    assert mcp_error(engine, "get_turns_around", {"timestamp": "2024-03-04T09:05", "before_ratio": -1}) \
        .startswith("invalid_input: before_ratio must be a number from 0 to 1")
    assert "before_ratio" in cli_error(capsys, home, "around", "--user", "alice", "2024-03-04T09:05",
                                       "--before-ratio", "2")
    assert "before_ratio" in cli_error(capsys, home, "around", "--user", "alice", "2024-03-04T09:05",
                                       "--before-ratio", "nan")


# Strict integer types ---------------------------------------------------------------------------
@pytest.mark.parametrize("limit", ['"3"', "true", "3.0"])
def test_limit_must_be_an_integer_over_http(api: httpx.Client, limit: str) -> None:
    body = '{"user_id": "alice", "text": "PostgreSQL", "limit": %s}' % limit
    answer = api.post("/api/search_session_history", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422 and "limit" in answer.json()["error"]["message"], answer.text


@pytest.mark.parametrize("limit", ["3", True, 3.5])
def test_limit_must_be_an_integer_over_mcp(engine: ConversationEngine, limit: Any) -> None:
    text = mcp_error(engine, "search_session_history", {"text": "PostgreSQL", "limit": limit})
    assert text.startswith("invalid_input: limit")


def test_limit_must_be_an_integer_on_the_cli(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--home", str(home), "grep", "--user", "alice", "PostgreSQL", "--limit", "true"])
    assert stopped.value.code == 2 and "--limit: invalid int value: 'true'" in capsys.readouterr().err


# Lone surrogates --------------------------------------------------------------------------------
@pytest.mark.model  # see tests/conftest.py (--fast)
def test_lone_surrogates_are_invalid_input(engine: ConversationEngine, api: httpx.Client, home: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    before = engine.stats("alice")
    refused(api, "/api/conversation/search", {"query": "data\ud800base"}, "lone surrogate")
    refused(api, "/api/search_session_history", {"text": "\udcff"}, "lone surrogate")
    refused(api, "/api/messages", {"messages": [{"role": "user", "content": "half \ud83d an emoji"}]},
            "content holds a lone surrogate")
    assert mcp_error(engine, "conversation_search", {"query": "x\ud800"}).startswith("invalid_input: query holds")
    # a non-UTF-8 byte on the command line arrives as a lone surrogate (surrogateescape)
    assert "text holds a lone surrogate" in cli_error(capsys, home, "grep", "--user", "alice", "\udcff")
    assert "query holds a lone surrogate" in cli_error(capsys, home, "search", "--user", "alice", "a\udcffb")
    assert engine.stats("alice") == before


def test_an_id_with_a_control_character_is_invalid_input(engine: ConversationEngine) -> None:
    before = engine.stats("alice")
    for code in range(32):
        with pytest.raises(InvalidInputError, match="printable characters"):
            engine.ingest("alice", [{"role": "user", "content": "hi", "message_id": f"id{chr(code)}x"}], index=False)
    assert engine.stats("alice") == before
    engine.ingest("alice", [{"role": "user", "content": "hi", "message_id": "café 1\x7f", "created_at": NOW.isoformat()}],
                  index=False)
    assert engine.store.existing_message_ids(["café 1\x7f"]) == {"café 1\x7f": "alice"}  # printable: taken


# A full disk -------------------------------------------------------------------------------------
def _limited(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.process  # see tests/conftest.py (--fast)
def test_a_full_disk_is_one_clear_line_and_nothing_is_lost(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("w") as fh:
        for i in range(300):
            fh.write(json.dumps({"user_id": "u", "role": "user", "content": f"word{i} " * 2000,
                                 "created_at": f"2024-05-01T10:{i // 60:02d}:{i % 60:02d}"}) + "\n")
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CONVSEARCH_EMBEDDING_BACKEND": "none"}
    small = ["--home", str(home), "ingest", str(REPO / "data" / "sample.jsonl"), "--format", "jsonl"]
    first = subprocess.run([sys.executable, "-m", "engine.surfaces.cli", *small], env=env, capture_output=True, text=True,
                           timeout=120)
    assert first.returncode == 0, first.stderr
    before = subprocess.run([sys.executable, "-m", "engine.surfaces.cli", "--home", str(home), "stats"], env=env,
                            capture_output=True, text=True, timeout=120)
    full = subprocess.run([sys.executable, "-m", "engine.surfaces.cli", "--home", str(home), "ingest", str(big), "--format",
                           "jsonl"], env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: _limited(3_000_000))
    assert full.returncode == 11 and full.stderr.count("\n") == 1, full.stderr  # storage_full
    assert full.stderr.startswith("convsearch: error [storage_full]: the disk is full") and "free some space" in full.stderr
    stats = subprocess.run([sys.executable, "-m", "engine.surfaces.cli", "--home", str(home), "stats"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert json.loads(stats.stdout)["messages"] == json.loads(before.stdout)["messages"]  # the import's and its notes
