"""Legacy flat history: `{timestamp, userMessage, assistantResponse, toolsUsed}` entries.

The file is a JSON list (records named "index N", from 0) or JSONL ("line N", from 1). Each entry
becomes a user message and an assistant message at its timestamp (ISO 8601, naive read in the
user's zone, or epoch seconds/milliseconds); `toolsUsed` (names, or objects with a `name`) goes
on the assistant message. The whole file lands in the `user_id` argument's continuous thread as
ONE ended conversation titled "Migrated Conversation History". External ids hash each entry's
time and text, so importing the file again (or a longer copy of it) stores nothing twice.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Iterator
from zoneinfo import ZoneInfo

from engine.errors import ConvsearchError, ImportFileError
from engine.importers.appending import ingest_batches
from engine.importers.records import (
    BadRecord, ImportContext, Item, ThreadBatch, Totals, ZoneBook, check_message, load_json, parsed_line,
)
from engine.models import NewMessage
from engine.timeutil import parse_timestamp

__all__ = ["import_legacy", "MIGRATED_TITLE", "legacy_messages"]

MIGRATED_TITLE = "Migrated Conversation History"
_EPOCH_MS_FROM = 10**11  # larger epoch numbers are milliseconds (JavaScript's Date.now())


def import_legacy(ctx: ImportContext) -> Totals:
    assert ctx.user_id is not None  # import_file checks it with a clear error first
    try:
        tz = ZoneBook(ctx.store, ctx.timezone).zone(ctx.user_id)
    except BadRecord as exc:
        raise ImportFileError(exc.reason) from None
    items: list[Item] = []
    for location, entry in _entries(ctx):
        try:
            items.extend(Item(location, m) for m in legacy_messages(entry, tz))
        except BadRecord as exc:
            ctx.issues.bad(location, exc.reason)
    batch = ThreadBatch(ctx.user_id, ctx.timezone, None, tuple(items), as_conversation=MIGRATED_TITLE)
    return ingest_batches(ctx, [batch])


def _entries(ctx: ImportContext) -> Iterator[tuple[str, Any]]:
    with ctx.path.open("rb") as fh:
        head = fh.read(64).lstrip()
    if head.startswith(b"["):
        data = load_json(ctx.path)
        if not isinstance(data, list):
            raise ImportFileError("a legacy history is a JSON list of entries (or JSONL): check --format")
        yield from ((f"index {i}", entry) for i, entry in enumerate(data))
        return
    with ctx.path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield f"line {number}", parsed_line(raw.decode("utf-8"))
            except UnicodeDecodeError:
                ctx.issues.bad(f"line {number}", "not UTF-8 text: re-export the file as UTF-8")
            except BadRecord as exc:
                ctx.issues.bad(f"line {number}", exc.reason)


def legacy_messages(entry: Any, tz: ZoneInfo) -> list[NewMessage]:
    """The user and assistant messages of one entry (either may be missing, not both)."""
    if not isinstance(entry, dict):
        raise BadRecord("expected an object with timestamp, userMessage and assistantResponse, "
                        f"got {type(entry).__name__}")
    at = _timestamp(entry.get("timestamp"), tz)
    user_text, reply = entry.get("userMessage"), entry.get("assistantResponse")
    for name, value in (("userMessage", user_text), ("assistantResponse", reply)):
        if value is not None and not isinstance(value, str):
            raise BadRecord(f"{name} must be a string, got {type(value).__name__}")
    if not user_text and not reply:
        raise BadRecord("entry has neither userMessage nor assistantResponse")
    key = hashlib.sha1(json.dumps([at.isoformat(), user_text, reply], ensure_ascii=False).encode()).hexdigest()[:16]
    messages = []
    if user_text:
        messages.append(NewMessage("user", user_text, at, external_id=f"legacy:{key}:user"))
    if reply:
        messages.append(NewMessage("assistant", reply, at, external_id=f"legacy:{key}:assistant",
                                   tools_used=_tools(entry.get("toolsUsed"))))
    return [check_message(m) for m in messages]


def _timestamp(value: Any, tz: ZoneInfo) -> datetime:
    if value is None:
        raise BadRecord("missing timestamp: every entry needs one")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1000 if value >= _EPOCH_MS_FROM else value
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise BadRecord(f"timestamp {value!r} is not a valid epoch time") from None
    try:
        return parse_timestamp(value, tz)
    except ConvsearchError as exc:
        raise BadRecord(exc.message) from None


def _tools(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadRecord(f"toolsUsed must be a list of tool names, got {type(value).__name__}")
    names = [t.get("name") if isinstance(t, dict) else t for t in value]
    if not all(isinstance(n, str) and n for n in names):
        raise BadRecord(f"toolsUsed must hold tool names (or objects with a name), got {value!r}")
    return tuple(names)
