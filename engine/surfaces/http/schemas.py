"""Pydantic models of the HTTP and MCP surfaces: the documented shape of every request and result.

Request models only check types; values (ranges, ids, timestamps) are checked by the engine, so
every surface gives the same answer. Optional fields left out (or null) take the engine's default,
which each description states. Response models mirror the engine's frozen records field for field
(tests/test_http.py checks the mirror), so `out()` turns any record into its documented model.
"""

from __future__ import annotations

from datetime import date, datetime
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from engine.surfaces.http.requests import (AddUserRequest, AssembleRequest, ContextRequest, DeleteRequest,
                                  EndConversationRequest, GetConversationRequest, GetRequest, IngestRequest, Kind,
                                  ListConversationsRequest, MessageIn, NoBody, RangeRequest, RegenerateDayRequest, Request, Seq,
                                  SearchRequest, SliceRequest, SubstringRequest, SummarizeRequest, ThreadRangeRequest,
                                  TurnsAroundRequest, TurnsSinceRequest, UserRequest, UsersRequest)
from engine.surfaces.serialize import to_jsonable

__all__ = [  # requests, then results, then helpers
    "Request", "UserRequest", "AddUserRequest", "MessageIn", "IngestRequest", "EndConversationRequest", "SearchRequest",
    "GetRequest", "TurnsSinceRequest", "TurnsAroundRequest", "ContextRequest", "SubstringRequest", "RangeRequest",
    "ThreadRangeRequest", "SliceRequest", "NoBody", "Seq",
    "ListConversationsRequest", "GetConversationRequest", "AssembleRequest",
    "RegenerateDayRequest", "SummarizeRequest", "UserOut", "ThreadOut", "IngestOut", "ScorePartsOut", "SearchHitOut",
    "SearchOut", "MessageOut",
    "DayOut", "SummaryViewOut",
    "TurnsSinceOut", "TurnsAroundOut", "ContextOut", "SubstringMatchOut", "SummaryOut", "EndOut", "ConversationOut",
    "StoredMessageOut", "ConversationDetailOut", "TruncationMarkerOut", "PayloadOut", "SliceOut", "IndexReportOut",
    "IndexStatusOut", "HealthOut", "UsersRequest", "DeleteRequest", "ErrorBody", "ErrorOut", "GetOut",
    "given", "out", "substring_matches",
]



def given(**options: Any) -> dict[str, Any]:
    """Options the caller set: the rest take the engine's defaults, so no surface keeps its own."""
    return {name: value for name, value in options.items() if value is not None}


@lru_cache(maxsize=None)
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def out(kind: Any, value: object) -> Any:
    """An engine record (or list, or union member) as its documented response model."""
    return _adapter(kind).validate_python(to_jsonable(value))


def substring_matches(found: list[tuple[int, Any]]) -> list[dict[str, Any]]:
    """The facade's (offset, message) pairs as named objects."""
    return [{"offset": offset, "message": message} for offset, message in found]


# Results ----------------------------------------------------------------------------------------
class ThreadOut(BaseModel):
    thread_id: str = Field(description="The thread's id (pass it as thread_id).")
    user_id: str = Field(description="Its user.")
    mode: Literal["thread", "continuous"] = Field(description="continuous: the user's one running thread; "
                                                  "thread: an imported or named one.")
    created_at: datetime = Field(description="When it was created (UTC).")
    title: str | None = Field(None, description="Its title (imported conversations keep theirs).")


class UserOut(BaseModel):
    user_id: str = Field(description="The user's id.")
    timezone: str = Field(description="IANA time zone that decides the user's calendar days.")
    created_at: datetime = Field(description="When the user was created (UTC).")


class IngestOut(BaseModel):
    thread_id: str = Field(description="The thread the messages went to.")
    inserted: list[str] = Field(description="Ids of the messages stored, in order.")
    duplicates: list[str] = Field(description="Ids already stored, skipped.")
    first_seq: int | None = Field(description="Seq of the first message stored (null when none was).")
    last_seq: int | None = Field(description="Seq of the last message stored (null when none was).")
    opened_days: list[date] = Field(description="Days of the user that this batch opened.")
    ended_conversations: list[str] = Field(description="Conversations the batch closed by an idle gap.")
    seconds: float = Field(0.0, description="Time the call took.")
    messages_per_s: float = Field(0.0, description="Messages stored per second of the call.")
    phases_s: dict[str, float] = Field(default_factory=dict, description="Seconds per phase: store, summaries, "
                                       "lexical, and embed when the call embedded.")


