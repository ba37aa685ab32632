"""The facade's calls over HTTP, for every client of a data directory that a server owns.

DuckDB lets one process write a store, so while `convsearch serve` runs (engine.surfaces.runtime says
where), the CLI and `convsearch mcp` send their calls to it. `RemoteEngine` offers the calls they
make, with ConversationEngine's names and arguments, each one POST to the server's /api. Results
come back as the documented JSON, which callers print or validate just as they do the engine's
records; errors come back as the same ConvsearchError subclasses, with the server's message.
"""

from __future__ import annotations

import time
from datetime import date, datetime
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

import httpx

from engine.config import Settings
from engine.errors import ConvsearchError, InvalidInputError, ServerUnavailableError
from engine.models import NewMessage
from engine.query.navigation_results import (AROUND_BEFORE_RATIO, AROUND_COUNT, CONTEXT_TURNS, SINCE_LIMIT, SUBSTRING_LIMIT)
from engine.query.search_types import DEFAULT_LIMIT, KINDS, SearchMode
from engine.surfaces.runtime import running_server
from engine.surfaces.serialize import to_jsonable

T = TypeVar("T")

__all__ = ["RemoteEngine", "connect"]

QUICK_S = 300.0  # every call but index, reindex and import, which run as long as they need
STARTING_S = 20.0  # how long a server that holds the store may take to say where it listens


def connect(home: Path, open_store: Callable[[], T]) -> T | "RemoteEngine":
    """The server that owns `home` when one runs (waiting while it starts), else `open_store()`."""
    deadline = time.monotonic() + STARTING_S
    while (server := running_server(home)) is not None and server.url is None:
        if time.monotonic() > deadline:
            raise ServerUnavailableError(f"the convsearch server (pid {server.pid}) of {home} is still starting "
                                         f"after {STARTING_S:.0f} s: check its log")
        time.sleep(0.1)
    return RemoteEngine(server.url) if server is not None and server.url else open_store()


def _error_classes(base: type[ConvsearchError] = ConvsearchError) -> dict[str, type[ConvsearchError]]:
    found = {base.code: base}
    for sub in base.__subclasses__():
        found.update(_error_classes(sub))
    return found


def _given(**options: Any) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, (date, datetime)) else v) for k, v in options.items() if v is not None}


def _message(item: NewMessage | Mapping[str, Any]) -> dict[str, Any]:
    """A message as the HTTP API takes it: a record's fields that are set (turns only), or the caller's dict."""
    if not isinstance(item, NewMessage):
        return dict(item)
    if item.kind != "turn":
        raise InvalidInputError(f"only turns are ingested over HTTP, not {item.kind!r} messages")
    return {k: v for k, v in to_jsonable(item).items() if k != "kind" and v not in (None, [], {})}


def _local_only(option: str, value: object) -> None:
    """An option the HTTP API does not take: refused, not dropped, so no call silently means another."""
    if value is not None:
        raise InvalidInputError(f"{option} is not offered over HTTP: leave it out, or stop the server and use the "
                                "store directly")


