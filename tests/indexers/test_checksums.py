"""A version's checksums find every change to its files after the save, and an unreadable file is
reported, not raised (real files in tmp_path)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from indexers import checksums
from indexers.checksums import CHECKSUM_FILE, changed_files, write_checksums


@pytest.fixture
def version(tmp_path: Path) -> Path:
    (tmp_path / "hnsw").mkdir()
    (tmp_path / "hnsw" / "index.faiss").write_bytes(bytes(range(256)) * 4000)  # past one read block
    (tmp_path / "manifest.json").write_text('{"chunks": 3}')
    write_checksums(tmp_path)
    return tmp_path


def test_a_version_as_saved_matches(version: Path) -> None:
    assert changed_files(version) == []


def test_every_change_is_named(version: Path) -> None:
    graph = version / "hnsw" / "index.faiss"
    data = bytearray(graph.read_bytes())
    data[700_000] ^= 1
    graph.write_bytes(bytes(data))
    (version / "manifest.json").write_text('{"chunks": 3} ')
    flipped, resized = changed_files(version)
    assert flipped.startswith("hnsw/index.faiss has other bytes than when saved (CRC32 ")
    assert resized == "manifest.json holds 14 bytes, 13 when saved"
    graph.unlink()
    assert changed_files(version)[0] == "hnsw/index.faiss is missing"


def test_an_unreadable_file_or_record_is_reported(version: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def bad_sector(path: Path) -> dict:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(checksums, "_sums", bad_sector)
    assert changed_files(version) == ["hnsw/index.faiss cannot be read (Input/output error)",
                                      "manifest.json cannot be read (Input/output error)"]
    monkeypatch.undo()
    (version / CHECKSUM_FILE).write_text("{not json")
    assert changed_files(version) == [f"{CHECKSUM_FILE} is unreadable (JSONDecodeError)"]


def test_a_version_saved_before_checksums_is_not_checked(version: Path) -> None:
    (version / CHECKSUM_FILE).unlink()
    (version / "manifest.json").write_text("anything")
    assert changed_files(version) == []
