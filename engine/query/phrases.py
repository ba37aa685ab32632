"""Query words that stand next to each other in a turn too ("support group", "adoption agency").

Pure tokens -> weights: no store. A turn that holds two query words side by side (in either order,
stop words aside, as the tokenizer leaves them) matches the query more closely than one holding
them apart; engine.query.ranking adds the pair's weight to the query weight the turn shares.
"""

from __future__ import annotations

from typing import Mapping, Sequence

__all__ = ["query_pairs", "pair_weight"]


def query_pairs(tokens: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The query's neighbouring token pairs, each once (a repeated word pairs with nothing)."""
    pairs = {(a, b) for a, b in zip(tokens, tokens[1:]) if a != b}
    return tuple(sorted(pairs))


def pair_weight(pairs: Sequence[tuple[str, str]], line_tokens: Sequence[str], idf: Mapping[str, float]) -> float:
    """The query weight (idf of both words) of the `pairs` that stand next to each other in a line."""
    if not pairs or len(line_tokens) < 2:
        return 0.0
    adjacent = set(zip(line_tokens, line_tokens[1:]))
    return sum(idf[a] + idf[b] for a, b in pairs if (a, b) in adjacent or (b, a) in adjacent)
