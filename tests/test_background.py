"""The server's scheduler: each job runs when due, a failing one keeps its turn, stop saves once more."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from engine.api import ConversationEngine
from engine.config import Settings
from engine.locks import WriterLocks
from engine.maintenance import closing
from engine.query.summary_index import summary_key
from engine.store.embedding_cache import content_hash
from engine.surfaces.http.background import Job, Scheduler, serving_jobs
from tests.support import HashEmbedder, batch, live_server, open_engine


def wait_for(check, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def test_jobs_run_on_their_own_intervals_and_a_failure_is_kept_not_raised():
    runs: list[str] = []

    def fails() -> None:
        runs.append("fails")
        raise RuntimeError("disk on fire")

    fast = Job("fast", lambda: runs.append("fast"), every_s=0.01, on_stop=True)
    broken = Job("broken", fails, every_s=0.01)
    late = Job("late", lambda: runs.append("late"), every_s=3600, first_s=3600)
    scheduler = Scheduler([fast, broken, late]).start()
    try:
        assert wait_for(lambda: fast.steps >= 3 and broken.steps >= 3)
    finally:
        scheduler.stop()
    assert broken.last_error == "RuntimeError: disk on fire" and fast.last_error is None
    assert late.steps == 0 and "late" not in runs  # not due within the hour
    steps = fast.steps
    assert runs[-1] == "fast"  # the on_stop job ran once more after the thread stopped
    time.sleep(0.05)
    assert fast.steps == steps  # and nothing runs after stop


def test_serve_schedules_the_index_step_and_the_scheduled_close(tmp_path: Path):
    settings = Settings(index_interval_s=5, finalize_every_minutes=30)
    with ConversationEngine(tmp_path, settings=settings, embedder=None) as engine:
        jobs = {job.name: job for job in serving_jobs(engine, maintain=True)}
        assert (jobs["index"].every_s, jobs["index"].first_s, jobs["index"].on_stop) == (5, 0.0, True)
        assert (jobs["finalize"].every_s, jobs["finalize"].first_s) == (1800, 1800)
        assert [j.name for j in serving_jobs(engine, maintain=False)] == ["finalize"]
    with ConversationEngine(tmp_path, settings=Settings(finalize_every_minutes=0), embedder=None) as engine:
        assert serving_jobs(engine, maintain=False) == []
        Scheduler([]).start().stop()  # nothing to run: no thread, and stop still returns


def ranked(response):
    return [(hit.message_id, round(hit.score, 6)) for hit in response.results]


class PausingEmbedder(HashEmbedder):
    """The hash embedder, counting texts; with `hold_call`, that call waits (3 s at most) until the
    engine's embedding is paused, so a server stops while a backlog is being embedded."""

    def __init__(self, hold_call: int | None = None) -> None:
        self.calls = self.texts = 0
        self.hold_call = hold_call
        self.engine: ConversationEngine | None = None

    def embed(self, texts):
        self.calls += 1
        self.texts += len(texts)
        if self.calls == self.hold_call and self.engine is not None:
            wait_for(self.engine.pipeline.paused.is_set, seconds=3)
        return super().embed(texts)


def test_a_stopping_server_leaves_its_backlog_pending_and_the_next_start_embeds_only_the_rest(tmp_path: Path):
    """Stopping `serve` used to wait until the index step had embedded the whole backlog (minutes for
    an import); now the step stops before its next batch, saves, and the batches done stay cached."""
    held = PausingEmbedder(hold_call=2)
    with open_engine(tmp_path / "paused", held, summaries=False) as engine:
        held.engine = engine
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 1500), index=False)
        with live_server(engine):
            assert wait_for(lambda: held.calls >= 2)
        # The server stopped during the second batch: no third, none in the step run at stop.
        assert held.calls == 2
        assert engine.pipeline.needs_index("u")
        assert not engine.pipeline.paused.is_set()  # a stopped server leaves the engine as it was
    fresh = PausingEmbedder()
    with open_engine(tmp_path / "fresh", fresh, summaries=False) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 1500), index=False)
        engine.maintain()
        embedded = fresh.texts
        expected = engine.search("u", "topic7 theme3", limit=10)
    resumed = PausingEmbedder()
    with open_engine(tmp_path / "paused", resumed, summaries=False) as engine:
        assert engine.search("u", "lastof0", mode="lexical").results  # the shard saved at the stop
        engine.maintain()
        assert not engine.pipeline.needs_index("u")
        assert held.texts + resumed.texts == embedded > held.texts  # each text embedded once in all
        got = engine.search("u", "topic7 theme3", limit=10)
    assert ranked(got) == ranked(expected)


