"""A summary worker's process (`python -m engine.summaries.worker`, started by SummaryWorkers).

It reads (summarizer, asks) frames from stdin and answers each with the asks' texts (or, when the
summarizer raised, the error as a string) until stdin closes. Stray prints go to stderr: stdout
carries only frames.
"""

from __future__ import annotations

import os
import sys

from engine.summaries.frames import read_frame, write_frame
from engine.summaries.workers import texts_of_all


def serve() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = sys.stdin.buffer
    while True:
        try:
            summarizer, asks = read_frame(requests)
        except EOFError:
            return
        try:
            answer: object = texts_of_all(summarizer, asks)
        except Exception as exc:  # noqa: BLE001 - the engine makes the block itself and logs this
            answer = f"{type(exc).__name__}: {exc}"
        write_frame(answers, answer)


if __name__ == "__main__":
    serve()
