"""What several test modules share: one fake embedder, the real model loaded once, a live HTTP
server on a free loopback port, and the small conversations the surface tests ingest.

Test modules import from here, never from each other (a helper living in a test module drags
that module's fixtures and slow imports into every importer).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from engine.api import ConversationEngine
from engine.config import Settings
from engine.query.summary_index import SummaryMatches
from indexers.embedders import Embedder, load_embedder
from indexers.message_vectors import MessageVectors

__all__ = ["HashEmbedder", "real_embedder", "free_port", "live_server", "live", "NOW", "ALICE", "BOB", "messages",
           "CRASH_T0", "open_engine", "batch", "StatementCount", "chat_export", "assert_same_matches"]


class HashEmbedder:
    """The one fake embedder: a bag of hashed words, L2-normalised. Deterministic, 384 wide like
    MiniLM (the HNSW index is built that wide), no model to load; texts sharing words are close."""

    name = "test-hash-384"
    dim = 384
    max_tokens = 256

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            rows[i, 0] = 0.01  # never a zero row
            for word in re.findall(r"\w+", text.lower()):
                rows[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@functools.cache
def real_embedder() -> Embedder:
    """MiniLM through the configured backend (ONNX int8 by default), loaded once per test session.
    Tests using it are marked `model`."""
    backend = Settings().embedding_backend
    loaded = load_embedder("onnx" if backend == "none" else backend)
    assert loaded is not None
    return loaded


def free_port() -> int:
    """A port the OS says is free on 127.0.0.1 (tests run side by side: never a fixed port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def live_server(engine: ConversationEngine, *, log_level: str = "critical") -> Iterator[str]:
    """create_app(engine) under uvicorn on a free 127.0.0.1 port (a background thread); yields the base URL."""
    import uvicorn  # here, not at the top: the crash test's child imports this module and never serves

    from engine.surfaces.http.app import create_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level=log_level))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def live(engine: ConversationEngine) -> Iterator[Any]:
    """An httpx client of the app under a real uvicorn server (live_server); a generator, so a test
    writes `for client in live(engine):`."""
    import httpx

    with live_server(engine, log_level="warning") as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


# Alice (Paris) and Bob (Tokyo): the conversations the HTTP, CLI and MCP tests ingest ----------------
NOW = datetime(2024, 3, 6, 12, 0, tzinfo=timezone.utc)
ALICE = [
    ("a1", "user", "2024-03-04T09:00:00+01:00", "We need to pick a database for the invoicing app: "
                                                  "PostgreSQL or MySQL?"),
    ("a2", "assistant", "2024-03-04T09:01:00+01:00", "PostgreSQL fits invoicing well: exact numeric types, JSONB "
                                                       "for line items and strict transactions."),
    ("a3", "user", "2024-03-04T09:05:00+01:00", "Decision: we go with PostgreSQL 15. Also, desk order A-7731 is late."),
    ("a4", "assistant", "2024-03-04T09:06:00+01:00", "Noted. I will write ADR-007 recording the PostgreSQL decision."),
    ("a5", "user", "2024-03-05T14:00:00+01:00", "The API logs show ECONNRESET errors under load since this morning."),
    ("a6", "assistant", "2024-03-05T14:02:00+01:00", "ECONNRESET usually means the pool closed the connection: "
                                                       "check the PgBouncer idle timeouts."),
]
BOB = [
    ("b1", "user", "2024-03-04T20:00:00+09:00", "My cat Mochi is allergic to salmon food."),
    ("b2", "assistant", "2024-03-04T20:01:00+09:00", "Then avoid fish-based treats and food for Mochi."),
]


def messages(rows: list[tuple[str, str, str, str]]) -> list[dict[str, str]]:
    """ALICE/BOB rows as the message dicts ingest takes."""
    return [{"message_id": i, "role": r, "created_at": t, "content": c} for i, r, t, c in rows]


