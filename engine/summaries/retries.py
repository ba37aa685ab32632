"""Summaries that failed (the summarizer was down) and wait for a retry, so an ingest never fails for them.

The message is stored before any summary is attempted; a failed day or conversation summary is
queued here and retried by the next ingest of that user and by the server's background step, no
sooner than `RETRY_AFTER_S` after its last failure. The queue lives in memory: after a restart a
day's summary is rewritten at the day's next update, a conversation's by `end`/`summarize`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Literal

__all__ = ["SummaryJob", "RetryQueue", "RETRY_AFTER_S"]

RETRY_AFTER_S = 2.0


@dataclass(frozen=True, slots=True)
class SummaryJob:
    user_id: str
    kind: Literal["day", "conversation"]
    target: str  # a day_segment_id or a conversation_id
    thread_id: str


class RetryQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._failed: dict[SummaryJob, tuple[str, float]] = {}  # job -> (error, when)
        self._lock = threading.Lock()
        self.last_error: str | None = None

    def failed(self, job: SummaryJob, error: str) -> None:
        with self._lock:
            self._failed[job] = (error, self.clock())
            self.last_error = error

    def succeeded(self, job: SummaryJob) -> None:
        with self._lock:
            self._failed.pop(job, None)

    def due(self, user_id: str | None = None) -> list[SummaryJob]:
        """Failed jobs (of one user, or all) whose last try is at least RETRY_AFTER_S old."""
        now = self.clock()
        with self._lock:
            return [job for job, (_, when) in self._failed.items()
                    if now - when >= RETRY_AFTER_S and user_id in (None, job.user_id)]

    def status(self) -> dict[str, object]:
        with self._lock:
            return {"pending_retries": len(self._failed), "last_error": self.last_error if self._failed else None}
