"""Token counts for prompts: MiniLM's real WordPiece tokenizer, or chars/4 when it cannot load.

The count is an estimate of an LLM's tokens either way (no LLM tokenizer is shipped), but the
WordPiece count is deterministic and close for English and French; `exact` tells callers which one
they got so they can report it.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

__all__ = ["TokenCounter", "CHARS_PER_TOKEN", "PROBE_CHARS_PER_TOKEN"]

log = logging.getLogger("convsearch.tokens")
log.addHandler(logging.NullHandler())

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text
PROBE_CHARS_PER_TOKEN = 16  # generous: real text rarely needs more characters per token


def _load_tokenizer() -> Any | None:
    """The shipped tokenizer, or None (logged once) when it or its package is missing."""
    try:
        from indexers.model_files import wordpiece_tokenizer

        return wordpiece_tokenizer()
    except Exception as exc:  # any failure to load means "count approximately", never a crash
        log.warning("tokens.fallback reason=%r", str(exc))
        return None


class TokenCounter:
    """Counts and cuts text in tokens; `exact` is False when counting chars/4."""

    def __init__(self, *, use_tokenizer: bool = True) -> None:
        self._tokenizer = _load_tokenizer() if use_tokenizer else None
        self.exact: bool = self._tokenizer is not None

    def count(self, text: str) -> int:
        """Tokens of `text` (no special tokens: a prompt is not one model input)."""
        if not text:
            return 0
        if self._tokenizer is None:
            return math.ceil(len(text) / CHARS_PER_TOKEN)
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, encoded as one batch (much faster than one call per text)."""
        if self._tokenizer is None:
            return [self.count(t) for t in texts]
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encodings]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span of each token, so text can be cut on token boundaries."""
        if self._tokenizer is None:
            return [(i, min(i + CHARS_PER_TOKEN, len(text))) for i in range(0, len(text), CHARS_PER_TOKEN)]
        return list(self._tokenizer.encode(text, add_special_tokens=False).offsets)

    def count_upto(self, text: str, limit: int) -> int:
        """Exact when the count is <= limit; else some number > limit, found from a prefix when possible.

        Why: deciding that a megabyte tool output is over a 4,000-token budget should not tokenise it all.
        """
        probe = PROBE_CHARS_PER_TOKEN * max(limit, 0) + 256
        if len(text) > probe:
            cut = max(text.rfind(c, 0, probe) for c in " \n\t")
            # Whole words only: a prefix of whole words never has more tokens than the full text.
            if cut > 0:
                head = self.count(text[:cut])
                if head > limit:
                    return head
        return self.count(text)