# Generated batches on a hash-embedder engine (the crash and concurrency tests) ---------------------
CRASH_T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)


def open_engine(home: Path, embedder: object | None = "hash", *, summaries: bool = True) -> ConversationEngine:
    """The engine on `home` with the hash embedder; without summaries an index or save loop spends its
    time indexing."""
    chosen = HashEmbedder() if embedder == "hash" else embedder
    ahead = 24 * 366  # batch k is stamped k * ~3.5 days after T0: far past the pinned clock for the later ones
    settings = Settings(future_tolerance_hours=ahead) if summaries else Settings(summarizer="none",
                                                                                  future_tolerance_hours=ahead)
    return ConversationEngine(home, embedder=chosen, clock=lambda: CRASH_T0 + timedelta(days=400),
                              settings=settings)


def batch(k: int, size: int) -> list[dict]:
    """Batch k: ids b<k>-<i>, 30 s apart, continuing the previous batches; the last says lastof<k>."""
    out = []
    for i in range(size):
        text = f"batch {k} message {i} about topic{i % 89} and theme{(k * 7 + i) % 31}"
        out.append({"role": "user" if i % 2 else "assistant", "message_id": f"b{k:04d}-{i:05d}",
                    "content": text + (f" lastof{k}" if i == size - 1 else ""),
                    "created_at": (CRASH_T0 + timedelta(seconds=30 * (k * 10_000 + i))).isoformat()})
    return out


class StatementCount:
    """Counts every statement the engine's store runs from now on."""

    def __init__(self, engine: ConversationEngine) -> None:
        self.count = 0
        db = engine.store.db
        for name in ("execute", "execute_with", "insert_arrow"):
            inner = getattr(db, name)

            def counted(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
                self.count += 1
                return _inner(*args, **kwargs)
            setattr(db, name, counted)


def chat_export(threads: int, per_thread: int, start: datetime) -> list[dict]:
    """A ChatGPT-style export (`conversations.json`): `threads` conversations of `per_thread`
    turns 30 s apart, each two hours after the last."""
    return [{"id": f"c{c}", "title": f"Chat {c}", "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "id": f"c{c}-m{i}",
         "create_time": start.timestamp() + c * 7200 + i * 30,
         "content": f"We decided to use topic{c} for step {i}. I'll send the report tomorrow."}
        for i in range(per_thread)]} for c in range(threads)]


def saved_message_vectors(directory: Path, ids: Sequence[str], dim: int,
                          rng: np.random.Generator) -> tuple[np.ndarray, MessageVectors]:
    """Random float32 vectors for these ids, put, saved into `directory` and loaded back (the rows a
    search reads by pread): the vectors and the loaded set."""
    vectors = rng.standard_normal((len(ids), dim)).astype(np.float32)
    store = MessageVectors(dim)
    store.put(list(ids), vectors)
    store.save(directory)
    return vectors, MessageVectors.load(directory, dim)


def assert_same_matches(a: SummaryMatches, b: SummaryMatches) -> None:
    """Two summary indexes' matches of one query: the same summaries, Markdown, scores, vectors and spans."""
    assert [s.summary_id for s in a.summaries] == [s.summary_id for s in b.summaries]
    assert list(a.summaries) == list(b.summaries)
    assert [a.full(i) for i in range(len(a.summaries))] == [b.full(i) for i in range(len(b.summaries))]
    # a document sums its query terms in term-id order, and ids follow the order words first came in,
    # so an updated index may differ from a fresh one in the last bit (as a live shard from a rebuilt one)
    np.testing.assert_allclose(a.lexical_raw, b.lexical_raw, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(a.matched, b.matched)
    assert a.vectors is not None and b.vectors is not None
    np.testing.assert_array_equal(a.vectors, b.vectors)  # NaN rows compare equal here
    np.testing.assert_array_equal(a.spans.by_start, b.spans.by_start)
