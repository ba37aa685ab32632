"""The windows beside a window (indexers/neighbours.py, Shard.neighbours) and how a search opens them."""

from __future__ import annotations

import numpy as np
import pytest

from engine.api import ConversationEngine
from engine.query.candidates import beside_candidates, lexical_side, window_candidates
from indexers.neighbours import WindowsBySeq


def test_a_turn_is_found_in_the_window_of_its_thread_that_starts_last_before_it():
    # thread 0: windows 10 = seqs 1-3, 11 = 3-5 (one turn of overlap), 12 = 6-6; thread 1: window 20 = 1-4
    windows = WindowsBySeq.of(np.array([12, 10, 20, 11]), np.array([0, 0, 1, 0]), np.array([6, 1, 1, 3]),
                              np.array([6, 3, 4, 5]))
    assert windows.holding(np.array([0]), np.array([3])).tolist() == [11]  # in 10 and 11: the later one
    assert windows.holding(np.array([0, 0, 1]), np.array([2, 6, 4])).tolist() == [10, 12, 20]
    assert windows.holding(np.array([0, 1, 0, 2]), np.array([7, 5, 0, 1])).tolist() == []  # past the ends, no thread
    assert windows.holding(np.array([0]), np.array([-1])).tolist() == []
    in_order = WindowsBySeq.of(np.array([10, 11, 12, 20]), np.array([0, 0, 0, 1]), np.array([1, 3, 6, 1]),
                               np.array([3, 5, 6, 4]))
    assert windows.order is not None and in_order.order is None  # windows in key order: no order kept
    for threads, seqs in (([0], [3]), ([0, 0, 1], [2, 6, 4]), ([0, 1, 0, 2], [7, 5, 0, 1]), ([1, 1], [0, 9])):
        assert in_order.holding(np.array(threads), np.array(seqs)).tolist() == \
            windows.holding(np.array(threads), np.array(seqs)).tolist()


@pytest.mark.parametrize("interleaved", [False, True])
def test_the_neighbours_of_every_window_are_windows_holding_the_turns_beside_it(tmp_path, interleaved):
    """Two threads written one after the other (their windows come in key order) or turn by turn (they do
    not: the index keeps their order)."""
    long = " ".join(f"word{i}" for i in range(400))  # a message longer than a window: several pieces
    texts = [f"turn {i} about topic {i % 3}" if i != 7 else long for i in range(15)]
    turns = [(other, i) for i in range(15) for other in ("a", "b")] if interleaved else \
        [(other, i) for other in ("a", "b") for i in range(15)]
    with ConversationEngine(tmp_path, embedder=None) as engine:
        engine.add_user("u", "UTC")
        for other in ("a", "b"):
            engine.store.ensure_thread("u", f"u:{other}")
        for other, i in turns:  # two threads
            engine.ingest("u", [{"role": "user", "content": texts[i], "message_id": f"{other}{i}",
                                 "created_at": f"2024-01-01T09:{i:02d}"}], thread_id=f"u:{other}")
        shard = engine.pipeline.shard("u")
        _check_every_window(shard)  # every window fresh
        labels = set(shard.chunks)
        engine.index("u")  # saved: the windows are read from the chunk file
        shard = engine.pipeline.shard("u")
        _check_every_window(shard)
        assert (shard._saved_by_seq.order is not None) == interleaved  # the saved windows' index as said
        engine.ingest("u", [{"role": "user", "content": "one more turn", "message_id": "b99",
                             "created_at": "2024-01-01T09:30"}], thread_id="u:b")
        new = set(shard.chunks) - labels
        assert new and labels - set(shard.chunks)  # the tail's saved windows replaced by fresh ones
        _check_every_window(shard)  # saved and fresh, the index of the saved ones kept across the change
        assert new & set(shard.neighbours(np.array(sorted(labels & set(shard.chunks)))).tolist())


def _check_every_window(shard) -> None:
    """Each window's neighbours hold the turns beside it: one window for each, live, and no other."""
    for label in sorted(shard.chunks):
        window = shard.chunks.window(label)
        beside = set(shard.neighbours(np.array([label])).tolist())
        expected = [set(shard.labels_touching(window.thread_id, {seq})) - {label}
                    for seq in (window.from_seq - 1, window.to_seq + 1)]
        assert all(beside & wanted for wanted in expected if wanted)  # one window holding each turn beside
        assert beside <= set().union(*expected)


def test_the_windows_beside_the_best_are_added_scored_and_named_for_opening(tmp_path):
    with ConversationEngine(tmp_path, embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user", "content": f"turn number {i} " * 30 + ("pottery" if i == 6 else ""),
                             "message_id": f"m{i}", "created_at": f"2024-01-01T09:{i:02d}"} for i in range(12)])
        shard = engine.pipeline.shard("u")
        lexical = lexical_side(shard, shard.tokenizer.tokenize("pottery"), None, 50)
        found = window_candidates(shard, lexical, None, "lexical", 50)
        assert len(found.labels) == 1  # the one window holding the word
        order = np.array([0])
        more, beside = beside_candidates(shard, lexical, found, order, 1, None)
        expected = shard.neighbours(found.labels)
        none, nothing = beside_candidates(shard, lexical, found, order, 0, None)  # a reach of 0: nothing beside
    assert len(expected) == 2 and more.labels.tolist() == found.labels.tolist() + expected.tolist()
    assert beside.tolist() == [1, 2] and more.raw[1:].tolist() == [0.0, 0.0] and not more.matched[1:].any()
    assert none.labels.tolist() == found.labels.tolist() and not len(nothing)
