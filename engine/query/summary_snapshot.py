"""A user's summary BM25 and packed Markdown saved to disk, so a restarted server's first search
need not tokenize and pack every summary again.

At 1M messages a user has ~57,600 summaries, and building their index on the first search after a
restart took ~10 s: 7.6 making and adding the tokens, 1.5 packing the Markdown (docs/benchmarks.md).
The snapshot is a cache of that work, never the truth: a document is its text's tokens, so it is
named by its text's key (`summary_key`, a hash of title and Markdown), and a load keeps the
documents of the texts the user's summaries still have, drops the others and tokenizes and packs
only what was written since. Whatever does not check out (no files, a torn write, a tokenizer that
now gives other tokens) is ignored and the index is built from the store as before.

Layout: `<dir>/<user-slug>/` holds `bm25/` (Bm25Index.save), `docs.npz` (each document's label,
text key and packed Markdown) and `meta.json`, written last. A save fills a staging directory and
swaps it in with two renames: a crash leaves the old snapshot, the new one or none, never a mix.
Deleting messages or the user removes the snapshot with the index (`SummaryIndex.forget`): no
deleted text stays on disk in it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from engine.errors import IndexStateError
from engine.models import Summary
from engine.query.packed_texts import PackedTexts
from indexers.bm25 import Bm25Index, Bm25Params
from indexers.distinct import all_distinct
from indexers.lexical import LexicalTokenizer
from indexers.npy_files import load_members
from indexers.shard import shard_dir

__all__ = ["SNAPSHOT_MIN", "SavedDocuments", "SummarySnapshots", "Reuse", "restored_bm25", "restored_markdown"]

log = logging.getLogger("convsearch.summaries")

SNAPSHOT_MIN = 1000  # summaries below which building the index (~0.2 s at 1,000) is cheap enough
FORMAT = 1
# A sentence whose tokens change when the tokenizer's code, its stemmer or its settings do: a
# snapshot made by another tokenizer would score other tokens than the query's.
PROBE = "Decided: running the cafés' ÉTÉ plans… 東京都 ord-912654 and the Straße’s meetings"


@dataclass(frozen=True, slots=True)
class SavedDocuments:
    """A loaded snapshot, by saved row: each document's text key, label and packed Markdown."""

    bm25: Bm25Index
    keys: list[str]
    labels: np.ndarray
    markdown: PackedTexts

    def reuse(self, keys: Sequence[str]) -> "Reuse":
        """Which saved row holds each of these texts (equal texts take one row each)."""
        free: dict[str, list[int]] = {}
        for row in range(len(self.keys) - 1, -1, -1):  # popped from the end: the first row first
            free.setdefault(self.keys[row], []).append(row)
        taken = np.array([free[key].pop() if free.get(key) else -1 for key in keys], dtype=np.int64)
        left = sorted(row for rows in free.values() for row in rows)
        return Reuse(self, taken, np.array(left, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class Reuse:
    """What a build takes from a snapshot: `taken[i]` is the saved row of summary i's text (-1: none)."""

    saved: SavedDocuments
    taken: np.ndarray
    gone: np.ndarray  # saved rows no summary has any more (rewritten or deleted)

    @property
    def exact(self) -> bool:
        """Whether the snapshot holds exactly these texts (no need to save it again)."""
        return not len(self.gone) and bool((self.taken >= 0).all())


def restored_bm25(reuse: Reuse | None, summaries: Sequence[Summary], params: Bm25Params,
                  tokens_of: Callable[[Sequence[Summary]], list[list[str]]]) -> tuple[Bm25Index, np.ndarray, int]:
    """The summaries' BM25, each one's label in it and the next free label: the snapshot's documents
    where it has their text, the others tokenized and added under new labels."""
    if reuse is None:
        bm25, labels, next_label = Bm25Index(params), np.full(len(summaries), -1, np.int64), 0
    else:
        bm25, saved_labels = reuse.saved.bm25, reuse.saved.labels
        labels = np.where(reuse.taken >= 0, saved_labels[reuse.taken], -1)
        next_label = int(saved_labels.max()) + 1
        bm25.remove(saved_labels[reuse.gone].tolist())
    fresh = np.flatnonzero(labels < 0)
    labels[fresh] = np.arange(next_label, next_label + len(fresh))
    bm25.add(labels[fresh].tolist(), tokens_of([summaries[row] for row in fresh.tolist()]))
    return bm25, labels, next_label + len(fresh)


def restored_markdown(reuse: Reuse | None, summaries: Sequence[Summary]) -> PackedTexts:
    """The summaries' Markdown, packed: the snapshot's bytes where it has their text."""
    if reuse is None:
        return PackedTexts.of(s.markdown for s in summaries)
    fresh = np.flatnonzero(reuse.taken < 0)
    kept = np.flatnonzero(reuse.taken >= 0)
    joined = reuse.saved.markdown.take(reuse.taken[kept]).joined(
        PackedTexts.of(summaries[row].markdown for row in fresh.tolist()))
    position = np.empty(len(summaries), np.int64)  # of each summary's text in `joined`
    position[kept], position[fresh] = np.arange(len(kept)), np.arange(len(kept), len(summaries))
    return joined.take(position)


class SummarySnapshots:
    """Where each user's snapshot is saved, and the checks a load makes."""

    def __init__(self, directory: Path, tokenizer: LexicalTokenizer, params: Bm25Params) -> None:
        self.directory = directory
        self.meta = {"format": FORMAT, "bm25": asdict(params), "tokenizer": asdict(tokenizer.params),
                     "probe": tokenizer.tokenize(PROBE)}

    def load(self, user_id: str) -> SavedDocuments | None:
        """The user's snapshot, or None when there is none that this tokenizer can use."""
        base = shard_dir(self.directory, user_id)
        try:
            if json.loads((base / "meta.json").read_text("utf-8")) != self.meta:
                return None
            bm25 = Bm25Index.load(base / "bm25", mapped=False)  # every search reads it all (mapped: +0.04 ms a match)
            docs = load_members(base / "docs.npz", ("labels", "keys", "texts", "ends"))
            labels, keys, texts, ends = docs["labels"], docs["keys"], docs["texts"], docs["ends"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, IndexStateError) as exc:
            log.warning("summary index snapshot of %s unreadable (%s): built from the store", user_id, exc)
            return None
        if not (0 < len(labels) == len(bm25) == len(keys) == len(ends)) or not all_distinct(labels) \
                or bool((bm25.doc_ids(labels) < 0).any()) or ends[-1] != len(texts) \
                or bool((np.diff(ends, prepend=0) < 0).any()):
            log.warning("summary index snapshot of %s is inconsistent: built from the store", user_id)
            return None
        at = np.column_stack((np.zeros(len(ends), np.int64), ends - np.diff(ends, prepend=0), ends))
        return SavedDocuments(bm25, keys.astype(str).tolist(), labels, PackedTexts((texts.tobytes(),), at))

    def save(self, user_id: str, keys: Sequence[str], labels: np.ndarray, markdown: PackedTexts,
             bm25: Bm25Index) -> None:
        """Replace the user's snapshot with these documents (the caller keeps the index from changing
        meanwhile). A failure is logged: the snapshot only saves time."""
        base = shard_dir(self.directory, user_id)
        staging = base.with_name(f".{base.name}.{os.getpid()}-{threading.get_ident()}")
        packed = markdown.in_one_buffer()
        try:
            self._drop_leftovers(base)
            staging.mkdir(parents=True)
            bm25.save(staging / "bm25")
            np.savez(staging / "docs.npz", labels=np.asarray(labels, np.int64), keys=np.asarray(keys, dtype="S64"),
                     texts=np.frombuffer(packed.buffers[0], np.uint8) if packed.buffers else np.zeros(0, np.uint8),
                     ends=packed.at[:, 2])
            (staging / "meta.json").write_text(json.dumps(self.meta), "utf-8")
            self._swap(base, staging)
        except OSError as exc:
            log.warning("summary index snapshot of %s not saved (%s): the next start builds it again", user_id, exc)
            shutil.rmtree(staging, ignore_errors=True)

    def forget(self, user_id: str) -> None:
        base = shard_dir(self.directory, user_id)
        shutil.rmtree(base, ignore_errors=True)
        self._drop_leftovers(base)

    @staticmethod
    def _drop_leftovers(base: Path) -> None:
        """Staging directories of the user's saves that a crash interrupted. A user's save runs under
        their lock, and one process owns a home, so none is in use."""
        if base.parent.is_dir():
            for left in base.parent.glob(f".{base.name}.*"):
                shutil.rmtree(left, ignore_errors=True)

    @staticmethod
    def _swap(base: Path, staging: Path) -> None:
        """`staging` in place of `base`: an old snapshot moves aside first (a directory cannot be
        renamed over a full one), then goes."""
        old = staging.with_name(staging.name + ".old")
        if base.exists():
            os.replace(base, old)
        os.replace(staging, base)
        shutil.rmtree(old, ignore_errors=True)
