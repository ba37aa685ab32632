"""The MCP surface: conversation memory tools for a model, bound to one user.

No tool takes a user id: a server is built for one user (`convsearch mcp --user U` over stdio, or
per session over HTTP by `convsearch serve`, engine.surfaces.mcp.http) and every call reads and writes
that user's history only. Each tool is a few lines over ConversationEngine and returns
the same documented models as the HTTP API. Engine errors and wrong argument types come back as
tool errors (isError) with the engine's message; logs go to stderr (stdout is the protocol).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from engine.api import ConversationEngine
from engine.config import data_dir
from engine.errors import ConvsearchError, InvalidInputError
from engine.surfaces.http.schemas import (AssembleRequest, ContextOut, ConversationDetailOut, ConversationOut, EndOut,
                                 GetRequest, IngestOut, IngestRequest, MessageIn, MessageOut, PayloadOut,
                                 DayOut, SearchOut, SearchRequest, SliceOut, SubstringMatchOut, SubstringRequest,
                                 SummaryOut, TurnsAroundOut, TurnsAroundRequest, TurnsSinceOut, TurnsSinceRequest,
                                 ContextRequest, given, out, substring_matches)
from engine.surfaces.remote import RemoteEngine, connect

__all__ = ["build_server", "run_stdio", "BoundTools", "TOOL_NAMES"]


def _doc(model: Any, field: str) -> str:
    """A request field's HTTP description, so both surfaces describe an argument the same way."""
    return str(model.model_fields[field].description)


def _arg(model: Any, field: str) -> Any:
    """Strict, like the HTTP requests: "3" or true is not a limit."""
    return Field(description=_doc(model, field), strict=True)


START = Field(description="First seq of the range (seqs start at 1; other tools' results show them).", strict=True)
END = Field(description="End of the range, exclusive: [start_seq, end_seq).", strict=True)
THREAD = Field(description="Thread to read (imported conversations have their own; a search hit's thread_id "
                           "names one); default: the user's continuous thread.", strict=True)