class ScorePartsOut(BaseModel):
    vector: float | None = Field(description="Cosine similarity clamped to 0..1; null without a vector yet.")
    lexical: float = Field(description="BM25 normalised to 0..1 by the query's best match.")
    lexical_raw: float = Field(description="Raw BM25 score.")
    fused: float = Field(description="Score after fusing vector and lexical.")
    penalty: float = Field(description="Multiplier for messages a summary already covers (1.0: none).")
    vector_rank: int | None = Field(description="1-based rank among vector candidates.")
    lexical_rank: int | None = Field(description="1-based rank among lexical matches.")
    fusion: str = Field(description="How the score was made: weighted, rrf, lexical or vector.")
    window: float | None = Field(None, description="Message hits: fused score of the best window holding the "
                                 "message (vector, lexical and the ranks are that window's).")
    own: float | None = Field(None, description="Message hits: how well the message's own line matches.")
    summary: float | None = Field(None, description="Message hits: fused score of the best summary covering it.")
    own_lexical: float | None = Field(None, description="Message hits: query weight the message's own line shares, "
                                      "relative to the best line (0..1); what exempts it from min_score.")


class SearchHitOut(BaseModel):
    kind: Kind = Field(description="A message window or a summary.")
    score: float = Field(description="Final score, 0 to 1; higher is better.")
    thread_id: str = Field(description="Thread of the hit.")
    day_label: date | None = Field(description="The user's calendar day of the hit.")
    day_segment_id: str | None = Field(description="Day to open with /api/conversation/get.")
    snippet: str = Field(description="The matching text, shortened.")
    covered_by_summary: bool = Field(description="A summary already covers this message.")
    from_seq: int = Field(description="First seq the hit spans.")
    to_seq: int = Field(description="Last seq the hit spans.")
    message_id: str | None = Field(None, description="The message to cite.")
    seq: int | None = Field(None, description="Seq of that message.")
    created_at: datetime | None = Field(None, description="When that message was written (UTC).")
    role: str | None = Field(None, description="Role of that message.")
    speaker: str | None = Field(None, description="Speaker of that message.")
    first_message_id: str | None = Field(None, description="First message of the window.")
    last_message_id: str | None = Field(None, description="Last message of the window.")
    summary_id: str | None = Field(None, description="Id of the summary (summary hits).")
    summary_kind: str | None = Field(None, description="day, conversation or range (summary hits).")
    parts: ScorePartsOut | None = Field(None, description="Score parts, only with explain.")
    started_at: datetime | None = Field(None, description="Summary hits: when the first message covered was written.")
    ended_at: datetime | None = Field(None, description="Summary hits: when the last message covered was written.")


class SearchOut(BaseModel):
    query: str = Field(description="The query as searched (trimmed).")
    results: list[SearchHitOut] = Field(description="Hits, summaries first, then messages by score.")
    mode: Literal["hybrid", "lexical", "vector"] = Field(description="Which indexes answered.")
    not_vector_indexed: int = Field(description="Messages found lexically but not yet in the vector index.")
    took_ms: float = Field(description="Time the search took.")
    notice: str | None = Field(None, description="Why the search degraded, e.g. fell back to lexical.")
    terms: list[str] = Field([], description="The query's words as the keyword index searched them: stemmed, "
                                              "without stop words or a date the query names (what a client may "
                                              "highlight).")


class MessageOut(BaseModel):
    message_id: str = Field(description="The message's id.")
    seq: int = Field(description="Position in its thread (1, 2, ...): ranges and continuations use it.")
    role: str = Field(description="user, assistant, system or tool.")
    speaker: str | None = Field(description="Display name of the author.")
    content: str = Field(description="The full text.")
    created_at: datetime = Field(description="When it was written (UTC).")
    day_label: date = Field(description="The user's calendar day of the message.")
    conversation_id: str = Field(description="The conversation it belongs to.")
    tools_used: list[str] = Field(description="Tools the message used.")
    thread_id: str = Field(description="Its thread.")
    day_segment_id: str = Field(description="Its day, to open with /api/conversation/get.")
    content_chars: int = Field(0, description="Length of the whole text; content is at most 20,000 characters of it.")
    content_offset: int = Field(0, description="Where content starts in the whole text.")
    content_truncated: bool = Field(False, description="More text follows: get the message with "
                                    "offset = content_offset + length of content for the next part.")


class DayOut(BaseModel):
    day_segment_id: str = Field(description="The day's id.")
    thread_id: str = Field(description="Its thread.")
    day_label: date = Field(description="The user's calendar day.")
    summary_markdown: str | None = Field(description="The day's summary; null until it has one.")
    updated_at: datetime = Field(description="Last change of the day (UTC).")
    message_ids: list[str] = Field(description="The day's turns in order.")


