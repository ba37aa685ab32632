"""A search's windows (engine/query/candidates): scored on both sides, then opened into their messages."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.api import ConversationEngine
from engine.query.candidates import beside_candidates, expand_to_messages, lexical_side, query_idf, window_candidates


def test_a_window_without_the_querys_terms_is_opened_without_tokenizing_and_gives_what_tokenizing_gives(tmp_path):
    """Its lines cannot hold a query term: they share nothing, and reading them would change nothing. Checked
    against opening every window with its lines tokenized, for words of every frequency (one in every turn)."""
    topics = ["pottery", "kiln", "glaze", "hiking", "trail"]
    with ConversationEngine(tmp_path, embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user" if i % 2 else "assistant", "message_id": f"m{i}",
                             "content": f"turn {i} on {topics[i % 5]} " + "filler words here " * 25,
                             "created_at": f"2024-01-01T09:{i:02d}"} for i in range(30)])
        shard = engine.pipeline.shard("u")
        skipped = 0
        for query in ("pottery kiln", "glaze", "turn trail", "hiking filler", "nothing matches this"):
            tokens = shard.tokenizer.tokenize(query)
            lexical = lexical_side(shard, tokens, None, 4)
            found = window_candidates(shard, lexical, None, "lexical", 4)
            found, beside = beside_candidates(shard, lexical, found, np.arange(len(found.labels)), 4, None)
            order = np.concatenate((np.arange(len(found.labels) - len(beside)), beside))
            idf = query_idf(shard, tokens)
            shard._line_tokens.clear()  # noqa: SLF001
            opened = expand_to_messages(shard, found, order, tokens, None, idf, None)
            tokenized = set(shard._line_tokens)  # noqa: SLF001
            every = dataclasses.replace(found, holds_terms=np.ones(len(found.labels), bool))
            expected = expand_to_messages(shard, every, order, tokens, None, idf, None)
            assert opened.message_ids == expected.message_ids and opened.shared.tolist() == expected.shared.tolist()
            assert [set(t) & set(tokens) for t in opened.tokens] == [set(t) & set(tokens) for t in expected.tokens]
            assert tokenized == set(found.labels[order][found.holds_terms[order]].tolist())
            skipped += int((~found.holds_terms[order]).sum())
        assert skipped  # some windows held none of the query's words


@pytest.mark.model
def test_a_window_without_a_vector_yet_has_no_cosine_and_the_others_their_own(tmp_path):
    """Windows the BM25 list brings and HNSW did not: a cosine read from the index where there is a vector,
    NaN (not 0: "not embedded yet") where the message's vector is still pending."""
    with ConversationEngine(tmp_path) as engine:
        engine.add_user("u", "UTC")
        for i in range(2):  # two threads; the second one's turns are searchable by keywords only, for now
            engine.store.ensure_thread("u", f"u:{i}")
            engine.ingest("u", [{"role": "user", "message_id": f"m{i}-{j}", "created_at": f"2024-01-0{i + 1}T09:{j:02d}",
                                 "content": f"the kiln firing number {j} went {'well' if j % 2 else 'badly'}"}
                                for j in range(6)], thread_id=f"u:{i}", index=False)
            if i == 0:
                engine.index("u")
        shard = engine.pipeline.shard("u")
        vector = engine.pipeline.embedder.embed(["kiln firing"])[0]
        tokens = shard.tokenizer.tokenize("kiln firing")
        found = window_candidates(shard, lexical_side(shard, tokens, None, 50), vector, "hybrid", 50)
        vectored = shard.has_vector.flags(found.labels)
        assert vectored.any() and not vectored.all()
        assert np.isnan(found.cosine[~vectored]).all()
        expected = shard.hnsw.vectors(found.labels[vectored]) @ vector
        np.testing.assert_allclose(found.cosine[vectored], expected, rtol=1e-5)
