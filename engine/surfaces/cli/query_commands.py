"""Query commands: search, get, navigation, summaries, conversations, context and index status.

Each handler is a few lines over ConversationEngine. Options left out take the engine's defaults
(`given`), so the CLI, HTTP and MCP surfaces can never disagree on them. With `--format table`,
message records are cut to the columns people scan and search score parts become columns.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from engine.surfaces.cli.common import open_engine
from engine.surfaces.http.schemas import given, substring_matches
from engine.surfaces.serialize import to_jsonable

__all__ = ["register", "for_people"]

Handler = Callable[[argparse.Namespace], Any]
MESSAGE_COLUMNS = ("seq", "created_at", "role", "speaker", "message_id", "content")


def register(sub: argparse._SubParsersAction) -> None:
    _search_parsers(sub)
    _navigation_parsers(sub)
    _summary_parsers(sub)


def _command(sub: argparse._SubParsersAction, name: str, handler: Handler, help_text: str, *,
             thread: bool = False) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--user", required=True, help="the user whose history to use")
    if thread:
        p.add_argument("--thread", help="thread id, as `convsearch threads` lists them (default: the continuous one)")
    p.set_defaults(handler=_shown(handler))
    return p


def _search_parsers(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, "search", search, "hybrid search of a user's messages and summaries")
    p.add_argument("query", help="what to look for, in words")
    p.add_argument("--limit", type=int, help="results, 1 to 20 (default 6)")
    p.add_argument("--day", help="only this calendar day (YYYY-MM-DD, the user's zone)")
    p.add_argument("--recency-days", type=float, help="only the last N days")
    p.add_argument("--start", help="only at or after this ISO 8601 time (naive = user's zone)")
    p.add_argument("--end", help="only before this ISO 8601 time (naive = user's zone)")
    p.add_argument("--explain", action="store_true", default=None, help="show each result's score parts")
    p.add_argument("--min-score", type=float, help="drop results scoring below this (0 to 1)")
    p.add_argument("--fusion", choices=("weighted", "rrf"), help="how vector and keyword scores combine "
                   "(default: CONVSEARCH_FUSION)")

    p = _command(sub, "grep", grep, "exact, case-insensitive substring search, oldest first", thread=True)
    p.add_argument("text", help="literal text to find (no wildcards or regex)")
    p.add_argument("--limit", type=int, help="at most this many matches (default 50)")

    p = _command(sub, "get", get, "a message, a day (summary and message ids), or a range of a day")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--message", help="message id")
    which.add_argument("--day", help="day segment id (as search results show it)")
    p.add_argument("--from", dest="from_id", help="with --day and --to: first message id of the range")
    p.add_argument("--to", dest="to_id", help="with --day and --from: last message id of the range (inclusive)")
    p.add_argument("--offset", type=int, help="with --message: its text from this character (long messages come "
                   "in parts; see content_truncated)")


def _navigation_parsers(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, "since", since, "every turn at or after a moment, and the summaries ending after it",
                 thread=True)
    p.add_argument("timestamp", help="ISO 8601 time (naive = user's zone)")
    p.add_argument("--limit", type=int, help="at most this many turns (default 1000)")
    p.add_argument("--from-seq", type=int, help="continue a truncated answer from this seq (its next_seq)")
    p.add_argument("--no-summaries", dest="include_summaries", action="store_false", default=None,
                   help="leave the summaries out")

    p = _command(sub, "around", around, "a window of turns before and after a moment", thread=True)
    p.add_argument("timestamp", help="ISO 8601 moment (naive = user's zone)")
    p.add_argument("--count", type=int, help="turns in the window (default 40)")
    p.add_argument("--before-ratio", type=float, help="share of the window before the moment, 0 to 1 (default 0.5)")

    p = _command(sub, "context", context, "recent turns verbatim, with summaries standing in for older ones",
                 thread=True)
    p.add_argument("--turns", type=int, help="messages' worth of context (default 40)")

    p = _command(sub, "range", messages_range, "turns with START <= seq < END", thread=True)
    p.add_argument("start", type=int, help="first seq")
    p.add_argument("end", type=int, help="end seq, exclusive")


def _summary_parsers(sub: argparse._SubParsersAction) -> None:
    # `summarize` (a range, a backfill, the scheduled close) lives in engine.surfaces.cli.summary_commands
    p = _command(sub, "conversations", conversations, "list recent conversations, or show one with --id")
    p.add_argument("--limit", type=int, help="how many to list, 1 to 100 (default 10)")
    p.add_argument("--id", dest="conversation_id", help="show this conversation and all its messages")

    p = _command(sub, "end", end, "end the open conversation now and summarise it")
    p.add_argument("--reason", help="why it ended (default 'explicit')")

    p = _command(sub, "assemble", assemble, "the context payload for the user's next model call")
    p.add_argument("--max-tokens", type=int, help="token budget (default: CONVSEARCH_CONVERSATION_MAX_CONTEXT_TOKENS "
                   "minus CONVSEARCH_CONVERSATION_RESERVED_TOKENS, 4000)")

    _command(sub, "status", status, "what the user's indexes hold and what still waits for vectors")
    _command(sub, "threads", threads, "the user's threads (continuous and imported), oldest first")


# Handlers -------------------------------------------------------------------------------------
def search(args: argparse.Namespace) -> Any:
    with open_engine(args) as engine:
        return engine.search(args.user, args.query, **given(
            limit=args.limit, day=args.day, recency_days=args.recency_days, start=args.start, end=args.end,
            explain=args.explain, min_score=args.min_score, fusion=args.fusion))


def grep(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        found = engine.substring_search(args.user, args.text, **given(limit=args.limit, thread_id=args.thread))
        return substring_matches(found)


def get(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        return engine.get(args.user, message_id=args.message, day_segment_id=args.day,
                          from_message_id=args.from_id, to_message_id=args.to_id, offset=args.offset)


def since(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        return engine.turns_since(args.user, args.timestamp, **given(
            limit=args.limit, from_seq=args.from_seq, include_summaries=args.include_summaries,
            thread_id=args.thread))


def around(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        return engine.turns_around(args.user, args.timestamp, **given(count=args.count, before_ratio=args.before_ratio,
                                                                      thread_id=args.thread))


def context(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        return engine.conversation_context(args.user, **given(turns=args.turns, thread_id=args.thread))


def messages_range(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        return engine.messages_range(args.user, args.start, args.end, **given(thread_id=args.thread))


def conversations(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        if args.conversation_id is not None:
            return engine.get_conversation(args.user, args.conversation_id)
        return engine.list_conversations(args.user, **given(limit=args.limit))


def end(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        return engine.end_conversation(args.user, **given(reason=args.reason))


def assemble(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        return engine.assemble_context(args.user, **given(max_tokens=args.max_tokens))


def status(args: argparse.Namespace) -> Any:
    with open_engine(args) as engine:
        engine.users(args.user)  # unknown user: an error, not an empty report
        return engine.index_status(args.user)


def threads(args: argparse.Namespace) -> Any:
    with open_engine(args, vectors=False) as engine:
        return engine.list_threads(args.user)


# Table output ---------------------------------------------------------------------------------
def _shown(handler: Handler) -> Handler:
    """The handler's result, reshaped for people when the output is a table."""

    def run(args: argparse.Namespace) -> Any:
        result = handler(args)
        return for_people(to_jsonable(result)) if args.format == "table" else result

    run.__name__ = handler.__name__
    return run


def for_people(data: Any) -> Any:
    """Message records cut to MESSAGE_COLUMNS; search hits as flat rows (score parts as columns)."""
    if isinstance(data, list):
        return [for_people(item) for item in data]
    if not isinstance(data, dict):
        return data
    if "message_id" in data and "content" in data:
        return {k: data[k] for k in MESSAGE_COLUMNS if k in data}
    if set(data) == {"offset", "message"}:
        return {"offset": data["offset"], **for_people(data["message"])}
    if "snippet" in data and "score" in data:
        return _hit_row(data)
    return {k: for_people(v) for k, v in data.items()}


def _hit_row(hit: dict[str, Any]) -> dict[str, Any]:
    row = {"score": round(hit["score"], 3), "kind": hit["kind"], "day": hit["day_label"],
           "cite": hit["message_id"] or hit["summary_id"]}
    parts = hit.get("parts")
    if parts:
        vector = parts["vector"]
        row |= {"vector": None if vector is None else round(vector, 3), "lexical": round(parts["lexical"], 3),
                "penalty": parts["penalty"], "fusion": parts["fusion"]}
    return row | {"snippet": hit["snippet"]}
