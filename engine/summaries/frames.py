"""Length-prefixed pickle frames: how the engine and its summary workers talk over pipes."""

from __future__ import annotations

import pickle
from typing import IO, Any

__all__ = ["write_frame", "read_frame"]

_HEADER = 8  # bytes of the frame's length, little-endian


def write_frame(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(_HEADER, "little"))
    stream.write(data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next frame's value; EOFError when the stream ends (cleanly or mid-frame)."""
    header = stream.read(_HEADER)
    if len(header) < _HEADER:
        raise EOFError("the stream ended")
    size = int.from_bytes(header, "little")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError(f"the stream ended {size - len(data)} bytes short of a frame")
    return pickle.loads(data)
