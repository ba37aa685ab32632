"""Worker processes (engine/subprocesses.py): a function and its arguments in, its result or its
error out, and always the engine's own code, wherever the engine was started from."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from engine.collector import WRITE_THRESHOLD
from engine.subprocesses import WorkerFailed, WorkerProcess


@pytest.mark.process
def test_an_error_in_a_worker_comes_back_as_text_and_the_worker_serves_on() -> None:
    worker = WorkerProcess()
    try:
        assert worker.call(sorted, [3, 1, 2]) == [1, 2, 3]
        with pytest.raises(WorkerFailed, match="TypeError"):
            worker.call(sorted, [3, "a"])
        with pytest.raises(WorkerFailed, match="pickle"):  # a result that cannot travel back
            worker.call(threading.Lock)
        assert worker.call(len, "still serving") == 13
    finally:
        worker.stop()


@pytest.mark.process
def test_a_worker_runs_the_engines_code_from_a_directory_holding_another_engine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    impostor = tmp_path / "engine"
    impostor.mkdir()
    (impostor / "__init__.py").write_text("", encoding="utf-8")
    (impostor / "subprocesses.py").write_text("raise SystemExit('another checkout')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    worker = WorkerProcess()
    try:
        assert worker.call(max, [4, 9, 2]) == 9
    finally:
        worker.stop()


@pytest.mark.process
def test_a_worker_keeps_the_raised_collector_threshold_between_calls() -> None:
    """Restored after each call, the default threshold made the worker collect over its memos at
    each call's end and while unpickling the next call's arguments."""
    worker = WorkerProcess()
    try:
        assert worker.call(gc.get_threshold)[0] == WRITE_THRESHOLD
        assert worker.call(gc.get_threshold)[0] == WRITE_THRESHOLD  # and after a call has ended
    finally:
        worker.stop()
