"""A search's windows (engine/query/candidates): scored on both sides, then opened into their messages."""

from __future__ import annotations

import numpy as np
import pytest

from engine.api import ConversationEngine
from engine.query.candidates import beside_candidates, expand_to_messages, lexical_side, query_idf, window_candidates


def _expanded_by_tokenizing(shard, found, order, tokens, idf):
    """What `expand_to_messages` gives, found the plain way: every line of every window tokenized."""
    wanted, seen, ids, words, shared = sorted(set(tokens)), set(), [], [], []
    for label in found.labels[order].tolist():
        window = shard.chunks.window(label)
        for message_id, line in zip(window.message_ids, window.message_lines()):
            if message_id not in seen:
                seen.add(message_id)
                held = frozenset(shard.tokenizer.tokenize(line)) & set(tokens)
                ids.append(message_id)
                words.append(held)
                shared.append(sum(idf[t] for t in wanted if t in held))
    return tuple(ids), tuple(words), shared


@pytest.mark.parametrize("filler", [1, 3, 25])  # windows of many turns, of a few, of one
def test_a_lines_query_terms_are_what_tokenizing_it_gives_and_only_needed_lines_are_tokenized(tmp_path, filler):
    """A window of one line holds what its line holds: its postings say which query terms, with no tokenizing.
    Of a window of several lines, only the lines of the messages it gives are tokenized (windows overlap), and
    none of one holding no query term. Checked against tokenizing every line, for words of every frequency."""
    topics = ["pottery", "kiln", "glaze", "hiking", "trail", "bread", "yeast", "chess", "opening", "violin", "bow", "tide"]
    with ConversationEngine(tmp_path, embedder=None) as engine:
        engine.add_user("u", "UTC")
        engine.ingest("u", [{"role": "user" if i % 2 else "assistant", "message_id": f"m{i}",
                             "content": f"turn {i} on {topics[i % 12]} " + "filler words here " * filler,
                             "created_at": f"2024-01-01T09:{i:02d}"} for i in range(40)])
        shard = engine.pipeline.shard("u")
        for query in ("pottery kiln", "glaze", "turn trail", "hiking filler", "violin bow tide", "nothing matches this"):
            tokens = shard.tokenizer.tokenize(query)
            lexical = lexical_side(shard, tokens, None, 4)
            found = window_candidates(shard, lexical, None, "lexical", 4)
            found, beside = beside_candidates(shard, lexical, found, np.arange(len(found.labels)), 4, None)
            order = np.concatenate((np.arange(len(found.labels) - len(beside)), beside))
            idf = query_idf(shard, tokens)
            shard._line_tokens.clear()  # noqa: SLF001
            opened = expand_to_messages(shard, found, order, tokens, None, idf, None)
            assert (opened.message_ids, opened.tokens, opened.shared.tolist()) == _expanded_by_tokenizing(
                shard, found, order, tokens, idf)
            tokenized = {(label, line) for label, lines in shard._line_tokens.items() for line in lines}  # noqa: SLF001
            several = {(int(found.labels[w]), line) for w, line in zip(opened.windows.tolist(), opened.lines)
                       if found.held[w].any() and len(shard.chunks.window(int(found.labels[w])).message_ids) > 1}
            assert tokenized == several
        sizes = {len(c.message_ids) for c in shard.chunks.values()}
        assert sizes == {1} if filler == 25 else max(sizes) > 1


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
