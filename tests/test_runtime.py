"""Which server owns a data directory (engine/surfaces/runtime.py): a killed one never does."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.surfaces.runtime import SERVER_FILE, ServerInfo, running_server


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    return stat[stat.rfind(")") + 2]


@pytest.mark.process
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_server_killed_but_not_yet_reaped_owns_nothing(tmp_path: Path) -> None:
    """Between kill -9 and its parent's wait, a process is a zombie: its pid answers a signal, but a
    restarted server must be free to take the store (its lock died with it)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / SERVER_FILE).write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": child.pid}), encoding="utf-8")
        assert running_server(tmp_path) == ServerInfo(url="http://127.0.0.1:9", pid=child.pid)
        child.kill()  # not waited for: this process, its parent, leaves it a zombie
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child.pid) == "Z"
        assert running_server(tmp_path) is None
    finally:
        child.kill()
        child.wait()
    assert running_server(tmp_path) is None  # reaped: gone
