"""Which message of a window to cite, and the snippet to show."""

from __future__ import annotations

from typing import Callable, Sequence

from engine.models import Message

__all__ = ["best_message", "make_snippet"]

SNIPPET_CHARS = 240


def best_message(messages: Sequence[Message], query_tokens: Sequence[str],
                 tokenize: Callable[[str], list[str]], weight: Callable[[str], float]) -> Message:
    """The message sharing the most query weight (idf) with the query; ties go to the longer one."""
    wanted = set(query_tokens)

    def score(m: Message) -> tuple[float, int]:
        shared = wanted.intersection(tokenize(m.content))
        return (sum(weight(t) for t in shared), len(m.content))

    return max(messages, key=score)


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
