"""Shards published to storage other machines reach, and fetched back by a serving node
(indexers/shard_storage.py): a local directory, and a real S3-compatible server (moto's, on loopback)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from engine.api import ConversationEngine
from engine.errors import InvalidInputError
from indexers.shard import Shard, shard_dir
from indexers.shard_storage import ShardStorage

pytestmark = pytest.mark.slow  # a few seconds each: two engines, moto's server

QUERIES = ["order A-7731", "database", "Mochi"]


@pytest.fixture(scope="module")
def s3_server():
    """A real S3-compatible HTTP server on 127.0.0.1 (a free port), in this process."""
    server_module = pytest.importorskip("moto.server", reason="moto is not installed: pip install 'moto[server]'")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"{host}:{port}"
    server.stop()


@pytest.fixture(params=["directory", "s3"])
def location(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "directory":
        return str(tmp_path / "shared")
    endpoint = request.getfixturevalue("s3_server")
    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    bucket = tmp_path.name.lower().replace("_", "-")[:40]
    url = f"s3://{bucket}/shards?endpoint_override={endpoint}&scheme=http&region=us-east-1"
    pafs.FileSystem.from_uri(url + "&allow_bucket_creation=true")[0].create_dir(bucket)
    return url


@pytest.fixture
def homes(tmp_path: Path, sample_path: Path) -> tuple[Path, Path]:
    """A home indexed from the sample, and a node's home with the same store and no indexes."""
    with ConversationEngine(tmp_path / "job", embedder=None) as engine:
        engine.import_file(sample_path, fmt="jsonl")
        engine.reindex()
    shutil.copytree(tmp_path / "job", tmp_path / "node", ignore=shutil.ignore_patterns("indexes"))
    return tmp_path / "job", tmp_path / "node"


def results(home: Path, users: tuple[str, ...] = ("alice", "bob")) -> list[tuple]:
    with ConversationEngine(home, embedder=None) as engine:
        found = [(h.message_id, round(h.score, 6)) for u in users for q in QUERIES
                 for h in engine.search(u, q, limit=5).results]
    assert found
    return found


def load(home: Path, user: str, engine: ConversationEngine) -> Shard:
    shard = Shard.load(engine.pipeline.root, user, engine.pipeline.tokenizer, with_vectors=False)
    assert shard is not None
    return shard


def test_a_published_shard_is_fetched_whole_by_another_node(location: str, homes: tuple[Path, Path]) -> None:
    job, node = homes
    storage = ShardStorage(location)
    with ConversationEngine(job, embedder=None) as engine:
        for user in ("alice", "bob"):
            shard = load(job, user, engine)
            assert storage.live(user) is None and storage.fetch(user, node / "indexes") is None
            assert [storage.publish(shard), storage.publish(shard)] == ["v000001", "v000002"]
            assert storage.live(user).manifest == shard.manifest
    for user in ("alice", "bob"):
        assert storage.fetch(user, node / "indexes") == "v000002"
        assert sorted(p.name for p in shard_dir(node / "indexes", user).iterdir()) == ["CURRENT", "v000002"]
    assert results(node) == results(job)


def test_a_killed_upload_leaves_the_old_version_live(location: str, homes: tuple[Path, Path]) -> None:
    job, node = homes
    storage = ShardStorage(location)
    with ConversationEngine(job, embedder=None) as engine:
        shard = load(job, "alice", engine)
        storage.publish(shard)
        # what a job killed mid-upload leaves: part of the next version, CURRENT not flipped
        fs, base = (pafs.LocalFileSystem(), str(storage.local)) if storage.local else (storage.fs, storage.base)
        slug = shard_dir(Path(), "alice").name
        fs.create_dir(f"{base}/{slug}/v000002")
        with fs.open_output_stream(f"{base}/{slug}/v000002/manifest.json") as out:
            out.write(b"{half")
        assert storage.live("alice").manifest == shard.manifest
        assert storage.fetch("alice", node / "indexes") == "v000001"
        assert storage.publish(shard) == "v000002"  # the rerun replaces the leftover
        assert storage.live("alice").manifest == shard.manifest
    assert storage.fetch("alice", node / "indexes") == "v000002"
    assert results(node, ("alice",)) == results(job, ("alice",))


def test_an_unusable_location_says_what_to_give() -> None:
    with pytest.raises(InvalidInputError, match="give a directory or a URL"):
        ShardStorage("nosuchscheme://bucket/prefix")
