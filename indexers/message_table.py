"""Per-message metadata of one user's shard, so a search builds its hits without any SQL.

A search cites messages; showing one needs its id, time, day, role and speaker. Fetching them from
DuckDB cost a scan of the user's messages per query (linear in their number), so the shard keeps
them in memory: per thread, numpy columns indexed by seq (seqs are dense and never reused), not
one Python object per message, so a million messages take tens of MB. The store stays the source
of truth: the table is rebuilt from it when a shard loads and is never saved.

Readers may call `get` without the shard lock: a seq's role is written last and cleared first,
so a reader sees a message whole or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from engine.models import ROLES, Message
from indexers.chunking import label_for

__all__ = ["MessageCard", "MessageTable"]

_ABSENT = -1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EPOCH_ORDINAL = _EPOCH.date().toordinal()
_MICROSECOND = timedelta(microseconds=1)
Columns = dict[str, np.ndarray]  # a batch of messages by `_LAYOUT` name; names are vocabulary codes
_ROLE_CODE = {role: code for code, role in enumerate(ROLES)}
# (column, dtype, fill of an empty seq); roles last, since a role marks a seq present
_LAYOUT = (("ids", object, None), ("micros", np.int64, 0), ("days", np.int32, 0), ("conversations", np.int32, _ABSENT),
           ("speakers", np.int32, _ABSENT), ("labels", np.int32, _ABSENT), ("roles", np.int8, _ABSENT))


@dataclass(frozen=True, slots=True)
class MessageCard:
    """What a search hit shows of a message besides its text (which comes from its window)."""

    thread_id: str
    seq: int
    message_id: str
    created_at: datetime  # aware UTC, as `engine.store.rows.message_from_row` gives it
    role: str
    speaker: str | None
    day_label: date
    label: str  # what its window line starts with ("Alice", "Tool: grep"), to strip it from a snippet
    conversation: int  # equal for the messages of one conversation of the shard (a code, not the id)


class _Columns:
    """One thread's columns, indexed by seq; role -1 marks a seq with no live message."""

    ids: np.ndarray  # object: message ids, None where absent
    micros: np.ndarray  # int64: created_at, microseconds since the UTC epoch
    days: np.ndarray  # int32: day_label as a proleptic ordinal
    conversations: np.ndarray  # int32: conversation code
    speakers: np.ndarray  # int32: vocabulary code, -1 for None
    labels: np.ndarray  # int32: vocabulary code
    roles: np.ndarray  # int8: index into ROLES, -1 where absent

    def __init__(self, capacity: int) -> None:
        for name, dtype, fill in _LAYOUT:
            setattr(self, name, np.full(capacity, fill, dtype=dtype))

    def reserve(self, highest_seq: int) -> None:
        size = len(self.roles)
        if highest_seq < size:
            return
        grown = max(highest_seq + 1, 2 * size)  # geometric: amortised O(1) per message
        for name, dtype, fill in _LAYOUT:
            new = np.full(grown, fill, dtype=dtype)
            new[:size] = getattr(self, name)
            setattr(self, name, new)

    def write(self, at: np.ndarray, values: Columns, rows: np.ndarray) -> None:
        for name, _, _ in _LAYOUT:  # roles last
            getattr(self, name)[at] = values[name][rows]


