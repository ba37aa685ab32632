"""The store: users, threads and messages in one DuckDB file (messages are the source of truth).

Every read that takes a `user_id` is scoped to that user: an id of another user's thread or
message is answered exactly like an unknown id, so nothing leaks across tenants.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from engine.store.across_threads import AcrossThreads
from engine.store.checks import StoreChecks
from engine.store.db import Database, in_values
from engine.store.embedding_cache import EmbeddingCache
from engine.store.history import History
from engine.errors import InvalidInputError, UnknownMessageError, UnknownThreadError, UnknownUserError
from engine.models import Message, Thread, User
from engine.store.rows import (INDEXED_COLUMNS, MESSAGE_COLUMNS, aware, indexed_table, message_from_row, naive_utc,
                               thread_from_row, user_from_row)
from engine.store.timeline import Timeline
from engine.text_rules import id_problem
from engine.timeutil import utcnow, zone

__all__ = ["Store", "STORE_FILENAME", "continuous_thread_id", "taken_thread"]

STORE_FILENAME = "convsearch.duckdb"
TAIL_PROBE = 1024  # seqs below a thread's last one where `thread_tail` looks for its last time first
SHORT_RANGE_SEQS = 1024  # a range read as rows, not exported as Arrow: the export costs ~0.6 ms more a read
# ids a look-up statement takes: DuckDB holds the GIL while it takes a list parameter in (a million ids:
# 0.67 s at once), and another thread's statements wait for it; 65,536 hold it up to ~60 ms
IDS_A_STATEMENT = 65_536

_MESSAGE_SCHEMA = pa.schema([
    ("message_id", pa.string()), ("thread_id", pa.string()), ("user_id", pa.string()),
    ("seq", pa.int64()), ("role", pa.string()), ("content", pa.string()),
    ("created_at", pa.timestamp("us")), ("day_label", pa.date32()), ("conversation_id", pa.string()),
    ("speaker", pa.string()), ("tools_used", pa.list_(pa.string())), ("metadata", pa.string()),
    ("external_id", pa.string()), ("kind", pa.string()),
])


CONTINUOUS_SUFFIX = ":continuous"


def continuous_thread_id(user_id: str) -> str:
    """Each user has one continuous thread, addressable without a lookup; no other thread's id ends
    like one (ensure_threads), so no user can take another's."""
    return f"{user_id}{CONTINUOUS_SUFFIX}"