def test_summaries_left_unembedded_by_a_pause_are_embedded_by_the_next_step(tmp_path: Path):
    with open_engine(tmp_path, PausingEmbedder()) as engine:
        engine.add_user("u", "UTC")
        for k in range(4):  # days ~3.5 apart: each batch closes the last one's day and conversation
            engine.ingest("u", batch(k, 100), index=False)
        assert engine.summary_index.embeds_pending("u")
        with engine.indexing_paused():
            assert engine.summary_index.embed_pending("u") == 0
        assert engine.summary_index.embeds_pending("u")  # still pending, not marked done
        assert engine.summary_index.embed_pending("u", limit=2) == 2  # a background step's slice
        assert engine.summary_index.embeds_pending("u")
        engine.maintain()  # the rest, a slice at a time
        assert not engine.summary_index.embeds_pending("u") and engine.summary_index.embed_pending("u") == 0


def test_a_live_ingest_embeds_its_own_messages_and_leaves_a_backlog_to_the_background_step(tmp_path: Path):
    """A live call after an import (messages stored unembedded) used to embed the whole backlog
    inline: one message after 300 unembedded took 11 s with the real model."""
    counted = PausingEmbedder()
    with open_engine(tmp_path / "live", counted) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 300), index=False)
        backlog = engine.pipeline.pending_vector_messages("u")
        embedded = counted.texts
        engine.ingest("u", batch(1, 1), index=True)
        assert counted.texts - embedded < 10  # its windows, lines and the summaries it wrote; none of the backlog
        assert backlog > 250 and engine.pipeline.pending_vector_messages("u") >= backlog - 3  # but the window it shares
        engine.maintain()  # the background step's work
        assert engine.pipeline.pending_vector_messages("u") == 0 and not engine.summary_index.embeds_pending("u")
        got = engine.search("u", "topic7 theme3", limit=10)
    with open_engine(tmp_path / "fresh", PausingEmbedder()) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 300), index=True)
        engine.ingest("u", batch(1, 1), index=True)
        expected = engine.search("u", "topic7 theme3", limit=10)
    assert ranked(got) == ranked(expected)


def test_an_unindexed_batch_leaves_an_index_not_in_memory_to_its_next_load_or_the_background_step(tmp_path: Path):
    """A bulk `ingest(index=False)` stores and summarises only (as an import does): the user's index,
    not in memory, catches up when a search loads it or when a server's background step looks."""
    with open_engine(tmp_path / "live", PausingEmbedder()) as engine:
        engine.add_user("u", "UTC")
        engine.maintain()  # a server's first step looks at every user; later ones at the loaded and the written
        engine.ingest("u", batch(0, 300), index=False)
        assert engine.pipeline.loaded("u") is None
        assert engine.maintain() == ["u"] and engine.pipeline.pending_vector_messages("u") == 0
        engine.ingest("u", batch(1, 40), index=False)  # in memory now: the index follows the batch
        assert engine.pipeline.loaded("u").manifest.watermarks == engine.store.last_seqs("u")
        assert engine.maintain() == ["u"]  # its vectors
        got = engine.search("u", "topic7 theme3 lastof1", limit=10)
    with open_engine(tmp_path / "cold", PausingEmbedder()) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 300), index=False)
        engine.ingest("u", batch(1, 40), index=False)
        assert engine.pipeline.loaded("u") is None
        cold = engine.search("u", "topic7 theme3 lastof1", limit=10, mode="lexical")  # caught up by its load
        assert cold.results and cold.results[0].message_id == "b0001-00039"
    with open_engine(tmp_path / "fresh", PausingEmbedder()) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 300), index=True)
        engine.ingest("u", batch(1, 40), index=True)
        expected = engine.search("u", "topic7 theme3 lastof1", limit=10)
    assert ranked(got) == ranked(expected)


