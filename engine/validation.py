"""The checks every surface shares for integers and seq ranges, each written once.

A bool is refused where an int is expected (True would pass as 1); messages name the argument and
say what is allowed.
"""

from __future__ import annotations

from engine.errors import InvalidInputError

__all__ = ["whole_number", "seq_range", "seq_number", "seq_problem", "shown_number", "MAX_SEQ", "SEQS"]

MAX_SEQ = 2**63 - 1  # the store's BIGINT: a larger seq would reach DuckDB as an error about its integer types
SEQS = f"seqs start at 1 (a thread's first message) and are at most {MAX_SEQ}"


def shown_number(value: int) -> str:
    """An int as an error echoes it: a huge one by its size (str() of one past 4,300 digits raises,
    and a thousand digits help no one)."""
    if abs(value) < 10**20:
        return str(value)
    return f"a number of about {int(abs(value).bit_length() * 0.30103) + 1} digits"


def whole_number(name: str, value: object, *, minimum: int = 0, maximum: int | None = None,
                 too_big: str = "") -> int:
    """`value` as an int within [minimum, maximum], or InvalidInputError naming `name`.
    `too_big` is appended to the message when the maximum is passed (what to do instead)."""
    value = _an_int(name, value)
    if value < minimum:
        raise InvalidInputError(f"{name} must be at least {minimum}, got {shown_number(value)}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{name} must be at most {maximum}, got {shown_number(value)}{too_big}")
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
    """A seq: a thread's first message is 1; at most MAX_SEQ (the store's column). The HTTP edge
    applies this same rule to its `Seq` fields."""
    value = _an_int(name, value)
    problem = seq_problem(value)
    if problem is not None:
        raise InvalidInputError(f"{name}: {problem}")
    return value


def seq_problem(value: int) -> str | None:
    """Why a whole number is no seq, or None: the one bound `seq_number` and the HTTP `Seq` type apply."""
    return None if 1 <= value <= MAX_SEQ else f"{SEQS}, got {shown_number(value)}"


def _an_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be a whole number, got {value!r}")
    return value
