"""Where shards are published and fetched: a local directory, or storage several machines reach.

The layout is the same everywhere (`<user-slug>/CURRENT`, `<user-slug>/vNNNNNN/`), so a shard
written by a reindex worker on one machine is served by another after `fetch`.

* A local path (the default) is written by `Shard.save` itself: fsync, then one rename per flip.
* A URL (`s3://bucket/prefix?endpoint_override=host:port&scheme=http`, or any scheme
  `pyarrow.fs` knows) is written through pyarrow's filesystem: the version is built in a local
  temporary directory, uploaded under a new version prefix, and only then is `CURRENT` replaced
  with one PUT. An object store has no directory rename, but a single object write is atomic, so
  a killed upload leaves the old version live and a reader sees old or new, never a mix.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from engine.errors import IndexStateError, InvalidInputError
from indexers.chunk_map import read_chunk_columns
from indexers.manifest import Manifest
from indexers.shard import Shard, current_version_dir, flip_pointer, shard_dir

__all__ = ["ShardStorage", "LiveShard"]


@dataclass(frozen=True, slots=True)
class LiveShard:
    """What a job needs to know of a published shard to decide whether to rebuild it."""

    manifest: Manifest
    all_vectors: bool  # every window has its vector (an incremental index may have left some pending)


class ShardStorage:
    """Shards of many users under one location (a directory or a URL)."""

    def __init__(self, location: str | Path) -> None:
        text = str(location)
        self.location = text
        self.local: Path | None = None
        if "://" not in text or text.startswith("file://"):
            self.local = Path(text.removeprefix("file://")).absolute()
            return
        try:
            self.fs, self.base = pafs.FileSystem.from_uri(text)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as exc:
            raise InvalidInputError(
                f"cannot use the shard location {text!r} ({exc}): give a directory or a URL such as "
                "s3://bucket/prefix?endpoint_override=host:port&scheme=http"
            ) from None
        self.base = self.base.rstrip("/")

    @property
    def url(self) -> str:
        """A string that rebuilds this storage anywhere (what Ray workers are given)."""
        return str(self.local) if self.local is not None else self.location

    # Writing --------------------------------------------------------------------------------
    def publish(self, shard: Shard) -> str:
        """Write the shard as a new version and flip CURRENT to it; the version's name."""
        if self.local is not None:
            return shard.save(self.local).name
        with tempfile.TemporaryDirectory(prefix="convsearch-shard-") as tmp:
            built = shard.save(Path(tmp))
            slug = built.parent.name
            live = self._pointer(slug)
            name = f"v{int(live[1:]) + 1 if live else 1:06d}"
            target = f"{self.base}/{slug}/{name}"
            self.fs.delete_dir_contents(target, missing_dir_ok=True)  # the leftover of a killed upload
            pafs.copy_files(str(built), target, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs)
            with self.fs.open_output_stream(f"{self.base}/{slug}/CURRENT") as out:
                out.write(name.encode("utf-8"))
            self._drop_versions_except(slug, name)
            return name

    def _drop_versions_except(self, slug: str, keep: str) -> None:
        selector = pafs.FileSelector(f"{self.base}/{slug}", allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.Directory and info.base_name != keep:
                self.fs.delete_dir(info.path)

    # Reading --------------------------------------------------------------------------------
    def _pointer(self, slug: str) -> str | None:
        path = f"{self.base}/{slug}/CURRENT"
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with self.fs.open_input_stream(path) as stream:
            return stream.read().decode("utf-8").strip() or None

    def live(self, user_id: str) -> LiveShard | None:
        """The user's published manifest and whether every window has a vector; None: no shard."""
        slug = shard_dir(Path(), user_id).name
        try:
            if self.local is not None:
                version = current_version_dir(self.local, user_id)
                if version is None:
                    return None
                manifest = Manifest.load(version / "manifest.json")
                flags = read_chunk_columns(version, ["has_vector"])
            else:
                name = self._pointer(slug)
                if name is None:
                    return None
                where = f"{self.base}/{slug}/{name}"
                with self.fs.open_input_stream(f"{where}/manifest.json") as stream:
                    manifest = Manifest.from_json(stream.read().decode("utf-8"), f"{self.location} {where}")
                flags = read_chunk_columns(where, ["has_vector"], self.fs)
        except (OSError, pa.ArrowInvalid):
            return None  # unreadable: the job rebuilds it
        except IndexStateError:
            return None
        return LiveShard(manifest, all(flags.column("has_vector").to_pylist()))

    def fetch(self, user_id: str, root: Path) -> str | None:
        """Copy the user's live version into the local shard directory `root` (the engine's
        `indexes/`), flipping the local CURRENT only once the copy is complete; its name, or None."""
        slug = shard_dir(Path(), user_id).name
        base = shard_dir(root, user_id)
        if self.local is not None:
            version = current_version_dir(self.local, user_id)
            if version is None or self.local == Path(root).absolute():
                return None if version is None else version.name
            name, source, source_fs = version.name, str(version), pafs.LocalFileSystem()
        else:
            pointer = self._pointer(slug)
            if pointer is None:
                return None
            name = pointer
            source, source_fs = f"{self.base}/{slug}/{name}", self.fs
        base.mkdir(parents=True, exist_ok=True)
        staging = base / f".fetch-{name}"
        shutil.rmtree(staging, ignore_errors=True)
        pafs.copy_files(source, str(staging), source_filesystem=source_fs, destination_filesystem=pafs.LocalFileSystem())
        shutil.rmtree(base / name, ignore_errors=True)
        os.replace(staging, base / name)
        flip_pointer(base / "CURRENT", name)
        for old in base.iterdir():
            if old.is_dir() and old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        return name
