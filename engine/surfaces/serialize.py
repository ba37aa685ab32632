"""Engine records to JSON-safe values: the one conversion every surface shares."""

from __future__ import annotations

import dataclasses
import math
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Mapping

__all__ = ["to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """Dataclasses, dates, tuples, numpy scalars and paths to plain JSON types."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime) and value.utcoffset() == timedelta(0):
        return value.isoformat().removesuffix("+00:00") + "Z"  # as the HTTP models write it: one form everywhere
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return to_jsonable(value.item())
    return value
