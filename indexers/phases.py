"""Seconds per phase of a job (ingest, import, index, reindex), for the rates its report gives."""

from __future__ import annotations

from contextlib import contextmanager
from time import perf_counter
from typing import Iterator

__all__ = ["Phases", "per_second"]


class Phases:
    """Wall seconds spent in each named phase; a phase timed twice adds up."""

    def __init__(self) -> None:
        self.started = perf_counter()
        self._seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        began = perf_counter()
        try:
            yield
        finally:
            self._seconds[name] = self._seconds.get(name, 0.0) + perf_counter() - began

    def elapsed(self) -> float:
        return perf_counter() - self.started

    def seconds(self) -> dict[str, float]:
        """Each phase's seconds (to 0.1 ms), in the order they first ran."""
        return {name: round(value, 4) for name, value in self._seconds.items()}


def per_second(count: int, seconds: float) -> float:
    """A rate for a report (0 when nothing was timed)."""
    return round(count / seconds, 1) if seconds > 0 else 0.0
