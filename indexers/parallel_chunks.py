"""A long thread chunked on several cores, window for window as `chunk_thread` alone chunks it.

Chunking is restartable (indexers/chunking.py): from any window start s of a whole run, chunking the
messages from s on yields the whole run's windows from s on. So the thread is cut into segments:
the engine's process chunks the first, worker processes (engine/subprocesses.py) the others, each
from its cut to a little past the next one. Where a segment's windows reach a start of the next
segment's windows, the next segment's take over. On a 100k-message generated thread the two
met at the cut's first or second window; where they do not meet, the caller chunks the thread
alone. Workers also tokenize their windows for BM25, the other half of a build's CPU, and send
the tokens encoded (indexers/encoded_tokens.py). The engine's own share is chunked in pieces of
OWN_PIECE messages, each from the last window the piece before began (`chunk_here`), so that a
stopping server (`stop`) leaves a long catch-up between two pieces, not after it.
"""

from __future__ import annotations

import bisect
import logging
import operator
import pickle
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from typing import Callable, Iterable, Sequence

from engine.errors import IndexingPausedError
from engine.subprocesses import WorkerProcess
from indexers.chunking import Chunk, ChunkParams, TokenCounter, Turn, TurnRow, chunk_thread
from indexers.encoded_tokens import EncodedTokens
from indexers.lexical import LexicalTokenizer

__all__ = ["NO_WORKERS", "PARALLEL_MIN_MESSAGES", "OWN_PIECE", "ChunkWorkers", "Chunked", "Stop", "chunk_here",
           "chunk_in_parallel", "chunk_segment", "never", "stitched", "tokens_of"]

log = logging.getLogger("convsearch.index")

PARALLEL_MIN_MESSAGES = 10_000  # below this a worker's start (~0.5 s) and the transfer outweigh the saving
# The engine's segment is this many times a worker's: the worker sends its windows back (~0.5 s of a
# 100k build) and its answer is unpickled on the engine's side. Its start now runs during the read
# (ChunkWorkers.start_for); twelve runs each of a 100k build: median 6.57 s at 1.05, 6.71 at 1.15,
# 6.86 at 1.25 (six at 0.95: 6.75; docs/benchmarks.md).
OWN_WEIGHT = 1.05
_REACH = 256  # messages a segment reads past the next one's cut, so that the two meet
OWN_PIECE = 25_000  # messages the engine's process chunks between two looks at `stop` (~2 s here)
_FIELDS = operator.attrgetter(*(f.name for f in fields(Chunk)))  # a Chunk as a tuple: half the pickling time

Chunked = tuple[list[Chunk], EncodedTokens]  # windows in order, and their BM25 tokens
Stop = Callable[[], bool]  # whether to leave the work (a server stopping): IndexingPausedError

_TURN_FIELDS = operator.attrgetter(*TurnRow._fields)  # a message as the tuple a worker rebuilds its TurnRow from
_SEQ = operator.attrgetter("seq")


def never() -> bool:
    """The default `stop`: a build that is never left (the CLI's index and reindex)."""
    return False


class ChunkWorkers:
    """The worker processes a catch-up may chunk long threads with: `count` at a time, each used
    for one thread. `start` starts them ahead of their work: a worker's start (Python and this
    module's imports, ~0.4 s) then runs while the engine reads the messages, not after."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._started: list[WorkerProcess] = []

    def start_for(self, lengths: Iterable[int]) -> None:
        """Start the workers now if a thread of these lengths (messages to chunk) will use them."""
        if self.count and any(length >= PARALLEL_MIN_MESSAGES for length in lengths):
            self.start()

    def start(self) -> None:
        """Start the workers not started yet."""
        try:
            while len(self._started) < self.count:
                self._started.append(self._spawn())
        except OSError as exc:  # not started: `take` tries again, and the caller falls back then
            log.warning("a chunking worker could not start ahead of its work: %s", exc)

    def take(self) -> WorkerProcess:
        """A worker for one thread's segment (one started ahead, or a new one); the taker stops it."""
        return self._started.pop() if self._started else self._spawn()

    @staticmethod
    def _spawn() -> WorkerProcess:
        """A worker that imports this module as it starts."""
        return WorkerProcess(preload=(__name__,))

    def close(self) -> None:
        """Stop the workers started ahead and never taken."""
        for process in self._started:
            process.stop_aside()
        self._started.clear()

    def __enter__(self) -> ChunkWorkers:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


NO_WORKERS = ChunkWorkers(0)  # chunk in the engine's process alone


def chunk_segment(rows: Sequence[tuple], params: ChunkParams, warm: bytes) -> tuple[list[tuple], EncodedTokens]:
    """A worker's share: the windows of one segment as field tuples, and their tokens encoded.
    `warm`: the engine's word counter and tokenizer, pickled with their memos (`_warm`). A worker puts
    off young collections for its life (engine/subprocesses.py), as the engine's process does for a build."""
    counter, tokenizer = pickle.loads(warm)
    chunks = chunk_thread(list(map(TurnRow._make, rows)), params, counter)
    return [_FIELDS(chunk) for chunk in chunks], tokens_of(chunks, tokenizer)


def tokens_of(chunks: Sequence[Chunk], tokenizer: LexicalTokenizer) -> EncodedTokens:
    """The windows' BM25 tokens, encoded."""
    return tokenizer.encode_many([chunk.text for chunk in chunks])


