"""Shared pieces of the importers: report types, the bad-record policy, flat rows.

Every importer turns its file into `ThreadBatch`es (one per user and thread, messages already
stamped with aware UTC times) and hands them to `appending.ingest_batches`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Collection, Mapping
from zoneinfo import ZoneInfo

from tqdm import tqdm

from engine.errors import ConvsearchError, ImportFileError, UnknownUserError
from engine.store.ingest import Ingestor, message_problem
from engine.models import NewMessage
from engine.store.core import Store, continuous_thread_id
from engine.text_rules import id_problem
from engine.timeutil import parse_timestamp, zone

__all__ = [
    "SkippedRecord", "ImportReport", "BadRecord", "Issues", "Item", "ThreadBatch", "ImportContext",
    "Totals", "BatchOutcome", "ZoneBook", "FlatGrouper", "check_message", "check_id",
    "flat_message", "load_json", "progress_bar",
]

SKIP_HINT = "fix the record, or skip such records (`convsearch ingest --skip-bad`, skip_bad=True in Python)"


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    location: str  # "line 12" / "index 3" / "conv-26 D8:6"
    reason: str


@dataclass(frozen=True, slots=True)
class ImportReport:
    path: str
    format: str
    users: tuple[str, ...]
    threads: tuple[str, ...]
    inserted: int
    duplicates: int
    summaries: int
    skipped: tuple[SkippedRecord, ...]
    seconds: float
    changed: tuple[SkippedRecord, ...] = ()  # re-imported ids whose content differs from the stored one
    rewritten: tuple[tuple[str, str, int], ...] = ()  # (user, thread, seq) whose text --update replaced
    messages_per_s: float = 0.0  # inserted / seconds of the whole import
    phases_s: Mapping[str, float] = field(default_factory=dict)  # store (read and append), rewrite, summaries, lexical
    without_text: int = 0  # messages not imported for having no text (an image or a tool call alone)


class BadRecord(Exception):
    """Raised by record parsers; the reader turns it into an error or a skipped record."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Issues:
    """The bad-record policy of one import: fail on the first one, or skip and list each."""

    def __init__(self, skip_bad: bool) -> None:
        self.skip_bad = skip_bad
        self.skipped: list[SkippedRecord] = []
        self.changed: list[SkippedRecord] = []  # ids already stored with other content: kept, or replaced
        self.rewritten: list[tuple[str, str, int]] = []  # (user, thread, seq) replaced: to re-index
        self.without_text = 0  # messages with nothing to store (an image or a tool call alone)

    def bad(self, location: str, reason: str) -> None:
        if not self.skip_bad:
            raise ImportFileError(f"{reason}; nothing was imported: {SKIP_HINT}", location=location)
        record = SkippedRecord(location, reason)
        if not self.skipped or self.skipped[-1] != record:  # a record's two messages (a legacy entry's) fail as one
            self.skipped.append(record)


@dataclass(frozen=True, slots=True)
class Item:
    location: str
    message: NewMessage  # created_at is always set (aware UTC) by the reader


@dataclass(frozen=True, slots=True)
class ThreadBatch:
    """Messages of one user's thread; `thread_id` None is the user's continuous thread."""

    user_id: str
    timezone: str | None
    thread_id: str | None
    items: tuple[Item, ...]
    title: str | None = None
    as_conversation: str | None = None
    end_reason: str | None = None  # end the open conversation after the batch (LoCoMo sessions)


@dataclass(frozen=True, slots=True)
class ImportContext:
    store: Store
    ingestor: Ingestor
    path: Path
    user_id: str | None
    timezone: str | None
    issues: Issues
    progress: bool
    now: datetime
    claim: Callable[[Collection[str]], None]  # once the file is read: its users' locks and the transaction
    update: bool = False  # a re-imported id with other content replaces the stored text



@dataclass(frozen=True, slots=True)
class BatchOutcome:
    thread_id: str
    inserted: tuple[str, ...]
    duplicates: int


@dataclass(frozen=True, slots=True)
class Totals:
    users: tuple[str, ...] = ()
    threads: tuple[str, ...] = ()
    inserted: int = 0
    duplicates: int = 0
    summaries: int = 0
    outcomes: tuple[BatchOutcome, ...] = field(default=(), repr=False)


def progress_bar(enabled: bool, total: int | None, desc: str, unit: str = "msg") -> tqdm:
    """A bar on stderr (stdout may carry a report); a no-op when disabled or stderr is not a terminal."""
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", disable=not (enabled and sys.stderr.isatty()),
                file=sys.stderr, leave=False)


TOO_DEEP = "JSON nested too deeply (deeper than any conversation record): flatten it"


def load_json(path: Path) -> Any:
    """A whole JSON file (the JSON formats are small; a UTF-8 byte-order mark is allowed); a clear
    error naming where it breaks."""
    try:
        with path.open("r", encoding="utf-8-sig") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ImportFileError(f"{path} is not valid JSON ({exc.msg}, column {exc.colno}): fix or re-export the file",
                              location=f"line {exc.lineno}") from None
    except UnicodeDecodeError:
        raise ImportFileError(f"{path} is not UTF-8 text: re-export it as UTF-8 JSON") from None
    except RecursionError:
        raise ImportFileError(f"{path}: {TOO_DEEP}") from None


