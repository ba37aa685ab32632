"""Who a caller is (engine.surfaces.http.auth) and where a server listens (engine.surfaces.runtime): pure rules, no server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.datastructures import Headers

from engine.config import Settings
from engine.errors import AuthError, ForbiddenError
from engine.surfaces.http.auth import Caller, identify, mcp_user
from engine.surfaces.runtime import SERVER_FILE, advertised, running_server

CLOSED = Settings(api_token="admin", user_tokens={"tok-a": "alice", "tok-b": "bob"})
OPEN = Settings(user_tokens={"tok-a": "alice"})


@pytest.mark.parametrize(("settings", "header", "caller"), [
    (CLOSED, "Bearer admin", Caller(admin=True)),
    (CLOSED, "bearer  admin ", Caller(admin=True)),
    (CLOSED, "Bearer tok-b", Caller(admin=False, user_id="bob")),
    (CLOSED, "Bearer nope", None),
    (CLOSED, "", None),
    (CLOSED, "Basic admin", None),
    (OPEN, "", Caller(admin=True)),  # no api_token: an open (loopback) server
    (OPEN, "Bearer tok-a", Caller(admin=False, user_id="alice")),  # a user token still binds its user
])
def test_identify(settings: Settings, header: str, caller: Caller | None) -> None:
    assert identify(header, settings) == caller


def test_an_mcp_session_gets_its_user_from_credentials_only() -> None:
    assert mcp_user(Caller(admin=False, user_id="alice"), Headers({})) == "alice"
    assert mcp_user(Caller(admin=False, user_id="alice"), Headers({"X-Convsearch-User": "alice"})) == "alice"
    with pytest.raises(ForbiddenError, match="bound to user 'alice'"):
        mcp_user(Caller(admin=False, user_id="alice"), Headers({"X-Convsearch-User": "bob"}))
    assert mcp_user(Caller(admin=True), Headers({"X-Convsearch-User": "bob"})) == "bob"
    with pytest.raises(AuthError, match="X-Convsearch-User"):
        mcp_user(Caller(admin=True), Headers({}))


def test_user_tokens_come_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVSEARCH_USER_TOKENS", json.dumps({"t1": "ann"}))
    assert Settings().user_tokens == {"t1": "ann"}


@pytest.mark.process  # see tests/conftest.py (--fast)
def test_the_server_file_names_a_live_server_and_is_removed_after(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / SERVER_FILE).write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": other.pid}))
        found = running_server(tmp_path)
        assert found is not None and found.pid == other.pid and found.url == "http://127.0.0.1:9"
    finally:
        other.kill()
        other.wait()
    assert running_server(tmp_path) is None  # its pid is gone: ignored
    (tmp_path / SERVER_FILE).write_text("garbage")
    assert running_server(tmp_path) is None
    with advertised(tmp_path, "http://127.0.0.1:1234") as info:
        assert info.pid == os.getpid() and json.loads((tmp_path / SERVER_FILE).read_text())["url"].endswith(":1234")
        assert running_server(tmp_path) is None  # a process never routes to itself
    assert not (tmp_path / SERVER_FILE).exists()
