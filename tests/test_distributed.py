"""Reindex on Ray (indexers/distributed.py): a real local Ray instance, the real model, real shards.

The Ray path must give the very shards of the single-process path, and a worker killed mid-job
must leave every user with its old shard or its new one, never a mix, with a rerun completing.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: `pip install 'convsearch[ray]'` (make test installs it)")

from engine.api import ConversationEngine  # noqa: E402
from engine.surfaces.cli import main  # noqa: E402
from engine.errors import ReindexIncompleteError  # noqa: E402
from indexers.chunk_map import CHUNK_SCHEMA, read_chunk_columns  # noqa: E402
from indexers.distributed import RayOptions, reindex_on_ray  # noqa: E402
from indexers.shard import current_version_dir  # noqa: E402
from indexers.shard_storage import ShardStorage  # noqa: E402

pytestmark = pytest.mark.slow

USERS = [f"user{i}" for i in range(5)]
TOPICS = ["postgres migration", "kyoto trip", "invoice A-7731", "cat Mochi vet", "ECONNRESET retry",
          "garden tomatoes", "piano lessons", "tax return deadline"]
WORDS = "we should check the plan again tomorrow because it matters a lot for everyone involved".split()
QUERIES = ["postgres migration", "invoice A-7731", "when is the vet appointment", "piano"]


def messages(user: str, count: int, start: int = 0) -> list[dict]:
    rng = random.Random(f"{user}-{start}")
    t0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)
    out = []
    for i in range(start, start + count):
        topic = rng.choice(TOPICS)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 30)))
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"About {topic}: {words}.",
                    "created_at": (t0 + timedelta(minutes=7 * i)).isoformat(), "message_id": f"{user}-m{i}"})
    return out


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance (2 CPUs, as CI) for the module: starting one costs seconds."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield
    ray.shutdown()


def make_home(home: Path, count: int) -> None:
    with ConversationEngine(home) as engine:
        for user in USERS:
            engine.add_user(user)
            engine.ingest(user, messages(user, count), index=False)


def manifest_of(root: Path, user: str) -> dict:
    return json.loads((current_version_dir(root, user) / "manifest.json").read_text())


def hits(engine: ConversationEngine, user: str) -> list[tuple]:
    return [(h.kind, h.message_id or h.summary_id, round(h.score, 5))
            for q in QUERIES for h in engine.search(user, q, limit=5).results]


def test_ray_reindex_equals_the_single_process_one(tmp_path: Path, local_ray: None) -> None:
    make_home(tmp_path / "single", 12)
    shutil.copytree(tmp_path / "single", tmp_path / "ray")
    with ConversationEngine(tmp_path / "single") as engine:
        engine.reindex()
        expected = {u: hits(engine, u) for u in USERS}
    with ConversationEngine(tmp_path / "ray") as engine:
        report = engine.reindex_on_ray()
        assert sorted(r.user_id for r in report.rebuilt) == USERS and report.skipped == []
        assert all(r.embeddings_computed > 0 for r in report.rebuilt)
        assert {u: hits(engine, u) for u in USERS} == expected
        again = engine.reindex_on_ray()  # everyone is at the target: a rerun has nothing to do
        assert again.rebuilt == [] and sorted(again.skipped) == USERS
    for user in USERS:
        single, distributed = (tmp_path / name / "indexes" for name in ("single", "ray"))
        assert manifest_of(distributed, user) == manifest_of(single, user)
        chunks = [read_chunk_columns(current_version_dir(root, user), list(CHUNK_SCHEMA.names)) for root in (single, distributed)]
        assert chunks[0].equals(chunks[1])


def _descendant_of(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


def _kill_embedding_actor_after_first_publish(root: Path, old: dict[str, dict], killed: list[int]) -> None:
    """kill -9 this test's embedding actor while it embeds, once one user has its new shard."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not killed:
        try:
            published = any(manifest_of(root, u) != old[u] for u in USERS)
        except OSError:  # read while a save removed the old version: look again
            published = False
        for entry in os.listdir("/proc") if published else ():
            if not entry.isdigit():
                continue
            try:
                title = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if title.startswith(b"ray::_EmbedActor.embed") and _descendant_of(int(entry), os.getpid()):
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
                return
        time.sleep(0.01)


def test_a_killed_worker_leaves_old_or_new_and_a_rerun_completes(tmp_path: Path, local_ray: None) -> None:
    home = tmp_path / "home"
    make_home(home, 10)
    with ConversationEngine(home) as engine:
        engine.index()  # the old shards
        old = {u: manifest_of(engine.pipeline.root, u) for u in USERS}
        for user in USERS:
            engine.ingest(user, messages(user, 10, start=10), index=False)  # the store moves on
        root = engine.pipeline.root
        killed: list[int] = []
        watcher = threading.Thread(target=_kill_embedding_actor_after_first_publish, args=(root, old, killed))
        watcher.start()
        options = RayOptions(retries=0, users_in_flight=1, batch_texts=4)  # no retry: the kill must cost users
        args = (engine.store, engine.pipeline.cache, engine.pipeline.params, engine.pipeline.spec(), USERS,
                ShardStorage(root))
        with pytest.raises(ReindexIncompleteError, match="run the same command again"):
            reindex_on_ray(*args, options)
        watcher.join()
        assert killed, "the embedding actor was never seen embedding"
        states = {u: manifest_of(root, u) for u in USERS}
        new = [u for u in USERS if states[u] != old[u]]
        assert new and len(new) < len(USERS)
        target = {u: {f"{u}:continuous": engine.store.thread_tail(f"{u}:continuous")[0]} for u in USERS}
        assert all(states[u]["watermarks"] == target[u] for u in new)  # new means complete, not a mix
        report = reindex_on_ray(*args, RayOptions())
        assert sorted(report.skipped) == sorted(new)
        assert sorted(r.user_id for r in report.rebuilt) == sorted(set(USERS) - set(new))
    with ConversationEngine(home) as engine:  # every shard loads and has every message
        for user in USERS:
            assert manifest_of(root, user)["watermarks"] == target[user]
            assert engine.search(user, "postgres migration", limit=3).results
            assert engine.pipeline.pending_vector_messages(user) == 0


def test_the_cli_publishes_to_another_location_and_a_serving_node_fetches(tmp_path: Path, local_ray: None,
                                                                          capsys: pytest.CaptureFixture) -> None:
    make_home(tmp_path / "job", 6)
    shared = tmp_path / "object-store"
    job = ["--home", str(tmp_path / "job"), "reindex", "--all"]
    assert main([*job, "--shards", str(shared)]) == 3  # invalid input
    assert "only apply with --executor ray" in capsys.readouterr().err
    assert main([*job, "--executor", "ray", "--embed-actors", "2"]) == 3  # 2 CPUs: one is the tasks'
    assert "use 1 to 1" in capsys.readouterr().err
    assert main([*job, "--executor", "ray", "--shards", f"file://{shared}"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(r["user_id"] for r in report["rebuilt"]) == USERS and report["embed_actors"] == 1
    assert not any((tmp_path / "job" / "indexes" / p.name / "CURRENT").exists() for p in shared.iterdir())
    shutil.copytree(tmp_path / "job", tmp_path / "node", ignore=shutil.ignore_patterns("indexes"))
    storage = ShardStorage(shared)
    with ConversationEngine(tmp_path / "node") as engine:
        for user in USERS:
            assert storage.fetch(user, engine.pipeline.root) == "v000001"
            assert engine.search(user, "invoke A-7731 invoice", limit=3).results
            assert engine.pipeline.pending_vector_messages(user) == 0
