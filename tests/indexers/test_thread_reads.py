"""The index's reads of the store (indexers/thread_reads.py) give each thread's messages as the
Message objects would: the same turns in the same order, notes and tool messages included, for
one thread alone and for many read together."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import indexers.thread_reads as thread_reads
from engine.api import ConversationEngine
from engine.config import Settings
from engine.models import NewMessage
from indexers.parallel_chunks import _TURN_FIELDS
from indexers.thread_reads import tables_of_threads, turns_by_thread

T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)


def _thread(n: int, offset: int) -> list[NewMessage]:
    """Turns over three days: speakers, tool messages with and without tools."""
    out = []
    for i in range(n):
        at = T0 + timedelta(days=i * 3 // n, minutes=7 * i + offset)
        if i % 5 == 4:
            out.append(NewMessage("tool", f"exit 0 after step {i}", at, tools_used=("shell", "grep") if i % 2 else ()))
        else:
            out.append(NewMessage("user" if i % 2 else "assistant", f"step {i} of plan {offset}", at,
                                  speaker="Ana" if i % 3 == 0 else None))
    return out


@pytest.mark.parametrize("per_read", [10_000, 30])
def test_reads_give_the_messages_of_each_thread_as_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         per_read: int) -> None:
    monkeypatch.setattr(thread_reads, "SEQS_PER_READ", per_read)  # 30: each thread read alone
    with ConversationEngine(tmp_path, embedder=None, settings=Settings(summarizer="extractive")) as engine:
        engine.add_user("u", "UTC")
        engine.store.ensure_threads("u", {"t-a": None, "t-b": None})
        for k, thread_id in enumerate(("t-a", "t-b", None)):
            engine.ingest("u", _thread(40, k), thread_id=thread_id, index=False)
        store = engine.store
        ranges = {thread_id: (3, last) for thread_id, last in store.last_seqs("u").items()}
        expected = store.messages_in_ranges(ranges)
        assert any(m.kind == "note" for found in expected.values() for m in found)  # the day summaries' notes
        assert any(m.tools_used for found in expected.values() for m in found)
        got: dict = {}
        reads = 0
        for threads, table in tables_of_threads(store, ranges):
            got.update(turns_by_thread(threads, table))
            reads += 1
    assert reads == (1 if per_read > 1000 else len(ranges))
    assert {t: [tuple(turn) for turn in turns] for t, turns in got.items()} == {
        t: [_TURN_FIELDS(m) for m in found] for t, found in expected.items()}