class BoundTools:
    """The tools, bound to one engine and one user; docstrings are what the model reads."""

    def __init__(self, engine: ConversationEngine | RemoteEngine, user_id: str) -> None:
        self.engine, self.user_id = engine, user_id

    def conversation_search(
        self, query: Annotated[str, _arg(SearchRequest, "query")],
        day: Annotated[str | None, _arg(SearchRequest, "day")] = None,
        recency_days: Annotated[float | None, _arg(SearchRequest, "recency_days")] = None,
        start: Annotated[str | None, _arg(SearchRequest, "start")] = None,
        end: Annotated[str | None, _arg(SearchRequest, "end")] = None,
        limit: Annotated[int | None, _arg(SearchRequest, "limit")] = None,
        kinds: Annotated[list[Literal["summary", "message"]] | None, _arg(SearchRequest, "kinds")] = None,
        explain: Annotated[bool | None, _arg(SearchRequest, "explain")] = None,
        min_score: Annotated[float | None, _arg(SearchRequest, "min_score")] = None,
        fusion: Annotated[Literal["weighted", "rrf"] | None, Field(description=_doc(SearchRequest, "fusion"))] = None,
    ) -> SearchOut:
        """Search everything ever said with this user, by meaning and keywords. Use it first when you need
        something from before the current conversation and do not know when it was said. Hits give a snippet,
        the day, and the message_id to cite; day and conversation summaries come first. Open a hit in full with
        conversation_get. For exact strings (order numbers, error codes, quotes) use search_session_history."""
        options = given(day=day, recency_days=recency_days, start=start, end=end, limit=limit, kinds=kinds,
                        explain=explain, min_score=min_score, fusion=fusion)
        return out(SearchOut, self.engine.search(self.user_id, query, **options))

    def conversation_get(
        self, message_id: Annotated[str | None, _arg(GetRequest, "message_id")] = None,
        day_segment_id: Annotated[str | None, _arg(GetRequest, "day_segment_id")] = None,
        from_message_id: Annotated[str | None, _arg(GetRequest, "from_message_id")] = None,
        to_message_id: Annotated[str | None, _arg(GetRequest, "to_message_id")] = None,
        offset: Annotated[int | None, _arg(GetRequest, "offset")] = None,
    ) -> MessageOut | DayOut | list[MessageOut]:
        """Open what a search hit points to: one message in full (message_id); a whole day (day_segment_id:
        its summary and message ids); or part of a day (day_segment_id with from_message_id and to_message_id).
        Use after conversation_search; use get_turns_around to see what surrounded a moment instead."""
        found = self.engine.get(self.user_id, message_id=message_id, day_segment_id=day_segment_id,
                                from_message_id=from_message_id, to_message_id=to_message_id, offset=offset)
        return out(MessageOut | DayOut | list[MessageOut], found)

    def get_conversation_context(
        self, turns: Annotated[int | None, _arg(ContextRequest, "turns")] = None,
        thread_id: Annotated[str | None, THREAD] = None,
    ) -> ContextOut:
        """Catch up on the recent conversation: the latest turns verbatim, with summaries standing in for older
        ones, up to `turns` messages' worth. Use at the start of a session or after a break; use get_turns_since
        to replay everything after a specific time."""
        options = given(turns=turns, thread_id=thread_id)
        return out(ContextOut, self.engine.conversation_context(self.user_id, **options))

    def get_turns_since(
        self, timestamp: Annotated[str, _arg(TurnsSinceRequest, "timestamp")],
        limit: Annotated[int | None, _arg(TurnsSinceRequest, "limit")] = None,
        include_summaries: Annotated[bool | None, _arg(TurnsSinceRequest, "include_summaries")] = None,
        from_seq: Annotated[int | None, _arg(TurnsSinceRequest, "from_seq")] = None,
        thread_id: Annotated[str | None, THREAD] = None,
    ) -> TurnsSinceOut:
        """Every turn at or after a moment, in order, plus summaries of spans ending after it. Use for "what
        happened since ...". An answer holds at most `limit` turns and about 100,000 characters: when
        `truncated` is true, call again with from_seq=next_seq and include_summaries=false for the rest."""
        options = given(limit=limit, include_summaries=include_summaries, from_seq=from_seq, thread_id=thread_id)
        return out(TurnsSinceOut, self.engine.turns_since(self.user_id, timestamp, **options))

    def get_turns_around(
        self, timestamp: Annotated[str, _arg(TurnsAroundRequest, "timestamp")],
        count: Annotated[int | None, _arg(TurnsAroundRequest, "count")] = None,
        before_ratio: Annotated[float | None, _arg(TurnsAroundRequest, "before_ratio")] = None,
        thread_id: Annotated[str | None, THREAD] = None,
    ) -> TurnsAroundOut:
        """A window of turns before and after a moment. Use to see what surrounded a remembered time or a
        search hit (pass its created_at)."""
        options = given(count=count, before_ratio=before_ratio, thread_id=thread_id)
        return out(TurnsAroundOut, self.engine.turns_around(self.user_id, timestamp, **options))

    def search_session_history(
        self, text: Annotated[str, _arg(SubstringRequest, "text")],
        limit: Annotated[int | None, _arg(SubstringRequest, "limit")] = None,
        thread_id: Annotated[str | None, THREAD] = None,
    ) -> list[SubstringMatchOut]:
        """Exact, case-insensitive substring search over this user's turns, oldest first, with the offset of
        each match. Use for literal strings (ids, order numbers, error codes, file names, quotes) that
        conversation_search might rank low or blur."""
        found = self.engine.substring_search(self.user_id, text, **given(limit=limit, thread_id=thread_id))
        return out(list[SubstringMatchOut], substring_matches(found))

    def request_context_slice(self, start_seq: Annotated[int, START], end_seq: Annotated[int, END]) -> SliceOut:
        """Ask that the next context assembly for this user load messages start_seq <= seq < end_seq instead
        of today's (once). Use when an older stretch must be in your prompt on the next turn."""
        self.engine.request_context_slice(self.user_id, start_seq, end_seq)
        note = "The next context assembly uses these messages instead of today's, once."
        return SliceOut(start_seq=start_seq, end_seq=end_seq, note=note)

    def summarize_message_range(self, start_seq: Annotated[int, START], end_seq: Annotated[int, END]) -> SummaryOut:
        """Write and store a summary of turns start_seq <= seq < end_seq. Use to condense a long stretch you
        have located instead of reading it verbatim; the summary becomes searchable."""
        return out(SummaryOut, self.engine.summarize_range(self.user_id, start_seq, end_seq))

    def end_conversation(
        self, reason: Annotated[str | None, Field(description="Why it ended, a short label kept on the record "
                                                  "(default 'explicit'; at most 200 characters, else refused).")] = None,
    ) -> EndOut:
        """Mark the current conversation finished now and summarise it (title and two or three sentences). Use
        when the user wraps up or moves to an unrelated topic; otherwise conversations end after an idle gap."""
        return out(EndOut, self.engine.end_conversation(self.user_id, **given(reason=reason)))

    def get_conversation(
        self, conversation_id: Annotated[str | None, Field(description="Return this conversation and its messages "
                                                           "(ids come from list_recent).", strict=True)] = None,
        list_recent: Annotated[bool, Field(description="List recent conversations instead.", strict=True)] = False,
        limit: Annotated[int | None, Field(description="With list_recent: how many, 1 to 100 (default 10).",
                                                     strict=True)] = None,
    ) -> ConversationDetailOut | list[ConversationOut]:
        """Browse past conversations: without arguments, the latest ones (title, summary, times, id, newest
        first); with conversation_id, one conversation with its messages, as many as one answer holds (about
        100,000 characters): when `truncated` is true, `continue_with` says how to read the rest with
        get_turns_since. Use conversation_search to find a topic instead."""
        if conversation_id is not None:
            if list_recent:
                raise InvalidInputError("give conversation_id, or list_recent=true, not both")
            return out(ConversationDetailOut, self.engine.get_conversation(self.user_id, conversation_id))
        return out(list[ConversationOut], self.engine.list_conversations(self.user_id, **given(limit=limit)))

    def add_messages(
        self, messages: Annotated[list[MessageIn], _arg(IngestRequest, "messages")],
        thread_id: Annotated[str | None, _arg(IngestRequest, "thread_id")] = None,
    ) -> IngestOut:
        """Append messages (oldest first) to this user's history; they are stored durably and searchable when
        this returns. Use it to record each turn as it happens. Give each a message_id: sending the same ids
        again is a no-op, so a retry never stores a message twice."""
        batch = [m.model_dump(exclude_none=True) for m in messages]
        return out(IngestOut, self.engine.ingest(self.user_id, batch, **given(thread_id=thread_id)))

    def assemble_context(
        self, max_tokens: Annotated[int | None, _arg(AssembleRequest, "max_tokens")] = None,
    ) -> PayloadOut:
        """The prompt block for your next model call: summaries of earlier days and conversations, then today's
        turns, within a token budget. Use it to build the context of a turn; after request_context_slice the
        next call brings that older stretch instead of today's turns, once."""
        return out(PayloadOut, self.engine.assemble_context(self.user_id, **given(max_tokens=max_tokens)))


READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
TOOLS: dict[str, ToolAnnotations] = {
    "conversation_search": READ, "conversation_get": READ, "get_conversation_context": READ,
    "get_turns_since": READ, "get_turns_around": READ, "search_session_history": READ, "get_conversation": READ,
    "assemble_context": READ, "request_context_slice": WRITE, "summarize_message_range": WRITE, "add_messages": WRITE,
    "end_conversation": ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                        open_world_hint=False),
}
TOOL_NAMES = tuple(TOOLS)


def _tool_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Engine errors as tool errors carrying their code and message (the SDK would hide them as crashes)."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except ConvsearchError as exc:
            raise ToolError(f"{exc.code}: {exc.message}") from exc

    return call


class CodedServer(MCPServer):
    """Tool errors whose text starts with the error code (`invalid_input: ...`), as docs/reference/mcp.md
    promises, instead of the SDK's "Error executing tool X: ..." prefix; and an argument a tool does not
    take is an error (the SDK would drop it: `mode` or `user_id` silently ignored misleads an agent)."""

    def __init__(self, *args: Any, parameters: Mapping[str, frozenset[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parameters = parameters  # each tool's argument names

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        unknown = sorted(set(arguments or {}) - self.parameters[name]) if name in self.parameters else []
        if unknown:
            takes = ", ".join(sorted(self.parameters[name])) or "none"
            text = f"{InvalidInputError.code}: {name} has no argument {', '.join(unknown)}; its arguments: {takes}"
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            return CallToolResult(content=[TextContent(type="text", text=_coded(exc))], is_error=True)


def _coded(exc: BaseException) -> str:
    """`code: message` from the engine error or argument validation behind a ToolError."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConvsearchError):
            return f"{cause.code}: {cause.message}"
        if isinstance(cause, ValidationError):
            parts = [f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in cause.errors()]
            return f"{InvalidInputError.code}: {'; '.join(parts)}"
        cause = cause.__cause__
    text = str(exc)
    return text if text.split(":", 1)[0].isidentifier() else f"{InvalidInputError.code}: {text}"


def build_server(engine: ConversationEngine | RemoteEngine, user_id: str) -> MCPServer:
    """The MCP server over `engine`, every tool bound to `user_id`."""
    bound = BoundTools(engine, user_id)
    tools = [Tool.from_function(_tool_errors(getattr(bound, name)), name=name, annotations=hints, structured_output=True)
             for name, hints in TOOLS.items()]
    for tool in tools:  # the SDK reads the schema it publishes live from here
        tool.fn_metadata.output_schema = nullable_as_type_list(tool.fn_metadata.output_schema)
    return CodedServer(
        name="convsearch", version="0.1.0", log_level="WARNING", tools=tools,
        parameters={name: frozenset(inspect.signature(getattr(bound, name)).parameters) for name in TOOLS},
        instructions=(f"Long-term memory of your conversations with user {user_id!r}: search it, open what you "
                      "find, replay periods, and summarise. Every tool reads this user's history only."),
    )


def nullable_as_type_list(schema: Any) -> Any:
    """The same JSON Schema with each `anyOf: [{"type": T}, {"type": "null"}]` (pydantic's `T | None`)
    written `"type": [T, "null"]`. A client that validates results (the Python SDK does, with
    jsonschema, on every call) checks a ten-hit search result in 4.0 ms against 5.9."""
    if isinstance(schema, list):
        return [nullable_as_type_list(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: nullable_as_type_list(value) for key, value in schema.items()}
    options = out.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        other = options[1] if options[0] == {"type": "null"} else options[0]
        if isinstance(other, dict) and set(other) == {"type"} and isinstance(other["type"], str) and other["type"] != "null":
            del out["anyOf"]
            out["type"] = [other["type"], "null"]
    return out


def run_stdio(home: str | Path | None, user_id: str) -> None:
    """Serve over stdin/stdout until the client closes them; an unknown user fails before serving.
    Beside a running `convsearch serve` every call goes to it (engine.surfaces.runtime), else to the store."""
    with contextlib.redirect_stdout(sys.stderr):  # stray prints while the model loads must not hit the protocol
        engine = connect(data_dir(home), lambda: ConversationEngine(home))
    with engine:
        engine.users(user_id)
        build_server(engine, user_id).run("stdio")
