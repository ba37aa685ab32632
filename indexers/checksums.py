"""A checksum of every file of a saved shard version, so bytes changed on disk after the save (a
bad sector, a copy cut short, a stray write) are found by `convsearch doctor`, not served.

A save writes `checksums.json` beside the version's other files (CRC32 and size of each); nothing
checks it on load, which must stay fast: the doctor reads every file again and compares. A version
saved before checksums existed has none and is not checked.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

__all__ = ["CHECKSUM_FILE", "write_checksums", "changed_files"]

CHECKSUM_FILE = "checksums.json"
_BLOCK = 1 << 20  # bytes read at a time: a 1M-message shard's files are ~2 GB


def write_checksums(version: Path) -> None:
    """Record the CRC32 and size of every file under `version` (before it is made live)."""
    files = {_name(path, version): _sums(path) for path in sorted(version.rglob("*"))
             if path.is_file() and path.name != CHECKSUM_FILE}
    (version / CHECKSUM_FILE).write_text(json.dumps({"algorithm": "crc32", "files": files}, indent=1), encoding="utf-8")


def changed_files(version: Path) -> list[str]:
    """What differs from the version's recorded checksums, one line a file (missing, resized,
    different bytes, or an unreadable record); empty when all match or none were recorded."""
    record = version / CHECKSUM_FILE
    if not record.exists():
        return []
    try:
        files = json.loads(record.read_text(encoding="utf-8"))["files"]
        expected = {str(name): (int(sums["bytes"]), str(sums["crc32"])) for name, sums in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return [f"{CHECKSUM_FILE} is unreadable ({type(exc).__name__})"]
    problems = []
    for name, (size, crc) in expected.items():
        path = version / name
        if not path.is_file():
            problems.append(f"{name} is missing")
            continue
        try:
            found = _sums(path)
        except OSError as exc:  # a bad sector reads as EIO
            problems.append(f"{name} cannot be read ({exc.strerror or type(exc).__name__})")
            continue
        if found["bytes"] != size:
            problems.append(f"{name} holds {found['bytes']} bytes, {size} when saved")
        elif found["crc32"] != crc:
            problems.append(f"{name} has other bytes than when saved (CRC32 {found['crc32']}, saved {crc})")
    return problems


def _sums(path: Path) -> dict[str, int | str]:
    crc, size = 0, 0
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            crc, size = zlib.crc32(block, crc), size + len(block)
    return {"bytes": size, "crc32": f"{crc:08x}"}


def _name(path: Path, version: Path) -> str:
    return path.relative_to(version).as_posix()
