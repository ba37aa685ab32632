"""Where the server that owns a data directory listens: `server.json` in that directory.

`convsearch serve` writes it (pid, and URL null) before it opens the store, then with its URL once
it listens, and removes it on exit; other clients (the CLI, `convsearch mcp`) read it to send their
requests there instead of opening the store, which DuckDB lets one process write, and wait while
a server is starting. A file whose pid is gone (a killed server, reaped or not) is ignored.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

__all__ = ["ServerInfo", "SERVER_FILE", "running_server", "advertised"]

SERVER_FILE = "server.json"


@dataclass(frozen=True, slots=True)
class ServerInfo:
    url: str | None  # None while the server starts
    pid: int


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether the process has exited and waits for its parent to reap it: a server killed with -9 keeps
    its pid until then (~1 s under some inits), though its store lock is already released. Linux only."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].startswith("Z")  # the state follows the command name in parentheses


def running_server(home: Path) -> ServerInfo | None:
    """The live server of this data directory, if any (never this very process)."""
    try:
        data = json.loads((Path(home) / SERVER_FILE).read_text(encoding="utf-8"))
        info = ServerInfo(url=None if data["url"] is None else str(data["url"]), pid=int(data["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if info.pid != os.getpid() and _alive(info.pid) else None


@contextmanager
def advertised(home: Path, url: str | None) -> Iterator[ServerInfo]:
    """Write the file (atomically) for the duration; remove it after, unless another server took it."""
    info = ServerInfo(url=url, pid=os.getpid())
    path = Path(home) / SERVER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{SERVER_FILE}.{info.pid}")
    tmp.write_text(json.dumps({"url": info.url, "pid": info.pid}), encoding="utf-8")
    os.replace(tmp, path)
    try:
        yield info
    finally:
        try:
            if json.loads(path.read_text(encoding="utf-8")).get("pid") == info.pid:
                path.unlink()
        except (OSError, ValueError):
            pass
