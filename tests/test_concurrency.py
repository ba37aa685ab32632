"""One engine, many threads: searches and reads from several threads while another thread ingests,
indexes and reindexes; and a second process that tries to write gets StoreLockedError.

Writer model (docs/reliability.md): one process owns the DuckDB file; inside it the facade's
`write_lock` serialises writers; readers take only the shard lock and the connection lock.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from engine.api import ConversationEngine
from engine.maintenance.doctor import diagnose
from engine.errors import ConvsearchError
from indexers.embedders import DeadlineEmbedder
from tests.support import HashEmbedder, batch, open_engine

USERS = ("u0", "u1")
READERS, READS_PER_THREAD, WRITES = 4, 25, 12
TIME_CAP_S = 60.0
BATCH = 20


def _first_batch(user: str) -> int:
    return 100 if user == "u0" else 200  # distinct message ids per user


def _build(home: Path) -> ConversationEngine:
    e = open_engine(home)
    for user in USERS:
        e.add_user(user)
        e.ingest(user, batch(_first_batch(user), 60))
    e.index()
    return e


@pytest.fixture
def engine(tmp_path: Path):
    with _build(tmp_path / "home") as e:
        yield e


class _Progress:
    """Batches the writer has finished (ingest returned), readable from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: dict[str, list[int]] = {u: [_first_batch(u)] for u in USERS}

    def add(self, user: str, k: int) -> None:
        with self.lock:
            self.done[user].append(k)

    def pick(self, rng: random.Random, user: str) -> int:
        with self.lock:
            return rng.choice(self.done[user])


def _writer(engine: ConversationEngine, progress: _Progress, stop: threading.Event) -> None:
    for i in range(WRITES):
        if stop.is_set():
            return
        user = USERS[i % 2]
        k = _first_batch(user) + 1 + i // 2
        engine.ingest(user, batch(k, BATCH), index=i % 3 == 0)  # vectors now, or with the next index()
        progress.add(user, k)
        if i % 4 == 3:
            engine.index(user)
        if i == WRITES // 2:
            engine.reindex("u0")


def _reader(engine: ConversationEngine, progress: _Progress, seed: int, stop: threading.Event) -> int:
    """Searches for a batch the writer finished: it must be found, and only the user's own messages."""
    rng, checked = random.Random(seed), 0
    for _ in range(READS_PER_THREAD):
        if stop.is_set():
            break
        user = rng.choice(USERS)
        k = progress.pick(rng, user)
        mode = rng.choice(("hybrid", "lexical", "vector"))
        response = engine.search(user, f"lastof{k} theme{rng.randrange(31)}", limit=10, mode=mode)
        ids = [h.message_id for h in response.results if h.kind == "message"]
        assert all(_owner(i) == user for i in ids), (user, ids)
        messages = [h for h in response.results if h.kind == "message"]
        assert [h.score for h in messages] == sorted((h.score for h in messages), reverse=True)
        if mode == "lexical":  # read-your-writes: a finished ingest is searchable from every thread
            assert f"b{k:04d}-{BATCH - 1:05d}" in ids or k == _first_batch(user), (k, ids)
        engine.get(user, message_id=f"b{_first_batch(user):04d}-00003")
        engine.turns_around(user, "2024-05-01T00:10:00Z", count=6)
        checked += 1
    return checked


def _owner(message_id: str | None) -> str:
    k = int(str(message_id)[1:5])
    return "u0" if k < 200 else "u1"


@pytest.mark.slow
@pytest.mark.parametrize("start", ["warm", "cold"])
def test_concurrent_searches_while_ingesting_and_indexing(tmp_path: Path, start: str) -> None:
    """warm: shards already in memory; cold: a restarted engine, so the first searches race to load them."""
    _build(tmp_path / "home").close()
    with open_engine(tmp_path / "home") as engine:
        if start == "warm":
            for user in USERS:
                engine.pipeline.shard(user)
        _run_threads(engine)


def _run_threads(engine: ConversationEngine) -> None:
    progress, stop, errors, counts = _Progress(), threading.Event(), [], []

    def guarded(target, *args) -> None:
        try:
            result = target(*args)
            if isinstance(result, int):
                counts.append(result)
        except BaseException as exc:  # noqa: BLE001 - any exception in any thread fails the test
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=guarded, args=(_writer, engine, progress, stop))]
    threads += [threading.Thread(target=guarded, args=(_reader, engine, progress, 1000 + n, stop))
                for n in range(READERS)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, TIME_CAP_S - (time.monotonic() - started)))
    stop.set()
    assert not any(t.is_alive() for t in threads), "a thread is stuck (deadlock?)"
    assert not errors, errors
    print(f"concurrency readers={READERS} searches={sum(counts)} writes={WRITES}")
    assert sum(counts) == READERS * READS_PER_THREAD
    _assert_nothing_lost(engine, progress)


def _assert_nothing_lost(engine: ConversationEngine, progress: _Progress) -> None:
    engine.index()
    for user in USERS:
        sizes = {k: 60 if k == _first_batch(user) else BATCH for k in progress.done[user]}
        expected = {f"b{k:04d}-{i:05d}" for k, size in sizes.items() for i in range(size)}
        rows = engine.store.db.execute("SELECT message_id FROM messages WHERE user_id = ? AND kind = 'turn'", [user])
        assert {r[0] for r in rows} == expected
        for k in progress.done[user]:
            hits = engine.search(user, f"lastof{k}", limit=1, mode="lexical", kinds=("message",)).results
            assert hits and _owner(hits[0].message_id) == user
    assert len(progress.done["u0"]) + len(progress.done["u1"]) == WRITES + 2
    assert diagnose(engine).ok


