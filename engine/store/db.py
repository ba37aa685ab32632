"""The DuckDB connection: opening, numbered migrations, transactions and batch inserts.

DuckDB allows one writer process per file; a second process (or a second engine on the same file in
one process) gets StoreLockedError, never a corrupt file. Inside a process the connection is shared
under one lock, so the HTTP server's worker threads take turns for writes; a read outside the
reader's own transaction runs beside them on a cursor of its own (engine/store/readers.py). An
import's long transaction runs on a connection of its own (`transaction(beside_others=True)`), so it
holds up neither reads nor other users' writes: DuckDB's transactions conflict only on the same rows.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, cast

import duckdb
import pyarrow as pa

from engine.errors import ConvsearchError, EngineClosedError, InvalidInputError, StoreBusyError, StoreLockedError
from engine.store.readers import CLOSED, ReaderPool, is_read

__all__ = ["Database", "SCHEMA_VERSION", "MIGRATIONS", "in_values"]

# Numbered migrations: append, never edit a released one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE users (
        user_id VARCHAR PRIMARY KEY, timezone VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL);
    CREATE TABLE threads (
        thread_id VARCHAR PRIMARY KEY, user_id VARCHAR NOT NULL, mode VARCHAR NOT NULL,
        title VARCHAR, created_at TIMESTAMP NOT NULL);
    CREATE TABLE messages (
        message_id VARCHAR PRIMARY KEY, thread_id VARCHAR NOT NULL, user_id VARCHAR NOT NULL,
        seq BIGINT NOT NULL, role VARCHAR NOT NULL, content VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL, day_label DATE NOT NULL, conversation_id VARCHAR NOT NULL,
        speaker VARCHAR, tools_used VARCHAR[], metadata VARCHAR, external_id VARCHAR,
        kind VARCHAR NOT NULL);
    CREATE TABLE conversations (
        conversation_id VARCHAR PRIMARY KEY, thread_id VARCHAR NOT NULL, user_id VARCHAR NOT NULL,
        ordinal INTEGER NOT NULL, started_at TIMESTAMP NOT NULL, last_message_at TIMESTAMP NOT NULL,
        first_seq BIGINT NOT NULL, last_seq BIGINT NOT NULL, ended_at TIMESTAMP, end_reason VARCHAR,
        title VARCHAR, summary VARCHAR);
    CREATE TABLE day_segments (
        day_segment_id VARCHAR PRIMARY KEY, user_id VARCHAR NOT NULL, thread_id VARCHAR NOT NULL,
        day_label DATE NOT NULL, starts_at_seq BIGINT NOT NULL, ends_at_seq BIGINT NOT NULL,
        summary_markdown VARCHAR, updated_at TIMESTAMP NOT NULL);
    CREATE TABLE summaries (
        summary_id VARCHAR PRIMARY KEY, thread_id VARCHAR NOT NULL, user_id VARCHAR NOT NULL,
        kind VARCHAR NOT NULL, from_seq BIGINT NOT NULL, to_seq BIGINT NOT NULL,
        markdown VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL,
        day_label DATE, conversation_id VARCHAR, title VARCHAR, message_count INTEGER NOT NULL);
    CREATE TABLE embedding_cache (
        user_id VARCHAR NOT NULL, model VARCHAR NOT NULL, content_hash VARCHAR NOT NULL,
        vector FLOAT[] NOT NULL, PRIMARY KEY (user_id, model, content_hash));
    """,
    # 2: a thread's highest seq ever given, so a deleted last message's seq is never reused
    """
    ALTER TABLE threads ADD COLUMN last_seq BIGINT DEFAULT 0;
    UPDATE threads SET last_seq = (SELECT coalesce(max(seq), 0) FROM messages m WHERE m.thread_id = threads.thread_id);
    """,
    # 3: summaries' vectors apart from the windows': a lookup by hash scans the whole vector column,
    # ~3 GB at 1M messages, which DuckDB's buffer pool then kept in a serving process. The summaries'
    # vectors cached so far move over (their key is `summary_key`: sha256 of the title, a newline
    # and the Markdown, or of the Markdown alone when there is no title).
    """
    CREATE TABLE summary_embeddings (
        user_id VARCHAR NOT NULL, model VARCHAR NOT NULL, content_hash VARCHAR NOT NULL,
        vector FLOAT[] NOT NULL, PRIMARY KEY (user_id, model, content_hash));
    INSERT INTO summary_embeddings
    SELECT e.user_id, e.model, e.content_hash, e.vector FROM embedding_cache e
    JOIN (SELECT DISTINCT user_id, sha256(CASE WHEN coalesce(title, '') = '' THEN markdown
                                               ELSE title || chr(10) || markdown END) AS content_hash
          FROM summaries) s ON s.user_id = e.user_id AND s.content_hash = e.content_hash;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
# Rows up to which an insert is a parametrised VALUES statement: one row took 1.3 ms of CPU so, 2.8-3.3
# ms through a registered Arrow table (a 10k store, 100 inserts each way in one transaction).
SMALL_INSERT_ROWS = 8
# Values up to which `in_values` writes a list inline: `x IN (SELECT unnest(?))` costs DuckDB ~1-2 ms
# more than `x IN (?, ?)` on the live path's one or two ids (2.3 against 1.0 ms for a message id at
# 10k messages); for many values the semi-join is the fast one (list_contains tests every row).
INLINE_VALUES = 8
# DuckDB's threads. The lock below runs one statement at a time, and the store's statements are
# small (bulk reads are bound by turning rows into Python objects), so a second thread only adds its
# hand-offs: a live one-message ingest took 15 % less CPU on one (10k store; 5 % at 100k, p90 14 %),
# bulk ingest, import and reindex the same. The other core is the summary workers' and searches'.
DUCKDB_THREADS = 1
# How long a read waits for the writer's lock before it looks again whether a transaction holds it
# (then it reads on a cursor of its own: engine/store/readers.py).
READ_RETRY_S = 0.01


# What a failed commit's message says when another transaction wrote the same rows (or took the same key)
_CONFLICTS = ("conflict", "constraint violation", "duplicate key")

# What DuckDB raises for a parameter it cannot bind (a number or list where an id belongs, a lone
# surrogate, an arbitrary object): the caller's value, not the SQL, so it is the caller's error.
_VALUE_ERRORS = (duckdb.ConversionException, duckdb.InvalidInputException, duckdb.NotImplementedException)


def in_values(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """`column IN (values)` (string values: ids) and its parameters, the cheaper way for the list's size."""
    if not values:
        return "FALSE", []
    if len(values) <= INLINE_VALUES:
        return f"{column} IN ({', '.join('?' * len(values))})", list(values)
    return f"{column} IN (SELECT unnest(?::VARCHAR[]))", [list(values)]


