"""Summary texts made in worker processes, so a bulk ingest, import or backfill uses every core.

A pure summarizer (the extractive one) is a function of the messages alone, so a block of jobs can
be split: the main process reads the turns and writes what was made (it alone holds the store);
the workers only turn messages into Markdown and titles. A job goes to a lane by its day, so a
day's summary and its conversations' read the same messages in one process: each process
memoises the sentences it has read, and a split that ignored days would read most messages
twice. The main process takes no lane: it waits, or indexes the batch meanwhile (`ingest`), and
the same work runs slower there (its garbage collections walk the shard). Small blocks (the live
path's one-message ingest) stay in the main process, where a round trip would cost more than it
saves.

A worker is one of engine/subprocesses.py's processes, sent `texts_of_all` and a block's asks.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from engine.models import Message
from engine.subprocesses import WorkerFailed, WorkerProcess, usable_cores
from engine.summaries.summarizers import Summarizer

__all__ = ["Ask", "Texts", "PendingTexts", "SummaryWorkers", "texts_of", "texts_of_all", "default_workers",
           "PARALLEL_MIN_TURNS", "BULK_MESSAGES"]

log = logging.getLogger("convsearch.summaries")
log.addHandler(logging.NullHandler())

PARALLEL_MIN_TURNS = 1000  # turns a block's jobs read before workers pay off (a worker starts in ~0.5 s, once)
BULK_MESSAGES = PARALLEL_MIN_TURNS // 2  # a batch this large makes such a block: its days' and conversations' turns


@dataclass(frozen=True, slots=True)
class Ask:
    """One summary to make: the turns it quotes, whether it needs a title, and its lane (a day's
    ordinal: one day's jobs meet in one process)."""

    turns: Sequence[Message]
    titled: bool
    lane: int


@dataclass(frozen=True, slots=True)
class Texts:
    markdown: str
    title: str | None  # None when the ask needed none


def texts_of(summarizer: Summarizer, ask: Ask) -> Texts:
    return Texts(summarizer.summarize(ask.turns), summarizer.title(ask.turns) if ask.titled else None)


def texts_of_all(summarizer: Summarizer, asks: Sequence[Ask]) -> list[Texts]:
    return [texts_of(summarizer, ask) for ask in asks]


def default_workers() -> int:
    """As many as the cores the process may use, at most 4; none on one core. The engine indexes
    while they work, yet one worker on 2 cores left it waiting for summaries (100k ingest:
    1,528 msg/s with one, 1,773 with two; docs/benchmarks.md)."""
    cores = usable_cores()
    return min(cores, 4) if cores > 1 else 0


class PendingTexts:
    """A block's texts on their way from the workers; `result` waits for them (and makes here the
    share of a worker that died)."""

    def __init__(self, owner: "SummaryWorkers", summarizer: Summarizer, asks: Sequence[Ask],
                 placed: Sequence[Sequence[int]], futures: Sequence[Future[list[Texts]]]) -> None:
        self.owner, self.summarizer, self.asks, self.placed, self.futures = owner, summarizer, asks, placed, futures

    def result(self) -> list[Texts]:
        made: dict[int, Texts] = {}
        for mine, future in zip(self.placed, self.futures):
            try:
                made.update(zip(mine, future.result()))
            except WorkerFailed as exc:
                self.owner.failed(exc)
        made.update((i, texts_of(self.summarizer, ask)) for i, ask in enumerate(self.asks) if i not in made)
        return [made[i] for i in range(len(self.asks))]


class SummaryWorkers:
    """`processes` summary workers, started on the first block large enough to need them. A
    thread per worker carries its round trips, so the engine can index while they summarise."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._workers: list[WorkerProcess] = []
        self._carriers: ThreadPoolExecutor | None = None

    def start(self, summarizer: Summarizer, asks: Sequence[Ask]) -> PendingTexts | None:
        """The asks sent to the workers, one lane each; None when the block should be made here,
        one job at a time (few turns, no workers, or a summarizer that is not pure, e.g. an LLM's)."""
        if sum(len(ask.turns) for ask in asks) < PARALLEL_MIN_TURNS:
            return None
        ready = self._ready(summarizer)
        if ready is None:
            return None
        workers, carriers = ready
        placed = [[i for i, ask in enumerate(asks) if ask.lane % self.processes == lane]
                  for lane in range(self.processes)]
        futures = [carriers.submit(worker.call, texts_of_all, summarizer, [asks[i] for i in mine])
                   for worker, mine in zip(workers, placed)]
        return PendingTexts(self, summarizer, asks, placed, futures)

    def warm(self, summarizer: Summarizer) -> None:
        """Start the workers now, when a large batch is on its way: a worker takes ~0.5 s to start,
        spent beside the engine storing the batch instead of before its first summaries."""
        self._ready(summarizer)

    def _ready(self, summarizer: Summarizer) -> tuple[list[WorkerProcess], ThreadPoolExecutor] | None:
        """The running workers and their carriers, started if need be; None when `summarizer`
        cannot leave the engine's process (none configured, not pure) or the workers cannot start."""
        if self.processes < 1 or not getattr(summarizer, "pure", False):
            return None
        try:
            while len(self._workers) < self.processes:
                self._workers.append(WorkerProcess())
        except OSError as exc:
            self.failed(exc)
            return None
        if self._carriers is None:
            self._carriers = ThreadPoolExecutor(self.processes, thread_name_prefix="summary-worker")
        return self._workers, self._carriers

    def failed(self, exc: BaseException) -> None:
        log.warning("summary workers failed (%s: %s): the block is summarised in the main process; the next "
                    "large one starts new workers", type(exc).__name__, exc)
        self.close()

    def close(self) -> None:
        workers, self._workers = self._workers, []
        carriers, self._carriers = self._carriers, None
        for worker in workers:
            worker.end_input()  # all at once: they exit side by side
        for worker in workers:
            worker.stop()
        if carriers is not None:
            carriers.shutdown(wait=True)
