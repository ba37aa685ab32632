"""Which summaries of a user changed, by revision, so the in-memory summary index updates only those.

Why: rebuilding a user's summary index from the store re-reads and re-tokenizes every summary (at
100k messages, 5,910 summaries: ~1 s of CPU), and the live path writes a summary every few turns,
so the first search after each such ingest paid that second. Only this process's writes are
counted (a second writer is refused: one server per store).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Iterable

__all__ = ["SummaryChanges", "CHANGE_LOG"]

CHANGE_LOG = 256
"""Changes remembered per user; a reader further behind rebuilds from the store."""


class SummaryChanges:
    """Per user: a revision bumped by every write of their summaries, and the ids each write touched."""

    def __init__(self) -> None:
        self._revisions: dict[str, int] = {}
        self._log: dict[str, deque[tuple[int, frozenset[str] | None]]] = {}
        self._lock = threading.Lock()

    def revision(self, user_id: str) -> int:
        """How many times the user's summaries changed in this process (0 before any change)."""
        return self._revisions.get(user_id, 0)

    def bump(self, user_id: str, summary_ids: Iterable[str] | None) -> None:
        """Record a write: of these summaries, or (None) of any number of them."""
        with self._lock:
            revision = self._revisions.get(user_id, 0) + 1
            changed = frozenset(summary_ids) if summary_ids is not None else None
            self._log.setdefault(user_id, deque(maxlen=CHANGE_LOG)).append((revision, changed))
            self._revisions[user_id] = revision

    def since(self, user_id: str, revision: int) -> frozenset[str] | None:
        """The ids of the summaries written or deleted after `revision`; None when that is not known
        (a write of all of them, or more writes since than the log keeps)."""
        with self._lock:
            if revision == self._revisions.get(user_id, 0):
                return frozenset()
            log = tuple(self._log.get(user_id, ()))
        if not log or log[0][0] > revision + 1:
            return None
        changed: set[str] = set()
        for at, ids in log:
            if at > revision:
                if ids is None:
                    return None
                changed |= ids
        return frozenset(changed)
