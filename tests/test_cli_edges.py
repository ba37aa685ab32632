"""What a careless or hostile CLI user hits: another user's thread id, a byte-order mark, JSON nested
too deep, a pandas Parquet file, a file given as the data directory, escape codes in messages, Ctrl-C.
The CLI's own `main` over a real store (lexical only); Ctrl-C on a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.surfaces.cli import main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def lexical_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVSEARCH_EMBEDDING_BACKEND", "none")  # these are about the CLI, not the model


def write_jsonl(path: Path, rows: list[dict[str, Any]], *, prefix: bytes = b"") -> Path:
    path.write_bytes(prefix + "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
    return path


def row(user: str, message_id: str, content: str, minute: int, **extra: Any) -> dict[str, Any]:
    return {"user_id": user, "message_id": message_id, "role": "user", "content": content,
            "created_at": f"2024-03-0{1 + minute // 60}T10:{minute % 60:02d}:00Z", **extra}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    try:
        return status, json.loads(captured.out), captured.err
    except json.JSONDecodeError:
        return status, captured.out, captured.err


def test_no_user_can_take_another_users_continuous_thread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    plant = write_jsonl(tmp_path / "plant.jsonl", [row("mallory", "m1", "planted by mallory", 0,
                                                       thread_id="bob:continuous")])
    status, _, err = run(capsys, "--home", home, "ingest", str(plant))
    assert status == 3 and "names a user's continuous thread" in err
    run(capsys, "--home", home, "ingest", str(write_jsonl(tmp_path / "bob.jsonl", [row("bob", "b1", "hunter2", 1)])))
    status, found, _ = run(capsys, "--home", home, "grep", "--user", "bob", "planted")
    assert status == 0 and found == []
    status, threads, _ = run(capsys, "--home", home, "threads", "--user", "bob")
    assert [t["thread_id"] for t in threads] == ["bob:continuous"]


def test_a_byte_order_mark_is_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(tmp_path / "bom.jsonl", [row("u", "a", "first", 0), row("u", "b", "second", 1)],
                       prefix="\ufeff".encode("utf-8"))
    status, report, err = run(capsys, "--home", str(tmp_path / "home"), "ingest", str(data))
    assert status == 0 and report["import"]["inserted"] == 2, err


@pytest.mark.parametrize("name,text,fmt", [
    ("deep.json", "[" * 100_000 + "]" * 100_000, "openai"),
    ("deep.jsonl", json.dumps(row("u", "a", "x", 0))[:-1] + ', "metadata": ' + '{"a":' * 50_000 + "1" + "}" * 50_001 + "\n",
     "jsonl"),
])
def test_json_nested_too_deep_is_a_bad_record_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                                          text: str, fmt: str) -> None:
    data = tmp_path / name
    data.write_text(text, encoding="utf-8")
    status, _, err = run(capsys, "--home", str(tmp_path / "home"), "ingest", str(data), "--format", fmt, "--user", "u")
    assert status == 3 and "nested too deeply" in err and "Traceback" not in err


def test_a_pandas_parquet_file_with_nanoseconds_imports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "ns.parquet"
    pq.write_table(pa.table({"user_id": ["u"], "message_id": ["u1"], "role": ["user"], "content": ["x"],
                             "created_at": pa.array([1709800000123456789], pa.timestamp("ns"))}), data)
    home = str(tmp_path / "home")
    assert run(capsys, "--home", home, "ingest", str(data))[0] == 0
    status, message, _ = run(capsys, "--home", home, "get", "--user", "u", "--message", "u1")
    assert status == 0 and message["created_at"] == "2024-03-07T08:26:40.123456Z"


def test_a_file_as_the_data_directory_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("")
    status, _, err = run(capsys, "--home", str(tmp_path / "f"), "ingest", str(REPO / "data" / "sample.jsonl"))
    assert status == 3 and "is a file, not a data directory" in err


def test_table_output_escapes_terminal_control_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    hostile = "\x1b[31mRED\x1b[0m \x1b]0;pwned\x07 done"
    run(capsys, "--home", home, "ingest", str(write_jsonl(tmp_path / "h.jsonl", [row("u", "e1", hostile, 0)])))
    for argv in (["grep", "--user", "u", "RED"], ["get", "--user", "u", "--message", "e1"], ["search", "--user", "u", "done"]):
        status, out, _ = run(capsys, "--home", home, "--format", "table", *argv)
        assert status == 0 and "RED" in out and "\x1b" not in out and "\x07" not in out and "\\x1b[31m" in out, argv


@pytest.mark.process
def test_ctrl_c_during_an_import_exits_130_without_a_traceback(tmp_path: Path) -> None:
    big = write_jsonl(tmp_path / "big.jsonl", [row("u", f"m{i}", f"message {i} about the boiler " * 20, 0)
                                               | {"created_at": f"2024-03-01T10:00:{i % 60:02d}.{i:06d}Z"}
                                               for i in range(60_000)])
    env = {**os.environ, "PYTHONPATH": str(REPO), "CONVSEARCH_EMBEDDING_BACKEND": "none"}
    child = subprocess.Popen([sys.executable, "-m", "engine.surfaces.cli", "--home", str(tmp_path / "home"), "-v",
                              "ingest", str(big)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    started = time.monotonic()
    for line in child.stderr:  # the import has begun reading: Ctrl-C lands in the store's work
        if "reading and storing" in line or time.monotonic() - started > 60:
            break
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130 and "Traceback" not in err and "run the same command again" in err, err


def test_an_openai_conversation_whose_current_node_is_missing_is_an_error(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    node = {"id": "n1", "parent": None, "message": {"id": "n1", "author": {"role": "user"},
                                                     "content": {"parts": ["hello"]}, "create_time": 1709800000}}
    data = tmp_path / "chat.json"
    data.write_text(json.dumps([{"id": "c1", "title": "t", "mapping": {"n1": node}, "current_node": "gone"}]),
                    encoding="utf-8")
    status, _, err = run(capsys, "--home", str(tmp_path / "home"), "ingest", str(data), "--format", "openai",
                         "--user", "u")
    assert status == 3 and "current_node 'gone' is not a node of its mapping" in err


def test_a_directory_is_not_a_file_to_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "--home", str(tmp_path / "home"), "ingest", str(tmp_path), "--format", "jsonl")
    assert status == 3 and "is a directory: give one file" in err
