"""Writer locks of one engine: one per user, so a write for one user never waits on another user's
indexing, plus `everyone()` for work across users (imports of many users, index --all, doctor).

`everyone()` waits for the per-user writers in flight and holds new ones off; both are re-entrant
in their own thread. `users()` holds several users' locks (an import's), taken in one order so two
such holders never wait on each other in a circle. The store's own lock still serialises the short
SQL statements.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from typing import Callable, Iterable, Iterator

__all__ = ["WriterLocks"]


class WriterLocks:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._users: dict[str, threading.RLock] = {}
        self._busy = 0  # per-user writers inside their lock, over all threads
        self._owner: int | None = None  # the thread holding everyone()
        self._depth = 0
        self._mine = threading.local()  # this thread's per-user holds (it may take everyone() inside one)
        self._waiting: dict[str, int] = {}  # writers asking for each user's lock that do not hold it yet

    @contextmanager
    def user(self, user_id: str) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            # a thread already holding a user's lock goes on: an everyone() waiting waits for it anyway
            self._cond.wait_for(lambda: self._owner in (None, me) or getattr(self._mine, "count", 0) > 0)
            self._busy += 1
            self._waiting[user_id] = self._waiting.get(user_id, 0) + 1
            lock = self._users.setdefault(user_id, threading.RLock())
        self._mine.count = getattr(self._mine, "count", 0) + 1
        try:
            with _acquired(lock, lambda: self._arrived(user_id)):
                yield
        finally:
            self._mine.count -= 1
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    @contextmanager
    def users(self, user_ids: Iterable[str]) -> Iterator[None]:
        """Each of these users' locks, taken in sorted order."""
        with ExitStack() as held:
            for user_id in sorted(set(user_ids)):
                held.enter_context(self.user(user_id))
            yield

    def let_waiters_in(self, user_id: str, timeout_s: float = 5.0) -> None:
        """Return once the writers already waiting for the user's lock have taken it: a loop that
        releases the lock between slices of work calls this before taking it again, since a lock
        released and at once re-taken by its thread is rarely handed to the waiting one (a live
        ingest waited three 0.6 s slices of a backlog instead of one)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._waiting.get(user_id), timeout_s)

    def _arrived(self, user_id: str) -> None:
        with self._cond:
            self._waiting[user_id] -= 1
            if not self._waiting[user_id]:
                del self._waiting[user_id]
            self._cond.notify_all()

    @contextmanager
    def everyone(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            self._cond.wait_for(lambda: self._owner in (None, me))
            self._owner, self._depth = me, self._depth + 1
            own = getattr(self._mine, "count", 0)
            self._cond.wait_for(lambda: self._busy <= own)  # the others finish; ours are this very call stack
        try:
            yield
        finally:
            with self._cond:
                self._depth -= 1
                if self._depth == 0:
                    self._owner = None
                self._cond.notify_all()


@contextmanager
def _acquired(lock: threading.RLock, arrived: Callable[[], None]) -> Iterator[None]:
    """`with lock`, calling `arrived` once it is held (or the wait failed)."""
    try:
        lock.acquire()
    finally:
        arrived()
    try:
        yield
    finally:
        lock.release()
