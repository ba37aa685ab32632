"""The BM25 index's files: which arrays it saves, how a file is replaced, and the checks a load
makes (indexers/bm25.py reads and writes them)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np

from indexers.mapped import release
from indexers.distinct import all_distinct

__all__ = ["FORMAT", "ARRAYS", "MMAPPED", "inconsistencies", "postings_in_range", "save_array", "replace_file"]

FORMAT = 1
# Saved arrays and their dtypes; the (large) posting arrays are memory-mapped on load.
ARRAYS = {"labels": np.int64, "doc_len": np.int64, "df": np.int64,
          "terms": np.int32, "ptr": np.int64, "docs": np.int32, "tfs": np.int32}
MMAPPED = frozenset({"terms", "ptr", "docs", "tfs"})


def inconsistencies(meta: dict[str, Any], terms: Any, a: dict[str, np.ndarray]) -> list[str]:
    """Names of the checks that loaded files fail (empty: they describe one consistent index)."""
    if any(a[name].dtype != dtype or a[name].ndim != 1 for name, dtype in ARRAYS.items()):
        return ["array types"]
    if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms) or len(set(terms)) != len(terms):
        return ["vocabulary"]
    n, ptr, seg_terms, docs = len(a["labels"]), a["ptr"], a["terms"], a["docs"]
    if not (n == meta["n_docs"] == len(a["doc_len"]) and len(a["df"]) == len(terms) == meta["n_terms"]
            and len(ptr) == len(seg_terms) + 1 and ptr[0] == 0 and ptr[-1] == len(docs) == len(a["tfs"])
            and len(docs) == meta["n_postings"]):
        return ["sizes"]
    checks = {
        "pointers": bool(np.all(np.diff(ptr) > 0)),
        "terms": not len(seg_terms) or bool(np.all(np.diff(seg_terms) > 0) and seg_terms[0] >= 0
                                            and seg_terms[-1] < len(terms)),
        "postings": postings_in_range(docs, a["tfs"], n),
        "labels": all_distinct(a["labels"]),
    }
    if all(checks.values()):  # df must be exactly what the postings say: each term's run length (one run a term)
        counted = np.zeros(len(terms), dtype=np.int64)
        counted[seg_terms] = np.diff(ptr)
        checks["df"] = np.array_equal(counted, a["df"])
    return [name for name, ok in checks.items() if not ok]


CHECK_BLOCK = 1 << 23  # postings checked at a time (32 MB of each int32 array)


def postings_in_range(docs: np.ndarray, tfs: np.ndarray, n_docs: int) -> bool:
    """Every posting names a document and counts it at least once. Read a block at a time, the
    mapped pages dropped after each: at 1M messages a whole pass kept ~300 MB of pages at once."""
    for start in range(0, len(docs), CHECK_BLOCK):
        block, counts = docs[start:start + CHECK_BLOCK], tfs[start:start + CHECK_BLOCK]
        fine = bool(block.min() >= 0 and block.max() < n_docs and counts.min() > 0)
        release(docs, tfs)
        if not fine:
            return False
    return True


def save_array(arr: np.ndarray, f: BinaryIO) -> None:
    np.save(f, arr, allow_pickle=False)


def replace_file(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write via a temporary sibling renamed over `path`: atomic per file, safe for live mmaps."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)