class RemoteEngine:
    """The calls of ConversationEngine that surfaces make, answered by the server at `url`."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.settings = settings or Settings()
        token = self.settings.api_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=url.rstrip("/") + "/api", headers=headers, timeout=QUICK_S)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "RemoteEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, path: str, body: dict[str, Any] | None = None, **request: Any) -> Any:
        try:
            response = self._client.post(path, json=body, **request) if body is not None else \
                self._client.post(path, **request)
        except httpx.HTTPError as exc:
            raise ServerUnavailableError(
                f"the convsearch server at {self.url} owns this data directory but did not answer "
                f"({type(exc).__name__}: {exc}); check it, or stop it to use the store directly") from None
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                code, message = str(error["code"]), str(error["message"])
            except (ValueError, KeyError, TypeError):
                code, message = "error", f"the server answered HTTP {response.status_code}: {response.text[:200]}"
            raise _error_classes().get(code, ConvsearchError)(message)
        return response.json()

    # Users, ingest, indexes --------------------------------------------------------------------
    def users(self, user_id: str | None = None) -> list[str]:
        return self._call("/users/list", _given(user_id=user_id))  # type: ignore[no-any-return]

    def iter_users(self) -> list[Any]:
        return self._call("/users/describe")  # type: ignore[no-any-return]

    def list_threads(self, user_id: str) -> list[Any]:
        return self._call("/threads", {"user_id": user_id})  # type: ignore[no-any-return]

    def add_user(self, user_id: str, timezone: str | None = None) -> Any:
        return self._call("/users", _given(user_id=user_id, timezone=timezone))

    def ingest(self, user_id: str, messages: Sequence[NewMessage | Mapping[str, Any]], *, thread_id: str | None = None,
               index: bool = True) -> Any:
        body = _given(user_id=user_id, messages=[_message(m) for m in messages], thread_id=thread_id, index=index)
        return self._call("/messages", body)

    def import_file(self, path: str | Path, *, fmt: str, user_id: str | None = None, timezone: str | None = None,
                    skip_bad: bool = False, progress: bool = False, update: bool = False) -> Any:
        """The file goes up as the request body; the report names the local path, as a local import does."""
        params = _given(format=fmt, user_id=user_id, timezone=timezone, skip_bad=skip_bad, update=update,
                        suffix=Path(path).name)
        try:
            with open(path, "rb") as handle:
                report = self._call("/import", content=handle, params=params, timeout=None)
        except OSError as exc:
            raise ConvsearchError(f"cannot use the file {str(path)[:200]!r}: {exc.strerror or exc}") from None
        return {**report, "path": str(path)}

    def index(self, user_id: str | None = None, *, progress: Callable[[int, int], None] | None = None) -> Any:
        return self._call("/index", _given(user_id=user_id), timeout=None)

    def reindex(self, user_id: str | None = None, *, progress: Callable[[int, int], None] | None = None) -> Any:
        return self._call("/reindex", _given(user_id=user_id), timeout=None)

    def index_status(self, user_id: str) -> Any:
        return self._call("/index/status", {"user_id": user_id})

    def stats(self, user_id: str | None = None) -> Any:
        return self._call("/stats", _given(user_id=user_id))

    def delete(self, user_id: str, *, message_ids: Sequence[str] | None = None, conversation_id: str | None = None,
               all_of_user: bool = False) -> Any:
        return self._call("/delete", _given(user_id=user_id, message_ids=None if message_ids is None else list(message_ids),
                                            conversation_id=conversation_id, all_of_user=all_of_user))

    # Search and navigation -----------------------------------------------------------------------
    def search(self, user_id: str, query: str, *, day: str | date | None = None, recency_days: float | None = None,
               start: str | datetime | None = None, end: str | datetime | None = None, limit: int = DEFAULT_LIMIT,
               min_score: float | None = None, kinds: Sequence[str] = KINDS, explain: bool = False,
               mode: SearchMode | None = None, fusion: str | None = None) -> Any:
        _local_only("mode", mode)
        return self._call("/conversation/search", _given(
            user_id=user_id, query=query, day=day, recency_days=recency_days, start=start, end=end, limit=limit,
            min_score=min_score, kinds=list(kinds), explain=explain, fusion=fusion))

    def get(self, user_id: str, *, message_id: str | None = None, day_segment_id: str | None = None,
            from_message_id: str | None = None, to_message_id: str | None = None, offset: int | None = None) -> Any:
        return self._call("/conversation/get", _given(
            user_id=user_id, message_id=message_id, day_segment_id=day_segment_id, from_message_id=from_message_id,
            to_message_id=to_message_id, offset=offset))

    def turns_since(self, user_id: str, timestamp: str | datetime, *, include_summaries: bool = True,
                    limit: int = SINCE_LIMIT, from_seq: int | None = None, thread_id: str | None = None) -> Any:
        return self._call("/get_turns_since", _given(user_id=user_id, timestamp=timestamp, include_summaries=include_summaries,
                                                     limit=limit, from_seq=from_seq, thread_id=thread_id))

    def turns_around(self, user_id: str, timestamp: str | datetime, *, count: int = AROUND_COUNT,
                     before_ratio: float = AROUND_BEFORE_RATIO, thread_id: str | None = None) -> Any:
        return self._call("/get_turns_around", _given(user_id=user_id, timestamp=timestamp, count=count,
                                                      before_ratio=before_ratio, thread_id=thread_id))

    def conversation_context(self, user_id: str, turns: int = CONTEXT_TURNS, *, thread_id: str | None = None) -> Any:
        return self._call("/get_conversation_context", _given(user_id=user_id, turns=turns, thread_id=thread_id))

    def messages_range(self, user_id: str, start_seq: int, end_seq: int, *, thread_id: str | None = None) -> Any:
        return self._call("/messages/range", _given(user_id=user_id, start_seq=start_seq, end_seq=end_seq,
                                                    thread_id=thread_id))

    def substring_search(self, user_id: str, text: str, *, limit: int = SUBSTRING_LIMIT,
                         thread_id: str | None = None) -> list[tuple[int, Any]]:
        found = self._call("/search_session_history", _given(user_id=user_id, text=text, limit=limit,
                                                             thread_id=thread_id))
        return [(match["offset"], match["message"]) for match in found]

    # Summaries, conversations, context ---------------------------------------------------------
    def summarize_range(self, user_id: str, start_seq: int, end_seq: int, *, thread_id: str | None = None) -> Any:
        return self._call("/summarize_range", _given(user_id=user_id, start_seq=start_seq, end_seq=end_seq,
                                                     thread_id=thread_id))

    def summarize(self, user_id: str | None = None, *, since: str | None = None) -> Any:
        return self._call("/summarize", _given(user_id=user_id, since=since), timeout=None)

    def finalize_days(self, user_id: str | None = None, *, now: datetime | None = None) -> Any:
        _local_only("now", now)  # the server closes days by its own clock
        return self._call("/summarize/finalize", _given(user_id=user_id), timeout=None)

    def regenerate_day_summary(self, user_id: str, day_label: str | date, *, thread_id: str | None = None) -> Any:
        day = day_label.isoformat() if isinstance(day_label, date) else day_label
        return self._call(f"/days/{day}/summary", _given(user_id=user_id, thread_id=thread_id))

    def list_conversations(self, user_id: str, limit: int = 10) -> Any:
        return self._call("/conversations/list", _given(user_id=user_id, limit=limit))

    def get_conversation(self, user_id: str, conversation_id: str) -> Any:
        return self._call("/conversations/get", {"user_id": user_id, "conversation_id": conversation_id})

    def end_conversation(self, user_id: str, reason: str = "explicit", *, thread_id: str | None = None) -> Any:
        return self._call("/conversation/end", _given(user_id=user_id, reason=reason, thread_id=thread_id))

    def request_context_slice(self, user_id: str, start_seq: int, end_seq: int) -> None:
        self._call("/context/slice", {"user_id": user_id, "start_seq": start_seq, "end_seq": end_seq})

    def assemble_context(self, user_id: str, *, max_tokens: int | None = None) -> Any:
        return self._call("/context/assemble", _given(user_id=user_id, max_tokens=max_tokens))