def parsed_line(text: str) -> Any:
    """One line's JSON value (a byte-order mark before the first is allowed); BadRecord saying what is wrong."""
    try:
        return json.loads(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        raise BadRecord(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise BadRecord(TOO_DEEP) from None


def check_id(name: str, value: object) -> str:
    """Ids are non-empty printable strings of at most 256 characters (as the store requires)."""
    if problem := id_problem(name, value):
        raise BadRecord(problem)
    return str(value)


def check_message(message: NewMessage) -> NewMessage:
    """The Ingestor's own checks, per record, so one bad record can be skipped alone."""
    problem = message_problem(message)
    if problem:
        raise BadRecord(problem)
    return message


def flat_message(row: Mapping[str, Any], zone_of: ZoneBook, default_user: str | None,
                 now: datetime) -> tuple[str, str | None, NewMessage]:
    """(user_id, thread_id or None, message) from one JSONL line or parquet row."""
    own_user = row.get("user_id")  # a record's own user_id wins over the importer's default
    if own_user is None and default_user is None:
        raise BadRecord("no user_id: add one to the record or pass user_id (--user)")
    user_id = check_id("user_id", own_user if own_user is not None else default_user)
    tz = zone_of.zone(user_id, row.get("timezone"))
    thread_id = row.get("thread_id")
    if thread_id is not None:
        thread_id = None if thread_id == continuous_thread_id(user_id) else check_id("thread_id", thread_id)
    for name in ("role", "content"):
        if row.get(name) is None:
            raise BadRecord(f"missing {name}: every record needs role and content")
    created = row.get("created_at")
    try:
        stamp = now if created is None else parse_timestamp(created, tz, field="created_at")
    except ConvsearchError as exc:
        raise BadRecord(exc.message) from None
    kind = row.get("kind") or "turn"
    if kind not in ("turn", "note"):
        raise BadRecord(f"kind {kind!r} is not 'turn' or 'note'")
    message = NewMessage(
        role=row["role"], content=row["content"], created_at=stamp, message_id=row.get("message_id"),
        external_id=row.get("external_id"), speaker=_optional_str("speaker", row.get("speaker")),
        tools_used=_tools(row.get("tools_used")), metadata=_metadata(row.get("metadata")), kind=kind,
    )
    return user_id, thread_id, check_message(message)


class ZoneBook:
    """Each user's zone, for naive timestamps: the stored user's, else the first one the file gives."""

    def __init__(self, store: Store, default: str | None) -> None:
        self.store = store
        self.default = default
        self.names: dict[str, str | None] = {}  # user -> zone to create it with (None: exists)
        self._zones: dict[str, ZoneInfo] = {}

    def zone(self, user_id: str, given: object = None) -> ZoneInfo:
        if user_id not in self._zones:
            name = self._existing(user_id)
            if name is None:
                if given is not None and not isinstance(given, str):
                    raise BadRecord(f"timezone must be an IANA name such as 'Europe/Paris', got {given!r}")
                name = given or self.default or "UTC"
                try:
                    zone(name)
                except ConvsearchError as exc:
                    raise BadRecord(exc.message) from None
                self.names[user_id] = name
            self._zones[user_id] = zone(name)
        return self._zones[user_id]

    def _existing(self, user_id: str) -> str | None:
        try:
            return self.store.get_user(user_id).timezone
        except UnknownUserError:
            return None


class FlatGrouper:
    """Collects flat records (JSONL lines, parquet rows) into one batch per user and thread."""

    def __init__(self, ctx: ImportContext) -> None:
        self.ctx = ctx
        self.zones = ZoneBook(ctx.store, ctx.timezone)
        self._items: dict[tuple[str, str | None], list[Item]] = {}

    def add(self, location: str, row: object) -> None:
        """Parse one record; a bad one is raised or skipped as the import's policy says."""
        try:
            if not isinstance(row, dict):
                raise BadRecord(f"expected a JSON object with role and content, got {type(row).__name__}")
            user_id, thread_id, message = flat_message(row, self.zones, self.ctx.user_id, self.ctx.now)
        except BadRecord as exc:
            self.ctx.issues.bad(location, exc.reason)
            return
        self._items.setdefault((user_id, thread_id), []).append(Item(location, message))

    def batches(self) -> list[ThreadBatch]:
        return [ThreadBatch(user_id, self.zones.names.get(user_id), thread_id, tuple(items))
                for (user_id, thread_id), items in self._items.items()]


def _optional_str(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise BadRecord(f"{name} must be a string, got {value!r}")
    return value


def _tools(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise BadRecord(f"tools_used must be a list of tool names, got {value!r}")
    return tuple(value)


def _metadata(value: object) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):  # parquet keeps metadata as a JSON string
        value = parsed_line(value)
    if not isinstance(value, dict):
        raise BadRecord(f"metadata must be an object, got {type(value).__name__}")
    return value
