"""Service commands: `serve` (HTTP API and MCP over HTTP, under uvicorn) and `mcp` (MCP over stdio).

`serve` owns the data directory (DuckDB allows one writer process) and says where it listens in
`server.json` there; every other client, `mcp` included, then goes through it. Neither prints on
stdout itself: for `mcp`, stdout is the protocol.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import time

from engine.surfaces.cli.common import open_local, refuse_beside_server
from engine.config import Settings, data_dir
from engine.api import ConversationEngine
from engine.errors import InvalidInputError, StoreLockedError
from engine.surfaces.http.hosts import is_loopback

__all__ = ["register"]

log = logging.getLogger("convsearch.serve")
STORE_WAIT_S = 60  # how long `serve` waits for a command that holds the store (an import started beside it)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the HTTP API and MCP (at /mcp) for this data directory (loopback by default)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free port)")
    p.add_argument("--insecure", action="store_true",
                   help="serve a non-loopback address without CONVSEARCH_API_TOKEN (anyone who reaches it reads "
                        "every user's history)")
    p.set_defaults(handler=serve)

    p = sub.add_parser("mcp", help="serve the MCP tools over stdio, bound to one user")
    p.add_argument("--user", required=True, help="the user every tool reads and writes")
    p.set_defaults(handler=mcp)


def serve(args: argparse.Namespace) -> None:
    """Own the data directory: HTTP API and MCP on one socket, advertised in the directory (engine.surfaces.runtime)
    before the server's own imports, so a CLI command started beside `serve &` finds it starting."""
    from engine.surfaces.runtime import advertised

    if not is_loopback(args.host) and not Settings().api_token:
        if not args.insecure:
            raise InvalidInputError(
                f"refusing to serve {args.host} without a token: anyone who can reach it would read every user's "
                "history; set CONVSEARCH_API_TOKEN, or bind 127.0.0.1, or pass --insecure to serve it anyway")
        log.warning("serve.no_token host=%s --insecure: anyone who can reach it reads every user's history",
                    args.host)
    refuse_beside_server(args, "serve")
    with advertised(data_dir(args.home), None), _store_when_free(args) as engine:  # "starting", for clients
        import uvicorn

        from engine.surfaces.http.app import create_app

        sock = _listen(args.host, args.port)  # bound before advertising: early clients wait in the backlog
        url = f"http://{_client_host(args.host)}:{sock.getsockname()[1]}"
        config = uvicorn.Config(create_app(engine, host=args.host, url=url), log_level="info")
        print(f"convsearch: serving {engine.home} at {url} (MCP at {url}/mcp)", file=sys.stderr, flush=True)
        uvicorn.Server(config).run(sockets=[sock])


def _store_when_free(args: argparse.Namespace) -> ConversationEngine:
    """The store, once a command that opened it first lets it go: one started at the same moment as
    `serve &` may have opened it before server.json said a server was starting."""
    deadline, warned = time.monotonic() + STORE_WAIT_S, False
    while True:
        try:
            return open_local(args, "serve", create=True)
        except StoreLockedError:
            if time.monotonic() > deadline:
                raise
            if not warned:
                log.warning("serve.waiting: another process has the store open; waiting up to %d s for it", STORE_WAIT_S)
                warned = True
            time.sleep(0.5)


def mcp(args: argparse.Namespace) -> None:
    from engine.surfaces.mcp.server import run_stdio

    run_stdio(args.home, args.user)


def _listen(host: str, port: int) -> socket.socket:
    """A TCP listener for uvicorn. Its proto must say TCP: asyncio sets TCP_NODELAY only on accepted
    sockets that do, and without it each response on a kept-alive connection waited ~40 ms for the
    client's delayed ACK (Nagle): a search over httpx.Client took 52 ms instead of 12."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def _client_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to `host`."""
    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
    host = wildcard.get(host, host)
    return f"[{host}]" if ":" in host else host