_SECOND_WRITER = """
import sys
from engine.api import ConversationEngine
from engine.errors import StoreLockedError
try:
    ConversationEngine(sys.argv[1], embedder=None)
except StoreLockedError as exc:
    print(exc.code, exc.http_status)
    print(exc.message)
"""


@pytest.mark.process
def test_a_second_writer_process_gets_store_locked(engine: ConversationEngine) -> None:
    done = subprocess.run([sys.executable, "-c", _SECOND_WRITER, str(engine.home)],
                          capture_output=True, text=True, timeout=120)
    code, message = done.stdout.splitlines()[:2]
    assert done.returncode == 0 and code == "store_locked 423", done.stderr
    assert "open for writing in another process" in message
    cli = subprocess.run([sys.executable, "-c", "from engine.surfaces.cli import main; raise SystemExit(main())",
                          "--home", str(engine.home), "stats"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 6 and "Traceback" not in cli.stderr
    assert cli.stderr.startswith("convsearch: error [store_locked]: the store") and "one writer" in cli.stderr
    # the owner is untouched and keeps working
    engine.ingest("u0", batch(199, 3))
    hits = engine.search("u0", "lastof199", limit=1, mode="lexical", kinds=("message",)).results
    assert hits[0].message_id == "b0199-00002"
    assert diagnose(engine).ok


def test_readers_never_see_an_error_during_reindex_swaps(engine: ConversationEngine) -> None:
    """A reader racing a loop of reindexes always gets a complete answer from the old or new shard."""
    stop, errors, seen = threading.Event(), [], []

    def read() -> None:
        while not stop.is_set() and len(seen) < 2000:
            try:
                hits = engine.search("u1", "lastof200", limit=1, mode="lexical", kinds=("message",)).results
                seen.append(hits[0].message_id if hits else None)
            except ConvsearchError as exc:  # pragma: no cover - reported below
                errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(4):
        engine.reindex("u1")
    stop.set()
    reader.join(timeout=30)
    assert not errors and seen and set(seen) == {"b0200-00059"}



def test_searches_racing_a_cold_load_wait_for_the_caught_up_shard(tmp_path: Path) -> None:
    """A restarted server's first searches race the shard's load. Every vector is in the embedding
    cache, so each must answer hybrid with the stored message first. A shard published before it
    was caught up let a racing search see no vectors, answer by keywords and say nothing."""
    home = tmp_path / "home"
    with open_engine(home, summaries=False) as first:
        first.add_user("u0")
        for k in range(3):
            first.ingest("u0", batch(k, 300), index=True)  # vectors cached; no shard saved
    with open_engine(home, summaries=False) as engine:
        start, found, shards = threading.Barrier(6), [], []

        def search() -> None:
            start.wait()
            found.append(engine.search("u0", "lastof2", limit=1, kinds=("message",)))
            shards.append(engine.pipeline.shard("u0"))

        threads = [threading.Thread(target=search) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert len(found) == 6 and all(s is shards[0] for s in shards)  # one load, not one per racing search
    assert [(r.mode, r.notice, r.results[0].message_id) for r in found] == [("hybrid", None, "b0002-00299")] * 6


def test_a_cold_load_of_one_user_does_not_hold_up_anothers(tmp_path: Path) -> None:
    """After a restart each user's first call loads that user's shard (26 s for 100k imported
    messages). One lock for every load made each other user's first search wait for it."""
    home = tmp_path / "home"
    with open_engine(home, summaries=False) as first:
        for user in USERS:
            first.add_user(user)
            first.ingest(user, batch(_first_batch(user), 30))
    with open_engine(home, summaries=False) as engine:
        answered: list[str | None] = []

        def search_u1() -> None:
            hits = engine.search("u1", "lastof200", limit=1, mode="lexical", kinds=("message",)).results
            answered.append(hits[0].message_id if hits else None)

        with engine.pipeline._load_lock("u0"):  # noqa: SLF001  (u0's load in flight)
            other = threading.Thread(target=search_u1)
            other.start()
            other.join(timeout=30)
            assert answered == ["b0200-00029"]
        assert engine.search("u0", "lastof100", limit=1, mode="lexical").results[0].message_id == "b0100-00029"


class _WritesWhileEmbedding:
    """A query model that lets a writer in once while it runs: a search waits for its vector outside
    the shard's lock, so a write can land between its keyword side and the rest."""

    name, dim, max_tokens = HashEmbedder.name, HashEmbedder.dim, HashEmbedder.max_tokens

    def __init__(self, write: Callable[[], None]) -> None:
        self.write: Callable[[], None] | None = write

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.write is not None:
            time.sleep(0.3)  # the search's keyword side is read meanwhile (a few ms)
            self.write, write = None, self.write
            write()
        return HashEmbedder().embed(["a vector that points elsewhere"] * len(texts))


def test_a_message_deleted_while_the_query_embeds_is_never_returned(engine: ConversationEngine) -> None:
    """The keyword side read before the deletion names its window: read again, never opened (KeyError)."""
    doomed = batch(100, 60)[7]  # "... topic7 and theme..."
    engine.searcher.query_embedder = DeadlineEmbedder(
        _WritesWhileEmbedding(lambda: engine.delete_messages("u0", [doomed["message_id"]])))
    response = engine.search("u0", "topic7", limit=5)
    assert response.mode == "hybrid"
    assert doomed["message_id"] not in [h.message_id for h in response.results]