@contextmanager
def _values_checked() -> Iterator[None]:
    try:
        yield
    except _VALUE_ERRORS as exc:
        reason = str(exc).splitlines()[0][:200]
        raise InvalidInputError(
            f"a value does not fit its field ({reason}): ids, names and text must be strings, seqs and limits integers"
        ) from None


def _make_folder(folder: Path) -> None:
    """The data directory, created when missing; a file in its place is the caller's mistake, said so."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InvalidInputError(f"{folder} is a file, not a data directory: pick a directory (--home, "
                                "CONVSEARCH_HOME)") from None


class _ClosedConnection:
    """What a closed Database holds: any use says the engine is closed (not DuckDB's "Connection
    already closed!"); closing again does nothing."""

    def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        raise EngineClosedError(CLOSED)


_OPEN_HERE: set[str] = set()  # the store files this process has open
_OPEN_GUARD = threading.Lock()


def _claimed(path: str, owner: object) -> Callable[[], None]:
    """Claim a store file for one Database of this process; the returned call (also run when the owner
    is collected) gives it back. DuckDB lets a process open a file twice, but two engines on one
    directory each keep their own indexes and locks: one would keep finding what the other deleted."""
    if path == ":memory:":
        return lambda: None
    key = str(Path(path).resolve())
    with _OPEN_GUARD:
        if key in _OPEN_HERE:
            raise StoreLockedError(f"the store {path} is already open in this process (another ConversationEngine "
                                   "on the same directory): use that engine, or close it before opening another")
        _OPEN_HERE.add(key)
    return weakref.finalize(owner, _give_back, key)


def _give_back(key: str) -> None:
    with _OPEN_GUARD:
        _OPEN_HERE.discard(key)


class Database:
    """One DuckDB connection with migrations applied; `path` may be ':memory:'."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            _make_folder(Path(self.path).parent)
        self._release = _claimed(self.path, self)
        try:
            self._con = duckdb.connect(self.path, read_only=read_only)
        except duckdb.IOException as exc:
            self._release()
            if "lock" in str(exc).lower():
                raise StoreLockedError(
                    f"the store {self.path} is open for writing in another process "
                    "(DuckDB allows one writer): stop that process or send requests to its server"
                ) from None
            raise ConvsearchError(f"cannot open the store {self.path}: {exc}") from None
        self._con.execute(f"SET threads = {DUCKDB_THREADS}")
        self._lock = threading.RLock()
        self._depth = 0
        self._writer: int | None = None  # the thread whose transaction is open on the shared connection
        self._own = threading.local()  # this thread's transaction on a connection of its own: .cursor, .depth
        self._beside = 0  # transactions open on connections of their own (under the lock)
        self._beside_done = threading.Condition(self._lock)
        self._readers: ReaderPool | None = None  # none until migrated: the first reads see the new schema
        if not read_only:
            self._migrate()
        self._readers = ReaderPool(self._con)

    def close(self) -> None:
        with self._lock:
            self._beside_done.wait_for(lambda: not self._beside)  # an import in flight commits or rolls back first
            readers, self._readers = self._readers, None
            if readers is not None:
                readers.close()
            self._con.close()
            self._con = cast(duckdb.DuckDBPyConnection, _ClosedConnection())
        self._release()

    @contextmanager
    def transaction(self, *, beside_others: bool = False) -> Iterator[None]:
        """All-or-nothing: nested calls join the outer transaction. `beside_others`: on a connection
        of its own, so other threads' statements and transactions run meanwhile; for a long write
        (an import) whose rows no one else writes (the caller holds those users' writer locks)."""
        if self._own_cursor() is not None:
            self._own.depth += 1
            try:
                yield
            finally:
                self._own.depth -= 1
            return
        if beside_others and self._writer != threading.get_ident():
            with self._transaction_beside():
                yield
            return
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self._con.execute("BEGIN TRANSACTION")
            self._depth, self._writer = 1, threading.get_ident()
            try:
                yield
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
            else:
                self._con.execute("COMMIT")
            finally:
                self._depth, self._writer = 0, None

    @contextmanager
    def _transaction_beside(self) -> Iterator[None]:
        """A transaction on a cursor of this thread's own (its statements take no lock); a commit that
        conflicts with another transaction's rows is StoreBusyError; `close` waits for it to end."""
        with self._lock:
            cursor = self._con.cursor()
            self._beside += 1
        try:
            cursor.execute("BEGIN TRANSACTION")
            self._own.cursor, self._own.depth = cursor, 1
            try:
                yield
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            try:
                cursor.execute("COMMIT")
            except duckdb.TransactionException as exc:
                if not any(word in str(exc).lower() for word in _CONFLICTS):
                    raise  # a full disk, say: the caller's handlers say it
                raise StoreBusyError(f"another write changed the same rows meanwhile ({str(exc).splitlines()[0][:200]}); "
                                     "nothing of this one was stored: run it again") from None
        finally:
            self._own.cursor = None
            cursor.close()
            with self._lock:
                self._beside -= 1
                self._beside_done.notify_all()

    def _own_cursor(self) -> duckdb.DuckDBPyConnection | None:
        """The cursor of this thread's transaction beside the others, if one is open."""
        return getattr(self._own, "cursor", None)

    def in_transaction(self) -> bool:
        """Whether this thread is inside a transaction (what it reads may yet roll back)."""
        return self._own_cursor() is not None or self._writer == threading.get_ident()

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        with self._connection_for(sql) as connection, _values_checked():
            return connection.execute(sql, params or []).fetchall()

    def fetch_arrow(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        with self._connection_for(sql) as connection, _values_checked():
            return connection.sql(sql, params=list(params or [])).to_arrow_table()

    @contextmanager
    def _connection_for(self, sql: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """The writer's connection, under the lock. A read outside this thread's own transaction that
        finds the lock held by another thread's transaction runs on a reader cursor instead of
        waiting for it; when the lock is free it takes the writer's connection, where a point read
        costs less (406-420 against 432-457 us on a reader cursor). Inside this thread's transaction
        beside the others, its own connection."""
        own = self._own_cursor()
        if own is not None:
            yield own
            return
        readers = self._readers
        if readers is None or self._writer == threading.get_ident() or not is_read(sql):
            with self._lock:
                yield self._con
            return
        while not self._lock.acquire(timeout=READ_RETRY_S):
            if self._writer is not None:  # another thread's transaction: read beside it
                with readers.cursor() as cursor:
                    yield cursor
                return
        try:
            yield self._con
        finally:
            self._lock.release()

    def insert_arrow(self, table_name: str, batch: pa.Table, *, or_ignore: bool = False) -> None:
        """Insert a batch by column name: ~1M rows/s, where row-at-a-time runs at ~1k/s; up to
        SMALL_INSERT_ROWS rows go in as one VALUES statement instead (the live path's one message).
        `or_ignore`: rows whose primary key is already there are skipped, not an error. Outside a
        transaction a plain insert is tried first, and "or ignore" only if a key clashes: DuckDB's
        "or ignore" costs 5-30x a plain insert into a large keyed table (two rows into 130k cache
        entries: 13-69 ms against 2-3 ms of CPU). A failed statement rolls back alone there; inside a
        transaction it would abort the transaction, so "or ignore" is used at once."""
        if batch.num_rows == 0:
            return
        columns = ", ".join(batch.column_names)
        with self._writing() as (connection, in_transaction), _rows_of(connection, batch, columns) as (rows, values):
            insert = f"INTO {table_name} ({columns}) {rows}"
            if not or_ignore:
                connection.execute(f"INSERT {insert}", values)
            elif in_transaction:
                connection.execute(f"INSERT OR IGNORE {insert}", values)
            else:
                _insert_or_ignore(connection, insert, values)

    @contextmanager
    def _writing(self) -> Iterator[tuple[duckdb.DuckDBPyConnection, bool]]:
        """The connection this thread writes on, and whether a transaction is open on it."""
        own = self._own_cursor()
        if own is not None:
            yield own, True
            return
        with self._lock:
            yield self._con, bool(self._depth)

    def execute_with(self, batch: pa.Table, sql: str, params: Sequence[Any] | None = None) -> None:
        """Run `sql` with `batch` readable as the table `_batch` (one UPDATE ... FROM _batch for many rows)."""
        if batch.num_rows == 0:
            return
        with self._writing() as (connection, _), _values_checked():
            connection.register("_batch", batch)
            try:
                connection.execute(sql, params or [])
            finally:
                connection.unregister("_batch")

    def schema_version(self) -> int:
        rows = self.execute("SELECT max(version) FROM schema_version")
        return int(rows[0][0] or 0)

    def _migrate(self) -> None:
        with self._lock:
            self._con.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at TIMESTAMP NOT NULL)"
            )
            current = self.schema_version()
            if current > SCHEMA_VERSION:
                raise ConvsearchError(
                    f"the store {self.path} has schema version {current}, newer than this convsearch "
                    f"({SCHEMA_VERSION}): upgrade convsearch"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                with self.transaction():
                    self._con.execute(MIGRATIONS[version - 1])
                    self._con.execute("INSERT INTO schema_version VALUES (?, now())", [version])
            if current < SCHEMA_VERSION:
                self.release_buffers()  # a migration may have read whole tables

    @contextmanager
    def reads_held_off(self) -> Iterator[None]:
        """No read runs on a reader cursor inside (the memory limit is about to be lowered)."""
        if self._readers is None:
            yield
            return
        with self._readers.held_off():
            yield

    def release_buffers(self) -> None:
        """Drop the table blocks DuckDB keeps cached after a read: it frees them only to stay under
        its memory limit (80% of RAM), so a one-off read of a whole table would stay resident in a
        serving process. The limit is lowered for a moment; what is pinned stays. In memory there is
        nothing to re-read: the blocks are the data, and DuckDB would spill them to a temp directory."""
        if self.path == ":memory:":
            return
        with self._lock, self.reads_held_off():
            if self._beside:
                return  # an import's statements would fail to pin their blocks: the next call frees them
            try:
                self._con.execute("SET memory_limit = '1MB'")
            except duckdb.Error:
                pass  # more than that is pinned (a transaction's data): what could go went
            finally:
                self._con.execute("RESET memory_limit")


@contextmanager
def _rows_of(connection: duckdb.DuckDBPyConnection, batch: pa.Table, columns: str) -> Iterator[tuple[str, list[Any]]]:
    """The batch as an INSERT's rows and their parameters: up to SMALL_INSERT_ROWS rows as one
    parametrised VALUES list (the live path's message and vectors, where registering an Arrow
    table costs more than the insert), more as the registered table `_batch`."""
    if batch.num_rows <= SMALL_INSERT_ROWS:
        row = "(" + ", ".join("?" * batch.num_columns) + ")"
        yield (f"VALUES {', '.join([row] * batch.num_rows)}",
               [value for record in batch.to_pylist() for value in record.values()])
        return
    connection.register("_batch", batch)
    try:
        yield f"SELECT {columns} FROM _batch", []
    finally:
        connection.unregister("_batch")


def _insert_or_ignore(connection: duckdb.DuckDBPyConnection, insert: str, values: list[Any]) -> None:
    """Outside a transaction: the cheap plain insert, and "or ignore" when a key was already there."""
    try:
        connection.execute(f"INSERT {insert}", values)
    except duckdb.ConstraintException:
        connection.execute(f"INSERT OR IGNORE {insert}", values)
