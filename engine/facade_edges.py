"""What the facade does at its edges: callers' dicts as records, files and a full disk as clear
errors, long texts capped, and the lock that holds every user's writes (engine.api uses these)."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Iterator, Mapping, Sequence, cast

from engine.collector import fewer_collections
from engine.config import Settings
from engine.errors import ConvsearchError, InvalidInputError, storage_error
from engine.locks import WriterLocks
from engine.models import NewMessage, Role
from engine.query.navigation_results import capped_message as capped  # the one cap of a returned message
from engine.subprocesses import usable_cores
from engine.timeutil import read_iso
from indexers.bm25 import Bm25Params
from indexers.chunking import ChunkParams
from indexers.hnsw import HnswParams
from indexers.lexical import TokenizerParams
from indexers.pipeline import PipelineParams

__all__ = ["pipeline_params", "to_new_message", "to_new_messages", "by_thread", "capped", "as_path", "file_errors", "disk_errors",
           "guarded_write", "EveryUser", "checked_clock", "UsersToCheck"]


class UsersToCheck:
    """The users a server's background step looks at besides the loaded ones: every user at first,
    then those imported since (an import writes users no shard of this process holds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: set[str] | None = None  # None: all of them

    def add(self, users: Iterable[str]) -> None:
        with self._lock:
            if self._users is not None:
                self._users.update(users)

    def take(self) -> set[str] | None:
        """What to check now (None: every user), and none until the next add."""
        with self._lock:
            taken, self._users = self._users, set()
            return taken


def checked_clock(clock: object) -> Callable[[], datetime]:
    """The engine's clock, read once: it must give aware datetimes (a naive one, such as
    datetime.now, failed later inside ingest and navigation with a TypeError)."""
    now = clock() if callable(clock) else None
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise InvalidInputError(f"clock must be a function giving an aware datetime, such as lambda: "
                                f"datetime.now(timezone.utc); it gave {now!r}")
    return cast(Callable[[], datetime], clock)


def pipeline_params(settings: Settings) -> PipelineParams:
    return PipelineParams(
        chunk=ChunkParams(window_tokens=settings.window_tokens, overlap_messages=settings.overlap_messages),
        tokenizer=TokenizerParams(stemming=settings.stemming, stopwords=settings.stopwords),
        bm25=Bm25Params(k1=settings.bm25_k1, b=settings.bm25_b),
        hnsw=HnswParams(m=settings.hnsw_m, ef_construction=settings.hnsw_ef_construction, ef=settings.hnsw_ef),
        build_workers=min(usable_cores(), 4) - 1 if settings.index_workers is None else settings.index_workers,
    )


def to_new_messages(messages: Sequence[NewMessage | Mapping[str, Any]]) -> list[NewMessage]:
    """`ingest`'s batch: a list of messages, each as `to_new_message` takes it."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidInputError("messages must be a list of messages (objects with role and content)")
    return [to_new_message(m, index=i) for i, m in enumerate(messages)]


def to_new_message(item: NewMessage | Mapping[str, Any], *, index: int = 0) -> NewMessage:
    """A caller's dict (role, content, created_at, ...) as a NewMessage.

    A created_at without an offset stays naive here: the Ingestor reads it in the user's zone.
    """
    if isinstance(item, NewMessage):
        return item
    if not isinstance(item, Mapping):
        raise InvalidInputError(f"message {index}: expected an object with role and content")
    unknown = set(item) - {"role", "content", "created_at", "message_id", "external_id", "speaker",
                           "tools_used", "metadata"}
    if unknown:
        raise InvalidInputError(f"message {index}: unknown fields {sorted(unknown)}")
    created = item.get("created_at")
    if created is not None and not isinstance(created, (str, datetime)):
        raise InvalidInputError(f"message {index}: created_at must be an ISO 8601 string, got {type(created).__name__}")
    tools = item.get("tools_used") or ()
    if not isinstance(tools, (list, tuple)) or not all(isinstance(t, str) for t in tools):
        raise InvalidInputError(f"message {index}: tools_used must be a list of tool names")
    metadata = item.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(f"message {index}: metadata must be an object")
    return NewMessage(
        # role and content are checked where every record is, by the Ingestor
        role=cast(Role, item.get("role")), content=cast(str, item.get("content")),
        created_at=read_iso(created, field=f"message {index}: created_at") if isinstance(created, str) else created,
        message_id=item.get("message_id"), external_id=item.get("external_id"), speaker=item.get("speaker"),
        tools_used=tuple(tools), metadata=dict(metadata),
    )


def by_thread(rewritten: Iterable[tuple[str, str, int]]) -> dict[tuple[str, str], set[int]]:
    grouped: dict[tuple[str, str], set[int]] = {}
    for user, thread, seq in rewritten:
        grouped.setdefault((user, thread), set()).add(seq)
    return grouped


def as_path(path: object) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidInputError(f"path must be a file path, got {type(path).__name__}")
    return Path(path)


@contextmanager
def file_errors(path: object) -> Iterator[None]:
    """An unreadable or unwritable file is the caller's problem to fix: say which and why."""
    try:
        yield
    except OSError as exc:
        if storage_error(exc) is not None:
            raise
        raise InvalidInputError(f"cannot use the file {str(path)[:200]!r}: {exc.strerror or exc}") from None


@contextmanager
def disk_errors() -> Iterator[None]:
    """A full disk (store or index files) as StorageFullError: one clear line, not a traceback."""
    try:
        yield
    except ConvsearchError:
        raise
    except Exception as exc:
        full = storage_error(exc)
        if full is None:
            raise
        raise full from None


@contextmanager
def guarded_write(lock: ContextManager[Any]) -> Iterator[None]:
    """How every write of the facade runs: under its writer lock, a full disk as StorageFullError,
    and fewer garbage collections meanwhile (engine/collector.py)."""
    with lock, disk_errors(), fewer_collections():
        yield


class EveryUser:
    """`with engine.write_lock:` (doctor) as every user's writer lock."""

    def __init__(self, locks: WriterLocks) -> None:
        self.locks = locks
        self._held: list[Any] = []

    def __enter__(self) -> None:
        held = self.locks.everyone()
        held.__enter__()
        self._held.append(held)

    def __exit__(self, *exc: object) -> None:
        self._held.pop().__exit__(*exc)
