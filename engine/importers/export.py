"""Export one thread to Parquet, JSONL or CSV (by the file's extension), in the columns the importers
read (Parquet and JSONL exports import back as they were).

The continuous thread is written with a null `thread_id` (an import puts it back in the user's
continuous thread); `timezone` carries the user's zone so a fresh store recreates the user as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from engine.errors import InvalidInputError
from engine.models import Message
from engine.store.core import Store

__all__ = ["export_thread", "export_thread_parquet", "EXPORT_SCHEMA", "EXPORT_FORMATS", "PAGE_ROWS"]

PAGE_ROWS = 5000  # messages read and written per step: memory stays flat on long threads

EXPORT_SCHEMA = pa.schema([
    ("user_id", pa.string()), ("thread_id", pa.string()), ("message_id", pa.string()),
    ("external_id", pa.string()), ("role", pa.string()), ("content", pa.string()),
    ("created_at", pa.timestamp("us", tz="UTC")), ("speaker", pa.string()),
    ("tools_used", pa.list_(pa.string())), ("metadata", pa.string()), ("kind", pa.string()),
    ("timezone", pa.string()),
])


class _Parquet:
    def __init__(self, path: Path) -> None:
        self.writer = pq.ParquetWriter(str(path), EXPORT_SCHEMA)

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table)

    def close(self) -> None:
        self.writer.close()


class _Jsonl:
    """One JSON object a line, as the JSONL importer reads them (nulls and empty lists left out)."""

    def __init__(self, path: Path) -> None:
        self.handle = path.open("w", encoding="utf-8")

    def write(self, table: pa.Table) -> None:
        for row in table.to_pylist():
            row["created_at"] = row["created_at"].isoformat()
            row["metadata"] = json.loads(row["metadata"]) if row["metadata"] else None
            kept = {k: v for k, v in row.items() if v not in (None, [])}
            self.handle.write(json.dumps(kept, ensure_ascii=False) + "\n")

    def close(self) -> None:
        self.handle.close()


class _Csv:
    """Spreadsheet columns: tools_used as a JSON list, times in ISO 8601 UTC."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.writer: pcsv.CSVWriter | None = None

    def write(self, table: pa.Table) -> None:
        tools = pa.array([json.dumps(t) if t else None for t in table.column("tools_used").to_pylist()], pa.string())
        table = table.set_column(table.schema.get_field_index("tools_used"), "tools_used", tools)
        if self.writer is None:
            self.writer = pcsv.CSVWriter(str(self.path), table.schema)
        self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        else:
            self.path.write_text(",".join(EXPORT_SCHEMA.names) + "\n", encoding="utf-8")


EXPORT_FORMATS: dict[str, Callable[[Path], Any]] = {".parquet": _Parquet, ".jsonl": _Jsonl, ".csv": _Csv}


def export_thread(store: Store, user_id: str, path: Path, *, thread_id: str | None = None) -> int:
    """Write the user's thread (default: the continuous one) to `path` in the format its extension
    names (.parquet, .jsonl, .csv); returns the rows written."""
    path = Path(path)
    kind = EXPORT_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise InvalidInputError(f"cannot tell the export format of {path.name!r}: end the file name with "
                                f"{', '.join(EXPORT_FORMATS)}")
    return _export(store, user_id, path, thread_id, kind)


def export_thread_parquet(store: Store, user_id: str, path: Path, *, thread_id: str | None = None) -> int:
    """Parquet whatever the extension (the Python API's historic name)."""
    return _export(store, user_id, Path(path), thread_id, _Parquet)


def _export(store: Store, user_id: str, path: Path, thread_id: str | None, kind: Callable[[Path], Any]) -> int:
    user = store.get_user(user_id)
    thread = store.get_thread(thread_id, user_id=user_id) if thread_id else store.continuous_thread(user_id)
    written_thread = None if thread.mode == "continuous" else thread.thread_id
    path.parent.mkdir(parents=True, exist_ok=True)
    rows, writer = 0, kind(path)
    try:
        start = 0
        while page := store.messages_in_range(thread.thread_id, start, limit=PAGE_ROWS):
            start = page[-1].seq + 1
            turns = [m for m in page if m.kind != "note"]  # the engine's notes are made again on import
            if turns:
                writer.write(_table(turns, written_thread, user.timezone))
                rows += len(turns)
    finally:
        writer.close()
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
