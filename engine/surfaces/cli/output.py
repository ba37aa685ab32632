"""CLI output: JSON by default (for scripts and agents), a plain table for people."""

from __future__ import annotations

import json
import re
import sys
from typing import Any, TextIO

from engine.surfaces.serialize import to_jsonable

__all__ = ["emit", "render_table"]

MAX_CELL = 80
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal acts on (escape sequences, bells); not tab or newline


def emit(payload: Any, fmt: str, stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout  # looked up per call, so redirected stdout (capsys, redirect_stdout) is honoured
    data = to_jsonable(payload)
    if fmt == "table":
        stream.write(render_table(data) + "\n")
    else:
        stream.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def render_table(data: Any) -> str:
    """Rows of dicts as aligned columns; a dict as key/value lines; lists inside a dict as sub-tables."""
    if isinstance(data, dict):
        rows = [k for k, v in data.items() if isinstance(v, list) and v and isinstance(v[0], dict)]
        head = "\n".join(f"{k}: {_cell(v, cut=False)}" for k, v in data.items() if k not in rows)
        tables = "\n\n".join(f"{k}:\n{render_table(data[k])}" for k in rows)
        return "\n\n".join(part for part in (head, tables) if part)
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        columns = [c for c in data[0] if not isinstance(data[0][c], (dict, list))]
        widths = {c: max(len(c), *(len(_cell(r.get(c))) for r in data)) for c in columns}
        lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
        lines += ["  ".join(_cell(r.get(c)).ljust(widths[c]) for c in columns) for r in data]
        return "\n".join(lines)
    if isinstance(data, list):
        return "\n".join(_cell(v) for v in data) or "(none)"
    return _cell(data)


def _cell(value: Any, *, cut: bool = True) -> str:
    """A table cell on one line, cut at MAX_CELL; a record's own field (`cut=False`) is shown whole.
    Control characters are shown escaped: a stored message must not recolour or retitle the terminal."""
    text = "" if value is None else (json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value))
    text = _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)
    if not cut:
        return text
    text = " ".join(text.split())
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"
