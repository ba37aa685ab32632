"""One error hierarchy for the whole engine: every surface turns these into clean messages.

Each error carries a stable `code` (HTTP and MCP clients see it, the CLI prints it), the HTTP
status it maps to and the CLI's exit code (one per family; docs/reference/cli.md lists them).
Messages always say what to do instead.
"""

from __future__ import annotations

__all__ = [
    "ConvsearchError",
    "InvalidInputError",
    "InvalidTimestampError",
    "UnknownTimezoneError",
    "OutOfOrderError",
    "ImportFileError",
    "NotFoundError",
    "UnknownUserError",
    "UnknownThreadError",
    "UnknownMessageError",
    "UnknownDaySegmentError",
    "UnknownConversationError",
    "IndexStateError",
    "ReindexIncompleteError",
    "StoreLockedError",
    "StoreBusyError",
    "EngineClosedError",
    "EmbeddingUnavailableError",
    "AuthError",
    "SummarizerError",
    "SettingsError",
    "ForbiddenError",
    "ServerUnavailableError",
    "IndexingPausedError",
    "StorageFullError",
    "storage_error",
]


class ConvsearchError(Exception):
    """Base of every error the engine raises on purpose."""

    code = "error"
    http_status = 400
    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInputError(ConvsearchError):
    """The caller sent something the engine cannot accept."""

    code = "invalid_input"
    http_status = 422
    exit_code = 3


class InvalidTimestampError(InvalidInputError):
    code = "invalid_timestamp"


class UnknownTimezoneError(InvalidInputError):
    code = "unknown_timezone"


class OutOfOrderError(InvalidInputError):
    """A message older than the thread's last one: threads are append-only in time order."""

    code = "out_of_order"


class ImportFileError(InvalidInputError):
    """A bad record in an import file; `location` names its line or index."""

    code = "bad_import_record"

    def __init__(self, message: str, *, location: str | None = None) -> None:
        super().__init__(f"{location}: {message}" if location else message)
        self.location = location


class NotFoundError(ConvsearchError):
    code = "not_found"
    http_status = 404
    exit_code = 4


class UnknownUserError(NotFoundError):
    code = "unknown_user"


class UnknownThreadError(NotFoundError):
    code = "unknown_thread"


class UnknownMessageError(NotFoundError):
    code = "unknown_message"


class UnknownDaySegmentError(NotFoundError):
    code = "unknown_day_segment"


class UnknownConversationError(NotFoundError):
    code = "unknown_conversation"


class IndexStateError(ConvsearchError):
    """An index directory that does not match the store or the configuration."""

    code = "index_mismatch"
    http_status = 409
    exit_code = 5


class ReindexIncompleteError(IndexStateError):
    """A distributed reindex that could not rebuild some users: each keeps its previous index."""

    code = "reindex_incomplete"
    http_status = 500


class StoreLockedError(ConvsearchError):
    """Another process holds the DuckDB file for writing (DuckDB allows one writer process)."""

    code = "store_locked"
    http_status = 423
    exit_code = 6


class StoreBusyError(StoreLockedError):
    """A long write (an import) found rows it wrote changed by another write meanwhile: it stored nothing."""

    code = "store_busy"
    http_status = 409


class EngineClosedError(ConvsearchError):
    """A call on an engine after its close (its store connection is gone)."""

    code = "engine_closed"


class EmbeddingUnavailableError(ConvsearchError):
    """The embedding model could not load or answered too slowly; search falls back to lexical."""

    code = "embedding_unavailable"
    http_status = 503
    exit_code = 7


class AuthError(ConvsearchError):
    code = "unauthorized"
    http_status = 401
    exit_code = 8


class SummarizerError(ConvsearchError):
    """The configured LLM summarizer failed (unreachable, HTTP error, unreadable answer)."""

    code = "summarizer_unavailable"
    http_status = 503
    exit_code = 9


class SettingsError(InvalidInputError):
    """An unknown setting (a misspelled CONVSEARCH_<NAME> or keyword) or a value out of range."""

    code = "invalid_setting"
    exit_code = 10


class ForbiddenError(AuthError):
    """Credentials that are valid but do not cover this request (a user token naming another user)."""

    code = "forbidden"
    http_status = 403


class ServerUnavailableError(ConvsearchError):
    """The server that owns the data directory did not answer."""

    code = "server_unavailable"
    http_status = 503
    exit_code = 12


class IndexingPausedError(ServerUnavailableError):
    """A server is stopping: an index catch-up in progress was left for its next start (the store keeps every message)."""

    code = "indexing_paused"


class StorageFullError(ConvsearchError):
    """The disk (or a file size limit) is full: the write failed and its transaction rolled back."""

    code = "storage_full"
    http_status = 507
    exit_code = 11


_FULL_ERRNOS = frozenset({28, 27, 122})  # ENOSPC, EFBIG, EDQUOT
_FULL_WORDS = ("no space left", "file too large", "disk quota")


def storage_error(exc: BaseException) -> StorageFullError | None:
    """A full disk as a clear error (from an OSError or DuckDB's IOException text); None for anything else."""
    text = str(exc).lower()
    if getattr(exc, "errno", None) in _FULL_ERRNOS or any(word in text for word in _FULL_WORDS):
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return StorageFullError(f"the disk is full ({first}): free some space, then run it again; the failed "
                                "write was not stored, what was stored before it stays (an import's "
                                "earlier batches), and stored ids are skipped")
    return None