class GatedEmbedder(HashEmbedder):
    """Its first call (with `of_summaries`, its first call on summaries) waits for `gate` (10 s at most)."""

    def __init__(self, *, of_summaries: bool = False) -> None:
        self.calls = 0
        self.callers: list[str] = []  # the thread of each call
        self.texts: list[str] = []
        self.entered, self.gate = threading.Event(), threading.Event()
        self.of_summaries = of_summaries

    def embed(self, texts):
        self.calls += 1
        self.callers.append(threading.current_thread().name)
        self.texts += texts
        gated = not self.of_summaries or any("## Summary" in t for t in texts)
        if gated and not self.entered.is_set():
            self.entered.set()
            self.gate.wait(10)
        return super().embed(texts)


@contextmanager
def model_busy_with_a_backlog(tmp_path: Path, monkeypatch
                              ) -> Iterator[tuple[ConversationEngine, threading.Thread, GatedEmbedder]]:
    """An engine whose background step (thread "step") is inside the model on its first slice of a
    600-message backlog (the thread's first windows) until the block ends; then the step finishes."""
    monkeypatch.setattr(closing, "SUMMARY_SLICE", 8)
    monkeypatch.setattr(closing, "WINDOW_SLICE", 8)
    gated = GatedEmbedder()
    with open_engine(tmp_path, gated, summaries=False) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 600), index=False)
        with step_inside_the_model(engine, gated) as step:
            yield engine, step, gated
        assert not step.is_alive() and engine.pipeline.pending_vector_messages("u") == 0


@contextmanager
def step_inside_the_model(engine: ConversationEngine, gated: GatedEmbedder) -> Iterator[threading.Thread]:
    """The background step (thread "step") started and held in the model's gated call until the block ends."""
    step = threading.Thread(target=engine.maintain, name="step")
    step.start()
    assert gated.entered.wait(10)
    try:
        yield step
    finally:
        gated.gate.set()
        step.join(60)


def test_a_live_ingest_does_not_wait_for_the_model_working_on_a_backlog(tmp_path: Path, monkeypatch):
    """The background step runs the model outside the user's lock: a live call made while the
    model works on a slice returns before it; when the lock was held through the model call, it
    waited for the slice (4-8 s with the real model)."""
    with model_busy_with_a_backlog(tmp_path, monkeypatch) as (engine, step, gated):
        live = threading.Thread(target=lambda: engine.ingest("u", batch(1, 1), index=True), name="live")
        live.start()
        live.join(10)
        assert not live.is_alive() and step.is_alive()  # returned while the step's model still worked
    assert gated.callers[:2] == ["step", "live"]


def test_a_deletion_while_the_model_works_leaves_no_vector_of_what_it_deleted(tmp_path: Path, monkeypatch):
    """The model ran outside the lock on a slice holding a message deleted meanwhile: none of the
    deleted windows' vectors is kept or cached; the slice's other windows keep theirs."""
    with model_busy_with_a_backlog(tmp_path, monkeypatch) as (engine, _, _):
        shard = engine.pipeline.shard("u")
        with shard.lock:
            doomed = [c.content_hash for c in shard.chunks.values() if "b0000-00002" in c.message_ids]
        assert doomed and engine.delete_messages("u", ["b0000-00002"]) == 1
    assert engine.pipeline.cache.get("u", doomed) == {}
    vectors = engine.pipeline.shard("u").message_vectors
    assert not vectors.has(["b0000-00002"]).any() and vectors.has(["b0000-00001", "b0000-00003"]).all()