class SummaryViewOut(BaseModel):
    summary_id: str = Field(description="The summary's id.")
    kind: str = Field(description="day, conversation or range.")
    from_seq: int = Field(description="First seq it covers.")
    to_seq: int = Field(description="Last seq it covers.")
    message_count: int = Field(description="Turns actually stored in the span.")
    markdown: str = Field(description="The summary text (Markdown).")
    title: str | None = Field(description="Title (conversation summaries).")
    day_label: date | None = Field(description="Day (day summaries).")
    conversation_id: str | None = Field(description="Conversation (conversation summaries).")
    ends_at: datetime | None = Field(description="Time of the last message it covers (UTC).")
    updated_at: datetime = Field(description="Last rewrite (UTC).")
    overlap: int = Field(0, description="Of message_count, how many a newer chosen summary already covers.")


class TurnsSinceOut(BaseModel):
    since: datetime = Field(description="The moment asked for, in UTC.")
    messages: list[MessageOut] = Field(description="Turns at or after it, in order.")
    summaries: list[SummaryViewOut] = Field(description="Summaries whose span ends after it.")
    truncated: bool = Field(description="More turns remain: continue with next_seq.")
    next_seq: int | None = Field(None, description="Pass as from_seq to get the rest.")
    next_timestamp: datetime | None = Field(None, description="Time of the first turn left out.")
    continue_with: str | None = Field(None, description="How to ask for the rest, in words.")
    notice: str | None = Field(None, description="E.g. that the moment is in the future.")


class TurnsAroundOut(BaseModel):
    moment: datetime = Field(description="The moment asked for, in UTC.")
    messages: list[MessageOut] = Field(description="Turns before then at/after the moment, in order.")
    before_count: int = Field(description="Turns found before the moment.")
    after_count: int = Field(description="Turns found at or after it.")
    requested_before: int = Field(description="Turns wanted before it.")
    requested_after: int = Field(description="Turns wanted at or after it.")
    notice: str | None = Field(None, description="Says when history could not fill one side.")


class ContextOut(BaseModel):
    requested_turns: int = Field(description="Turns asked for.")
    uncovered_count: int = Field(description="Turns of the thread no summary covers.")
    summaries: list[SummaryViewOut] = Field(description="Summaries standing in for older turns, oldest first.")
    turns: list[MessageOut] = Field(description="Latest raw turns no summary covers, in order.")
    turns_covered: int = Field(description="Messages represented by the turns and summaries together.")


class SubstringMatchOut(BaseModel):
    offset: int = Field(description="Character offset of the first match in the content.")
    message: MessageOut = Field(description="The matching message.")


class SummaryOut(BaseModel):
    summary_id: str = Field(description="The summary's id.")
    thread_id: str = Field(description="Its thread.")
    user_id: str = Field(description="Its user.")
    kind: str = Field(description="day, conversation or range.")
    from_seq: int = Field(description="First seq covered.")
    to_seq: int = Field(description="Last seq covered.")
    markdown: str = Field(description="The summary (Markdown).")
    created_at: datetime = Field(description="First written (UTC).")
    updated_at: datetime = Field(description="Last rewritten (UTC).")
    day_label: date | None = Field(None, description="Day (day summaries).")
    conversation_id: str | None = Field(None, description="Conversation (conversation summaries).")
    title: str | None = Field(None, description="Title (conversation summaries).")
    message_count: int = Field(0, description="Turns summarised.")


class EndOut(BaseModel):
    ended: bool = Field(description="Whether a conversation was open and is now ended.")
    conversation_id: str | None = Field(description="The conversation ended; null when none was open.")
    summary: SummaryOut | None = Field(description="Its summary; null when none was open, when summaries are off, "
                                       "or when the summarizer failed (it is retried in the background).")


class ConversationOut(BaseModel):
    conversation_id: str = Field(description="The conversation's id.")
    thread_id: str = Field(description="Its thread.")
    user_id: str = Field(description="Its user.")
    started_at: datetime = Field(description="First message time (UTC).")
    first_seq: int = Field(description="Seq of its first message.")
    last_seq: int = Field(description="Seq of its last message.")
    last_message_at: datetime = Field(description="Last message time (UTC).")
    ended_at: datetime | None = Field(None, description="When it ended; null while open.")
    end_reason: str | None = Field(None, description="Why it ended (idle, explicit, ...).")
    title: str | None = Field(None, description="Short title, once summarised.")
    summary: str | None = Field(None, description="Two or three sentences, once summarised.")


