"""The manifest of a user's index shard: what built it, and how far it has read.

A shard is only usable with the settings that built it; `check_compatible` says exactly what
differs and the command that fixes it, so a mismatch is never used silently.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from engine.errors import IndexStateError

__all__ = ["INDEX_SCHEMA_VERSION", "BuildSpec", "Manifest", "write_json_atomic"]

INDEX_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class BuildSpec:
    """Everything that changes what an index contains: a difference means a reindex."""

    model: str | None  # None: lexical only
    dim: int
    chunking: Mapping[str, Any]
    tokenizer: Mapping[str, Any]
    bm25: Mapping[str, Any]
    schema_version: int = INDEX_SCHEMA_VERSION

    def differences(self, other: "BuildSpec", *, ignore_model: bool = False) -> list[str]:
        mine, theirs = asdict(self), asdict(other)
        if ignore_model:
            for key in ("model", "dim"):
                mine.pop(key), theirs.pop(key)
        return [f"{key}: index has {theirs[key]!r}, configuration says {mine[key]!r}"
                for key in mine if mine[key] != theirs[key]]


@dataclass(frozen=True, slots=True)
class Manifest:
    user_id: str
    spec: BuildSpec
    watermarks: Mapping[str, int] = field(default_factory=dict)  # thread -> highest seq chunked
    tails: Mapping[str, int] = field(default_factory=dict)  # thread -> from_seq of its last window
    chunks: int = 0
    next_label: int = 0

    def check_compatible(self, wanted: BuildSpec, *, lexical_only: bool) -> None:
        """Raise IndexStateError naming each difference and the fix."""
        # A lexical-only engine may read a shard with vectors, never the other way round.
        differences = wanted.differences(self.spec, ignore_model=lexical_only)
        if differences:
            raise IndexStateError(
                f"the index of user {self.user_id!r} does not match the configuration ("
                + "; ".join(differences)
                + f"): run `convsearch reindex --user {self.user_id}`"
            )

    def advanced(self, marks: Mapping[str, tuple[int, int]], *, chunks: int, next_label: int) -> "Manifest":
        """The threads of `marks` (thread -> (watermark, tail)) indexed up to their watermarks."""
        return replace(
            self, watermarks={**self.watermarks, **{t: watermark for t, (watermark, _) in marks.items()}},
            tails={**self.tails, **{t: tail for t, (_, tail) in marks.items()}}, chunks=chunks, next_label=next_label,
        )

    def save(self, path: Path) -> None:
        write_json_atomic(path, asdict(self))

    @classmethod
    def load(cls, path: Path) -> "Manifest":
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise IndexStateError(
                f"the index manifest {path} is missing or unreadable ({exc}): run `convsearch reindex`"
            ) from None
        return cls.from_json(text, str(path))

    @classmethod
    def from_json(cls, text: str, where: str) -> "Manifest":
        """A manifest from its JSON text (`where` names it in the error: a path or a URL)."""
        try:
            raw = json.loads(text)
            spec = BuildSpec(**raw.pop("spec"))
            return cls(spec=spec, **raw)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise IndexStateError(
                f"the index manifest {where} is missing or unreadable ({exc}): run `convsearch reindex`"
            ) from None


def write_json_atomic(path: Path, payload: Any) -> None:
    """Temp file + fsync + rename: a crash leaves the old file or the new, never half of one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, ensure_ascii=False, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
