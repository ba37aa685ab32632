"""Service commands: `serve` (the HTTP API under uvicorn) and `mcp` (the MCP server over stdio).

Both hold the store open for writing while they run (DuckDB allows one writer process), so other
processes reach the data through them. They print nothing on stdout themselves: for `mcp`,
stdout is the protocol.
"""

from __future__ import annotations

import argparse
import logging

from engine.cli.common import open_engine
from engine.config import Settings
from engine.errors import InvalidInputError
from engine.http.hosts import is_loopback

__all__ = ["register"]

log = logging.getLogger("convsearch.serve")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the HTTP API (loopback by default)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--insecure", action="store_true",
                   help="serve a non-loopback address without CONVSEARCH_API_TOKEN (anyone who reaches it reads "
                        "every user's history)")
    p.set_defaults(handler=serve)

    p = sub.add_parser("mcp", help="serve the MCP tools over stdio, bound to one user")
    p.add_argument("--user", required=True, help="the user every tool reads and writes")
    p.set_defaults(handler=mcp)


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from engine.http.app import create_app

    if not is_loopback(args.host) and not Settings().api_token:
        if not args.insecure:
            raise InvalidInputError(
                f"refusing to serve {args.host} without a token: anyone who can reach it would read every user's "
                "history; set CONVSEARCH_API_TOKEN, or bind 127.0.0.1, or pass --insecure to serve it anyway")
        log.warning("serve.no_token host=%s --insecure: anyone who can reach it reads every user's history",
                    args.host)
    with open_engine(args, create=True) as engine:
        uvicorn.run(create_app(engine, bind_host=args.host), host=args.host, port=args.port, log_level="info")


def mcp(args: argparse.Namespace) -> None:
    from engine.mcp_server import run_stdio

    run_stdio(args.home, args.user)
