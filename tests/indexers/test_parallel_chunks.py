"""A long thread chunked in segments (indexers/parallel_chunks.py) gives exactly the windows and BM25
tokens of `chunk_thread` alone: the stitching on generated threads, then real worker processes
inside the pipeline."""

from __future__ import annotations

import logging
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import indexers.parallel_chunks as parallel_chunks
import indexers.pipeline as pipeline_module
import indexers.rechunk as rechunk_module
from engine.api import ConversationEngine
from engine.config import Settings
from engine.subprocesses import WorkerProcess
from indexers.chunking import ChunkParams, chunk_thread
from indexers.lexical import LexicalTokenizer
from engine.errors import IndexingPausedError
from indexers.parallel_chunks import Chunked, ChunkWorkers, chunk_here, stitched, tokens_of
from tests.indexers.test_chunking import counter, long_text, msg

TOKENIZER = LexicalTokenizer()


def _thread(n: int, seed: int) -> list:
    """Turns of 1 to 120 words, a note now and then, and a few lines longer than a window."""
    rng = random.Random(seed)
    return [msg(seq, long_text(rng.choice((1, 3, 8, 20, 40, 120, 400 if seq % 97 == 0 else 60)), seq),
                kind="note" if rng.random() < 0.03 else "turn", role=rng.choice(("user", "assistant")))
            for seq in range(1, n + 1)]


def _segments_chunked(messages: list, cuts: list[int], reach: int, params: ChunkParams) -> Chunked | None:
    segments = [messages[a:b + reach] for a, b in zip(cuts, cuts[1:] + [len(messages)])]
    parts = []
    for segment in segments:
        chunks = chunk_thread(segment, params, counter())
        parts.append((chunks, tokens_of(chunks, TOKENIZER)))
    return stitched(parts)


@pytest.mark.parametrize("seed", range(6))
def test_segments_stitched_at_any_cuts_equal_the_thread_chunked_alone(seed: int) -> None:
    rng = random.Random(seed)
    messages = _thread(600, seed)
    params = ChunkParams(window_tokens=rng.choice((64, 128, 254)), overlap_messages=rng.choice((0, 1, 2, 4)))
    alone = chunk_thread(messages, params, counter())
    cuts = [0, *sorted(rng.sample(range(1, 590), rng.choice((1, 2, 3))))]
    result = _segments_chunked(messages, cuts, 64, params)
    assert result is not None
    chunks, tokens = result
    assert [c.chunk_id for c in chunks] == [c.chunk_id for c in alone] and chunks == alone
    assert tokens.lists() == [TOKENIZER.tokenize(c.text) for c in alone]


