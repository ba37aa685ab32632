"""The window that holds a given turn of a thread, found by seq: what lies beside a window.

A search opens its best windows into their messages, and the rules between turns lift the reply
after a strong match and the turn it reacts to. They can lift only a candidate: the turn right
before or after a match may sit in a window that neither the keyword nor the vector list reached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from indexers.distinct import distinct

__all__ = ["WindowsBySeq"]


@dataclass(frozen=True, slots=True)
class WindowsBySeq:
    """Every window by (thread code, first seq), ascending; built from `ChunkMap.spans`. It keeps the keys
    (8 bytes a window) and, when the windows did not come in key order, their order (4 more); last seqs and
    labels stay the arrays it was built from (the saved ones are the chunk map's own). Why: serving memory
    is an issue 18 target, and ~10 MB for the 1.3M windows of 1M messages is a share of its margin."""

    keys: np.ndarray  # thread code << 32 | first seq, ascending
    order: np.ndarray | None  # int32: the window of each key; None when the windows came in key order
    lasts: np.ndarray  # last seq, in the order the windows came
    labels: np.ndarray  # the same order

    @classmethod
    def of(cls, labels: np.ndarray, threads: np.ndarray, firsts: np.ndarray, lasts: np.ndarray) -> WindowsBySeq:
        keys = _keys(threads, firsts)
        if len(keys) < 2 or bool(np.all(keys[1:] >= keys[:-1])):  # one thread written in order: no copy
            return cls(keys, None, np.asarray(lasts), np.asarray(labels))
        order = np.argsort(keys, kind="stable").astype(np.int32)
        return cls(keys[order], order, np.asarray(lasts), np.asarray(labels))

    def holding(self, threads: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """For each (thread code, seq), a window holding that turn: the one of its thread that starts last
        at or before it, if it reaches that far. The labels found, ascending and distinct."""
        threads, seqs = np.asarray(threads, dtype=np.int64), np.asarray(seqs, dtype=np.int64)
        real = seqs >= 0
        threads, seqs = threads[real], seqs[real]
        if not len(self.keys) or not len(seqs):
            return np.zeros(0, dtype=np.int64)
        at = np.maximum(np.searchsorted(self.keys, _keys(threads, seqs), side="right") - 1, 0)
        window = self.order[at] if self.order is not None else at
        held = (self.keys[at] >> 32 == threads) & (self.keys[at] & 0xFFFFFFFF <= seqs) & (self.lasts[window] >= seqs)
        return distinct(np.asarray(self.labels[window[held]], dtype=np.int64))


def _keys(threads: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    return (np.asarray(threads, dtype=np.int64) << 32) | np.asarray(seqs, dtype=np.int64)
