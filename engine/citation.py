"""Which message of a window to cite, and the snippet to show."""

from __future__ import annotations

from typing import Callable, Sequence

__all__ = ["best_line", "make_snippet", "SNIPPET_CHARS"]

SNIPPET_CHARS = 240


def best_line(line_tokens: Sequence[frozenset[str]], allowed: Sequence[bool], query_tokens: Sequence[str],
              weight: Callable[[str], float], similarities: Sequence[float] | None = None, *,
              vector_weight: float = 0.7, lexical_weight: float = 0.3) -> int | None:
    """Index of the allowed line that best matches the query, or None when no line is allowed.

    A line scores like a search hit: `vector_weight` x its own cosine with the query plus
    `lexical_weight` x the query weight (idf) it shares, relative to the best line of the window.
    Without similarities (lexical mode) the shared weight decides; ties go to the richer line, then
    the newer one (as between hits).
    """
    wanted = set(query_tokens)
    candidates = [i for i, ok in enumerate(allowed) if ok]
    if not candidates:
        return None
    shared = {i: sum(weight(t) for t in wanted & line_tokens[i]) for i in candidates}
    top = max(shared.values()) or 1.0

    def score(i: int) -> tuple[float, int, int]:  # the larger index is the newer message
        lexical = shared[i] / top
        cosine = similarities[i] if similarities is not None else float("nan")
        blended = lexical if cosine != cosine else vector_weight * max(cosine, 0.0) + lexical_weight * lexical
        return (blended, len(line_tokens[i]), i)

    return max(candidates, key=score)


def make_snippet(text: str, query_terms: Sequence[str], *, width: int = SNIPPET_CHARS) -> str:
    """A short excerpt around the first place a query term appears (case-insensitive)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lowered = flat.lower()
    hits = [i for i in (lowered.find(term.lower()) for term in query_terms if len(term) > 1) if i >= 0]
    centre = min(hits) if hits else 0
    start = max(0, min(centre - width // 3, len(flat) - width))
    excerpt = flat[start:start + width]
    return ("…" if start > 0 else "") + excerpt + ("…" if start + width < len(flat) else "")
