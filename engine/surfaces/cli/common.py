"""Shared CLI plumbing: opening the engine (or its server) and a progress bar."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable

from engine.api import ConversationEngine
from engine.config import data_dir
from engine.errors import InvalidInputError, StoreLockedError
from engine.surfaces.remote import RemoteEngine, connect
from engine.surfaces.runtime import running_server

__all__ = ["open_engine", "open_local", "refuse_beside_server", "progress_bar"]

log = logging.getLogger("convsearch.cli")


def open_engine(args: argparse.Namespace, *, vectors: bool = True, create: bool = False) -> ConversationEngine | RemoteEngine:
    """The server that owns --home when one runs (same calls, same output), else the engine on
    --home; `vectors=False` skips the embedding model for store-only commands."""
    opened = connect(data_dir(args.home), lambda: _local(args, vectors=vectors, create=create))
    if isinstance(opened, RemoteEngine):
        log.info("cli.via_server url=%s", opened.url)
    return opened


def open_local(args: argparse.Namespace, command: str, *, vectors: bool = True, create: bool = False) -> ConversationEngine:
    """The engine on --home for commands that need the store itself; refused beside a live server."""
    refuse_beside_server(args, command)
    return _local(args, vectors=vectors, create=create)


def _local(args: argparse.Namespace, *, vectors: bool, create: bool) -> ConversationEngine:
    """Only commands that fill a store (`create`: ingest, demo, serve) may start a new one: a
    mistyped --home is an error, not a fresh empty store."""
    home = data_dir(args.home)
    if not create and not ConversationEngine.holds_data(home):
        raise InvalidInputError(f"no convsearch data in {home}: check --home or CONVSEARCH_HOME, or create it "
                                "with `convsearch ingest FILE`")
    return ConversationEngine(home, embedder="auto" if vectors else None)


def refuse_beside_server(args: argparse.Namespace, command: str) -> None:
    home = data_dir(args.home)
    server = running_server(home)
    if server is not None:
        raise StoreLockedError(f"a convsearch server (pid {server.pid}, {server.url or 'starting'}) owns {home}: "
                               f"stop it before `convsearch {command}`")


def progress_bar(label: str) -> Callable[[int, int], None]:
    """A tqdm bar on stderr fed by (done, total) callbacks; silent when stderr is not a terminal."""
    from tqdm import tqdm

    state: dict[str, tqdm] = {}

    def update(done: int, total: int) -> None:
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = tqdm(total=total, desc=label, file=sys.stderr, disable=not sys.stderr.isatty())
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return update
