"""The checks every surface shares for integers and seq ranges, each written once.

A bool is refused where an int is expected (True would pass as 1); messages name the argument and
say what is allowed.
"""

from __future__ import annotations

from engine.errors import InvalidInputError

__all__ = ["whole_number", "seq_range", "seq_number", "MAX_SEQ"]

MAX_SEQ = 2**63 - 1  # the store's BIGINT: a larger seq would reach DuckDB as an error about its integer types


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
    start, end = seq_number("start_seq", start_seq), seq_number("end_seq", end_seq)
    if end <= start:
        raise InvalidInputError(
            f"range [{start}, {end}) is empty or reversed: end_seq is exclusive and must be greater "
            f"than start_seq (seq {start} alone is [{start}, {start + 1}))"
        )
    return start, end


def seq_number(name: str, value: object) -> int:
    """A seq: a thread's first message is 1; at most MAX_SEQ."""
    return whole_number(name, value, minimum=1, maximum=MAX_SEQ)
