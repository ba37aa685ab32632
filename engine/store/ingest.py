"""Appending messages to a thread: ids, order, seq, day segments and conversations, atomically.

Threads are append-only in time: a message older than the thread's last one is refused with
OutOfOrderError (importers sort each file by time first). Refusing keeps `seq` dense and in
time order, so ranges, windows and chunk ids never shift under existing indexes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable, Sequence

from engine.errors import InvalidInputError, InvalidTimestampError, OutOfOrderError
from engine.models import ROLES, IngestResult, Message, NewMessage
from engine.store.core import Store
from engine.text_rules import id_problem, surrogate_problem
from engine.store.timeline import Timeline, conversation_id_for
from engine.timeutil import local_day, message_time_problem, to_utc, utcnow, zone

__all__ = ["Ingestor", "MAX_MESSAGE_CHARS", "message_problem"]

MAX_MESSAGE_CHARS = 8 * 1024 * 1024  # a 1 MB message is stored intact; 8 MB is a sign of a mistake


@dataclass(frozen=True, slots=True)
class _ConversationState:
    conversation_id: str | None
    ordinal: int
    last_at: datetime | None
    ended: bool


class Ingestor:
    def __init__(self, store: Store, *, idle_timeout: timedelta, clock: Callable[[], datetime] = utcnow,
                 future_tolerance: timedelta = timedelta(days=1)) -> None:
        self.store = store
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.future_tolerance = future_tolerance

    def time_problem(self, moment: datetime) -> str | None:
        """Why an aware UTC message time cannot be stored now (None when it can)."""
        return message_time_problem(moment, self.clock(), self.future_tolerance)

    def add_messages(self, user_id: str, messages: Sequence[NewMessage], *, thread_id: str | None = None,
                     as_conversation: str | None = None) -> IngestResult:
        """Append `messages` (oldest first) to the user's thread (default: the continuous one).

        `as_conversation` (a title) puts the whole batch into one new, ended conversation whatever
        the gaps between messages: how imported histories keep their shape.
        """
        checked = [_validated(m, i) for i, m in enumerate(messages)]
        user = self.store.get_user(user_id)
        tz = zone(user.timezone)
        now = self.clock()
        checked = [self._in_utc(m, i, tz, now) for i, m in enumerate(checked)]
        with self.store.db.transaction():
            thread = (self.store.get_thread(thread_id, user_id=user_id) if thread_id
                      else self.store.continuous_thread(user_id))
            fresh, duplicates = self._new_only(user_id, thread.thread_id, checked)
            last_seq, last_at = self.store.thread_tail(thread.thread_id)
            # no created_at: now, or the thread's last time when that is later (a clock a little ahead)
            default_at = max(now, to_utc(last_at)) if last_at is not None else now
            stamped = [m if m.created_at else replace(m, created_at=default_at) for m in fresh]
            _check_order(stamped, last_at)
            placed, ended = self._place(user_id, thread.thread_id, stamped, last_seq, tz, as_conversation is not None)
            self.store.insert_messages(placed)
            if placed:
                self.store.advance_thread(thread.thread_id, placed[-1].seq)
            if as_conversation is not None and placed:
                self._close_imported(placed[-1], as_conversation)
            opened = self._touch_days(user_id, thread.thread_id, placed)
        return IngestResult(
            thread_id=thread.thread_id, inserted=tuple(m.message_id for m in placed), duplicates=tuple(duplicates),
            first_seq=placed[0].seq if placed else None, last_seq=placed[-1].seq if placed else None,
            opened_days=tuple(opened), ended_conversations=tuple(ended),
        )

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

    def end_conversation(self, thread_id: str, reason: str) -> str | None:
        """Explicitly end the open conversation; the next message starts a new one."""
        found = self.store.timeline.last_conversation(thread_id)
        if found is None or found[0].ended_at is not None:
            return None
        conversation = found[0]
        self.store.timeline.end_conversation(conversation.conversation_id, conversation.last_message_at, reason)
        return conversation.conversation_id

    def fresh(self, user_id: str, thread_id: str, messages: list[NewMessage]) -> list[NewMessage]:
        """The messages not stored yet (by id or external id), as an ingest would append them."""
        return self._new_only(user_id, thread_id, messages)[0]

    def _new_only(self, user_id: str, thread_id: str, messages: list[NewMessage]) -> tuple[list[NewMessage], list[str]]:
        """Drop messages already stored (same id or external id) and repeats within the batch."""
        taken = self.store.existing_message_ids(m.message_id for m in messages if m.message_id)
        for message_id, owner in taken.items():
            if owner != user_id:
                raise InvalidInputError(
                    f"message id {message_id!r} is already used: message ids are unique across the store, "
                    "so send it as external_id instead"
                )
        seen_external = self.store.existing_external_ids(thread_id, (m.external_id for m in messages))
        seen_ids = set(taken)
        fresh: list[NewMessage] = []
        duplicates: list[str] = []
        for m in messages:
            if (m.message_id and m.message_id in seen_ids) or (m.external_id and m.external_id in seen_external):
                duplicates.append(m.message_id or m.external_id or "")
                continue
            seen_ids.add(m.message_id) if m.message_id else None
            seen_external.add(m.external_id) if m.external_id else None
            fresh.append(m)
        return fresh, duplicates

    def _close_imported(self, last: Message, title: str) -> None:
        self.store.timeline.end_conversation(last.conversation_id, last.created_at, "imported")
        self.store.timeline.set_conversation_summary(last.conversation_id, title, "")

    def _place(self, user_id: str, thread_id: str, messages: list[NewMessage], last_seq: int, tz,
               one_conversation: bool = False) -> tuple[list[Message], list[str]]:
        """Give each message its seq, day and conversation; conversation rows are written once per batch."""
        state = _conversation_state(self.store.timeline, thread_id)
        placed: list[Message] = []
        ended: list[str] = []
        opened: list[tuple[str, int, int, datetime]] = []
        for offset, m in enumerate(messages, start=1):
            seq = last_seq + offset
            if m.kind == "note" and state.conversation_id is not None:
                # engine notes join the latest conversation; they never open, extend or end one
                placed.append(_message(m, thread_id, user_id, seq, tz, state.conversation_id))
                continue
            idle = state.last_at is not None and m.created_at - state.last_at > self.idle_timeout
            forced = one_conversation and offset == 1
            if state.conversation_id is None or state.ended or (idle and not one_conversation) or forced:
                if state.conversation_id is not None and not state.ended:
                    ended.append(state.conversation_id)
                ordinal = state.ordinal + 1
                state = _ConversationState(conversation_id_for(thread_id, ordinal), ordinal, m.created_at, False)
                opened.append((state.conversation_id, ordinal, seq, m.created_at))
            state = _ConversationState(state.conversation_id, state.ordinal, m.created_at, state.ended)
            placed.append(_message(m, thread_id, user_id, seq, tz, state.conversation_id))
        self._write_conversations(user_id, thread_id, placed, opened, ended)
        return placed, ended

    def _write_conversations(self, user_id: str, thread_id: str, placed: list[Message],
                             opened: list[tuple[str, int, int, datetime]], ended: list[str]) -> None:
        """New conversations go in with their final state in one insert; the one that was open
        before the batch is extended and, if the batch ended it, ended."""
        timeline = self.store.timeline
        last_of: dict[str, Message] = {m.conversation_id: m for m in placed if m.kind == "turn"}
        new_ids = {conversation_id for conversation_id, *_ in opened}
        for conversation_id in set(last_of) - new_ids:  # continued from before this batch
            last = last_of[conversation_id]
            timeline.extend_conversation(conversation_id, last.seq, last.created_at)
        for conversation_id in (c for c in ended if c not in new_ids):
            found = last_of.get(conversation_id)
            at = found.created_at if found else timeline.last_conversation(thread_id)[0].last_message_at
            timeline.end_conversation(conversation_id, at, "idle")
        timeline.insert_conversations([
            (conversation_id, thread_id, user_id, ordinal, at, last_of[conversation_id].created_at, first_seq,
             last_of[conversation_id].seq, last_of[conversation_id].created_at if conversation_id in ended else None,
             "idle" if conversation_id in ended else None)
            for conversation_id, ordinal, first_seq, at in opened
        ])

    def _touch_days(self, user_id: str, thread_id: str, placed: list[Message]) -> list:
        spans: dict = {}
        for m in placed:
            lo, hi = spans.get(m.day_label, (m.seq, m.seq))
            spans[m.day_label] = (min(lo, m.seq), max(hi, m.seq))
        return self.store.timeline.touch_days(user_id, thread_id, spans, self.clock())


def _message(m: NewMessage, thread_id: str, user_id: str, seq: int, tz, conversation_id: str) -> Message:
    return Message(
        message_id=m.message_id or f"m_{uuid.uuid4().hex}", thread_id=thread_id, user_id=user_id, seq=seq,
        role=m.role, content=m.content, created_at=m.created_at, day_label=local_day(m.created_at, tz),
        conversation_id=conversation_id, speaker=m.speaker, tools_used=tuple(m.tools_used),
        metadata=dict(m.metadata), external_id=m.external_id, kind=m.kind,
    )


def _conversation_state(timeline: Timeline, thread_id: str) -> _ConversationState:
    found = timeline.last_conversation(thread_id)
    if found is None:
        return _ConversationState(None, 0, None, True)
    conversation, ordinal = found
    return _ConversationState(conversation.conversation_id, ordinal, conversation.last_message_at,
                              conversation.ended_at is not None)


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
    if "\x00" in message.content:
        return "content holds a NUL character: remove it"
    for name in ("content", "speaker", "message_id", "external_id"):
        value = getattr(message, name)
        if isinstance(value, str) and surrogate_problem(value):
            return f"{name} {surrogate_problem(value)}"
    for name in ("message_id", "external_id"):
        value = getattr(message, name)
        if value is not None and id_problem(name, value):
            return id_problem(name, value)
    return None


def _check_order(messages: list[NewMessage], last_at: datetime | None) -> None:
    stored = None if last_at is None else to_utc(last_at)
    previous = stored
    for index, m in enumerate(messages):
        if previous is not None and m.created_at < previous:
            if index == 0:
                raise OutOfOrderError(
                    f"message {index} at {m.created_at.isoformat()} is older than the thread's last stored message "
                    f"({stored.isoformat()}): threads are appended in time order; send it with a later created_at "
                    "(or none: now), or put older history in a thread of its own (thread_id)")
            raise OutOfOrderError(
                f"message {index} at {m.created_at.isoformat()} is older than the message before it "
                f"({previous.isoformat()}): threads are appended in time order; sort the batch by created_at")
        previous = m.created_at
