"""Shared CLI plumbing: opening the engine and a progress bar."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from engine.api import ConversationEngine

__all__ = ["open_engine", "progress_bar"]


def open_engine(args: argparse.Namespace, *, vectors: bool = True) -> ConversationEngine:
    """The engine on --home; `vectors=False` skips the embedding model for store-only commands."""
    return ConversationEngine(args.home, embedder="auto" if vectors else None)


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
