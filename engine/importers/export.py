"""Export one thread to parquet, in the columns the parquet importer reads (export -> import round-trips).

The continuous thread is written with a null `thread_id` (an import puts it back in the user's
continuous thread); `timezone` carries the user's zone so a fresh store recreates the user as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engine.models import Message
from engine.store import Store

__all__ = ["export_thread_parquet", "EXPORT_SCHEMA", "PAGE_ROWS"]

PAGE_ROWS = 5000  # messages read and written per step: memory stays flat on long threads

EXPORT_SCHEMA = pa.schema([
    ("user_id", pa.string()), ("thread_id", pa.string()), ("message_id", pa.string()),
    ("external_id", pa.string()), ("role", pa.string()), ("content", pa.string()),
    ("created_at", pa.timestamp("us", tz="UTC")), ("speaker", pa.string()),
    ("tools_used", pa.list_(pa.string())), ("metadata", pa.string()), ("kind", pa.string()),
    ("timezone", pa.string()),
])


def export_thread_parquet(store: Store, user_id: str, path: Path, *, thread_id: str | None = None) -> int:
    """Write the user's thread (default: the continuous one) to `path`; returns the rows written."""
    user = store.get_user(user_id)
    thread = store.get_thread(thread_id, user_id=user_id) if thread_id else store.continuous_thread(user_id)
    written_thread = None if thread.mode == "continuous" else thread.thread_id
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with pq.ParquetWriter(str(path), EXPORT_SCHEMA) as writer:
        start = 0
        while True:
            page = store.messages_in_range(thread.thread_id, start, limit=PAGE_ROWS)
            if not page:
                break
            writer.write_table(_table(page, written_thread, user.timezone))
            rows += len(page)
            start = page[-1].seq + 1
    return rows


def _table(messages: list[Message], thread_id: str | None, tz: str) -> pa.Table:
    columns = {
        "user_id": [m.user_id for m in messages], "thread_id": [thread_id] * len(messages),
        "message_id": [m.message_id for m in messages], "external_id": [m.external_id for m in messages],
        "role": [m.role for m in messages], "content": [m.content for m in messages],
        "created_at": [m.created_at for m in messages], "speaker": [m.speaker for m in messages],
        "tools_used": [list(m.tools_used) for m in messages],
        "metadata": [json.dumps(dict(m.metadata), ensure_ascii=False, default=str) if m.metadata else None
                     for m in messages],
        "kind": [m.kind for m in messages], "timezone": [tz] * len(messages),
    }
    return pa.table(columns, schema=EXPORT_SCHEMA)