class Store:
    """Users, threads and messages; conversations, days and summaries live in `self.timeline`, the
    reads navigation and filters need in `self.history`, the doctor's checks in `self.checks`, the
    statements over many threads at once in `self.across`."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.db = Database(path)
        self.across = AcrossThreads(self.db)
        self.timeline = Timeline(self.db, self.across)
        self.history = History(self.db)
        self.checks = StoreChecks(self.db)
        self._users: dict[str, User] = {}  # users never change once created; deletion evicts

    def embedding_cache(self, model: str) -> EmbeddingCache:
        """The vectors `model` gave the users' windows and message lines, kept in this store's file (derived data)."""
        return EmbeddingCache(self.db, model)

    def summary_embedding_cache(self, model: str) -> EmbeddingCache:
        """The vectors `model` gave the users' summaries (a table of their own: loading them reads nothing else)."""
        return EmbeddingCache(self.db, model, "summary_embeddings")

    def release_buffers(self) -> None:
        """Let DuckDB drop the blocks it cached: after a one-off read of much of a table (`Database.release_buffers`)."""
        self.db.release_buffers()

    def transaction(self, *, beside_others: bool = False) -> AbstractContextManager[None]:
        """All-or-nothing: the writes inside commit together (nested calls join the outer one);
        `beside_others` as `Database.transaction` takes it (an import's)."""
        return self.db.transaction(beside_others=beside_others)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Users -----------------------------------------------------------------------------------
    def ensure_user(self, user_id: str, timezone: str | None = None) -> User:
        """The user, created with `timezone` (default UTC) when new; an existing user keeps its zone."""
        _check_id("user_id", user_id)
        if timezone is not None:
            zone(timezone)
        # one statement: two requests adding the same new user at once both get it (a check, then an
        # insert, let the second fail on the key)
        self.db.execute("INSERT OR IGNORE INTO users VALUES (?, ?, ?)", [user_id, timezone or "UTC", naive_utc(utcnow())])
        return self.get_user(user_id)

    def get_user(self, user_id: str) -> User:
        if not isinstance(user_id, str):
            raise InvalidInputError(f"user_id must be a string, got {type(user_id).__name__}")
        if user_id in self._users:
            return self._users[user_id]
        rows = self.db.execute("SELECT user_id, timezone, created_at FROM users WHERE user_id = ?", [user_id])
        if not rows:
            raise UnknownUserError(f"unknown user {user_id!r}: add it first (add_user, POST /api/users, or "
                                   "`convsearch ingest FILE --user`)")
        user = user_from_row(rows[0])
        if not self.db.in_transaction():  # one an import creates is not there if the import rolls back
            self._users[user_id] = user
        return user

    def delete_user(self, user_id: str) -> int:
        """Every row of the user in every table, the embedding cache included, in one transaction;
        returns how many messages went."""
        count = int(self.db.execute("SELECT count(*) FROM messages WHERE user_id = ?", [user_id])[0][0])
        with self.db.transaction():
            for table in ("messages", "summaries", "day_segments", "conversations", "threads", "embedding_cache",
                          "summary_embeddings", "users"):
                self.db.execute(f"DELETE FROM {table} WHERE user_id = ?", [user_id])
        self.timeline.summaries_changed(user_id)
        self._users.pop(user_id, None)
        return count

    def list_users(self) -> list[User]:
        return [user_from_row(r) for r in self.db.execute("SELECT user_id, timezone, created_at FROM users ORDER BY user_id")]

    # Threads ---------------------------------------------------------------------------------
    def continuous_thread(self, user_id: str) -> Thread:
        """The user's one continuous thread, created on first use."""
        self.get_user(user_id)
        thread_id = continuous_thread_id(user_id)
        rows = self._thread_rows(thread_id)
        if rows:  # one query on the live path
            thread = thread_from_row(rows[0])
            if thread.user_id != user_id:  # made by an import before such ids were refused
                raise InvalidInputError(f"thread {thread_id!r} belongs to user {thread.user_id!r}: export and delete "
                                        "that user's thread, then send this user's messages again")
            return thread
        self.db.execute("INSERT INTO threads (thread_id, user_id, mode, title, created_at) "
                        "VALUES (?, ?, 'continuous', NULL, ?)", [thread_id, user_id, naive_utc(utcnow())])
        return self.get_thread(thread_id, user_id=user_id)

    def ensure_thread(self, user_id: str, thread_id: str, *, title: str | None = None) -> Thread:
        """A plain (non-continuous) thread of the user, created when new."""
        if self.ensure_threads(user_id, {thread_id: title}):
            raise InvalidInputError(taken_thread(thread_id))
        return self.get_thread(thread_id, user_id=user_id)

    def ensure_threads(self, user_id: str, titles: Mapping[str, str | None]) -> list[str]:
        """`ensure_thread` for many (thread -> title) in one query and one insert; returns those
        that are another user's, left as they are (the caller says which record asked for them)."""
        for thread_id in titles:
            _check_id("thread_id", thread_id)
            if thread_id.endswith(CONTINUOUS_SUFFIX):
                raise InvalidInputError(f"thread id {thread_id[:80]!r} ends in {CONTINUOUS_SUFFIX!r}, which names a "
                                        "user's continuous thread: leave thread_id out for the user's own, or choose "
                                        "another id")
        self.get_user(user_id)
        owners = self.across.owners(list(titles)) if titles else {}
        new = [thread_id for thread_id in titles if thread_id not in owners]
        now = naive_utc(utcnow())
        self.db.insert_arrow("threads", pa.table({
            "thread_id": pa.array(new, pa.string()), "user_id": pa.array([user_id] * len(new), pa.string()),
            "mode": pa.array(["thread"] * len(new), pa.string()), "title": pa.array([titles[t] for t in new], pa.string()),
            "created_at": pa.array([now] * len(new), pa.timestamp("us"))}))
        return [thread_id for thread_id, owner in owners.items() if owner != user_id]

    def get_thread(self, thread_id: str, *, user_id: str | None = None) -> Thread:
        rows = self._thread_rows(thread_id)
        if not rows or (user_id is not None and rows[0][1] != user_id):
            raise _unknown_thread(thread_id)
        return thread_from_row(rows[0])

    def check_threads(self, user_id: str, thread_ids: Sequence[str]) -> None:
        """UnknownThreadError unless every one of these is a thread of the user (one query for many)."""
        if len(thread_ids) == 1:
            self.get_thread(thread_ids[0], user_id=user_id)
        elif thread_ids:
            owners = self.across.owners(thread_ids)
            for thread_id in thread_ids:
                if owners.get(thread_id) != user_id:
                    raise _unknown_thread(thread_id)

    def _thread_rows(self, thread_id: str) -> list[tuple]:
        return self.db.execute("SELECT thread_id, user_id, mode, title, created_at FROM threads WHERE thread_id = ?",
                               [thread_id])

    def last_seqs(self, user_id: str) -> dict[str, int]:
        """Each thread of the user (in `threads_of`'s order) with the highest seq it ever gave, in
        one query: what the indexes ask after every ingest."""
        rows = self.db.execute("SELECT thread_id, last_seq, created_at FROM threads WHERE user_id = ?", [user_id])
        rows.sort(key=lambda row: (row[2], row[0]))  # threads_of's ORDER BY, here: the SQL sort cost 0.4 ms more
        return {thread_id: int(last_seq or 0) for thread_id, last_seq, _ in rows}

    def last_turn_seqs(self, user_id: str) -> dict[str, int]:
        """Each thread of the user holding a turn, with the seq of its last one: how far an index must reach
        (windows hold turns; the engine's notes after them add none)."""
        rows = self.db.execute("SELECT thread_id, max(seq) FROM messages WHERE user_id = ? AND kind = 'turn' "
                               "GROUP BY thread_id", [user_id])
        return {thread_id: int(seq) for thread_id, seq in rows}

    def threads_of(self, user_id: str) -> list[Thread]:
        rows = self.db.execute(
            "SELECT thread_id, user_id, mode, title, created_at FROM threads WHERE user_id = ? ORDER BY created_at, thread_id",
            [user_id],
        )
        return [thread_from_row(r) for r in rows]

    def thread_tail(self, thread_id: str) -> tuple[int, datetime | None]:
        """(highest seq ever given, last created_at) of the thread; (0, None) when empty.

        Times never decrease along seq (threads are appended in time order), so the last time is
        among the latest seqs: asked there first, DuckDB's zone maps skip the rest of the table
        (0.75 ms instead of 15 ms at 300k messages); the whole thread only when those were deleted."""
        rows = self.db.execute("SELECT last_seq FROM threads WHERE thread_id = ?", [thread_id])
        if not rows:
            return 0, None
        last_seq = int(rows[0][0] or 0)
        recent = self.db.execute("SELECT max(created_at) FROM messages WHERE thread_id = ? AND seq >= ?",
                                 [thread_id, last_seq - TAIL_PROBE])[0][0]
        if recent is None and last_seq > TAIL_PROBE:
            recent = self.db.execute("SELECT max(created_at) FROM messages WHERE thread_id = ?", [thread_id])[0][0]
        return last_seq, recent

    def thread_tails(self, thread_ids: Sequence[str]) -> dict[str, tuple[int, datetime | None]]:
        """`thread_tail` of each of these threads, the time aware UTC; many in one query."""
        if len(thread_ids) != 1:
            return self.across.tails(thread_ids) if thread_ids else {}
        last_seq, at = self.thread_tail(thread_ids[0])
        return {thread_ids[0]: (last_seq, aware(at))}

    def advance_thread(self, thread_id: str, last_seq: int) -> None:
        self.db.execute("UPDATE threads SET last_seq = greatest(last_seq, ?) WHERE thread_id = ?", [last_seq, thread_id])

    def advance_threads(self, last_seqs: Mapping[str, int]) -> None:
        """`advance_thread` for each thread; many in one statement."""
        if len(last_seqs) == 1:
            [(thread_id, last_seq)] = last_seqs.items()
            self.advance_thread(thread_id, last_seq)
        elif last_seqs:
            self.across.advance(last_seqs)

    # Messages --------------------------------------------------------------------------------
    def insert_messages(self, messages: Sequence[Message]) -> None:
        """Append a batch in one Arrow insert (callers hold the transaction)."""
        plain = ("message_id", "thread_id", "user_id", "seq", "role", "content", "day_label", "conversation_id",
                 "speaker", "external_id", "kind")  # stored as they are
        try:  # a column at a time (100k messages: 0.34-0.43 s, where building rows field by field took 0.51)
            columns: dict[str, list[Any]] = {name: [getattr(m, name) for m in messages] for name in plain}
            columns["created_at"] = [naive_utc(m.created_at) for m in messages]
            columns["tools_used"] = [list(m.tools_used) for m in messages]
            columns["metadata"] = [json.dumps(dict(m.metadata), ensure_ascii=False, default=str) if m.metadata else None
                                   for m in messages]
            table = pa.table(columns, schema=_MESSAGE_SCHEMA)
        except (TypeError, ValueError, pa.ArrowException) as exc:  # UnicodeEncodeError is a ValueError
            # a field of the wrong type (a number as speaker) or text that is not Unicode (a lone surrogate)
            raise InvalidInputError(f"a message field cannot be stored ({str(exc)[:200]}): fields must be strings "
                                    "of valid Unicode, tools_used a list of names, metadata an object") from None
        self.db.insert_arrow("messages", table)

    def get_message(self, message_id: str, *, user_id: str | None = None) -> Message:
        rows = self.db.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_id = ?", [message_id])
        if not rows or (user_id is not None and rows[0][2] != user_id):
            raise UnknownMessageError(f"unknown message {message_id!r}: message ids come from search results")
        return message_from_row(rows[0])

    def message_ids_of_conversation(self, user_id: str, conversation_id: str) -> list[str]:
        rows = self.db.execute(
            "SELECT message_id FROM messages WHERE conversation_id = ? AND user_id = ?", [conversation_id, user_id])
        return [r[0] for r in rows]

    def messages_by_ids(self, message_ids: Sequence[str], *, user_id: str) -> list[Message]:
        """The user's messages among `message_ids`, in thread and seq order (unknown ids skipped)."""
        rows = self.db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE user_id = ? AND list_contains(?, message_id) ORDER BY thread_id, seq",
            [user_id, list(message_ids)],
        )
        return [message_from_row(r) for r in rows]

    def message_metadata(self, user_id: str) -> pa.Table:
        """What a search shows of each of the user's messages, without their text: one query, as Arrow
        (the shard's message table loads it vectorised). created_at stays naive UTC, as stored."""
        return self.db.fetch_arrow(
            "SELECT thread_id, seq, message_id, created_at, day_label, conversation_id, role, speaker, tools_used "
            "FROM messages WHERE user_id = ?", [user_id])

    def messages_arrow(self, user_id: str) -> pa.Table:
        """Every message of the user, by thread and seq, as one Arrow table: what a distributed
        reindex reads once and ships to workers that never open the store (`rows.messages_from_arrow`)."""
        return self.db.fetch_arrow(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE user_id = ? ORDER BY thread_id, seq", [user_id])

    def messages_in_range(self, thread_id: str, start_seq: int, end_seq: int | None = None, *,
                          limit: int | None = None, include_notes: bool = True) -> list[Message]:
        """Messages with start_seq <= seq < end_seq (end None: to the end), in order."""
        sql = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND seq >= ?"
        params: list[object] = [thread_id, start_seq]
        if end_seq is not None:
            sql += " AND seq < ?"
            params.append(end_seq)
        if not include_notes:
            sql += " AND kind = 'turn'"
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [message_from_row(r) for r in self.db.execute(sql, params)]

    def messages_in_ranges(self, ranges: Mapping[str, tuple[int, int]], *,
                           include_notes: bool = True) -> dict[str, list[Message]]:
        """`messages_in_range` of each thread (thread -> (lo, hi), hi included); many in one query,
        one alone as `messages_in_range` reads it (DuckDB's zone maps narrow `thread_id = ?`)."""
        if len(ranges) != 1:
            return self.across.messages(ranges, include_notes=include_notes) if ranges else {}
        [(thread_id, (lo, hi))] = ranges.items()
        return {thread_id: self.messages_in_range(thread_id, lo, hi + 1, include_notes=include_notes)}

    def indexed_in_ranges(self, ranges: Mapping[str, tuple[int, int]]) -> pa.Table:
        """`messages_in_ranges` as one Arrow table of INDEXED_COLUMNS by thread and seq: an index catching
        up on 100k messages spent ~0.9 s making Message objects, ~0.1 s reading this. A short range
        (the live path's) is fetched as rows (`indexed_table`)."""
        if len(ranges) != 1:
            return self.across.indexed(ranges)
        [(thread_id, (lo, hi))] = ranges.items()
        sql = f"SELECT {INDEXED_COLUMNS} FROM messages WHERE thread_id = ? AND seq >= ? AND seq <= ? ORDER BY seq"
        if hi - lo < SHORT_RANGE_SEQS:
            return indexed_table(self.db.execute(sql, [thread_id, lo, hi]))
        return self.db.fetch_arrow(sql, [thread_id, lo, hi])

    def turn_seqs_in_ranges(self, ranges: Mapping[str, tuple[int, int]]) -> dict[str, list[int]]:
        """Each thread's turn seqs (no notes) with lo <= seq <= hi, in order: whether a day holds turns,
        without reading them. Many threads in one query, one alone by `thread_id = ?`, as
        `messages_in_ranges` chooses."""
        if len(ranges) != 1:
            return self.across.turn_seqs(ranges) if ranges else {}
        [(thread_id, (lo, hi))] = ranges.items()
        rows = self.db.execute("SELECT seq FROM messages WHERE thread_id = ? AND seq >= ? AND seq <= ? AND kind = 'turn' "
                               "ORDER BY seq", [thread_id, lo, hi])
        return {thread_id: [seq for seq, in rows]}

    def substring_search(self, thread_id: str, needle: str, *, limit: int = 100) -> list[Message]:
        """Case-insensitive substring match; the needle is a parameter, never a pattern."""
        rows = self.db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND strpos(lower(content), lower(?)) > 0 "
            "ORDER BY seq LIMIT ?",
            [thread_id, needle, limit],
        )
        return [message_from_row(r) for r in rows]

    def existing_message_ids(self, message_ids: Iterable[str]) -> dict[str, str]:
        """message_id -> user_id for the ids already stored, IDS_A_STATEMENT ids a statement."""
        ids = list(message_ids)
        found: dict[str, str] = {}
        for start in range(0, len(ids), IDS_A_STATEMENT):
            among, values = in_values("message_id", ids[start:start + IDS_A_STATEMENT])  # many: a semi-join
            found.update(self.db.execute(f"SELECT message_id, user_id FROM messages WHERE {among}", values))
        return found

    def stored_contents(self, thread_id: str, message_ids: Sequence[str],
                        external_ids: Sequence[str]) -> dict[str, tuple[str, int, str]]:
        """message_id and external_id -> (message_id, seq, content) of the thread's messages among those ids."""
        rows = self.db.execute(
            "SELECT message_id, external_id, seq, content FROM messages WHERE thread_id = ? "
            "AND (list_contains(?, message_id) OR list_contains(?, external_id))",
            [thread_id, list(message_ids), list(external_ids)])
        found: dict[str, tuple[str, int, str]] = {}
        for message_id, external_id, seq, content in rows:
            found[message_id] = (message_id, int(seq), content)
            if external_id:
                found[external_id] = (message_id, int(seq), content)
        return found

    def replace_content(self, message_id: str, content: str) -> None:
        """A re-imported message's new text (same id, seq and time); the caller re-indexes it."""
        self.db.execute("UPDATE messages SET content = ? WHERE message_id = ?", [content, message_id])

    def existing_external_ids(self, external_ids: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
        """thread -> those of its `external_ids` already stored in it; many threads in one query."""
        asked = {thread_id: list(ids) for thread_id, ids in external_ids.items() if ids}
        if len(asked) > 1:
            return self.across.external_ids(asked)
        found: dict[str, set[str]] = {}
        for thread_id, ids in asked.items():
            rows = self.db.execute("SELECT external_id FROM messages WHERE thread_id = ? AND list_contains(?, external_id)",
                                   [thread_id, ids])
            found[thread_id] = {r[0] for r in rows}
        return found

    def delete_messages(self, message_ids: Sequence[str]) -> None:
        """Remove messages (callers also fix derived records: see engine.maintenance.deletion)."""
        if message_ids:
            self.db.execute("DELETE FROM messages WHERE list_contains(?, message_id)", [list(message_ids)])

    # Stats -----------------------------------------------------------------------------------
    def message_count(self, thread_id: str) -> int:
        """Turns stored in the thread (engine notes not counted)."""
        rows = self.db.execute("SELECT count(*) FROM messages WHERE thread_id = ? AND kind = 'turn'", [thread_id])
        return int(rows[0][0])

    def stats(self, user_id: str | None = None) -> dict[str, int]:
        """Row counts per table, optionally for one user."""
        counts: dict[str, int] = {}
        for table in ("users", "threads", "messages", "conversations", "day_segments", "summaries"):
            if user_id is None:
                counts[table] = int(self.db.execute(f"SELECT count(*) FROM {table}")[0][0])
            else:
                counts[table] = int(self.db.execute(f"SELECT count(*) FROM {table} WHERE user_id = ?", [user_id])[0][0])
        return counts


def taken_thread(thread_id: str) -> str:
    """Why a thread id another user has cannot be used."""
    return f"thread id {thread_id!r} is taken: choose another thread id"


def _unknown_thread(thread_id: str) -> UnknownThreadError:
    return UnknownThreadError(f"unknown thread {thread_id!r}: list the user's threads with list_threads, "
                               "`convsearch threads --user USER` or POST /api/threads")


def _check_id(name: str, value: object) -> None:
    problem = id_problem(name, value)
    if problem:
        raise InvalidInputError(problem)
