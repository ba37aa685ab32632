"""Where new messages go in a thread: each one's seq, day and conversation, from the thread's tail
and its latest conversation. Pure: the Ingestor reads that state (for one thread or many at once)
and writes what this gives back."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Mapping, Sequence
from zoneinfo import ZoneInfo

from engine.errors import ConvsearchError, OutOfOrderError
from engine.models import Conversation, Message, NewMessage
from engine.store.timeline import conversation_id_for
from engine.timeutil import local_day, to_utc

__all__ = ["Placement", "place", "check_order", "day_spans", "idle_past", "stored_message"]


@dataclass(frozen=True, slots=True)
class Placement:
    """What a batch of one thread becomes: its messages, the conversations it opened (id, ordinal,
    first seq, started_at) and ended, and how the rows of conversations change."""

    messages: list[Message]
    opened: list[tuple[str, int, int, datetime]]
    ended: list[str]
    extended: dict[str, Message] = field(default_factory=dict)  # continued from before: id -> its new last turn
    ended_before: dict[str, datetime] = field(default_factory=dict)  # open before the batch, ended by it: id -> at

    def conversation_rows(self, user_id: str, imported_title: str | None) -> list[tuple]:
        """The new conversations' rows in their final state (`Timeline.insert_conversations`); with
        `imported_title`, the batch's last conversation goes in ended ("imported") under that title."""
        last_of = {m.conversation_id: m for m in self.messages}  # a conversation a note opened has no turn
        last_of.update({m.conversation_id: m for m in self.messages if m.kind == "turn"})
        imported = self.messages[-1].conversation_id if imported_title is not None and self.messages else None
        rows = []
        for conversation_id, ordinal, first_seq, at in self.opened:
            last = last_of[conversation_id]
            ended_at, reason, title, brief = (
                (last.created_at, "idle", None, None) if conversation_id in self.ended
                else (self.messages[-1].created_at, "imported", imported_title, "") if conversation_id == imported
                else (None, None, None, None))
            rows.append((conversation_id, last.thread_id, user_id, ordinal, at, last.created_at, first_seq, last.seq,
                         ended_at, reason, title, brief))
        return rows


def idle_past(last_at: datetime, at: datetime, idle_timeout: timedelta) -> bool:
    """Whether a conversation whose last message came at `last_at` is over by `at`: the one rule for
    placing a message, the scheduled close and the context's conversation under way."""
    return at - last_at > idle_timeout


def place(thread_id: str, user_id: str, messages: Sequence[NewMessage], last_seq: int, tz: ZoneInfo,
          latest: tuple[Conversation, int] | None, idle_timeout: timedelta, one_conversation: bool = False) -> Placement:
    """Give each message its seq, day and conversation. A gap over `idle_timeout` opens a new
    conversation (`one_conversation`: the whole batch is one new conversation whatever the gaps);
    engine notes join the latest conversation and never open, extend or end one."""
    conversation_id, ordinal, last_at, ended = ((None, 0, None, True) if latest is None else
                                                (latest[0].conversation_id, latest[1], latest[0].last_message_at,
                                                 latest[0].ended_at is not None))
    before = conversation_id if not ended else None  # open before the batch
    forced = one_conversation  # the batch's first turn opens its conversation
    placed: list[Message] = []
    opened: list[tuple[str, int, int, datetime]] = []
    ended_ids: list[str] = []
    for offset, m in enumerate(messages, start=1):
        seq = last_seq + offset
        if m.kind == "note" and conversation_id is not None:
            placed.append(stored_message(m, thread_id, user_id, seq, tz, conversation_id))
            continue
        at = time_of(m)
        idle = last_at is not None and idle_past(last_at, at, idle_timeout)
        if conversation_id is None or ended or (idle and not one_conversation) or forced:
            if conversation_id is not None and not ended:
                ended_ids.append(conversation_id)
            ordinal += 1
            conversation_id, ended, forced = conversation_id_for(thread_id, ordinal), False, False
            opened.append((conversation_id, ordinal, seq, at))
        last_at = at
        placed.append(stored_message(m, thread_id, user_id, seq, tz, conversation_id))
    turns = {m.conversation_id: m for m in placed if m.kind == "turn"}
    extended = {before: turns[before]} if before is not None and before in turns else {}
    ended_before = {}
    if latest is not None and before is not None and before in ended_ids:
        ended_before[before] = turns[before].created_at if before in turns else latest[0].last_message_at
    return Placement(placed, opened, ended_ids, extended, ended_before)