class MessageTable:
    """The messages of one user's shard by (thread, seq); `put` and `forget` under the shard lock."""

    def __init__(self) -> None:
        self._threads: dict[str, _Columns] = {}
        self._names: list[str] = []  # speakers and labels: a small vocabulary shared by all threads
        self._codes: dict[str, int] = {}
        self._conversations: dict[str, int] = {}  # conversation id -> code (the ids themselves are never shown)

    def __len__(self) -> int:
        return sum(int(np.count_nonzero(c.roles != _ABSENT)) for c in self._threads.values())

    def put(self, messages: Iterable[Message]) -> None:
        """Add or overwrite messages (putting the same message again changes nothing)."""
        ms = list(messages)
        self.put_arrow(pa.table({  # one path for both: what a put stores is what a bulk load stores
            "thread_id": pa.array([m.thread_id for m in ms], pa.string()), "seq": pa.array([m.seq for m in ms], pa.int64()),
            "message_id": pa.array([m.message_id for m in ms], pa.string()),
            "created_at": pa.array([m.created_at for m in ms], pa.timestamp("us", tz="UTC")),
            "day_label": pa.array([m.day_label for m in ms], pa.date32()),
            "conversation_id": pa.array([m.conversation_id for m in ms], pa.string()),
            "role": pa.array([m.role for m in ms], pa.string()),
            "speaker": pa.array([m.speaker for m in ms], pa.string()),
            "tools_used": pa.array([list(m.tools_used) for m in ms], pa.list_(pa.string())),
        }))

    def put_arrow(self, table: pa.Table) -> None:
        """Add or overwrite the rows of `Store.message_metadata`, vectorised: Python work per distinct
        thread, role and speaker (and per tool message), not per message."""
        if table.num_rows == 0:
            return
        column = lambda name: table.column(name).combine_chunks()  # noqa: E731
        threads, thread_names = _encoded(column("thread_id"))
        role_codes, role_names = _encoded(column("role"))
        roles = np.array([_ROLE_CODE[r] for r in role_names], dtype=np.int8)[role_codes]
        speaker_codes, speaker_names = _encoded(column("speaker"))  # the appended -1 maps a null to -1
        speakers = np.array([self._code(s) for s in speaker_names] + [_ABSENT], dtype=np.int32)[speaker_codes]
        # the label is the speaker if any, else the role, except a tool message names its tools
        labels = np.array([self._code(s) if s else _ABSENT for s in speaker_names] + [_ABSENT], dtype=np.int32)[speaker_codes]
        unnamed = labels == _ABSENT
        labels[unnamed] = np.array([self._code(label_for(None, r, ())) for r in ROLES], dtype=np.int32)[roles[unnamed]]
        conversation_codes, conversation_ids = _encoded(column("conversation_id"))
        conversations = np.array([self._conversation_code(c) for c in conversation_ids], dtype=np.int32)
        tool_rows = np.flatnonzero(unnamed & (roles == _ROLE_CODE["tool"]))
        tools = column("tools_used").take(pa.array(tool_rows, type=pa.int64())).to_pylist()
        labels[tool_rows] = [self._code(label_for(None, "tool", t)) for t in tools]
        self._scatter(thread_names, threads, column("seq").cast(pa.int64()).to_numpy(), {
            "ids": column("message_id").to_numpy(zero_copy_only=False),
            # naive UTC (the store) or aware: either way the value is microseconds since the UTC epoch
            "micros": column("created_at").cast(pa.timestamp("us")).cast(pa.int64()).to_numpy(),
            "days": column("day_label").cast(pa.int32()).to_numpy() + _EPOCH_ORDINAL,
            "conversations": conversations[conversation_codes], "speakers": speakers, "labels": labels, "roles": roles})

    def _scatter(self, thread_names: Sequence[str], thread: np.ndarray, seq: np.ndarray, values: Columns) -> None:
        """Write row i at (thread_names[thread[i]], seq[i]), one thread at a time."""
        if int(seq.min()) < 0:
            raise ValueError("a message seq is negative")
        order = np.argsort(thread, kind="stable")  # stable: of two rows for one seq, the later wins
        for rows in np.split(order, np.flatnonzero(np.diff(thread[order])) + 1):
            at, name = seq[rows], thread_names[int(thread[rows[0]])]
            columns = self._threads.get(name)
            if columns is None:  # sized to fit: a user with many short threads stays small
                columns = self._threads[name] = _Columns(max(int(at.max()) + 1, 16))
            columns.reserve(int(at.max()))
            columns.write(at, values, rows)

    def forget(self, thread_id: str, seqs: Iterable[int]) -> None:
        """Drop these messages (deleted from the store); unknown seqs are ignored."""
        columns = self._threads.get(thread_id)
        if columns is None:
            return
        at = np.fromiter((s for s in seqs if 0 <= s < len(columns.roles)), dtype=np.int64)
        columns.roles[at] = _ABSENT  # first: a reader without the lock sees the message gone
        columns.ids[at] = None

    def get(self, thread_id: str, seq: int) -> MessageCard | None:
        """The message at (thread, seq), or None when there is none (never stored, or deleted)."""
        return self.cards([thread_id], [seq])[0]

    def cards(self, thread_ids: Sequence[str], seqs: Sequence[int]) -> list[MessageCard | None]:
        """`get` of each (thread, seq): each column read once for a thread's seqs, not once per message
        (a search's ~70 candidates cost ~6.6 us each one by one at 1M)."""
        found: list[MessageCard | None] = [None] * len(seqs)
        asked: dict[str, list[int]] = {}  # thread -> positions asked of it
        for i, thread_id in enumerate(thread_ids):
            asked.setdefault(thread_id, []).append(i)
        for thread_id, positions in asked.items():
            columns = self._threads.get(thread_id)
            if columns is None:
                continue
            where = [i for i in positions if 0 <= seqs[i] < len(columns.roles)]
            at = np.array([seqs[i] for i in where], dtype=np.int64)
            roles = columns.roles[at].tolist()  # first: a message forgotten meanwhile reads as absent
            rows = zip(where, at.tolist(), roles, columns.ids[at].tolist(), columns.micros[at].tolist(),
                       columns.speakers[at].tolist(), columns.days[at].tolist(), columns.labels[at].tolist(),
                       columns.conversations[at].tolist())
            for i, seq, role, message_id, micros, speaker, day, label, conversation in rows:
                if role == _ABSENT or message_id is None:  # never stored, deleted, or forgotten while we read
                    continue
                found[i] = MessageCard(
                    thread_id=thread_id, seq=seq, message_id=message_id,
                    created_at=_EPOCH + micros * _MICROSECOND, role=ROLES[role],
                    speaker=None if speaker == _ABSENT else self._names[speaker],
                    day_label=date.fromordinal(day), label=self._names[label], conversation=conversation)
        return found

    def _code(self, name: str) -> int:
        code = self._codes.get(name)
        if code is None:
            self._names.append(name)  # before the code is handed out: readers index `_names`
            code = self._codes[name] = len(self._names) - 1
        return code

    def _conversation_code(self, conversation_id: str) -> int:
        return self._conversations.setdefault(conversation_id, len(self._conversations))


def _encoded(array: pa.Array) -> tuple[np.ndarray, list]:
    """Each value's code into the distinct values (-1 for null), and those values."""
    encoded = array.dictionary_encode()
    return encoded.indices.fill_null(_ABSENT).to_numpy(), encoded.dictionary.to_pylist()
