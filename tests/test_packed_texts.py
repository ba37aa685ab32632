"""PackedTexts gives back each text as it was, through views, merges and the repack."""

from __future__ import annotations

import numpy as np

from engine.query.packed_texts import MAX_BUFFERS, PackedTexts


def test_texts_survive_views_merges_and_the_repack() -> None:
    rng = np.random.default_rng(5)
    words = ["## Summary", "décision", "日本語", "", "open loop", "x" * 3000]
    def some(n: int) -> list[str]:
        return ["\n".join(rng.choice(words, size=int(rng.integers(0, 6))).tolist()) for _ in range(n)]

    texts = some(40)
    packed = PackedTexts.of(texts)
    assert [packed.text(i) for i in range(len(packed))] == texts
    rows = [39, 0, 7, 7]
    assert [packed.take(rows).text(i) for i in range(4)] == [texts[i] for i in rows]
    for _ in range(3 * MAX_BUFFERS):  # live updates: keep some, add fresh ones
        keep = np.flatnonzero(rng.random(len(texts)) < 0.9)
        fresh = some(int(rng.integers(0, 4)))
        packed = packed.take(keep).joined(PackedTexts.of(fresh))
        texts = [texts[i] for i in keep] + fresh
        assert len(packed.buffers) <= MAX_BUFFERS
    assert [packed.text(i) for i in range(len(packed))] == texts
    assert len(PackedTexts.of([])) == 0 and len(PackedTexts.of([]).take([])) == 0
