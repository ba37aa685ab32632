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

A worker is one of engine/subprocesses.py's processes, sent `texts_of_wired` and a block's asks,
each turn as the four fields a summarizer reads (`Spoken`): pickling whole Messages, with their
times and metadata, cost the engine ~2 CPU s per 100k turns sent, and the worker as much again.
Each worker has its own carrier thread, so one that finishes its share of a block goes on to its
share of the next instead of waiting for the other.

While a bulk batch is being stored, its turns go to the worker of their day as they are stored, and
it reads them ahead (memoises their sentences' records), up to what its memo holds: the workers
would sit idle until the summaries began, and the first blocks' turns are then read already. One
worker reads at a time, so the engine storing the rest keeps a core (two at once slowed the store
by a third).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from typing import NamedTuple, Sequence, cast

from engine.models import Message
from engine.subprocesses import WorkerFailed, WorkerProcess, usable_cores
from engine.summaries.summarizers import PureSummarizer, Summarizer, quotable
from engine.summaries.text import MEMO_MAX_CHARS, MEMO_SIZE

__all__ = ["Ask", "Texts", "TurnText", "DistinctAsks", "distinct_asks", "PendingTexts", "SummaryWorkers", "texts_of",
           "texts_of_wired", "read_ahead_of", "lane_of", "default_workers", "PARALLEL_MIN_TURNS", "BULK_MESSAGES",
           "READ_AHEAD_TURNS"]

log = logging.getLogger("convsearch.summaries")
log.addHandler(logging.NullHandler())

PARALLEL_MIN_TURNS = 1000  # turns a block's jobs read before workers pay off (a worker starts in ~0.5 s, once)
BULK_MESSAGES = PARALLEL_MIN_TURNS // 2  # a batch this large makes such a block: its days' and conversations' turns
READ_AHEAD_TURNS = MEMO_SIZE  # turns a worker reads ahead of a bulk store's summaries: what its memo keeps


def lane_of(day: date) -> int:
    """A job's lane, by the day of the first turn it quotes: one day's jobs meet in one process."""
    return day.toordinal()


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


@dataclass(frozen=True, slots=True)
class DistinctAsks:
    """A block's asks, one per list of turns: a day with one conversation quotes the same turns as
    that conversation (every LoCoMo session, each conversation of a chat export), and a summary is a
    function of its turns alone. `of[i]` is ask i's distinct one, titled when any of its copies is."""

    asks: list[Ask]
    of: list[int]


def distinct_asks(asks: Sequence[Ask]) -> DistinctAsks:
    """The asks made distinct by their turns (see DistinctAsks)."""
    found: dict[tuple[int, ...], int] = {}  # the turns' identities: asks slice the same turns in hand
    distinct: list[Ask] = []
    of: list[int] = []
    for ask in asks:
        at = found.setdefault(tuple(map(id, ask.turns)), len(distinct))
        if at == len(distinct):
            distinct.append(ask)
        elif ask.titled and not distinct[at].titled:
            distinct[at] = Ask(distinct[at].turns, True, distinct[at].lane)
        of.append(at)
    return DistinctAsks(distinct, of)


def texts_of(summarizer: Summarizer, ask: Ask) -> Texts:
    return Texts(summarizer.summarize(ask.turns), summarizer.title(ask.turns) if ask.titled else None)


class TurnText(NamedTuple):
    """A turn as a worker receives it: what the summarizer reads of a Message (`Spoken`)."""

    role: str
    content: str
    speaker: str | None
    kind: str


Wired = list[tuple[list[tuple[str, str, str | None, str]], bool]]  # each ask's turns' fields, and `titled`


def _wired(asks: Sequence[Ask]) -> Wired:
    """The asks as plain tuples; a message quoted by two asks (its day's and its conversation's) is
    one tuple, which pickle sends once."""
    fields: dict[int, tuple[str, str, str | None, str]] = {}
    for message in (m for ask in asks for m in ask.turns):
        if id(message) not in fields:
            fields[id(message)] = (message.role, message.content, message.speaker, message.kind)
    return [([fields[id(m)] for m in ask.turns], ask.titled) for ask in asks]


def texts_of_wired(summarizer: PureSummarizer, asks: Wired) -> list[Texts]:
    """What a worker runs: each ask's texts, from its turns' fields (a worker puts off young
    collections for its life, engine/subprocesses.py: its memo of sentence records lives on)."""
    made = []
    for turns, titled in asks:
        spoken = [TurnText._make(turn) for turn in turns]
        made.append(Texts(summarizer.summarize(spoken), summarizer.title(spoken) if titled else None))
    return made


def read_ahead_of(summarizer: PureSummarizer, texts: Sequence[str]) -> int:
    """What a worker runs to read turns ahead (`SummaryWorkers.read_ahead`); how many it read."""
    summarizer.read_ahead(texts)
    return len(texts)


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
        self._carriers: list[ThreadPoolExecutor] = []  # one a worker: its calls queue behind its own
        self._reader: ThreadPoolExecutor | None = None  # carries the read-ahead calls, one at a time
        self._read_ahead = [0] * processes  # turns each worker was sent to read in this bulk store

    def start(self, summarizer: Summarizer, asks: Sequence[Ask]) -> PendingTexts | None:
        """The asks sent to the workers, one lane each; None when the block should be made here,
        one job at a time (few turns, no workers, or a summarizer that is not pure, e.g. an LLM's)."""
        if sum(len(ask.turns) for ask in asks) < PARALLEL_MIN_TURNS:
            return None
        ready = self._ready(summarizer)
        if ready is None:
            return None
        pure = cast(PureSummarizer, summarizer)  # `_ready` checked that it is
        placed = [[i for i, ask in enumerate(asks) if self._worker_of(ask.lane) == at] for at in range(self.processes)]
        futures = [carrier.submit(worker.call, texts_of_wired, pure, _wired([asks[i] for i in mine]))
                   for worker, carrier, mine in zip(*ready, placed)]
        return PendingTexts(self, summarizer, asks, placed, futures)

    def _worker_of(self, lane: int) -> int:
        """The worker that takes a lane's jobs, and reads its turns ahead."""
        return lane % self.processes

    def warm(self, summarizer: Summarizer) -> None:
        """Start the workers now, when a large batch is on its way: a worker takes ~0.5 s to start,
        spent beside the engine storing the batch instead of before its first summaries. The
        batch's turns may then be read ahead, afresh."""
        self._ready(summarizer)
        self._read_ahead = [0] * self.processes

    def read_ahead(self, summarizer: Summarizer, stored: Sequence[Message]) -> None:
        """Send the quotable turns just stored (those a memo keeps) to the worker of their day, up
        to READ_AHEAD_TURNS a worker since `warm`, to be read there while the engine stores the
        rest (see the module's docstring). Nothing is sent when the workers are not running."""
        if not self._workers or not getattr(summarizer, "pure", False):
            return
        texts: list[list[str]] = [[] for _ in range(self.processes)]
        for turn in quotable(stored):
            if len(turn.content) > MEMO_MAX_CHARS:
                continue  # not memoised: read where it is quoted
            at = self._worker_of(lane_of(turn.day_label))
            if self._read_ahead[at] < READ_AHEAD_TURNS:
                self._read_ahead[at] += 1
                texts[at].append(turn.content)
        if self._reader is None:
            self._reader = ThreadPoolExecutor(1, thread_name_prefix="summary-read-ahead")
        pure = cast(PureSummarizer, summarizer)
        for worker, mine in zip(self._workers, texts):
            if mine:  # a failure shows in the worker's next block, which is then made here
                self._reader.submit(worker.call, read_ahead_of, pure, mine)

    def _ready(self, summarizer: Summarizer) -> tuple[list[WorkerProcess], list[ThreadPoolExecutor]] | None:
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
        while len(self._carriers) < self.processes:
            self._carriers.append(ThreadPoolExecutor(1, thread_name_prefix="summary-worker"))
        return self._workers, self._carriers

    def failed(self, exc: BaseException) -> None:
        log.warning("summary workers failed (%s: %s): the block is summarised in the main process; the next "
                    "large one starts new workers", type(exc).__name__, exc)
        self.close()

    def close(self) -> None:
        workers, self._workers = self._workers, []
        carriers, self._carriers = self._carriers, []
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.shutdown(wait=True, cancel_futures=True)  # before the workers' input ends
        for worker in workers:
            worker.end_input()  # all at once: they exit side by side
        for worker in workers:
            worker.stop()
        for carrier in carriers:
            carrier.shutdown(wait=True)
