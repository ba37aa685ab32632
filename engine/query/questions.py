"""Which texts ask rather than tell: a query that is a question, a turn that asks one.

Pure text -> flags: no store. In a conversation the turn most like a question is often the same
question asked by someone ("what did we decide about the database?"), while the evidence is a
statement; engine.query.ranking weighs the asking turns by these shares.
"""

from __future__ import annotations

import re

__all__ = ["asks", "asking_share", "ends_asking"]

# what may follow a question mark and still end the question: quotes, brackets, emoji, spaces
_QUESTION_END = re.compile(r"\?[^\w.!?]*$")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])[^\w.!?]*\s+|\n+")
_INTERROGATIVES = frozenset(
    "what which who whom whose when where why how did do does is are was were can could should would will "
    "has have had am".split())
_FIRST_WORD = re.compile(r"\w+")


def asks(query: str) -> bool:
    """Whether a query is a question: it ends with '?' or opens with an interrogative word
    ("which database did we choose")."""
    text = query.strip()
    first = _FIRST_WORD.search(text.casefold())
    return bool(_QUESTION_END.search(text)) or (first is not None and first.group() in _INTERROGATIVES)


def ends_asking(line: str) -> bool:
    """Whether a turn ends with a question ("... Can you draft the migration plan?")."""
    return bool(_QUESTION_END.search(line.strip()))


def asking_share(line: str) -> float:
    """The share of a turn's characters in sentences that end with '?': 1 for a bare question,
    about 1/3 for "Decision made: PostgreSQL. I'll record it. Can you draft the plan?"."""
    if "?" not in line:  # most turns: nothing to split
        return 0.0
    sentences = [s for s in _SENTENCE_BREAK.split(line.strip()) if s.strip()]
    total = sum(len(s) for s in sentences)
    asking = sum(len(s) for s in sentences if _QUESTION_END.search(s.strip()))
    return asking / total if total else 0.0
