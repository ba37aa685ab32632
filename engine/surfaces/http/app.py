"""The HTTP surface: FastAPI routes a few lines each over ConversationEngine.

Every body names its `user_id`. Errors are always `{"error": {"code", "message"}}`: engine errors
keep their code and status, bad requests are 422 `invalid_input`, and only real bugs are 500
`internal` (logged; engine.surfaces.http.failures). The import route is in engine.surfaces.http.upload.
With `settings.api_token` set, every path but /healthz, the /docs page and the web page's (which check
their own cookie, engine.surfaces.web) needs the bearer token; without one, only Host headers naming
the bound address are answered. MCP over streamable HTTP is served at /mcp, each session bound to one
user (engine.surfaces.http.auth).
"""

from __future__ import annotations

from contextlib import asynccontextmanager, nullcontext
from typing import Annotated, Any, AsyncIterator

from fastapi import APIRouter, Depends, FastAPI, Request, Security
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.api import ConversationEngine
from engine.surfaces.http.background import Scheduler, serving_jobs
from engine.surfaces.http.auth import MCP_PATH, Auth, error_response
from engine.surfaces.http.failures import add_error_handlers
from engine.surfaces.http.docs_page import DOCS_PATH, STATIC_PREFIX, add_docs_page
from engine.surfaces.http.hosts import HostGuard, allowed_hosts
from engine.surfaces.http.upload import UPLOAD_PATH, router as upload_router
from engine.surfaces.web import is_web_path, mount as mount_web
from engine.surfaces.http.schemas import (RegenerateDayRequest, SummarizeRequest, AddUserRequest, AssembleRequest, ContextOut,
                                 ContextRequest, EndConversationRequest,
                                 EndOut, ErrorOut, GetConversationRequest, GetOut, GetRequest, HealthOut,
                                 IndexReportOut, IndexStatusOut, IngestOut, IngestRequest, ListConversationsRequest,
                                 ConversationDetailOut, ConversationOut, MessageOut, PayloadOut, NoBody,
                                 SearchOut, SearchRequest, SliceOut, SliceRequest, SubstringMatchOut, SubstringRequest,
                                 SummaryOut,
                                 ThreadOut, ThreadRangeRequest,
                                 TurnsAroundOut, TurnsAroundRequest, TurnsSinceOut, TurnsSinceRequest, UserOut,
                                 UserRequest, UsersRequest, DeleteRequest, given, out, substring_matches)
from engine.surfaces.runtime import advertised
from engine.surfaces.serialize import to_jsonable

__all__ = ["create_app", "router"]

SLICE_NOTE = "The user's next context assembly uses messages start_seq <= seq < end_seq instead of today's, once."


def _engine(request: Request) -> ConversationEngine:
    return request.app.state.engine  # type: ignore[no-any-return]


Engine = Annotated[ConversationEngine, Depends(_engine)]
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorOut} for code in (401, 404, 409, 413, 422, 423, 503)}
router = APIRouter(prefix="/api", responses=ERRORS)
open_router = APIRouter()


# Routes -----------------------------------------------------------------------------------------
@open_router.get("/healthz")
def healthz(request: Request) -> HealthOut:
    """Liveness probe; never needs the token. `details` shows background work and its failures."""
    scheduler: Scheduler | None = getattr(request.app.state, "scheduler", None)
    details: dict[str, Any] = {"summaries": _engine(request).summary_retries()}
    if scheduler is not None and (job := scheduler.jobs.get("index")) is not None:
        details["index"] = {"steps": job.steps, "last_error": job.last_error}
    return HealthOut(status="ok", details=details)


@router.post("/users")
def add_user(body: AddUserRequest, engine: Engine) -> UserOut:
    """Create a user (or return the existing one, which keeps its time zone)."""
    return out(UserOut, engine.add_user(body.user_id, body.timezone))


@router.post("/messages")
def ingest(body: IngestRequest, engine: Engine) -> IngestOut:
    """Append messages to a user's thread; they are searchable when this returns."""
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    return out(IngestOut, engine.ingest(body.user_id, messages, **given(thread_id=body.thread_id, index=body.index)))


@router.post("/conversation/end")
def end_conversation(body: EndConversationRequest, engine: Engine) -> EndOut:
    """End the open conversation now (instead of waiting for the idle timeout) and summarise it."""
    return out(EndOut, engine.end_conversation(body.user_id, **given(reason=body.reason, thread_id=body.thread_id)))


@router.post("/conversation/search")
def search(body: SearchRequest, engine: Engine) -> SearchOut:
    """Hybrid (vector + BM25) search of a user's messages and summaries, with citations."""
    options = body.model_dump(exclude={"user_id", "query"}, exclude_none=True)
    return out(SearchOut, engine.search(body.user_id, body.query, **options))


