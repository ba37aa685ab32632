"""The snippet a search hit shows."""

from __future__ import annotations

from typing import Sequence

__all__ = ["make_snippet", "SNIPPET_CHARS"]

SNIPPET_CHARS = 240


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
