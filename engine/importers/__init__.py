"""Importers: whole files into the store, all-or-nothing per file.

`import_file` reads one file of a known format, then stores it in one store transaction: the first
bad record raises ImportFileError naming its line/index and nothing is stored; with `skip_bad` each
bad record is skipped and listed in the report instead. Once the file is read, the import holds the
writer locks of the users it names (`hold`) and opens its transaction beside the others', so other
users' writes go on while it stores. Re-importing a file stores nothing new
when its records carry ids (every format but id-less JSONL/parquet does; see each module).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path
from time import perf_counter
from typing import Callable, Collection

from engine.errors import InvalidInputError
from engine.importers.export import EXPORT_FORMATS, export_thread, export_thread_parquet
from engine.importers.jsonl import import_jsonl
from engine.importers.legacy import import_legacy
from engine.importers.locomo import import_locomo
from engine.importers.openai_chat import import_openai
from engine.importers.parquet import import_parquet
from engine.importers.records import ImportContext, ImportReport, Issues, SkippedRecord, Totals, load_json
from engine.store.ingest import Ingestor
from engine.store.core import Store
from engine.timeutil import zone

__all__ = ["FORMATS", "EXPORT_FORMATS", "import_file", "ImportReport", "SkippedRecord", "export_thread",
           "export_thread_parquet", "guess_format"]

FORMATS = ("jsonl", "parquet", "openai", "locomo", "legacy")
_IMPORTERS: dict[str, Callable[[ImportContext], Totals]] = {
    "jsonl": import_jsonl, "parquet": import_parquet, "openai": import_openai,
    "locomo": import_locomo, "legacy": import_legacy,
}
_NEEDS_USER = ("openai", "legacy")  # these files do not say whose history they are


Hold = Callable[[Collection[str]], AbstractContextManager[object]]


def import_file(store: Store, ingestor: Ingestor, path: Path, *, fmt: str, user_id: str | None = None,
                timezone: str | None = None, skip_bad: bool = False, progress: bool = False,
                update: bool = False, hold: Hold = lambda users: nullcontext()) -> ImportReport:
    """Import `path` as `fmt`; `user_id`/`timezone` are defaults for the users the file creates.
    `hold(users)`: the writer locks of the users the file names, held until its transaction ends.

    LoCoMo ignores `user_id` (each conversation is its own user, in UTC).
    """
    path = Path(path)
    _check_arguments(path, fmt, user_id, timezone)
    started = perf_counter()
    issues = Issues(skip_bad)
    with ExitStack() as held:
        def claim(users: Collection[str]) -> None:
            held.enter_context(hold(users))
            held.enter_context(store.transaction(beside_others=True))

        ctx = ImportContext(store=store, ingestor=ingestor, path=path, user_id=user_id, timezone=timezone,
                            issues=issues, progress=progress, now=ingestor.clock(), claim=claim, update=update)
        totals = _IMPORTERS[fmt](ctx)
    return ImportReport(path=str(path), format=fmt, users=totals.users, threads=totals.threads,
                        inserted=totals.inserted, duplicates=totals.duplicates, summaries=totals.summaries,
                        skipped=tuple(issues.skipped), seconds=round(perf_counter() - started, 3),
                        changed=tuple(issues.changed), rewritten=tuple(issues.rewritten),
                        without_text=issues.without_text)


_BY_EXTENSION = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}


def guess_format(path: Path) -> str:
    """The import format a file's extension says (.jsonl, .parquet), or for .json its first record's shape."""
    found = _BY_EXTENSION.get(Path(path).suffix.lower())
    if found is None and Path(path).suffix.lower() == ".json" and Path(path).is_file():
        found = _json_shape(load_json(Path(path)))
    if found is None:
        raise InvalidInputError(f"cannot tell the format of {Path(path).name!r}: pass --format "
                                f"({', '.join(FORMATS)})")
    return found


def _json_shape(data: object) -> str | None:
    """locomo ({sample_id, conversation}), legacy ({userMessage, ...}) or openai (messages or a mapping)."""
    first = data[0] if isinstance(data, list) and data else data
    if not isinstance(first, dict):
        return None
    if "sample_id" in first and "conversation" in first:
        return "locomo"
    if {"userMessage", "assistantResponse"} & set(first):
        return "legacy"
    if {"messages", "mapping", "role"} & set(first):
        return "openai"
    return None


def _check_arguments(path: Path, fmt: str, user_id: str | None, timezone: str | None) -> None:
    if fmt not in FORMATS:
        raise InvalidInputError(f"unknown import format {fmt!r}: use one of {', '.join(FORMATS)}")
    if path.is_dir():
        raise InvalidInputError(f"{path} is a directory: give one file to import (each file is one import)")
    if not path.is_file():
        raise InvalidInputError(f"no such file: {path}: check the path")
    if fmt in _NEEDS_USER and not user_id:
        raise InvalidInputError(f"a {fmt} file does not name its user: pass user_id (--user) to import it")
    if timezone is not None:
        zone(timezone)
