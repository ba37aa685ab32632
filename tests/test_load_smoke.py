"""A tiny run of benchmarks/load_test.py: the real server in a subprocess, 2 client threads, 5 s,
without the model (startup in seconds). The full run and its figures are in docs/reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "load_test.py"


@pytest.mark.slow
@pytest.mark.process
def test_load_smoke_has_no_errors_and_loses_nothing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--threads", "2", "--seconds", "5", "--lexical",
                           "--home", str(tmp_path / "home")], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)["result"]
    assert result["errors"] == 0 and result["lost_messages"] == 0, result["first_errors"]
    assert result["latency_ms"]["search"]["count"] > 0 and result["latency_ms"]["ingest"]["count"] > 0
    assert result["stored_turns"] == result["acknowledged_messages"] >= 80  # 4 users x 20 seeded, plus ingests
    assert result["requests"] == result["latency_ms"]["all"]["count"]
    assert 4.5 <= result["seconds"] <= 40
