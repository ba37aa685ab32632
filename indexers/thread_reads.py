"""Reading many threads' messages for indexing in few queries, with bounded memory.

A statement costs DuckDB a millisecond or more however few rows it returns, so an index catching
up on an import of a chat export (thousands of threads of a few messages) spent most of its time
asking thread by thread; reading all of them at once would hold a large user's whole history.
A read is an Arrow table: the shard's message table loads it whole, and the chunker reads tuples.
"""

from __future__ import annotations

from typing import Iterator, Mapping

import pyarrow as pa

from engine.store.core import Store
from indexers.chunking import TurnRow

__all__ = ["tables_of_threads", "turns_by_thread", "SEQS_PER_READ"]

SEQS_PER_READ = 50_000  # seqs a query asks for at most (a thread longer than that is read alone)


def tables_of_threads(store: Store, ranges: Mapping[str, tuple[int, int]]) -> Iterator[tuple[list[str], pa.Table]]:
    """The messages with lo <= seq <= hi of the threads of `ranges`, a read at a time: its threads,
    and their messages by thread and seq (`Store.indexed_in_ranges`). Short threads are read
    together, up to SEQS_PER_READ seqs a query."""
    group: dict[str, tuple[int, int]] = {}
    for thread_id, (lo, hi) in ranges.items():
        if group and sum(b - a + 1 for a, b in group.values()) + hi - lo + 1 > SEQS_PER_READ:
            yield list(group), store.indexed_in_ranges(group)
            group = {}
        group[thread_id] = (lo, hi)
    if group:
        yield list(group), store.indexed_in_ranges(group)


def turns_by_thread(threads: list[str], table: pa.Table) -> dict[str, list[TurnRow]]:
    """Each thread's rows of a read as turns, in order (a thread without any: none)."""
    columns = [table.column(name).to_pylist() for name in ("message_id", "thread_id", "seq", "role", "content", "speaker")]
    tools = [tuple(used) if used else () for used in table.column("tools_used").to_pylist()]
    found: dict[str, list[TurnRow]] = {thread_id: [] for thread_id in threads}
    for turn in map(TurnRow._make, zip(*columns, tools, table.column("kind").to_pylist())):
        found[turn.thread_id].append(turn)
    return found
