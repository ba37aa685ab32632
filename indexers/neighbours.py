"""The window that holds a given turn of a thread, found by seq: what lies beside a window.

A search opens its best windows into their messages, and the rules between turns lift the reply
after a strong match and the turn it reacts to. They can lift only a candidate: the turn right
before or after a match may sit in a window that neither the keyword nor the vector list reached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["WindowsBySeq"]


@dataclass(frozen=True, slots=True)
class WindowsBySeq:
    """Every window by (thread code, first seq), ascending; built from `ChunkMap.spans`. 20 bytes a
    window (~26 MB for the 1.3M windows of 1M messages): serving memory is an issue 18 target."""

    keys: np.ndarray  # thread code << 32 | first seq
    lasts: np.ndarray  # last seq (int32)
    labels: np.ndarray

    @classmethod
    def of(cls, labels: np.ndarray, threads: np.ndarray, firsts: np.ndarray, lasts: np.ndarray) -> WindowsBySeq:
        keys = _keys(threads, firsts)
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], np.asarray(lasts, dtype=np.int32)[order], np.asarray(labels, dtype=np.int64)[order])

    def holding(self, threads: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """For each (thread code, seq), a window holding that turn: the one of its thread that starts last
        at or before it, if it reaches that far. The labels found, ascending and distinct."""
        threads, seqs = np.asarray(threads, dtype=np.int64), np.asarray(seqs, dtype=np.int64)
        real = seqs >= 0
        threads, seqs = threads[real], seqs[real]
        if not len(self.keys) or not len(seqs):
            return np.zeros(0, dtype=np.int64)
        at = np.searchsorted(self.keys, _keys(threads, seqs), side="right") - 1
        held = at >= 0
        at = np.maximum(at, 0)
        held &= (self.keys[at] >> 32 == threads) & (self.lasts[at] >= seqs)
        return np.unique(self.labels[at[held]])


def _keys(threads: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    return (np.asarray(threads, dtype=np.int64) << 32) | np.asarray(seqs, dtype=np.int64)