@router.post("/conversation/get")
def get(body: GetRequest, engine: Engine) -> GetOut:
    """A message by id; a day (summary and message ids); or a range of a day's messages."""
    return out(GetOut, engine.get(body.user_id, **body.model_dump(exclude={"user_id"})))


@router.post("/get_turns_since")
def turns_since(body: TurnsSinceRequest, engine: Engine) -> TurnsSinceOut:
    """Every turn since a moment (paged by from_seq) and the summaries ending after it."""
    options = body.model_dump(exclude={"user_id", "timestamp"}, exclude_none=True)
    return out(TurnsSinceOut, engine.turns_since(body.user_id, body.timestamp, **options))


@router.post("/get_turns_around")
def turns_around(body: TurnsAroundRequest, engine: Engine) -> TurnsAroundOut:
    """A window of turns before and after a moment."""
    options = body.model_dump(exclude={"user_id", "timestamp"}, exclude_none=True)
    return out(TurnsAroundOut, engine.turns_around(body.user_id, body.timestamp, **options))


@router.post("/get_conversation_context")
def conversation_context(body: ContextRequest, engine: Engine) -> ContextOut:
    """The latest turns' worth of context: raw recent turns, then summaries for older ones."""
    context = engine.conversation_context(body.user_id, **given(turns=body.turns, thread_id=body.thread_id))
    return out(ContextOut, context)


@router.post("/search_session_history")
def substring_search(body: SubstringRequest, engine: Engine) -> list[SubstringMatchOut]:
    """Exact, case-insensitive substring search (ids, error codes, quotes), oldest first."""
    found = engine.substring_search(body.user_id, body.text, **given(limit=body.limit, thread_id=body.thread_id))
    return out(list[SubstringMatchOut], substring_matches(found))


@router.post("/messages/range")
def messages_range(body: ThreadRangeRequest, engine: Engine) -> list[MessageOut]:
    """Turns with start_seq <= seq < end_seq, in order."""
    found = engine.messages_range(body.user_id, body.start_seq, body.end_seq, **given(thread_id=body.thread_id))
    return out(list[MessageOut], found)


@router.post("/summarize_range")
def summarize_range(body: ThreadRangeRequest, engine: Engine) -> SummaryOut:
    """Summarise turns start_seq <= seq < end_seq (stored, and searchable as a summary)."""
    summary = engine.summarize_range(body.user_id, body.start_seq, body.end_seq, thread_id=body.thread_id)
    return out(SummaryOut, summary)


@router.post("/threads")
def list_threads(body: UserRequest, engine: Engine) -> list[ThreadOut]:
    """The user's threads, oldest first: the continuous one and imported ones (pass their thread_id)."""
    return out(list[ThreadOut], engine.list_threads(body.user_id))


@router.post("/days/{day}/summary")
def regenerate_day_summary(day: str, body: RegenerateDayRequest, engine: Engine) -> SummaryOut:
    """Rewrite the day's summary now ("Regenerate summary"); `day` is YYYY-MM-DD in the user's zone."""
    return out(SummaryOut, engine.regenerate_day_summary(body.user_id, day, **given(thread_id=body.thread_id)))


@router.post("/summarize")
def summarize(body: SummarizeRequest, engine: Engine) -> dict[str, Any]:
    """The summary policy over stored history (a backfill): what `convsearch summarize --all` does."""
    return to_jsonable(engine.summarize(body.user_id, **given(since=body.since)))  # type: ignore[no-any-return]


@router.post("/summarize/finalize")
def finalize_days(body: UsersRequest, engine: Engine) -> dict[str, Any]:
    """The scheduled close now: idle conversations end, days that are over get their final summary."""
    return to_jsonable(engine.finalize_days(body.user_id))  # type: ignore[no-any-return]


@router.post("/conversations/list")
def list_conversations(body: ListConversationsRequest, engine: Engine) -> list[ConversationOut]:
    """The user's latest conversations, newest first (records only)."""
    return out(list[ConversationOut], engine.list_conversations(body.user_id, **given(limit=body.limit)))


@router.post("/conversations/get")
def get_conversation(body: GetConversationRequest, engine: Engine) -> ConversationDetailOut:
    """One conversation: its record and all its messages."""
    return out(ConversationDetailOut, engine.get_conversation(body.user_id, body.conversation_id))


@router.post("/context/slice")
def request_context_slice(body: SliceRequest, engine: Engine) -> SliceOut:
    """Make the user's next /api/context/assemble use these messages instead of today's."""
    engine.request_context_slice(body.user_id, body.start_seq, body.end_seq)
    return SliceOut(start_seq=body.start_seq, end_seq=body.end_seq, note=SLICE_NOTE)


@router.post("/context/assemble")
def assemble_context(body: AssembleRequest, engine: Engine) -> PayloadOut:
    """The prompt block for the user's next model call: summaries plus today's turns, within budget."""
    return out(PayloadOut, engine.assemble_context(body.user_id, **given(max_tokens=body.max_tokens)))