class StoredMessageOut(BaseModel):
    message_id: str = Field(description="The message's id.")
    thread_id: str = Field(description="Its thread.")
    user_id: str = Field(description="Its user.")
    seq: int = Field(description="Position in the thread.")
    role: str = Field(description="user, assistant, system or tool.")
    content: str = Field(description="The text (tool output possibly trimmed in context payloads).")
    created_at: datetime = Field(description="When it was written (UTC).")
    day_label: date = Field(description="The user's calendar day.")
    conversation_id: str = Field(description="Its conversation.")
    speaker: str | None = Field(None, description="Display name of the author.")
    tools_used: list[str] = Field([], description="Tools it used.")
    metadata: dict[str, Any] = Field({}, description="Free-form JSON given at ingest.")
    external_id: str | None = Field(None, description="Id from another system.")
    kind: str = Field("turn", description="'turn' (content) or 'note' (written by the engine).")


class ConversationDetailOut(BaseModel):
    conversation: ConversationOut = Field(description="The conversation's record.")
    messages: list[StoredMessageOut] = Field(description="Its messages in order, as many as one answer holds.")
    truncated: bool = Field(False, description="More messages follow: continue_with says how to read them.")
    next_seq: int | None = Field(None, description="Seq of the first message left out.")
    continue_with: str | None = Field(None, description="How to read the rest, in words.")


class TruncationMarkerOut(BaseModel):
    dropped: int = Field(description="Messages dropped here to fit the budget.")
    text: str = Field(description="The marker text shown in the prompt.")


class PayloadOut(BaseModel):
    user_id: str = Field(description="The user.")
    thread_id: str = Field(description="The thread assembled from.")
    day_label: date = Field(description="Today in the user's zone.")
    source: str = Field(description="'today', or 'slice' when a requested slice was used (once).")
    requested_slice: list[int] | None = Field(description="[start_seq, end_seq) of that slice.")
    items: list[StoredMessageOut | TruncationMarkerOut] = Field(description="Messages in order; markers for drops.")
    today_summary: str | None = Field(description="Today's summary, if any.")
    yesterday_summary: str | None = Field(description="Yesterday's summary, if any.")
    text: str = Field(description="The whole prompt block.")
    max_tokens: int = Field(description="The budget used.")
    messages_loaded: int = Field(description="Messages in the payload.")
    messages_dropped: int = Field(description="Messages left out to fit.")
    truncated: bool = Field(description="Anything was dropped or trimmed.")
    estimated_tokens: int = Field(description="Tokens of text.")
    exact_tokens: bool = Field(description="Counted with the real tokenizer (else characters / 4).")


class SliceOut(BaseModel):
    start_seq: int = Field(description="First seq of the slice.")
    end_seq: int = Field(description="End of the slice, exclusive.")
    note: str = Field(description="What the request does.")


class IndexReportOut(BaseModel):
    user_id: str = Field(description="The user indexed.")
    messages: int = Field(description="Messages newly chunked.")
    chunks_added: int = Field(description="Windows added.")
    chunks_removed: int = Field(description="Windows replaced.")
    embeddings_reused: int = Field(description="Vectors taken from the cache.")
    embeddings_computed: int = Field(description="Vectors computed.")
    seconds: float = Field(description="Time taken.")
    messages_per_s: float = Field(0.0, description="Messages chunked per second.")
    windows_per_s: float = Field(0.0, description="Windows added (index) or built (reindex) per second.")
    phases_s: dict[str, float] = Field(default_factory=dict, description="Seconds per phase: chunk, vectors, save, "
                                       "and catch_up for a reindex.")


class IndexStatusOut(BaseModel):
    user_id: str = Field(description="The user.")
    chunks: int = Field(description="Windows in the lexical index.")
    vector_indexed_chunks: int = Field(description="Windows with a vector.")
    not_vector_indexed_messages: int = Field(description="Messages still waiting for vectors.")
    watermarks: dict[str, int] = Field(description="Per thread, the highest seq indexed.")
    model: str | None = Field(description="Embedding model the index was built with.")
    schema_version: int = Field(description="Layout version of the index files (a change means a reindex).")
    embedder: str | None = Field(description="Embedding model loaded now (null: lexical only).")
    query_embedder: str | None = Field(None, description="The model that embeds queries (the embedder's int8 copy "
                                       "by default; null: lexical only).")
    summaries: dict[str, Any] = Field(default_factory=dict, description="Summaries whose summarizer call failed "
                                      "and wait for a retry (pending_retries, last_error), in this process.")


class HealthOut(BaseModel):
    status: Literal["ok"] = Field(description="Always 'ok' while the server answers.")
    details: dict[str, Any] = Field(default_factory=dict, description="Background work: the index step "
                                    "(steps run, last error) and summaries waiting for a retry (count, last error).")


class ErrorBody(BaseModel):
    code: str = Field(description="Stable error code, e.g. invalid_input, unknown_message, unauthorized.")
    message: str = Field(description="What went wrong and what to do instead.")


class ErrorOut(BaseModel):
    error: ErrorBody = Field(description="The error.")


GetOut = MessageOut | DayOut | list[MessageOut]
