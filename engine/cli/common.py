"""Shared CLI plumbing: opening the engine and a progress bar."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from engine.api import ConversationEngine
from engine.config import data_dir
from engine.errors import InvalidInputError
from engine.store import STORE_FILENAME

__all__ = ["open_engine", "progress_bar"]


def open_engine(args: argparse.Namespace, *, vectors: bool = True, create: bool = False) -> ConversationEngine:
    """The engine on --home; `vectors=False` skips the embedding model for store-only commands.

    Only commands that fill a store (`create`: ingest, demo, serve) may start a new one: a
    mistyped --home is an error, not a fresh empty store.
    """
    home = data_dir(args.home)
    if not create and not (home / STORE_FILENAME).is_file():
        raise InvalidInputError(f"no convsearch data in {home}: check --home or CONVSEARCH_HOME, or create it "
                                "with `convsearch ingest FILE`")
    return ConversationEngine(home, embedder="auto" if vectors else None)


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
