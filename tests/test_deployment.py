"""The deployment as its clients meet it: one `convsearch serve` owns a data directory; agents connect over
MCP (streamable HTTP and stdio) and the CLI runs beside them, all real processes on loopback sockets,
all on one store. Each MCP session sees its own user only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from engine.api import ConversationEngine
from engine.surfaces.runtime import SERVER_FILE, running_server
from tests.deployment import ADMIN, cli, data, environment, mcp_over_http, mcp_over_stdio, serve

USERS = {"alice": "Europe/Paris", "bob": "Asia/Tokyo", "carol": "UTC"}
SHARED_WORD = "zanzibar"  # said by every user: a search for it must still return only the caller's messages


def _rows(user: str) -> list[dict[str, Any]]:
    return [{"message_id": f"{user}-{i}", "role": "user" if i % 2 == 0 else "assistant",
             "created_at": f"2024-05-0{1 + i // 4}T1{i % 4}:00:00",
             "content": f"{user} note {i}: the {SHARED_WORD} trip budget is {100 + i} euros, code {user.upper()}-{i}"}
            for i in range(8)]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("deploy") / "home"
    with ConversationEngine(home) as engine:
        for user, zone in USERS.items():
            engine.add_user(user, zone)
            engine.ingest(user, _rows(user))
    return home


def _ids(found: Any) -> set[str]:
    hits = found["results"] if isinstance(found, dict) else found
    return {(h.get("message") or h).get("message_id") or "" for h in hits}


async def _agent(session: Any, user: str) -> dict[str, Any]:
    """What one agent does: add a turn, search, grep; returns what it saw."""
    added = data(await session.call_tool("add_messages", {"messages": [
        {"role": "user", "content": f"{user} adds: the {SHARED_WORD} ferry leaves at nine", "message_id": f"{user}-live"}]}))
    seen = {"added": added}
    seen["search"] = data(await session.call_tool("conversation_search", {"query": f"{SHARED_WORD} trip budget",
                                                                          "limit": 20}))
    seen["grep"] = data(await session.call_tool("search_session_history", {"text": SHARED_WORD}))
    smuggled = await session.call_tool("search_session_history", {"text": "BOB-1", "user_id": "bob"})
    seen["smuggled"] = (smuggled.is_error, " ".join(getattr(b, "text", "") for b in smuggled.content))
    seen["recent"] = data(await session.call_tool("get_conversation", {}))
    return seen


@pytest.mark.slow
def test_mcp_over_http_and_stdio_and_the_cli_share_one_server(home: Path, tmp_path: Path) -> None:
    env = environment()
    served = serve(home, env)
    upload = tmp_path / "dave.jsonl"
    upload.write_text("".join(json.dumps({"user_id": "dave", "timezone": "UTC", **row}) + "\n"
                              for row in _rows("dave")), encoding="utf-8")
    seen: dict[str, Any] = {}
    shell: dict[str, Any] = {}

    async def http_agent(user: str, headers: dict[str, str]) -> None:
        async with mcp_over_http(served.url, headers) as session:
            seen[user] = await _agent(session, user)

    async def stdio_agent() -> None:
        with open(tmp_path / "carol.stderr", "w") as errlog:
            async with mcp_over_stdio(home, env, "carol", errlog) as session:
                seen["carol"] = await _agent(session, "carol")

    def shell_user() -> None:
        shell["ingest"] = json.loads(cli(home, env, "ingest", str(upload), "--format", "jsonl", "--index").stdout)
        shell["search"] = json.loads(cli(home, env, "search", "--user", "dave", f"{SHARED_WORD} budget").stdout)
        shell["stats"] = json.loads(cli(home, env, "stats").stdout)

    async def everyone() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(http_agent, "alice", {"Authorization": "Bearer tok-alice"})
            group.start_soon(http_agent, "bob", {"Authorization": f"Bearer {ADMIN}", "X-Convsearch-User": "bob"})
            group.start_soon(stdio_agent)
            group.start_soon(anyio.to_thread.run_sync, shell_user)

    try:
        anyio.run(everyone)
    finally:
        log = served.stop()
    for user in ("alice", "bob", "carol"):
        mine = seen[user]
        assert mine["added"]["inserted"] == [f"{user}-live"]
        hits = mine["search"]["results"]
        assert hits and {h["thread_id"] for h in hits} == {f"{user}:continuous"}, user
        assert {h["message_id"] for h in hits if h["kind"] == "message"} <= {f"{user}-{i}" for i in range(8)} | {f"{user}-live"}
        assert _ids(mine["grep"]) == {f"{user}-{i}" for i in range(8)} | {f"{user}-live"}, user
        refused, text = mine["smuggled"]  # the token says who: a user_id argument is refused, never obeyed
        assert refused and "has no argument user_id" in text, user
        assert mine["recent"] and all(c["user_id"] == user for c in mine["recent"])
    assert shell["ingest"]["import"]["inserted"] == 8 and shell["ingest"]["import"]["path"].endswith("dave.jsonl")
    assert shell["ingest"]["index"][0]["user_id"] == "dave"
    assert shell["search"]["mode"] == "hybrid" and shell["search"]["not_vector_indexed"] == 0
    assert shell["search"]["results"] and {h["thread_id"] for h in shell["search"]["results"]} == {"dave:continuous"}
    assert shell["stats"]["users"] == 4
    assert "POST /api/import" in log and "POST /mcp" in log  # the CLI and the agents went through the server
    assert not (home / SERVER_FILE).exists() and running_server(home) is None  # removed on a clean exit
    with ConversationEngine(home, embedder=None) as engine:  # every write landed once, in the one store
        for user in ("alice", "bob", "carol"):
            assert [m.message_id for m in engine.store.messages_by_ids([f"{user}-live"], user_id=user)] == [f"{user}-live"]
        assert engine.stats()["messages"] >= 4 * 8 + 3


@pytest.mark.slow
def test_mcp_sessions_are_bound_by_credentials(home: Path) -> None:
    env = environment()
    served = serve(home, env)
    try:
        cases = {
            "no token": {},
            "wrong token": {"Authorization": "Bearer nope"},
            "admin without a user": {"Authorization": f"Bearer {ADMIN}"},
            "user token naming another": {"Authorization": "Bearer tok-alice", "X-Convsearch-User": "bob"},
            "admin naming an unknown user": {"Authorization": f"Bearer {ADMIN}", "X-Convsearch-User": "zed"},
        }
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        accept = {"Accept": "application/json, text/event-stream"}
        answers = {name: httpx.post(f"{served.url}/mcp", json=init, headers={**accept, **h}, timeout=30)
                   for name, h in cases.items()}
        codes = {name: (r.status_code, r.json()["error"]["code"]) for name, r in answers.items()}
        assert codes == {"no token": (401, "unauthorized"), "wrong token": (401, "unauthorized"),
                         "admin without a user": (401, "unauthorized"),
                         "user token naming another": (403, "forbidden"),
                         "admin naming an unknown user": (404, "unknown_user")}
        assert "X-Convsearch-User" in answers["admin without a user"].json()["error"]["message"]
        # A user token is for MCP only: the HTTP API wants the admin token.
        api = httpx.post(f"{served.url}/api/stats", json={}, headers={"Authorization": "Bearer tok-alice"})
        assert api.status_code == 403 and "CONVSEARCH_API_TOKEN" in api.json()["error"]["message"]
        # A session opened for alice is unknown to bob's credentials.
        opened = httpx.post(f"{served.url}/mcp", json=init, headers={**accept, "Authorization": "Bearer tok-alice"})
        session = opened.headers["mcp-session-id"]
        listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        stolen = httpx.post(f"{served.url}/mcp", json=listed, headers={
            **accept, "Authorization": "Bearer tok-bob", "mcp-session-id": session,
            "mcp-protocol-version": "2025-06-18"})
        assert stolen.status_code == 404
    finally:
        served.stop()


@pytest.mark.slow
def test_doctor_and_a_second_server_refuse_beside_a_live_one_and_a_dead_ones_file_is_ignored(home: Path) -> None:
    env = environment()
    served = serve(home, env, ready=False)
    try:
        early = cli(home, env, "stats")  # sent while the server starts: it waits, then goes through the server
        assert json.loads(early.stdout)["users"] >= 3
        for args in (("doctor", "--repair"), ("serve", "--port", "0")):
            refused = cli(home, env, *args, check=False)
            assert refused.returncode == 6, refused.stderr  # store_locked
            assert f"pid {served.process.pid}" in refused.stderr and "stop it" in refused.stderr, refused.stderr
        assert "POST /api/stats" in served.log.read_text(encoding="utf-8")
    finally:
        served.kill()  # kill -9: the file stays behind...
    assert (home / SERVER_FILE).exists() and running_server(home) is None  # ...but names a dead pid
    stats = json.loads(cli(home, env, "stats").stdout)  # so the CLI opens the store itself
    assert stats["users"] >= 3
    assert cli(home, env, "doctor", "--repair").returncode == 0
    os.remove(home / SERVER_FILE)


@pytest.mark.slow
def test_the_cli_prints_the_same_through_the_server_as_on_the_store(home: Path) -> None:
    env = environment()
    commands = [("search", "--user", "alice", f"{SHARED_WORD} budget", "--explain", "--fusion", "rrf"),
                ("since", "--user", "bob", "2024-05-02T00:00"), ("grep", "--user", "bob", "BOB-2"),
                ("conversations", "--user", "alice"), ("stats",),
                ("get", "--user", "alice", "--message", "bob-1"), ("search", "--user", "nobody", "x")]

    def outputs() -> list[tuple[int, str, str]]:
        runs = [cli(home, env, *c, check=False) for c in commands]
        return [(r.returncode, re.sub(r'"took_ms": [0-9.]+|took_ms: [0-9.]+', "took", r.stdout),
                 r.stderr.strip().splitlines()[-1] if r.returncode else "") for r in runs]

    local = outputs()
    served = serve(home, env)
    try:
        remote = outputs()
    finally:
        log = served.stop()
    assert log.count("POST /api/") >= len(commands)  # they did go through the server
    for command, mine, theirs in zip(commands, local, remote):
        assert mine == theirs, command
    assert [code for code, _, _ in local][-2:] == [4, 4]  # errors too (not found): same message, same exit code


@pytest.mark.slow
def test_a_server_started_while_a_command_holds_the_store_waits_for_it(home: Path) -> None:
    env = environment()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_STORE, str(home)], env=env, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "open"  # the store is held now
    served = serve(home, env)  # returns once /healthz answers: after the holder let go
    try:
        assert holder.wait(timeout=60) == 0
        assert "serve.waiting: another process has the store open" in served.log.read_text(encoding="utf-8")
        assert json.loads(cli(home, env, "stats").stdout)["users"] >= 3
    finally:
        served.stop()


HOLD_THE_STORE = """
import sys, time
from engine.api import ConversationEngine
with ConversationEngine(sys.argv[1], embedder=None):
    print("open", flush=True)
    time.sleep(3)
"""