@router.post("/index/status")
def index_status(body: UserRequest, engine: Engine) -> IndexStatusOut:
    """What the user's indexes hold and how many messages still wait for vectors."""
    engine.users(body.user_id)  # unknown user -> 404 (index_status alone answers with an empty shard)
    return out(IndexStatusOut, engine.index_status(body.user_id))


@router.post("/index")
def run_index(body: UsersRequest, engine: Engine) -> list[IndexReportOut]:
    """Incremental index: embed the messages that have no vector yet (one user, or every user)."""
    return out(list[IndexReportOut], engine.index(body.user_id))


@router.post("/reindex")
def run_reindex(body: UsersRequest, engine: Engine) -> list[IndexReportOut]:
    """Rebuild the indexes from the store and swap them in (one user, or every user)."""
    return out(list[IndexReportOut], engine.reindex(body.user_id))


@router.post("/users/list")
def list_users(body: UsersRequest, engine: Engine) -> list[str]:
    """User ids (or just the one given, which must exist)."""
    return engine.users(body.user_id)


@router.post("/users/describe")
def describe_users(engine: Engine, body: NoBody | None = None) -> list[UserOut]:
    """Every user with their time zone (what `convsearch users` prints); no body (or `{}`)."""
    return out(list[UserOut], list(engine.iter_users()))


@router.post("/stats")
def stats(body: UsersRequest, engine: Engine) -> dict[str, int]:
    """Counts of users, threads, messages, conversations, day segments and summaries (all, or one user's)."""
    return engine.stats(body.user_id)


@router.post("/delete")
def delete(body: DeleteRequest, engine: Engine) -> dict[str, Any]:
    """Delete messages, a conversation or a user everywhere (store, summaries, indexes, cache)."""
    return engine.delete(body.user_id, **body.model_dump(exclude={"user_id"}))


# Guards -----------------------------------------------------------------------------------------
class BodyLimit:
    """413 for a body over the limit: by Content-Length up front, else counted as it streams in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == UPLOAD_PATH:  # an upload has its own, larger cap
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._too_large(scope, receive, send)
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return None  # the client went away
            chunks.append(message.get("body", b""))
            size, more = size + len(chunks[-1]), message.get("more_body", False)
            if size > self.max_bytes:
                return await self._too_large(scope, receive, send)
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"request body is larger than {self.max_bytes} bytes (CONVSEARCH_MAX_BODY_BYTES): send less at once"
        await error_response(413, "body_too_large", message)(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _checks_itself(path: str) -> bool:
    """Paths the Auth middleware lets through: the web page reads its cookie; the docs page holds no data."""
    return is_web_path(path) or path == DOCS_PATH or path.startswith(STATIC_PREFIX)


# The app ----------------------------------------------------------------------------------------
def create_app(engine: ConversationEngine, *, host: str = "127.0.0.1", maintain: bool = True,
               url: str | None = None) -> FastAPI:
    """The HTTP app over one engine, with MCP at /mcp (the caller owns the engine and closes it).

    While the app runs (its lifespan), MCP sessions are served and the scheduled close runs every
    finalize_every_minutes; with `maintain`, the background step embeds what has no vector yet and
    saves changed shards (both: engine.surfaces.http.background); with `url`, the data directory's
    server.json says where the server listens (engine.surfaces.runtime)."""
    from engine.surfaces.mcp.http import McpSessions

    sessions = McpSessions(engine, host=host)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.scheduler = Scheduler(serving_jobs(engine, maintain=maintain), interrupt=engine.indexing_paused).start()
        try:
            async with sessions.running():
                with advertised(engine.home, url) if url else nullcontext():
                    yield
        finally:
            await run_in_threadpool(app.state.scheduler.stop)

    token = engine.settings.api_token
    app = FastAPI(title="convsearch", version="0.1.0", description=(__doc__ or "").strip(), lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    add_docs_page(app, needs_token=bool(token))
    app.state.engine = engine
    # Documents the bearer scheme in /openapi.json; Auth does the checking.
    dependencies = [Security(HTTPBearer(auto_error=False))] if token else []
    app.include_router(router, dependencies=dependencies)
    app.include_router(upload_router, prefix="/api", dependencies=dependencies, responses=ERRORS)
    app.include_router(open_router)
    mount_web(app)  # the web page at / (engine.surfaces.web)
    app.router.routes.append(Route(MCP_PATH, endpoint=sessions, methods=["GET", "POST", "DELETE"],
                                   include_in_schema=False))
    add_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=engine.settings.max_body_bytes)
    # outermost: no body is read before the caller is known
    app.add_middleware(Auth, settings=engine.settings, checks_itself=_checks_itself)
    if not token and (hosts := allowed_hosts(host)) is not None:
        app.add_middleware(HostGuard, hosts=hosts)  # no token: only Host headers naming the bound address
    return app
