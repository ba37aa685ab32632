"""Helpers for tests of the deployment: a real `convsearch serve` subprocess on a free loopback port, MCP
sessions over streamable HTTP and stdio, and CLI runs beside them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult

from engine.surfaces.runtime import running_server

REPO = Path(__file__).resolve().parents[1]
CONVSEARCH = str(Path(sys.executable).parent / "convsearch")
ADMIN = "admin-s3cret"
USER_TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}


def environment(**extra: str) -> dict[str, str]:
    """The environment of every process of a test: this checkout, offline, the test's tokens."""
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "CONVSEARCH_API_TOKEN": ADMIN, "CONVSEARCH_USER_TOKENS": json.dumps(USER_TOKENS), **extra}


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    log: Path

    def stop(self) -> str:
        """SIGTERM, wait, and return the server's stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        return self.log.read_text(encoding="utf-8")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def serve(home: Path, env: dict[str, str], *, timeout: float = 60.0, ready: bool = True) -> Served:
    """Start `convsearch serve --port 0` and wait until its server.json names it and /healthz answers
    (with `ready=False`: until server.json says it is starting)."""
    log = home.parent / f"serve-{time.monotonic_ns()}.log"
    with open(log, "w", encoding="utf-8") as err:
        process = subprocess.Popen([CONVSEARCH, "--home", str(home), "serve", "--port", "0"], env=env, cwd=REPO,
                                   stdout=err, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, log.read_text(encoding="utf-8")
        info = running_server(home)
        if not ready and info is not None and info.pid == process.pid:
            return Served(process, info.url or "", log)
        if info is not None and info.pid == process.pid and info.url:
            try:
                if httpx.get(f"{info.url}/healthz", timeout=5).status_code == 200:
                    return Served(process, info.url, log)
            except httpx.TransportError:
                pass
        assert time.monotonic() < deadline, "serve did not start: " + log.read_text(encoding="utf-8")
        time.sleep(0.1)


def cli(home: Path, env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([CONVSEARCH, "--home", str(home), *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert not check or done.returncode == 0, done.stderr
    return done


@asynccontextmanager
async def mcp_over_http(url: str, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    async with create_mcp_http_client(headers=headers) as http, \
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def mcp_over_stdio(home: Path, env: dict[str, str], user: str, errlog: Any) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(command=CONVSEARCH, args=["--home", str(home), "mcp", "--user", user], env=env,
                                   cwd=REPO)
    async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def data(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    structured = result.structured_content
    assert structured is not None
    return structured.get("result", structured)
