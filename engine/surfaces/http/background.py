"""The server's background step: every few seconds, `engine.maintain()` in a thread of its own.

It embeds messages still without vectors (sent with `index: false`, or caught up after a crash)
and saves changed index shards, so nobody has to run `convsearch index` beside a server and a
restart replays little. A failing step is logged and retried at the next tick; it never stops.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["Maintainer"]

log = logging.getLogger("convsearch.background")


class Maintainer:
    def __init__(self, engine: Any, interval_s: float) -> None:
        self.engine, self.interval_s = engine, interval_s
        self.steps = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="convsearch-maintain", daemon=True)

    def start(self) -> "Maintainer":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the step in progress, then run one last step (saves what changed)."""
        self._stop.set()
        self._thread.join()
        self._step()

    def _loop(self) -> None:
        while True:
            self._step()
            if self._stop.wait(self.interval_s):
                return

    def _step(self) -> None:
        try:
            users = self.engine.maintain()
            self.last_error = None
            if users:
                log.info("maintain.indexed users=%s", users)
        except Exception as exc:  # keep serving; the next tick retries
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("maintain.failed")
        self.steps += 1
