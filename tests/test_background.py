"""The server's scheduler: each job runs when due, a failing one keeps its turn, stop saves once more."""

from __future__ import annotations

import time
from pathlib import Path

from engine.api import ConversationEngine
from engine.config import Settings
from engine.surfaces.http.background import Job, Scheduler, serving_jobs


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