def stored_message(m: NewMessage, thread_id: str, user_id: str, seq: int, tz: ZoneInfo, conversation_id: str) -> Message:
    return Message(
        message_id=m.message_id or f"m_{uuid.uuid4().hex}", thread_id=thread_id, user_id=user_id, seq=seq,
        role=m.role, content=m.content, created_at=time_of(m), day_label=local_day(time_of(m), tz),
        conversation_id=conversation_id, speaker=m.speaker, tools_used=tuple(m.tools_used),
        metadata=dict(m.metadata), external_id=m.external_id, kind=m.kind,
    )


def day_spans(placed: Sequence[Message]) -> dict[tuple[str, date], tuple[int, int]]:
    """(thread, day) -> (first seq, last seq) of the placed messages."""
    spans: dict[tuple[str, date], tuple[int, int]] = {}
    for m in placed:
        lo, hi = spans.get((m.thread_id, m.day_label), (m.seq, m.seq))
        spans[(m.thread_id, m.day_label)] = (min(lo, m.seq), max(hi, m.seq))
    return spans


def in_repeated_hour(messages: Sequence[NewMessage], last_at: datetime | None,
                     second: Mapping[int, datetime]) -> list[NewMessage]:
    """Messages whose naive time fell in the hour the user's clocks repeat take its second pass
    (`second`, by the message's id()) when the first would go back before the message they follow:
    a client sending local wall-clock times through the autumn change (01:50, then 01:00 an hour
    later) keeps its order instead of being refused."""
    previous = None if last_at is None else to_utc(last_at)
    out = []
    for m in messages:
        later = second.get(id(m))
        if later is not None and previous is not None and time_of(m) < previous <= later:
            m = replace(m, created_at=later)
        previous = time_of(m)
        out.append(m)
    return out


def within_skew(messages: Sequence[NewMessage], last_at: datetime | None, skew: timedelta) -> list[NewMessage]:
    """Messages at most `skew` older than the message they follow take its time: two writers whose
    clocks are a little apart (a phone a minute fast, then the agent's server) keep the thread in time
    order instead of the second being refused. Older than that, `check_order` refuses them."""
    previous = None if last_at is None else to_utc(last_at)
    out = []
    for m in messages:
        if previous is not None and previous - skew <= time_of(m) < previous:
            m = replace(m, created_at=previous)
        previous = time_of(m)
        out.append(m)
    return out


def check_order(messages: Sequence[NewMessage], last_at: datetime | None) -> None:
    """OutOfOrderError unless the batch goes forward in time from the thread's last stored message."""
    previous = None if last_at is None else to_utc(last_at)
    for index, m in enumerate(messages):
        at = time_of(m)
        if previous is not None and at < previous:
            if index == 0:
                raise OutOfOrderError(
                    f"message {index} at {at.isoformat()} is older than the thread's last stored message "
                    f"({previous.isoformat()}) by more than the clock skew allowed (clock_skew_seconds): threads are "
                    "appended in time order; send it with a later created_at "
                    "(or none: now), or import older history into a thread of its own (`convsearch ingest FILE` with a "
                    "thread_id on its rows: docs/formats.md)")
            raise OutOfOrderError(
                f"message {index} at {at.isoformat()} is older than the message before it "
                f"({previous.isoformat()}) by more than the clock skew allowed (clock_skew_seconds): threads are "
                "appended in time order; sort the batch by created_at")
        previous = at


def time_of(message: NewMessage) -> datetime:
    """A stamped message's time (the Ingestor stamps every message before placing it)."""
    if message.created_at is None:
        raise ConvsearchError("a message reached placement without created_at: stamp it first")
    return message.created_at
