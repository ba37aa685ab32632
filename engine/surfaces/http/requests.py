"""Request models of the HTTP and MCP surfaces (engine.surfaces.http.schemas re-exports them with the results).

Strict types; values (ranges, ids, timestamps) are checked by the engine, so every surface gives the
same answer. What the engine cannot check in time is bounded here, once for every field: no text holds
a NUL, a seq fits the store's BIGINT column (a bigger one failed inside DuckDB), a user id is never
longer than an id may be (so no error echoes a 100 KB value). Optional fields left out (or null) take
the engine's default.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from engine.text_rules import MAX_ID_CHARS
from engine.validation import MAX_SEQ, seq_problem

__all__ = [
    "Request", "UserRequest", "AddUserRequest", "MessageIn", "IngestRequest", "EndConversationRequest",
    "SummarizeRequest", "RegenerateDayRequest", "SearchRequest", "GetRequest", "TurnsSinceRequest",
    "TurnsAroundRequest", "ContextRequest", "SubstringRequest", "RangeRequest", "ThreadRangeRequest",
    "ListConversationsRequest", "GetConversationRequest", "AssembleRequest", "UsersRequest", "DeleteRequest",
    "SliceRequest", "NoBody", "Kind", "Seq", "USER", "THREAD", "MAX_SEQ", "MAX_SEQ_SPAN", "holds_nul", "refuse_nul",
]

Kind = Literal["summary", "message"]
USER = "The user whose history to use; every request is scoped to this one user."
THREAD = "Thread to read (ids from /api/threads); default: the user's continuous thread."
MAX_SEQ_SPAN = 10_000  # the widest range /api/messages/range reads (engine.query.navigation.MAX_LIMIT; a test ties them)


def _seq(value: int) -> int:
    """The engine's seq rule (engine.validation.seq_problem), as a 422 naming the field."""
    problem = seq_problem(value)
    if problem is not None:
        raise PydanticCustomError("seq", "{problem}", {"problem": problem})
    return value


Seq = Annotated[int, AfterValidator(_seq), Field(json_schema_extra={"minimum": 1, "maximum": MAX_SEQ})]


def holds_nul(value: Any) -> bool:
    """Whether a string, or any string inside lists and dicts (keys too), holds a NUL; a loop, not
    recursion, so JSON nested as deep as the parser allows is no RecursionError."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str) and "\x00" in item:
            return True
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def refuse_nul(value: Any) -> Any:
    """The one rule for text on the HTTP surface: no NUL, in any field, query parameter or nested value."""
    if holds_nul(value):
        raise PydanticCustomError("nul_character", "holds a NUL character (\\u0000), which no text takes: remove it")
    return value


# Requests ---------------------------------------------------------------------------------------
class Request(BaseModel):
    """Strict types: "3" or true is not a limit, a number is not a string (a client bug to report, not guess)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """Every field, content or speaker or id, under refuse_nul; nested requests check their own."""
        return refuse_nul(value)


class NoBody(Request):
    """A route that takes nothing: no body, or `{}`."""


class UserRequest(Request):
    user_id: str = Field(description=USER, max_length=MAX_ID_CHARS)


class AddUserRequest(UserRequest):
    timezone: str | None = Field(None, description="IANA time zone (e.g. 'Europe/Paris') for day boundaries; "
                                 "default: the server's default zone. An existing user keeps its zone.")


class MessageIn(Request):
    role: Literal["user", "assistant", "system", "tool"] = Field(description="Who wrote the message.")
    content: str = Field(description="The message text (tool output for role 'tool').")
    created_at: str | None = Field(None, description="ISO 8601 time; without an offset it is read in the "
                                   "user's zone; default: now. Must not be older than the thread's last message.")
    message_id: str | None = Field(None, description="Your id (default: generated); re-sending an id is a no-op.")
    external_id: str | None = Field(None, description="An id from another system, kept for reference.")
    speaker: str | None = Field(None, description="Display name of the author.")
    tools_used: list[str] | None = Field(None, description="Names of the tools the message used.")
    metadata: dict[str, Any] | None = Field(None, description="Free-form JSON kept with the message.")


class IngestRequest(UserRequest):
    messages: list[MessageIn] = Field(description="Messages to append, oldest first.")
    thread_id: str | None = Field(None, description="Thread to append to; default: the user's continuous thread.")
    index: bool | None = Field(None, description="Embed the new messages before answering (default true); "
                               "with false they are searchable lexically at once, embedded at the next index run.")


class EndConversationRequest(UserRequest):
    reason: str | None = Field(None, description="Why it ended, kept on the record (default 'explicit').")
    thread_id: str | None = Field(None, description="Thread whose open conversation to end; default: continuous.")


