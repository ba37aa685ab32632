"""The checks every surface shares for integers and seq ranges, each written once.

A bool is refused where an int is expected (True would pass as 1); messages name the argument and
say what is allowed.
"""

from __future__ import annotations

from engine.errors import InvalidInputError

__all__ = ["whole_number", "seq_range"]


def whole_number(name: str, value: object, *, minimum: int = 0, maximum: int | None = None,
                 too_big: str = "") -> int:
    """`value` as an int within [minimum, maximum], or InvalidInputError naming `name`.
    `too_big` is appended to the message when the maximum is passed (what to do instead)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be a whole number, got {value!r}")
    if value < minimum:
        raise InvalidInputError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{name} must be at most {maximum}, got {value}{too_big}")
    return value


def seq_range(start_seq: object, end_seq: object) -> tuple[int, int]:
    """[start_seq, end_seq): whole numbers, seqs start at 1, end exclusive and after the start."""
    start = whole_number("start_seq", start_seq, minimum=1)
    end = whole_number("end_seq", end_seq, minimum=1)
    if end <= start:
        raise InvalidInputError(
            f"range [{start}, {end}) is empty or reversed: end_seq is exclusive and must be greater "
            f"than start_seq (seq {start} alone is [{start}, {start + 1}))"
        )
    return start, end
