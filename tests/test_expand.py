"""Opening windows into their messages (engine/query/candidates.expand_to_messages)."""

from __future__ import annotations

import dataclasses

import numpy as np

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
