"""Summaries made in worker processes (engine/summaries/workers.py): a large batch's summaries are
the same as the engine's own, a worker that dies costs nothing but time, small batches and impure
summarizers never leave the engine's process, and closing the engine stops the workers."""

from __future__ import annotations

import io
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.models import Message
import engine.summaries.workers as workers_module
from engine.subprocesses import WorkerProcess, read_frame, write_frame
from engine.summaries.text import MEMO_MAX_CHARS
from engine.summaries.workers import PARALLEL_MIN_TURNS, Ask, SummaryWorkers, lane_of, read_ahead_of

T0 = datetime(2024, 3, 4, 8, 0, tzinfo=timezone.utc)
LATER = datetime(2024, 6, 1, tzinfo=timezone.utc)
TOPICS = ["the DuckDB schema", "the release notes", "Alice's trip to Lyon", "the flaky CI job", "a birthday gift",
          "the HNSW parameters", "the invoice for March", "a new bike", "the onboarding guide", "the Tokyo office"]


def _thread(days: int, per_day: int, start: int = 0) -> list[dict]:
    """`per_day` turns a day in two conversations (morning and evening), with cues, questions and
    answers, so every section of a summary has something to quote."""
    out = []
    for day in range(start, start + days):
        for i in range(per_day):
            topic, other = TOPICS[(day + i) % len(TOPICS)], TOPICS[(day * 3 + i) % len(TOPICS)]
            at = T0 + timedelta(days=day, hours=0 if i < per_day // 2 else 10, minutes=i)
            content = (f"Can you check {topic} before Friday? I think {other} matters more." if i % 4 == 0 else
                       f"We decided to keep {topic} as it is. Next step: I'll write to Bob about {other}." if i % 4 == 1
                       else f"Day {day}: {topic} looks fine, and {other} is open. Should we ask Carol?" if i % 4 == 2
                       else f"Yes, Carol knows {other} well; she fixed {topic} last week.")
            out.append({"role": "user" if i % 2 == 0 else "assistant", "content": content,
                        "created_at": at.isoformat(), "message_id": f"m{day}-{i}"})
    return out


def _summaries(engine: ConversationEngine) -> list[tuple[str, str, str | None, int, int]]:
    return sorted((s.summary_id, s.markdown, s.title, s.from_seq, s.to_seq)
                  for s in engine.store.timeline.summaries_of_user("u"))


def _written(engine: ConversationEngine) -> tuple[object, ...]:
    """What the ingests left: summaries, the lexical index's state (its watermark counts the
    summaries' notes) and a search's hits."""
    status = engine.index_status("u")
    hits = [(h.kind, h.message_id, h.from_seq, round(h.score, 6)) for h in engine.search("u", "birthday gift").results]
    return _summaries(engine), status["chunks"], status["watermarks"], hits


def _ingested(home: Path, workers: int, batches: list[list[dict]]) -> tuple[object, ...]:
    with ConversationEngine(home, settings=Settings(summary_workers=workers), embedder=None,
                            clock=lambda: LATER) as engine:
        engine.add_user("u", "UTC")
        for batch in batches:
            engine.ingest("u", batch, index=False)
        return _written(engine)


@pytest.mark.process
def test_a_large_batch_is_summarised_in_workers_exactly_as_in_the_engine(tmp_path: Path) -> None:
    batches = [_thread(12, 60), _thread(12, 60, start=12)]  # 720 turns a batch: its blocks read > 1,000
    with ConversationEngine(tmp_path / "w", settings=Settings(summary_workers=2), embedder=None,
                            clock=lambda: LATER) as engine:
        engine.add_user("u", "UTC")
        for batch in batches:
            engine.ingest("u", batch, index=False)
        workers = [w.process for w in engine.summaries.workers._workers]
        assert len(workers) == 2 and all(p.poll() is None for p in workers)  # they ran, and are kept for the next
        in_workers = _written(engine)
    assert all(p.poll() is not None for p in workers)  # closing the engine stopped them
    alone = _ingested(tmp_path / "alone", 0, batches)
    assert len(in_workers[0]) > 40 and in_workers[3] and in_workers == alone


@pytest.mark.process
def test_a_worker_that_dies_costs_time_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    batches = [_thread(12, 60), _thread(12, 60, start=12), _thread(12, 60, start=24)]
    with ConversationEngine(tmp_path / "w", settings=Settings(summary_workers=1), embedder=None,
                            clock=lambda: LATER) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batches[0], index=False)
        first = engine.summaries.workers._workers[0].process
        first.kill()
        first.wait()
        with caplog.at_level(logging.WARNING, logger="convsearch.summaries"):
            engine.ingest("u", batches[1], index=False)  # made in the engine's process instead
        assert "summary workers failed" in caplog.text
        engine.ingest("u", batches[2], index=False)  # new workers start
        assert engine.summaries.workers._workers[0].process is not first
        in_workers = _written(engine)
    assert in_workers == _ingested(tmp_path / "alone", 0, batches)


