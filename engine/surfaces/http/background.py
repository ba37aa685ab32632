"""The server's timers: one thread that runs each periodic job of `serve` when it is due.

Two jobs: `index` (`engine.maintain()` every `index_interval_s`) embeds messages still without
vectors (sent with `index: false`, or caught up after a crash) and saves changed index shards, so
nobody has to run `convsearch index` beside a server and a restart replays little; `finalize`
(`engine.finalize_days()` every `finalize_every_minutes`, 0: off) is the scheduled close of idle
conversations and days that are over. A failing run is logged and retried when the job is next
due; it never stops the server. Both take writer locks, so running them in turn costs nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Sequence

if TYPE_CHECKING:
    from engine.api import ConversationEngine

__all__ = ["Job", "Scheduler", "serving_jobs"]

log = logging.getLogger("convsearch.background")


@dataclass
class Job:
    """`run` every `every_s` seconds, the first time `first_s` after the start; its count and last error."""

    name: str
    run: Callable[[], Any]
    every_s: float
    first_s: float = 0.0
    on_stop: bool = False  # run once more when the scheduler stops (the index job saves what changed)
    steps: int = 0
    last_error: str | None = None

    def step(self) -> None:
        try:
            self.run()
            self.last_error = None
        except Exception as exc:  # keep serving; the next time it is due retries
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("%s.failed", self.name)
        self.steps += 1


class Scheduler:
    """Runs its jobs in one daemon thread, each when it is due, until `stop`."""

    def __init__(self, jobs: Sequence[Job], *, interrupt: Callable[[], ContextManager[None]] = nullcontext) -> None:
        self.jobs = {job.name: job for job in jobs}
        self._interrupt = interrupt  # held while stopping: cuts the run in progress short
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="convsearch-background", daemon=True)

    def start(self) -> "Scheduler":
        if self.jobs:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the run in progress, then run the `on_stop` jobs once (the index saves what changed),
        all under `interrupt` (the server's: embedding pauses, so a backlog waits for the next start)."""
        with self._interrupt():
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join()
            for job in self.jobs.values():
                if job.on_stop:
                    job.step()

    def _loop(self) -> None:
        began = time.monotonic()
        due = {name: began + job.first_s for name, job in self.jobs.items()}
        while True:
            for name, job in self.jobs.items():
                if time.monotonic() >= due[name]:
                    job.step()
                    due[name] = time.monotonic() + job.every_s
            if self._stop.wait(max(0.0, min(due.values()) - time.monotonic())):
                return


def serving_jobs(engine: ConversationEngine, *, maintain: bool) -> list[Job]:
    """`serve`'s jobs: the index step (with `maintain`) and the scheduled close (unless set to 0)."""
    jobs = []
    if maintain:
        jobs.append(Job("index", lambda: _index_step(engine), engine.settings.index_interval_s, on_stop=True))
    every_s = engine.settings.finalize_every_minutes * 60
    if every_s > 0:
        jobs.append(Job("finalize", engine.finalize_days, every_s, first_s=every_s))
    return jobs


def _index_step(engine: ConversationEngine) -> None:
    users = engine.maintain()
    if users:
        log.info("maintain.indexed users=%s", users)
