"""Reads that do not wait for another thread's transaction.

One DuckDB connection takes the store's writes, a statement or a transaction at a time under the
Database's lock. An import stores its file in one transaction (all or nothing): at 100k messages
that held the lock ~4 s, at 1M ~36 s, and every read of every user (a day's timeline, the context
payload, the web page) waited behind it (6.6 s for a context read during a 100k import). DuckDB's
connections to one database read side by side, each seeing what was committed (MVCC), so a read
outside the reading thread's own transaction runs on a cursor of a small pool instead.

`release_buffers` lowers DuckDB's memory limit for a moment, which fails a read running then
("failed to pin block"): `held_off` waits for the reads in flight and holds new ones back.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import duckdb

from engine.errors import EngineClosedError

__all__ = ["ReaderPool", "is_read", "CLOSED"]

CLOSED = "this engine is closed: open a new ConversationEngine (or use it inside its `with` block)"


def is_read(sql: str) -> bool:
    """Whether a statement only reads (the store's reads all start with SELECT)."""
    return sql.lstrip()[:6].upper() == "SELECT"


class ReaderPool:
    """Cursors of one database for reads, as many as are read at once (a server's request threads
    come and go: a cursor a thread would pile up), made from a cursor of their own so that making one
    never waits for the writer's connection."""

    def __init__(self, connection: duckdb.DuckDBPyConnection) -> None:
        self._root = connection.cursor()
        self._idle: list[duckdb.DuckDBPyConnection] = []
        self._made = threading.Lock()  # the root makes one cursor at a time
        self._state = threading.Condition()
        self._reading = 0
        self._held = self._closed = False

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor for one read, back in the pool after it."""
        with self._state:
            while self._held:
                self._state.wait()
            if self._closed:  # the engine closed while this read waited
                raise EngineClosedError(CLOSED)
            self._reading += 1
            cursor = self._idle.pop() if self._idle else None
        try:
            if cursor is None:
                with self._made:
                    cursor = self._root.cursor()
            yield cursor
        finally:
            with self._state:
                if cursor is not None:
                    self._idle.append(cursor)
                self._reading -= 1
                if not self._reading:
                    self._state.notify_all()

    @contextmanager
    def held_off(self) -> Iterator[None]:
        """No read runs inside: those in flight are waited for, new ones wait."""
        with self._state:
            self._held = True
            while self._reading:
                self._state.wait()
        try:
            yield
        finally:
            with self._state:
                self._held = False
                self._state.notify_all()

    def close(self) -> None:
        """Close every cursor, once the reads in flight are done."""
        with self.held_off():
            self._closed = True
            for cursor in self._idle:
                cursor.close()
            self._idle.clear()
            self._root.close()
