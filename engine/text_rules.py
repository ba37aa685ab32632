"""Rules every piece of caller text obeys, written once for every surface."""

from __future__ import annotations

import math
import re

from engine.errors import InvalidInputError

__all__ = ["surrogate_problem", "id_problem", "check_text", "check_unit_interval", "shortened", "cut", "MAX_ID_CHARS",
           "TITLE_CAP_CHARS"]

MAX_ID_CHARS = 256
TITLE_CAP_CHARS = 120  # a conversation's title as made and as shown: a 1 MB first message is not a title
_CONTROL = re.compile(r"[\x00-\x1f]")  # what an id may not hold (a tab, a newline, ...)


def surrogate_problem(text: str) -> str | None:
    """Why `text` cannot be stored or searched as UTF-8 (a lone surrogate, e.g. half an emoji), or None."""
    if text.isascii():  # no surrogate is ASCII
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"holds a lone surrogate ({text[exc.start]!r} at character {exc.start}), which is not text: "
                "send valid UTF-8 (a broken emoji or a cut JSON escape such as '\\ud83d' does this)")
    return None


def id_problem(name: str, value: object) -> str | None:
    """Why `value` cannot be an id (of a user, thread or message), or None: ids are non-empty printable
    strings of at most MAX_ID_CHARS characters."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_CHARS or _CONTROL.search(value):
        return f"{name} must be a non-empty string of at most {MAX_ID_CHARS} printable characters, got {cut(repr(value))}"
    return None


def check_text(name: str, text: str) -> str:
    problem = surrogate_problem(text)
    if problem:
        raise InvalidInputError(f"{name} {problem}")
    return text


def check_unit_interval(name: str, value: object) -> float:
    """A finite number from 0 to 1 (scores and ratios): NaN, infinities, strings and booleans are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 1:
        raise InvalidInputError(f"{name} must be a number from 0 to 1, got {value!r}")
    return float(value)


def shortened(text: str | None, cap: int) -> str | None:
    """`text` in at most `cap` characters: cut at a word when one ends in its second half, with an ellipsis."""
    if text is None or len(text) <= cap:
        return text
    cut = text[:cap - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > cap // 2 else cut).rstrip(" ,;:-") + "…"


def cut(text: str, limit: int = 80) -> str:
    """A value echoed in an error message, at most `limit` characters: a 100 KB one helps nobody."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