@pytest.mark.parametrize("seed", range(4))
def test_a_thread_chunked_here_in_pieces_equals_the_thread_chunked_alone(seed: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's pieces (a look at `stop` between each) change no window, token or id."""
    rng = random.Random(seed)
    monkeypatch.setattr(parallel_chunks, "OWN_PIECE", rng.choice((3, 20, 150, 290)))
    messages = _thread(rng.choice((400, 700)), seed)
    params = ChunkParams(window_tokens=rng.choice((64, 128, 254)), overlap_messages=rng.choice((0, 1, 2, 4)))
    looks: list[int] = []

    def stop() -> bool:
        looks.append(1)
        return False

    chunks, tokens = chunk_here(messages, params, counter(), TOKENIZER, stop=stop)
    alone = chunk_thread(messages, params, counter())
    assert len(looks) >= 2  # it did go in pieces
    assert [c.chunk_id for c in chunks] == [c.chunk_id for c in alone] and chunks == alone
    assert tokens.lists() == [TOKENIZER.tokenize(c.text) for c in alone]


def test_a_stop_between_pieces_leaves_the_rest_unchunked(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _pieces_counted(monkeypatch)
    with pytest.raises(IndexingPausedError, match="try again once it is back"):
        chunk_here(_thread(600, 1), ChunkParams(), counter(), TOKENIZER, stop=lambda: len(made) >= 2)
    assert len(made) == 2  # of six pieces


def _pieces_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pieces of 100 messages; a 1 is appended for each the engine's process chunks."""
    monkeypatch.setattr(parallel_chunks, "OWN_PIECE", 100)
    made: list[int] = []
    real = parallel_chunks.chunk_thread
    monkeypatch.setattr(parallel_chunks, "chunk_thread", lambda *args: made.append(1) or real(*args))
    return made


def test_segments_that_never_meet_are_refused_not_glued() -> None:
    messages = _thread(300, 7)
    assert _segments_chunked(messages, [0, 150], 0, ChunkParams()) is None  # no reach past the cut


@pytest.mark.process
def test_a_thread_built_with_a_worker_process_equals_one_built_alone(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel_chunks, "PARALLEL_MIN_MESSAGES", 200)
    made: list[bool] = []
    real = rechunk_module.chunk_in_parallel

    def spied(*args: object) -> object:
        result = real(*args)  # type: ignore[arg-type]
        made.append(result is not None)
        return result

    monkeypatch.setattr(rechunk_module, "chunk_in_parallel", spied)
    shards = {}
    for workers in (0, 1):
        with ConversationEngine(tmp_path / str(workers), settings=Settings(index_workers=workers),
                                embedder=None) as engine:
            engine.add_user("u", "UTC")
            engine.ingest("u", _turns(900), index=False)
            hits = [engine.search("u", query, mode="lexical", kinds=("message",), limit=10)
                    for query in ("budget review", "ferry tickets")]
            shard = engine.pipeline.shard("u")
            windows = [(c.from_seq, c.to_seq, c.part, c.text, c.n_tokens, c.line_ends)  # ids differ between stores
                       for c in (shard.chunks[label] for label in sorted(shard.chunks))]
            shards[workers] = (windows, [[(h.score, h.seq, h.from_seq, h.to_seq) for h in hit.results] for hit in hits])
    assert made == [False, True]  # the pipeline did take the workers' windows
    assert shards[1] == shards[0] and shards[0][1][0]


@pytest.mark.process
def test_a_workers_tokens_come_back_encoded_one_string_per_distinct_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reindex holds every window's tokens at once: a string per occurrence cost 1.5 GB at 1M."""
    monkeypatch.setattr(parallel_chunks, "PARALLEL_MIN_MESSAGES", 200)
    messages = _thread(600, 5)
    result = parallel_chunks.chunk_in_parallel(messages, ChunkParams(), counter(), LexicalTokenizer(), ChunkWorkers(1))
    assert result is not None
    chunks, tokens = result
    assert tokens.lists() == [TOKENIZER.tokenize(c.text) for c in chunk_thread(messages, ChunkParams(), counter())]
    distinct = set(tokens.terms)
    assert len(tokens.ids) > 5 * len(distinct)  # words repeat: the check below has something to find
    assert len(tokens.terms) <= 2 * len(distinct)  # each part's terms once: the engine's and the worker's


@pytest.mark.process
def test_a_stop_during_the_engines_pieces_kills_the_worker_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopping server must not wait for the worker's whole segment (~3 s at 100k messages here)."""
    monkeypatch.setattr(parallel_chunks, "PARALLEL_MIN_MESSAGES", 200)
    started = _started_workers(monkeypatch)
    made = _pieces_counted(monkeypatch)
    with pytest.raises(IndexingPausedError):
        parallel_chunks.chunk_in_parallel(_thread(900, 4), ChunkParams(), counter(), TOKENIZER, ChunkWorkers(1),
                                          stop=lambda: len(made) >= 1)
    assert len(made) == 1 and len(started) == 1
    assert started[0][0].process.wait(timeout=20) == -9  # killed, not stopped after its segment


@pytest.mark.process
def test_a_worker_that_cannot_start_leaves_the_thread_to_the_engine(monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(parallel_chunks, "PARALLEL_MIN_MESSAGES", 200)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the worker exits at once
    messages = _thread(400, 3)
    with caplog.at_level(logging.WARNING, logger="convsearch.index"):
        assert parallel_chunks.chunk_in_parallel(messages, ChunkParams(), counter(), TOKENIZER, ChunkWorkers(1)) is None
    assert "chunked in the engine's process" in caplog.text


def _turns(n: int) -> list[dict]:
    rng = random.Random(11)
    topics = ("budget review on friday", "ferry tickets to the island", "the garden shed roof", "a python bug")
    start = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)
    return [{"role": ("user", "assistant")[i % 2], "created_at": (start + timedelta(minutes=7 * i)).isoformat(),
             "content": f"{rng.choice(topics)} " + long_text(rng.choice((4, 12, 30, 80)), i)} for i in range(n)]


@pytest.mark.process
def test_the_workers_of_a_build_exit_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """They are stopped aside (the engine goes on with the windows meanwhile), not left running."""
    monkeypatch.setattr(parallel_chunks, "PARALLEL_MIN_MESSAGES", 200)
    started = _started_workers(monkeypatch)
    made = parallel_chunks.chunk_in_parallel(_thread(600, 2), ChunkParams(), counter(), LexicalTokenizer(), ChunkWorkers(1))
    assert made is not None
    assert started
    assert _exited([worker for worker, _ in started])


@pytest.mark.process
def test_a_long_catch_up_starts_its_worker_before_the_read_and_chunks_with_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker is started as the catch-up begins, with the chunking module already imported, and
    that worker is the one the thread's segment goes to: no second worker is started."""
    monkeypatch.setattr(parallel_chunks, "PARALLEL_MIN_MESSAGES", 200)
    started = _started_workers(monkeypatch)
    chunkers = [("indexers.parallel_chunks",)]
    at_read: list[list[tuple[str, ...]]] = []  # the chunking workers started when a read of messages began
    real_read = pipeline_module.tables_of_threads

    def reading(store: object, behind: dict) -> object:
        if behind:
            at_read.append([preload for _, preload in started if preload in chunkers])
        return real_read(store, behind)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline_module, "tables_of_threads", reading)
    with ConversationEngine(tmp_path, settings=Settings(index_workers=1), embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", _turns(900), index=False)
        assert engine.search("u", "budget review", mode="lexical", kinds=("message",)).results
    assert at_read == [chunkers] and [preload for _, preload in started if preload in chunkers] == chunkers


@pytest.mark.process
def test_workers_started_ahead_are_preloaded_and_stopped_when_not_taken() -> None:
    with ChunkWorkers(2) as workers:
        workers.start()
        taken = workers.take()
        left = list(workers._started)
        assert taken.call(eval, "'indexers.parallel_chunks' in __import__('sys').modules") is True
        taken.stop()
    assert len(left) == 1 and not workers._started
    assert _exited(left)


def _started_workers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[WorkerProcess, tuple[str, ...]]]:
    """Every worker process started from now on, with what it preloads, in order."""
    started: list[tuple[WorkerProcess, tuple[str, ...]]] = []
    real_init = WorkerProcess.__init__

    def spied(self: WorkerProcess, preload: tuple[str, ...] = ()) -> None:
        real_init(self, preload)
        started.append((self, tuple(preload)))

    monkeypatch.setattr(WorkerProcess, "__init__", spied)
    return started


def _exited(workers: list[WorkerProcess], within_s: float = 20) -> bool:
    """Whether all these workers' processes exit within `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while any(worker.process.poll() is None for worker in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    return all(worker.process.poll() is not None for worker in workers)
