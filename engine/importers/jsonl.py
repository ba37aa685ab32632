"""JSONL import: one message per line, read line by line.

Fields: `role`, `content` (required); `user_id` (a line's own value wins, the importer's
`user_id` argument is the default for lines without one); `thread_id` (absent: the user's
continuous thread); `created_at` (ISO 8601, naive read in the user's zone; absent: the import
time); `message_id`, `external_id`, `speaker`, `tools_used`, `metadata`, `kind`; `timezone` for a
user the import creates. Other fields are ignored, blank lines too.

Ids make imports idempotent: lines with a `message_id` or `external_id` are skipped when already
stored, lines with neither are stored again on every import.
"""

from __future__ import annotations


from engine.importers.appending import ingest_batches
from engine.importers.records import BadRecord, FlatGrouper, ImportContext, Totals, parsed_line, progress_bar

__all__ = ["import_jsonl"]


def import_jsonl(ctx: ImportContext) -> Totals:
    grouper = FlatGrouper(ctx)
    size = ctx.path.stat().st_size
    with ctx.path.open("rb") as fh, progress_bar(ctx.progress, size, "read", unit="B") as bar:
        for number, raw in enumerate(fh, start=1):
            bar.update(len(raw))
            location = f"line {number}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                ctx.issues.bad(location, "not UTF-8 text: re-export the file as UTF-8")
                continue
            if not text.strip():
                continue
            try:
                row = parsed_line(text)
            except BadRecord as exc:
                ctx.issues.bad(location, exc.reason)
                continue
            grouper.add(location, row)
    return ingest_batches(ctx, grouper.batches())