@pytest.mark.process
def test_small_batches_and_impure_summarizers_stay_in_the_engine(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "w", settings=Settings(summary_workers=1), embedder=None,
                            clock=lambda: LATER) as engine:
        engine.add_user("u", "UTC")
        for message in _thread(3, 20):
            engine.ingest("u", [message], index=False)  # the live path: one message a call
        assert engine.summaries.workers._workers == [] and _summaries(engine)
    turn = Message("m", "t", "u", 1, "user", "We decided to keep the schema.", T0, T0.date(), "c")
    asks = [Ask([turn] * PARALLEL_MIN_TURNS, True, lane) for lane in range(2)]

    class Chatty:  # e.g. an LLM client: not marked pure
        def summarize(self, messages: object) -> str:
            return "## Summary\n- none noted\n"

        def title(self, messages: object) -> str:
            return "A title"
    workers = SummaryWorkers(1)
    assert workers.start(Chatty(), asks) is None and workers._workers == []
    assert SummaryWorkers(0).start(engine.summaries.summarizer, asks) is None


def test_a_frame_cut_short_is_an_end_of_stream_not_a_half_read_value() -> None:
    stream = io.BytesIO()
    write_frame(stream, {"asks": [1, 2, 3]})
    whole = stream.getvalue()
    assert read_frame(io.BytesIO(whole)) == {"asks": [1, 2, 3]}
    for cut in (0, 5, len(whole) - 1):
        with pytest.raises(EOFError):
            read_frame(io.BytesIO(whole[:cut]))


@pytest.mark.process
def test_summaries_made_while_indexing_are_written_even_when_indexing_fails(tmp_path: Path) -> None:
    batch = _thread(12, 60)
    with ConversationEngine(tmp_path / "w", settings=Settings(summary_workers=1), embedder=None,
                            clock=lambda: LATER) as engine:
        engine.add_user("u", "UTC")
        engine.search("u", "anything")  # the index in memory: an ingest indexes its batch beside the summaries

        def full_disk(user_id: str) -> None:
            raise OSError(28, "No space left on device")
        engine.pipeline.update_lexical = full_disk  # type: ignore[method-assign]
        with pytest.raises(Exception, match="space"):
            engine.ingest("u", batch, index=False)
        assert engine.summaries.workers._workers  # the summaries were made in a worker
        stored = _summaries(engine)
    assert stored and stored == _ingested(tmp_path / "alone", 0, [batch])[0]


@pytest.mark.process
def test_a_bulk_store_sends_each_worker_the_first_turns_of_its_days(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """While a bulk batch is stored, each worker is sent the quotable turns of the days it will
    summarise that its memo keeps, in stored order, up to READ_AHEAD_TURNS; a one-message ingest
    sends nothing."""
    monkeypatch.setattr(workers_module, "READ_AHEAD_TURNS", 100)
    sent: dict[int, list[str]] = {0: [], 1: []}
    real_call = WorkerProcess.call

    def spying(worker: WorkerProcess, function: Callable[..., Any], *args: Any) -> Any:
        if function is read_ahead_of:
            sent[engine.summaries.workers._workers.index(worker)].extend(args[1])
        return real_call(worker, function, *args)
    monkeypatch.setattr(WorkerProcess, "call", spying)
    tool = {"role": "tool", "content": "A tool's output: nothing to quote.", "created_at": (T0 - timedelta(hours=1)).isoformat()}
    long = {"role": "user", "content": "A long paste. " * 400, "created_at": (T0 - timedelta(minutes=30)).isoformat()}
    batch = [tool, long, *_thread(12, 60)]
    with ConversationEngine(tmp_path / "w", settings=Settings(summary_workers=2), embedder=None,
                            clock=lambda: LATER) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch, index=False)
        reader = engine.summaries.workers._reader
        assert reader is not None
        reader.submit(lambda: None).result()  # every read-ahead call made (one carrier, in order)
        turns = engine.store.messages_in_range(engine.store.continuous_thread("u").thread_id, 1, 10_000)
        expected: dict[int, list[str]] = {0: [], 1: []}
        for turn in turns:
            if turn.kind == "turn" and turn.role != "tool" and len(turn.content) <= MEMO_MAX_CHARS:
                expected[lane_of(turn.day_label) % 2].append(turn.content)
        assert sent == {lane: texts[:100] for lane, texts in expected.items()} and all(sent.values())
        engine.ingest("u", [{"role": "user", "content": "One more thing about the invoice."}], index=False)
        reader.submit(lambda: None).result()
        assert len(sent[0]) == len(sent[1]) == 100
