"""Other libraries a user might pick instead of convsearch, on the same texts and vectors.

Each peer builds an index from documents (one text and one vector per row; vectors come
from our own embedder, so the comparison is of search, not of models) into a directory, opens it
again (a serving process opens what a build process wrote), and answers `search(text, vector, k)`
with row numbers, best first. Nothing downloads: the peers never see a model hub.

The libraries are the optional extra `peers` (`pip install -e '.[peers]'`); importing this
package needs none of them, `load(name)` imports the one asked for.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

__all__ = ["Searcher", "Peer", "PEERS", "load", "parse_names"]


class Searcher(Protocol):
    def search(self, text: str, vector: np.ndarray, k: int) -> list[int]:
        """Row numbers of the best k documents for the query, best first."""
        ...


class Peer(Protocol):
    name: str

    def build(self, texts: Sequence[str], vectors: np.ndarray, path: Path) -> None:
        """Index the rows (text i has vector i) into the directory `path`."""
        ...

    def open(self, path: Path) -> Searcher:
        """The index that `build` wrote, ready to search."""
        ...


# name -> (module, its option); the module is imported only when asked for.
PEERS: dict[str, tuple[str, str]] = {
    "lancedb": ("benchmarks.peers.lancedb_peer", "hybrid"),
    "lancedb-fts": ("benchmarks.peers.lancedb_peer", "fts"),
    "txtai": ("benchmarks.peers.txtai_peer", "hybrid"),
    "bm25s": ("benchmarks.peers.bm25s_peer", "hybrid"),
}


def load(name: str) -> Peer:
    """The peer `name` (one of PEERS); a clear error when its library is not installed."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}: choose from {', '.join(PEERS)}")
    module, option = PEERS[name]
    try:
        return importlib.import_module(module).Peer(option)  # type: ignore[no-any-return]
    except ImportError as exc:
        raise SystemExit(f"peer {name!r} needs the optional extra: pip install -e '.[peers]' ({exc})") from None


def parse_names(text: str) -> list[str]:
    """'lancedb,bm25s' -> ['lancedb', 'bm25s'], each checked against PEERS."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    for name in names:
        if name not in PEERS:
            raise SystemExit(f"unknown peer {name!r}: choose from {', '.join(PEERS)}")
    return names
