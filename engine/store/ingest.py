"""Appending messages to threads: ids, order, seq, day segments and conversations, atomically.

Threads are append-only in time: a message older than the thread's last one is refused with
OutOfOrderError (importers sort each file by time first). Refusing keeps `seq` dense and in
time order, so ranges, windows and chunk ids never shift under existing indexes. Batches of many
threads go in together (`append`): each statement costs DuckDB a millisecond or more, so an import
of a chat export (thousands of short threads) asked thread by thread ran at ~100 messages/s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Callable, Mapping, Sequence
from zoneinfo import ZoneInfo

from engine.config import Settings, default
from engine.errors import InvalidInputError, InvalidTimestampError
from engine.models import ROLES, IngestResult, Message, NewMessage
from engine.store.core import Store
from engine.store.placing import Placement, check_order, day_spans, in_repeated_hour, place, within_skew
from engine.text_rules import id_problem, surrogate_problem
from engine.timeutil import message_time_problem, second_reading, to_utc, utcnow, zone

__all__ = ["Ingestor", "Append", "MAX_MESSAGE_CHARS", "message_problem"]

MAX_MESSAGE_CHARS = 8 * 1024 * 1024  # a 1 MB message is stored intact; 8 MB is a sign of a mistake


@dataclass(frozen=True, slots=True)
class Append:
    """Messages (oldest first) for one of a user's threads (None: the continuous one).
    `as_conversation` (a title) puts them all into one new, ended conversation whatever the gaps
    between them: how imported histories keep their shape."""

    messages: Sequence[NewMessage]
    thread_id: str | None = None
    as_conversation: str | None = None


class Ingestor:
    def __init__(self, store: Store, *, idle_timeout: timedelta, clock: Callable[[], datetime] = utcnow,
                 future_tolerance: timedelta = timedelta(hours=default("future_tolerance_hours")),
                 clock_skew: timedelta = timedelta(seconds=default("clock_skew_seconds"))) -> None:
        self.store = store
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.future_tolerance = future_tolerance
        self.clock_skew = clock_skew  # how much older than the message before it a message may be (`within_skew`)
        self.on_stored: Callable[[Sequence[Message]], None] | None = None  # told each batch stored, in its transaction

    @classmethod
    def of(cls, store: Store, settings: Settings, clock: Callable[[], datetime] = utcnow) -> Ingestor:
        """The ingestor these settings describe: the engine's, and a summary service's own."""
        return cls(store, idle_timeout=timedelta(minutes=settings.idle_timeout_minutes), clock=clock,
                   future_tolerance=timedelta(hours=settings.future_tolerance_hours),
                   clock_skew=timedelta(seconds=settings.clock_skew_seconds))

    def time_problem(self, moment: datetime) -> str | None:
        """Why an aware UTC message time cannot be stored now (None when it can)."""
        return message_time_problem(moment, self.clock(), self.future_tolerance)

    def add_messages(self, user_id: str, messages: Sequence[NewMessage], *, thread_id: str | None = None,
                     as_conversation: str | None = None) -> IngestResult:
        """Append `messages` (oldest first) to the user's thread (default: the continuous one); see `Append`."""
        return self.append(user_id, [Append(messages, thread_id, as_conversation)])[0]

    def append(self, user_id: str, appends: Sequence[Append]) -> list[IngestResult]:
        """Batches for several of the user's threads (each thread once), all or nothing: every
        batch is checked before anything is written, and the threads share each statement."""
        checked = [[_validated(m, i) for i, m in enumerate(a.messages)] for a in appends]
        tz = zone(self.store.get_user(user_id).timezone)
        now = self.clock()
        checked, second = self._all_in_utc(checked, tz, now)
        with self.store.db.transaction():
            thread_ids = self._thread_ids(user_id, appends)
            news = self._new_only(user_id, dict(zip(thread_ids, checked)))
            tails = self.store.thread_tails(thread_ids)
            latest = self.store.timeline.last_conversations(thread_ids)
            placements: list[Placement] = []
            for thread_id, append in zip(thread_ids, appends):
                last_seq, last_at = tails[thread_id]
                # no created_at: now, or the thread's last time when that is later (a clock a little ahead)
                default_at = max(now, last_at) if last_at is not None else now
                stamped = [m if m.created_at else replace(m, created_at=default_at) for m in news[thread_id][0]]
                stamped = within_skew(in_repeated_hour(stamped, last_at, second), last_at, self.clock_skew)
                check_order(stamped, last_at)
                placements.append(place(thread_id, user_id, stamped, last_seq, tz, latest.get(thread_id),
                                        self.idle_timeout, append.as_conversation is not None))
            opened = self._write(user_id, placements, [a.as_conversation for a in appends])
        return [IngestResult(
            thread_id=thread_id, inserted=tuple(m.message_id for m in p.messages), duplicates=tuple(news[thread_id][1]),
            first_seq=p.messages[0].seq if p.messages else None, last_seq=p.messages[-1].seq if p.messages else None,
            opened_days=tuple(day for t, day in opened if t == thread_id), ended_conversations=tuple(p.ended),
        ) for thread_id, p in zip(thread_ids, placements)]

    def add_notes(self, user_id: str, notes: Mapping[str, Sequence[str]]) -> None:
        """The engine's notes (thread -> texts) in one append, each stamped at its thread's last
        message so the time order holds; a note joins its thread's latest conversation."""
        notes = {thread_id: texts for thread_id, texts in notes.items() if texts}
        if notes:
            tails = self.store.thread_tails(list(notes))
            self.append(user_id, [Append([NewMessage(role="system", content=text, created_at=tails[thread_id][1],
                                                     kind="note") for text in texts], thread_id)
                                  for thread_id, texts in notes.items()])

    def _all_in_utc(self, batches: list[list[NewMessage]], tz: ZoneInfo, now: datetime
                    ) -> tuple[list[list[NewMessage]], dict[int, datetime]]:
        """Each batch's times in aware UTC (`_in_utc`), and for those read in the hour the zone
        repeats, its second pass (by the converted message's id(): placement may take it)."""
        second: dict[int, datetime] = {}
        out = []
        for batch in batches:
            converted = [self._in_utc(m, i, tz, now) for i, m in enumerate(batch)]
            for before, after in zip(batch, converted):
                later = second_reading(before.created_at, tz) if before.created_at is not None else None
                if later is not None:
                    second[id(after)] = later
            out.append(converted)
        return out, second

    def _in_utc(self, message: NewMessage, index: int, tz, now: datetime) -> NewMessage:
        """created_at in aware UTC (naive: the user's zone), refused when out of range."""
        if message.created_at is None:
            return message
        field = f"message {index}: created_at"
        at = to_utc(message.created_at, tz, field=field)
        problem = message_time_problem(at, now, self.future_tolerance)
        if problem:
            raise InvalidTimestampError(f"{field} {problem}")
        return message if at is message.created_at else replace(message, created_at=at)  # UTC already: as is

    def _thread_ids(self, user_id: str, appends: Sequence[Append]) -> list[str]:
        """Each append's thread, checked to be the user's (the continuous one created on first use)."""
        self.store.check_threads(user_id, [a.thread_id for a in appends if a.thread_id is not None])
        continuous = [self.store.continuous_thread(user_id).thread_id] if any(a.thread_id is None for a in appends) else []
        thread_ids = [a.thread_id if a.thread_id is not None else continuous[0] for a in appends]
        if len(set(thread_ids)) < len(thread_ids):
            raise InvalidInputError("a thread appears twice in one append: send its messages as one batch")
        return thread_ids

    def _write(self, user_id: str, placements: Sequence[Placement], titles: Sequence[str | None]) -> list[tuple[str, date]]:
        """The placed messages and what changes with them, `on_stored` told; returns the (thread, day) pairs
        that opened."""
        timeline = self.store.timeline
        placed = [m for p in placements for m in p.messages]
        self.store.insert_messages(placed)
        self.store.advance_threads({p.messages[-1].thread_id: p.messages[-1].seq for p in placements if p.messages})
        for p in placements:
            for conversation_id, last in p.extended.items():
                timeline.extend_conversation(conversation_id, last.seq, last.created_at)
            for conversation_id, at in p.ended_before.items():
                timeline.end_conversation(conversation_id, at, "idle")
        timeline.insert_conversations([row for p, title in zip(placements, titles)
                                       for row in p.conversation_rows(user_id, title)])
        opened = timeline.touch_days(user_id, day_spans(placed), self.clock())
        if self.on_stored is not None:
            self.on_stored(placed)
        return opened

    def end_conversation(self, thread_id: str, reason: str) -> str | None:
        """Explicitly end the open conversation; the next message starts a new one."""
        found = self.store.timeline.last_conversation(thread_id)
        if found is None or found[0].ended_at is not None:
            return None
        conversation = found[0]
        self.store.timeline.end_conversation(conversation.conversation_id, conversation.last_message_at, reason)
        return conversation.conversation_id

    def fresh(self, user_id: str, batches: Mapping[str, Sequence[NewMessage]]) -> dict[str, list[NewMessage]]:
        """Each thread's messages not stored yet (by id or external id), as an append would take them."""
        return {thread_id: fresh for thread_id, (fresh, _) in self._new_only(user_id, batches).items()}

    def _new_only(self, user_id: str,
                  batches: Mapping[str, Sequence[NewMessage]]) -> dict[str, tuple[list[NewMessage], list[str]]]:
        """Each thread's batch without the messages already stored (same id or external id) or
        repeated; message ids are unique across the store, external ids within a thread."""
        taken = self.store.existing_message_ids(m.message_id for ms in batches.values() for m in ms if m.message_id)
        for message_id, owner in taken.items():
            if owner != user_id:
                raise InvalidInputError(
                    f"message id {message_id!r} is already used: message ids are unique across the store, "
                    "so send it as external_id instead"
                )
        external = self.store.existing_external_ids({t: [m.external_id for m in ms if m.external_id]
                                                     for t, ms in batches.items()})
        seen_ids = set(taken)
        found: dict[str, tuple[list[NewMessage], list[str]]] = {}
        for thread_id, messages in batches.items():
            seen_external = external.get(thread_id, set())
            fresh: list[NewMessage] = []
            duplicates: list[str] = []
            for m in messages:
                if (m.message_id and m.message_id in seen_ids) or (m.external_id and m.external_id in seen_external):
                    duplicates.append(m.message_id or m.external_id or "")
                    continue
                seen_ids.add(m.message_id) if m.message_id else None
                seen_external.add(m.external_id) if m.external_id else None
                fresh.append(m)
            found[thread_id] = (fresh, duplicates)
        return found


