"""Reading many threads' messages for indexing in few queries, with bounded memory.

A statement costs DuckDB a millisecond or more however few rows it returns, so an index catching
up on an import of a chat export (thousands of threads of a few messages) spent most of its time
asking thread by thread; reading all of them at once would hold a large user's whole history.
"""

from __future__ import annotations

from typing import Iterator, Mapping

from engine.models import Message
from engine.store.core import Store

__all__ = ["messages_of_threads", "SEQS_PER_READ"]

SEQS_PER_READ = 50_000  # seqs a query asks for at most (a thread longer than that is read alone)


def messages_of_threads(store: Store, ranges: Mapping[str, tuple[int, int]]) -> Iterator[dict[str, list[Message]]]:
    """Each thread of `ranges` with its messages with lo <= seq <= hi, in their order, a read at
    a time: short threads read together, up to SEQS_PER_READ seqs a query."""
    group: dict[str, tuple[int, int]] = {}
    for thread_id, (lo, hi) in ranges.items():
        if group and sum(b - a + 1 for a, b in group.values()) + hi - lo + 1 > SEQS_PER_READ:
            yield store.messages_in_ranges(group)
            group = {}
        group[thread_id] = (lo, hi)
    if group:
        yield store.messages_in_ranges(group)