class SummarizeRequest(Request):
    user_id: str | None = Field(None, description="Only this user (default: every user).", max_length=MAX_ID_CHARS)
    since: str | None = Field(None, description="Only days (and conversations ending) on or after this YYYY-MM-DD.")


class RegenerateDayRequest(UserRequest):
    thread_id: str | None = Field(None, description="Thread of the day; default: the user's continuous thread.")


class SearchRequest(UserRequest):
    query: str = Field(description="What to look for, in words (at most 4096 characters).")
    day: str | None = Field(None, description="Only this calendar day of the user (YYYY-MM-DD).")
    recency_days: float | None = Field(None, description="Only the last N days (0 < N <= 36500).")
    start: str | None = Field(None, description="Only at or after this ISO 8601 time (naive = user's zone).")
    end: str | None = Field(None, description="Only before this ISO 8601 time (naive = user's zone).")
    limit: int | None = Field(None, description="Results to return, 1 to 20 (default 6).")
    min_score: float | None = Field(None, description="Drop results scoring below this (0 to 1; default none).")
    fusion: Literal["weighted", "rrf"] | None = Field(None, description="How vector and keyword scores combine: "
                                                      "weighted sum or reciprocal rank fusion (default: the server's).")
    kinds: list[Kind] | None = Field(None, description="Result kinds to return (default both).")
    explain: bool | None = Field(None, description="Include each result's score parts (default false).")


class GetRequest(UserRequest):
    message_id: str | None = Field(None, description="Get this one message (or give day_segment_id).")
    day_segment_id: str | None = Field(None, description="Get this day: its summary and message ids.")
    from_message_id: str | None = Field(None, description="With day_segment_id: the day's messages from this one...")
    to_message_id: str | None = Field(None, description="...to this one, inclusive.")
    offset: int | None = Field(None, description="With message_id: return its text from this character on "
                               "(a long message comes in parts of 20,000; see content_truncated).")


class TurnsSinceRequest(UserRequest):
    timestamp: str = Field(description="ISO 8601 time (naive = user's zone): turns at or after it.")
    include_summaries: bool | None = Field(None, description="Also return summaries ending after it (default true).")
    limit: int | None = Field(None, description="At most this many turns (default 1000).")
    from_seq: Seq | None = Field(None, description="Continue a truncated answer: pass its next_seq.")
    thread_id: str | None = Field(None, description=THREAD)


class TurnsAroundRequest(UserRequest):
    timestamp: str = Field(description="ISO 8601 moment (naive = user's zone) to centre the window on.")
    count: int | None = Field(None, description="Turns in the window (default 40).")
    before_ratio: float | None = Field(None, description="Share of the window before the moment, 0-1 (default 0.5).")
    thread_id: str | None = Field(None, description=THREAD)


class ContextRequest(UserRequest):
    turns: int | None = Field(None, description="Messages' worth of recent context to return (default 40).")
    thread_id: str | None = Field(None, description=THREAD)


class SubstringRequest(UserRequest):
    text: str = Field(description="Literal text to find (case-insensitive; no wildcards or regex).")
    limit: int | None = Field(None, description="At most this many matches, oldest first (default 50).")
    thread_id: str | None = Field(None, description=THREAD)


class RangeRequest(UserRequest):
    start_seq: Seq = Field(description="First seq of the range (seqs start at 1).")
    end_seq: Seq = Field(description="End of the range, exclusive.")


class SliceRequest(RangeRequest):
    @model_validator(mode="after")
    def _not_too_wide(self) -> SliceRequest:
        """A slice is read whole at the next assembly: no wider than /api/messages/range reads."""
        if self.end_seq - self.start_seq > MAX_SEQ_SPAN:
            raise PydanticCustomError("seq_span", "the slice [{start}, {end}) spans more than {most} seqs, the most "
                                      "/api/messages/range reads: ask for a narrower one",
                                      {"start": self.start_seq, "end": self.end_seq, "most": MAX_SEQ_SPAN})
        return self


class ThreadRangeRequest(RangeRequest):
    thread_id: str | None = Field(None, description=THREAD)


class ListConversationsRequest(UserRequest):
    limit: int | None = Field(None, description="At most this many, newest first, 1 to 100 (default 10).")


class GetConversationRequest(UserRequest):
    conversation_id: str = Field(description="The conversation to return, as listed by /api/conversations/list.")


class AssembleRequest(UserRequest):
    max_tokens: int | None = Field(None, description="Token budget of the payload (default: the server's setting).")


class UsersRequest(Request):
    user_id: str | None = Field(None, description="Only this user (default: every user).", max_length=MAX_ID_CHARS)


class DeleteRequest(UserRequest):
    message_ids: list[str] | None = Field(None, description="Delete these messages (another user's ids are ignored).")
    conversation_id: str | None = Field(None, description="Delete this conversation.")
    all_of_user: bool = Field(False, description="Delete the user and everything derived from it.")