def _validated(message: NewMessage, index: int) -> NewMessage:
    if not isinstance(message, NewMessage):
        raise InvalidInputError(f"message {index}: expected a NewMessage, got {type(message).__name__}")
    if message.created_at is not None and not isinstance(message.created_at, datetime):
        raise InvalidInputError(f"message {index}: created_at must be a datetime, got {type(message.created_at).__name__}")
    if message.kind not in ("turn", "note"):
        raise InvalidInputError(f"message {index}: kind {message.kind!r} is not 'turn' or 'note'")
    problem = message_problem(message)
    if problem:
        raise InvalidInputError(f"message {index}: {problem}")
    return message


def message_problem(message: NewMessage) -> str | None:
    """Why a new message cannot be stored (its role, text or ids), or None: the rule live ingest and
    every importer apply, each with its own error."""
    if message.role not in ROLES:
        return f"role {message.role!r} is not one of {', '.join(ROLES)}"
    if not isinstance(message.content, str):
        return "content must be a string"
    if len(message.content) > MAX_MESSAGE_CHARS:
        return f"content is over {MAX_MESSAGE_CHARS} characters: split it"
    if message.speaker is not None and not isinstance(message.speaker, str):
        return f"speaker must be a string, got {type(message.speaker).__name__}"
    for name in ("content", "speaker"):
        if "\x00" in (getattr(message, name) or ""):
            return f"{name} holds a NUL character: remove it"
    for name in ("content", "speaker", "message_id", "external_id"):
        value = getattr(message, name)
        if isinstance(value, str) and surrogate_problem(value):
            return f"{name} {surrogate_problem(value)}"
    for name in ("message_id", "external_id"):
        value = getattr(message, name)
        if value is not None and id_problem(name, value):
            return id_problem(name, value)
    return _metadata_problem(message.metadata)


def _metadata_problem(metadata: object) -> str | None:
    """Metadata is stored as JSON and exported as JSON: anything else (an object, NaN) would come back
    as its repr or as invalid JSON."""
    if not metadata:
        return None
    try:
        json.dumps(metadata, allow_nan=False)
    except RecursionError:
        return "metadata is nested too deeply: flatten it"
    except (TypeError, ValueError) as exc:
        return (f"metadata must hold JSON values only (strings, finite numbers, booleans, null, lists, objects): "
                f"{str(exc)[:120]}")
    return None