def chunk_in_parallel(messages: Sequence[Turn], params: ChunkParams, counter: TokenCounter,
                      tokenizer: LexicalTokenizer, workers: ChunkWorkers, stop: Stop = never) -> Chunked | None:
    """The thread's windows and tokens, made here and in `workers.count` worker processes; None when
    that does not pay (a short thread, no workers) or did not work (a worker failed, segments that
    never met): the caller chunks the thread alone then. `stop` is looked at between the engine's
    pieces; when it says so, the workers are killed and IndexingPausedError raised."""
    count = workers.count
    if count < 1 or len(messages) < PARALLEL_MIN_MESSAGES:
        return None
    segments = _cut(messages, [OWN_WEIGHT, *[1.0] * count])
    processes: list[WorkerProcess] = []
    warm = _warm(counter, tokenizer)
    try:
        processes.extend(workers.take() for _ in segments[1:])  # here, not on the carriers: a stop kills them all
        with ThreadPoolExecutor(count, thread_name_prefix="chunk-worker") as carriers:
            futures = [carriers.submit(_chunk_elsewhere, process, segment, params, warm)
                       for process, segment in zip(processes, segments[1:])]
            try:
                parts = [chunk_here(segments[0], params, counter, tokenizer, stop)]
            except IndexingPausedError:
                for process in processes:
                    process.kill()
                raise
            parts.extend(future.result() for future in futures)
    except OSError as exc:  # WorkerFailed, or a worker that could not start
        log.warning("chunking in worker processes failed (%s): the thread is chunked in the engine's process", exc)
        return None
    finally:
        for process in processes:
            process.stop_aside()
    whole = stitched(parts)
    if whole is None:
        log.warning("the segments of thread %s never met: it is chunked in the engine's process", messages[0].thread_id)
    return whole


def chunk_here(messages: Sequence[Turn], params: ChunkParams, counter: TokenCounter, tokenizer: LexicalTokenizer,
               stop: Stop = never) -> Chunked:
    """The thread's windows and tokens made in this process, OWN_PIECE messages at a time with a look at
    `stop` before each (IndexingPausedError). Each piece starts where the last window of the piece
    before began, a start of the whole run (indexers/chunking.py is restartable): that window alone
    is made twice, as the one a piece's end may cut short."""
    chunks: list[Chunk] = []
    tokens: list[EncodedTokens] = []
    at = 0
    while at < len(messages):
        if stop():
            raise IndexingPausedError("the server is stopping: the index catch-up was left for its next start "
                                      "(the store keeps every message); try again once it is back")
        end = min(at + OWN_PIECE, len(messages))
        made = chunk_thread(messages[at:end], params, counter)
        restart = end
        if end < len(messages) and made:
            restart = bisect.bisect_left(messages, made[-1].from_seq, lo=at, key=_SEQ)
        if restart <= at:  # one window as long as the piece (never seen): the rest in one go
            made, restart = chunk_thread(messages[at:], params, counter), len(messages)
        elif restart < end:
            made = [chunk for chunk in made if chunk.from_seq < made[-1].from_seq]
        chunks += made
        tokens.append(tokens_of(made, tokenizer))
        at = restart
    return chunks, tokens[0] if len(tokens) == 1 else EncodedTokens.joined(tokens)


def _cut(messages: Sequence[Turn], weights: Sequence[float]) -> list[Sequence[Turn]]:
    """Consecutive segments in these proportions, each reaching _REACH messages into the next."""
    cuts = [round(len(messages) * sum(weights[:i]) / sum(weights)) for i in range(len(weights) + 1)]
    return [messages[cuts[i]:cuts[i + 1] + _REACH] for i in range(len(weights))]


def _warm(counter: TokenCounter, tokenizer: LexicalTokenizer) -> bytes:
    """The engine's counter and tokenizer with what they memoised: a server's memos know most words
    of a thread, and with a worker that started without them a 100k-message reindex took 1-3 s
    longer. Pickled here, before the engine's own chunking changes them."""
    return pickle.dumps((counter, tokenizer), protocol=pickle.HIGHEST_PROTOCOL)


def _chunk_elsewhere(process: WorkerProcess, segment: Sequence[Turn], params: ChunkParams, warm: bytes) -> Chunked:
    rows = list(map(_TURN_FIELDS, segment))
    chunks, tokens = process.call(chunk_segment, rows, params, warm)
    return [Chunk(*fields) for fields in chunks], tokens


def stitched(parts: Sequence[Chunked]) -> Chunked | None:
    """One run from consecutive segments' windows; None when a segment's windows never reach a
    start of the next one's. Every start in the run so far is the whole run's: each depends on the
    window before it and the message after that window's end, which the segment holds; only the
    segment's last window may be cut short, and the next segment's windows replace it."""
    chunks, tokens = list(parts[0][0]), parts[0][1]
    for more, more_tokens in parts[1:]:
        starts = {chunk.from_seq for chunk in chunks}
        meet = next((chunk.from_seq for chunk in more if chunk.from_seq in starts), None)
        if meet is None:
            return None
        keep = bisect.bisect_left([chunk.from_seq for chunk in chunks], meet)
        take = bisect.bisect_left([chunk.from_seq for chunk in more], meet)
        chunks[keep:] = more[take:]
        tokens = EncodedTokens.joined([tokens.take(range(keep)), more_tokens.take(range(take, len(more)))])
    return chunks, tokens
