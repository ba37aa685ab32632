"""Parquet import: the JSONL fields as columns (what `export_thread_parquet` writes), by record batch.

`created_at` may be a timestamp column (naive values are read in the user's zone) or ISO strings;
`metadata` a JSON string; `tools_used` a list of strings. Rows are numbered from 1.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import ImportFileError
from engine.importers.appending import ingest_batches
from engine.importers.records import FlatGrouper, ImportContext, Totals, progress_bar

__all__ = ["import_parquet", "BATCH_ROWS"]

BATCH_ROWS = 4096  # rows per record batch: memory stays flat whatever the file size


def import_parquet(ctx: ImportContext) -> Totals:
    parquet = _open(ctx)
    missing = {"role", "content"} - set(parquet.schema_arrow.names)
    if missing:
        raise ImportFileError(f"{ctx.path} has no column {', '.join(sorted(missing))}: "
                              "a message needs role and content columns (see export_thread_parquet)")
    grouper = FlatGrouper(ctx)
    number = 0
    with progress_bar(ctx.progress, parquet.metadata.num_rows, "read", unit="row") as bar:
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
            for row in _in_microseconds(batch).to_pylist():
                number += 1
                grouper.add(f"row {number}", row)
            bar.update(batch.num_rows)
    return ingest_batches(ctx, grouper.batches())


def _in_microseconds(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Nanosecond timestamps (pandas' datetime columns) cut to microseconds, what the store keeps:
    Python's datetime cannot hold the nanoseconds, and refuses to drop them on its own."""
    columns = [column.cast(pa.timestamp("us", column.type.tz), safe=False)
               if pa.types.is_timestamp(column.type) and column.type.unit == "ns" else column
               for column in batch.columns]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _open(ctx: ImportContext) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(ctx.path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ImportFileError(f"{ctx.path} is not a readable parquet file ({exc}): "
                              "check the format (--format)") from None
