"""Which message of a window to cite, and the snippet to show."""

from __future__ import annotations

from typing import Callable, Sequence

__all__ = ["best_line", "make_snippet", "SNIPPET_CHARS"]

SNIPPET_CHARS = 240


def best_line(line_tokens: Sequence[frozenset[str]], allowed: Sequence[bool], query_tokens: Sequence[str],
              weight: Callable[[str], float]) -> int | None:
    """Index of the allowed line sharing the most query weight (idf); ties go to the richer line.

    None when no line is allowed (a filter excluded every message of the window).
    """
    wanted = set(query_tokens)
    candidates = [i for i, ok in enumerate(allowed) if ok]
    if not candidates:
        return None
    return max(candidates, key=lambda i: (sum(weight(t) for t in wanted & line_tokens[i]), len(line_tokens[i]), -i))


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