def test_a_slice_loop_lets_the_writers_waiting_for_the_user_take_the_lock_first():
    """The background step releases the user's lock between slices and calls let_waiters_in before
    taking it again: it returns only once the writers already waiting hold the lock. Without it, the
    loop's thread often re-took the lock first (a live ingest waited three slices, 2.05 s)."""
    locks = WriterLocks()
    order: list[str] = []

    def live() -> None:
        with locks.user("u"):
            order.append("live")

    def loop_between_slices() -> None:
        locks.let_waiters_in("u")
        order.append("next slice")

    with locks.user("u"):  # a slice
        waiter = threading.Thread(target=live)
        waiter.start()
        assert wait_for(lambda: locks._waiting.get("u") == 1)  # the live call waits for the lock
        loop = threading.Thread(target=loop_between_slices)
        loop.start()
        time.sleep(0.2)
        assert loop.is_alive()  # the waiting writer has not had the lock yet
    waiter.join(10)
    loop.join(10)
    assert order == ["live", "next slice"] and locks._waiting == {}


def test_a_deletion_embeds_the_windows_it_rebuilds_and_leaves_a_backlog_to_the_background_step(tmp_path: Path):
    counted = PausingEmbedder()
    with open_engine(tmp_path, counted, summaries=False) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", batch(0, 300), index=False)
        backlog = engine.pipeline.pending_vector_messages("u")
        engine.delete_messages("u", ["b0000-00150"])
        assert counted.texts < 10  # the windows rebuilt around it, none of the backlog
        assert backlog > 250 and engine.pipeline.pending_vector_messages("u") >= backlog - 10  # the stretch rebuilt
        engine.maintain()
        assert engine.pipeline.pending_vector_messages("u") == 0
        assert not any(h.message_id == "b0000-00150" for h in engine.search("u", "batch 0 message 150", limit=20).results)


@contextmanager
def model_busy_with_summaries(tmp_path: Path) -> Iterator[tuple[ConversationEngine, threading.Thread, GatedEmbedder]]:
    """An engine whose background step (thread "step") is inside the model on its first slice of
    summaries (the windows before them are done) until the block ends; then the step finishes."""
    gated = GatedEmbedder(of_summaries=True)
    with open_engine(tmp_path, gated) as engine:
        engine.add_user("u", "UTC")
        for k in range(4):  # days ~3.5 apart: each batch closes the last one's day and conversation
            engine.ingest("u", batch(k, 100), index=False)
        with step_inside_the_model(engine, gated) as step:
            yield engine, step, gated
        assert not step.is_alive() and not engine.summary_index.embeds_pending("u")


def test_a_live_ingest_does_not_wait_for_the_model_working_on_summaries(tmp_path: Path):
    """Summaries' slices run the model outside the user's lock too (16 a slice held it 0.6 s)."""
    with model_busy_with_summaries(tmp_path) as (engine, step, _):
        live = threading.Thread(target=lambda: engine.ingest("u", batch(9, 1), index=True), name="live")
        live.start()
        live.join(10)
        assert not live.is_alive() and step.is_alive()  # returned while the step's model still worked


def test_a_summary_rewritten_while_the_model_works_leaves_no_vector_of_its_old_text(tmp_path: Path):
    """Deleting a message rewrites the summaries that quote it; the slice the model was working
    on meanwhile must not cache the old texts (they quote the deleted message)."""
    with model_busy_with_summaries(tmp_path) as (engine, step, gated):
        planned = [t for t in gated.texts if "## Summary" in t]
        quoted = next(m for m in batch(0, 100) if any(f"{m['content']}." in t for t in planned))
        assert engine.delete_messages("u", [quoted["message_id"]]) == 1
        gated.gate.set()
        step.join(60)
        cache = engine.summary_index.cache
        assert cache is not None
        old = [content_hash(t) for t in planned if f"{quoted['content']}." in t]
        assert old and cache.get("u", old) == {}
        live = [summary_key(s) for s in engine.store.timeline.summaries_of_user("u")]
        assert live and len(cache.get("u", live)) == len(set(live))  # the rest, the rewritten ones too, have vectors
