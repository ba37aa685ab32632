"""OpenAI-style chat export: one thread per conversation of one user (the `user_id` argument).

Accepted shapes: a list of `{role, content}` messages; `{"messages": [...]}`; a list of such
conversations; ChatGPT's `conversations.json` (conversations with a `mapping` tree, read along
the branch ending at `current_node`). `content` is a string, a list of parts (`{"type": "text",
"text": ...}` or plain strings) or `{"parts": [...]}`; non-text parts are dropped and messages
with no text left are not imported (counted in the report's `without_text`, empty system nodes
aside). Times come from `create_time` (epoch seconds or ISO 8601); a message without one takes
the previous message's time, else the conversation's, else the import time, so file order is kept.

Threads are `<user_id>:openai:<conversation id>` (or `<user_id>:openai-<n>`, n from 1): thread ids
are unique across the store, so two users' exports cannot collide. Each message's `id` (else its
position) becomes its external id, so importing the same export again stores nothing new.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

from engine.errors import ConvsearchError, ImportFileError
from engine.importers.appending import ingest_batches
from engine.importers.records import (
    BadRecord, ImportContext, Item, ThreadBatch, Totals, ZoneBook, check_id, check_message, load_json,
)
from engine.models import NewMessage
from engine.timeutil import parse_timestamp

__all__ = ["import_openai", "conversations_of", "text_of"]

_ROLE_ALIASES = {"function": "tool", "developer": "system"}


def import_openai(ctx: ImportContext) -> Totals:
    assert ctx.user_id is not None  # import_file checks it with a clear error first
    conversations = conversations_of(load_json(ctx.path))
    several = len(conversations) > 1
    try:
        tz = ZoneBook(ctx.store, ctx.timezone).zone(ctx.user_id)
    except BadRecord as exc:
        raise ImportFileError(exc.reason) from None
    batches = []
    for number, conversation in enumerate(conversations, start=1):
        prefix = f"conversation {number} " if several else ""
        key = conversation.get("id")
        thread_id = f"{ctx.user_id}:openai:{key}" if isinstance(key, str) and key else f"{ctx.user_id}:openai-{number}"
        items = _items(ctx, conversation, prefix, tz)
        title = conversation.get("title") if isinstance(conversation.get("title"), str) else None
        batches.append(ThreadBatch(ctx.user_id, ctx.timezone, check_thread(thread_id), tuple(items), title=title))
    return ingest_batches(ctx, batches)


def check_thread(thread_id: str) -> str:
    try:
        return check_id("thread_id", thread_id)
    except BadRecord as exc:
        raise ImportFileError(f"{exc.reason}: shorten the conversation id") from None


def conversations_of(data: Any) -> list[dict[str, Any]]:
    """Every conversation of the file as {"messages": [...], "id"?, "title"?, "create_time"?}."""
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ImportFileError("an OpenAI chat export is a list of messages or of conversations: check --format")
    if data and all(isinstance(m, dict) and "role" in m for m in data):
        return [{"messages": data}]
    conversations = []
    for index, item in enumerate(data):
        if isinstance(item, dict) and isinstance(item.get("mapping"), dict):
            item = {**item, "messages": _branch(item)}
        if not isinstance(item, dict) or not isinstance(item.get("messages"), list):
            raise ImportFileError("expected a conversation with a messages list: check --format",
                                  location=f"index {index}")
        conversations.append(item)
    return conversations


def _branch(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """ChatGPT's tree, flattened along the branch the user last saw (root first)."""
    mapping = conversation["mapping"]
    node_id = conversation.get("current_node") or next(reversed(mapping), None)
    if mapping and node_id not in mapping:  # else nothing would be imported, and nothing said
        raise ImportFileError(f"conversation {str(conversation.get('id'))[:80]!r}: current_node "
                              f"{str(node_id)[:80]!r} is not a node of its mapping: re-export the conversation, "
                              "or remove current_node to take the last node")
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:  # a cycle ends the walk
        seen.add(node_id)
        node = mapping[node_id]
        message = node.get("message")
        if isinstance(message, dict):
            author = message.get("author") or {}
            chain.append({"role": author.get("role"), "name": author.get("name"), "id": message.get("id"),
                          "content": message.get("content"), "create_time": message.get("create_time")})
        node_id = node.get("parent")
    return chain[::-1]


def text_of(content: Any) -> str:
    """The text of a content value: a string, a list of parts, or {"parts": [...]} / {"text": ...}."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, dict):
        return text_of(content.get("parts", content.get("text")))
    if isinstance(content, list):
        texts = [p if isinstance(p, str) else p.get("text") for p in content if isinstance(p, (str, dict))]
        return "\n".join(t for t in texts if isinstance(t, str) and t)
    raise BadRecord(f"content must be a string or a list of text parts, got {type(content).__name__}")


def _items(ctx: ImportContext, conversation: dict[str, Any], prefix: str, tz: ZoneInfo) -> list[Item]:
    items: list[Item] = []
    try:
        last_at = _when(conversation.get("create_time"), tz) or ctx.now
    except BadRecord as exc:
        ctx.issues.bad(f"{prefix}create_time".strip(), exc.reason)
        last_at = ctx.now
    for index, raw in enumerate(conversation["messages"]):
        location = f"{prefix}index {index}"
        try:
            message = _message(raw, index, last_at, tz)
        except BadRecord as exc:
            ctx.issues.bad(location, exc.reason)
            continue
        if message is not None:
            last_at = message.created_at
            items.append(Item(location, message))
        elif raw.get("role") != "system":  # an empty system node is the export's scaffolding, not a message
            ctx.issues.without_text += 1
    return items


def _message(raw: Any, index: int, last_at: datetime, tz: ZoneInfo) -> NewMessage | None:
    if not isinstance(raw, dict):
        raise BadRecord(f"expected a message object with role and content, got {type(raw).__name__}")
    if "role" not in raw or "content" not in raw:
        raise BadRecord("missing role or content: every message needs both")
    role = _ROLE_ALIASES.get(raw["role"], raw["role"])
    text = text_of(raw["content"])
    if not text.strip():
        return None  # empty system nodes and tool-call stubs carry nothing to search
    calls = raw.get("tool_calls") if isinstance(raw.get("tool_calls"), list) else []
    tools = [c["function"].get("name") for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)]
    if role == "tool" and isinstance(raw.get("name"), str):
        tools.append(raw["name"])
    external = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"openai:{index}"
    return check_message(NewMessage(role=role, content=text, created_at=_when(raw.get("create_time"), tz) or last_at,
                                    external_id=external, tools_used=tuple(t for t in tools if isinstance(t, str))))


def _when(value: Any, tz: ZoneInfo) -> datetime | None:
    """`create_time` as aware UTC: epoch seconds (ChatGPT) or an ISO 8601 string."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise BadRecord(f"create_time {value!r} is not a valid epoch time in seconds") from None
    try:
        return parse_timestamp(value, tz)
    except ConvsearchError as exc:
        raise BadRecord(f"create_time: {exc.message}") from None
