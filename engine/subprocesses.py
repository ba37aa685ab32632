"""Pure functions run in worker processes on pipes, so the engine's CPU-bound work uses every core.

Summaries (engine/summaries/workers.py) and the chunking of a long thread (indexers/parallel_chunks.py)
send a module-level function and its arguments; the worker answers with its result, or with the
error as text. A worker is `python -m engine.subprocesses` on pipes with length-prefixed pickle
frames, not a multiprocessing pool: a spawned pool re-imports the caller's main script in every
child (an unguarded user script would run again there), and a fork would copy the store's and the
tokenizer's threads mid-flight.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, Callable, Sequence

from engine.collector import fewer_collections

__all__ = ["WorkerProcess", "WorkerFailed", "write_frame", "read_frame", "usable_cores"]

_HEADER = 8  # bytes of a frame's length, little-endian
_SOURCE_ROOT = str(Path(__file__).resolve().parents[1])  # what holds the `engine` package, for the workers


class WorkerFailed(OSError):
    """The worker answered with an error, or died: the caller does the work itself."""


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def write_frame(stream: IO[bytes], value: Any) -> None:
    _write_pickled(stream, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def _write_pickled(stream: IO[bytes], data: bytes) -> None:
    stream.write(len(data).to_bytes(_HEADER, "little"))
    stream.write(data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next frame's value; EOFError when the stream ends (cleanly or mid-frame)."""
    header = stream.read(_HEADER)
    if len(header) < _HEADER:
        raise EOFError("the stream ended")
    size = int.from_bytes(header, "little")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError(f"the stream ended {size - len(data)} bytes short of a frame")
    return pickle.loads(data)


class WorkerProcess:
    """One worker process and its pipes; one call at a time."""

    def __init__(self, preload: Sequence[str] = ()) -> None:
        """Start the worker; it imports the `preload` modules at once, not on its first call: a
        process started ahead of its work has them loaded by the time the work comes."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (_SOURCE_ROOT, os.environ.get("PYTHONPATH")) if p))
        # run from the engine's own tree: `-m` puts the working directory first on the path, and
        # another checkout's `engine` there would answer with other code
        self.process = subprocess.Popen([sys.executable, "-m", "engine.subprocesses", *preload], env=env,
                                        cwd=_SOURCE_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._lock = threading.Lock()

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in the worker; WorkerFailed when it raised there or the worker died."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            with self._lock:
                write_frame(self.process.stdin, (function, args))
                ok, answer = read_frame(self.process.stdout)
        except (OSError, EOFError, ValueError) as exc:  # a dead worker's pipe, a frame cut short
            raise WorkerFailed(f"worker process lost: {type(exc).__name__}: {exc}") from exc
        if not ok:
            raise WorkerFailed(f"worker failed: {answer}")
        return answer

    def end_input(self) -> None:
        """The worker exits once it has answered what it was asked."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):  # a dead worker's pipe
                self.process.stdin.close()

    def stop(self) -> None:
        self.end_input()
        if self.process.stdout is not None:
            self.process.stdout.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        """End the worker now, mid-call (a server stopping): a call waiting for its answer raises WorkerFailed."""
        with contextlib.suppress(OSError):
            self.process.kill()

    def stop_aside(self) -> None:
        """`stop`, waited for on a thread of its own: a worker that held a large build's windows
        takes 0.1-0.2 s to exit (100k messages), time the caller spends on what comes next."""
        self.end_input()
        threading.Thread(target=self.stop, name="worker-exit", daemon=True).start()


def serve() -> None:
    """The worker's loop: (function, args) frames in on stdin, (True, result) out, or (False, the
    error as text: an exception may not unpickle in the engine), until stdin closes. Stray prints go
    to stderr: stdout carries only frames."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = sys.stdin.buffer
    for module in sys.argv[1:]:  # WorkerProcess's preload
        importlib.import_module(module)
    with fewer_collections():  # for the worker's life: it only runs a write's work (see `_answer`)
        while True:
            try:
                function, args = read_frame(requests)
            except EOFError:
                return
            _write_pickled(answers, _answer(function, args))


def _answer(function: Callable[..., Any], args: Sequence[Any]) -> bytes:
    """The pickled (True, result), or (False, the error as text); a result that does not pickle is an
    error too (it used to end the worker). Called with the collector's threshold raised for good:
    restored after each call, as an engine's write does, it made each call's end and the next call's
    unpickling collect over the worker's memos, ~5 % of a summary worker's CPU."""
    try:
        return pickle.dumps((True, function(*args)), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - the caller does the work itself and logs this
        return pickle.dumps((False, f"{type(exc).__name__}: {exc}"), protocol=pickle.HIGHEST_PROTOCOL)


if __name__ == "__main__":
    serve()
