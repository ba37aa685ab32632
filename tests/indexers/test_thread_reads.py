"""The index's reads of the store (indexers/thread_reads.py) give each thread's messages as the
Message objects would: the same turns in the same order, notes and tool messages included, for
one thread alone and for many read together."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import engine.store.core as store_core
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


@pytest.mark.parametrize(("per_read", "short"), [(10_000, 1024), (30, 1024), (30, 0)])
def test_reads_give_the_messages_of_each_thread_as_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         per_read: int, short: int) -> None:
    monkeypatch.setattr(thread_reads, "SEQS_PER_READ", per_read)  # 30: each thread read alone
    monkeypatch.setattr(store_core, "SHORT_RANGE_SEQS", short)  # alone, fetched as rows; 0: as Arrow
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


def test_a_short_range_fetched_as_rows_is_the_table_arrow_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ConversationEngine(tmp_path, embedder=None, settings=Settings(summarizer="extractive")) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", _thread(40, 0), index=False)
        store = engine.store
        [(thread_id, last)] = store.last_seqs("u").items()
        for lo, hi in ((1, last), (5, 9), (last + 1, last + 5)):  # all, some, none
            as_rows = store.indexed_in_ranges({thread_id: (lo, hi)})
            monkeypatch.setattr(store_core, "SHORT_RANGE_SEQS", 0)
            exported = store.indexed_in_ranges({thread_id: (lo, hi)})
            monkeypatch.undo()
            assert as_rows.schema.names == exported.schema.names
            assert [str(f.type).replace("<l:", "<item:") for f in exported.schema] == [str(f.type) for f in as_rows.schema]
            assert as_rows.to_pylist() == exported.to_pylist()
            assert as_rows.num_rows == max(0, min(hi, last) - lo + 1)
