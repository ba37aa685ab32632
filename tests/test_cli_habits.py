"""The CLI's habits: options after the command, formats from extensions, --version, users and threads,
--thread on every navigation command (and HTTP route and MCP tool), exports by extension, a missing
home, whole fields in table output, -v."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Iterator

import anyio
import pyarrow.parquet as pq
import pytest
from mcp import Client

from engine.api import ConversationEngine
from engine.surfaces.cli import main
from engine.surfaces.mcp.server import build_server
from tests.support import live

ROWS = [
    {"user_id": "ana", "timezone": "Europe/Lisbon", "message_id": "c1", "role": "user",
     "content": "Continuous: the boiler needs a service", "created_at": "2024-05-01T09:00"},
    {"user_id": "ana", "message_id": "c2", "role": "assistant", "content": "Booked the boiler service " + "x" * 200,
     "created_at": "2024-05-01T09:01"},
    {"user_id": "ana", "thread_id": "trip", "message_id": "t1", "role": "user",
     "content": "Trip: the boiler of the train?", "created_at": "2024-04-01T08:00"},
    {"user_id": "ana", "thread_id": "trip", "message_id": "t2", "role": "assistant",
     "content": "Trip: trains have no boiler now", "created_at": "2024-04-01T08:01"},
]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("habits")
    data = folder / "ana.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    assert main(["ingest", str(data), "--home", str(folder / "home")]) == 0  # format from .jsonl, home after
    return folder / "home"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return out


def test_global_options_after_the_command(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = run(capsys, "grep", "--user", "ana", "boiler", "--home", str(home), "--format", "table")
    assert table.splitlines()[0].split()[:2] == ["offset", "seq"]
    before = run(capsys, "--home", str(home), "--format", "table", "grep", "--user", "ana", "boiler")
    assert before == table
    assert run(capsys, "--home", str(home), "stats", "--format", "json")["messages"] >= 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0 and capsys.readouterr().out.startswith("convsearch ")


def test_users_and_threads(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert [(u["user_id"], u["timezone"]) for u in run(capsys, "--home", str(home), "users")] == [
        ("ana", "Europe/Lisbon")]
    threads = run(capsys, "--home", str(home), "threads", "--user", "ana")
    assert {t["thread_id"]: t["mode"] for t in threads} == {"ana:continuous": "continuous", "trip": "thread"}
    assert main(["--home", str(home), "threads", "--user", "nobody"]) == 4  # not found


def test_thread_on_every_navigation_command(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--home", str(home)]
    grep = run(capsys, *base, "grep", "--user", "ana", "boiler", "--thread", "trip")
    assert [g["message"]["message_id"] for g in grep] == ["t1", "t2"]
    assert [g["message"]["message_id"] for g in run(capsys, *base, "grep", "--user", "ana", "boiler")] == ["c1", "c2"]
    since = run(capsys, *base, "since", "--user", "ana", "2024-04-01T08:01", "--thread", "trip")
    assert [m["message_id"] for m in since["messages"]] == ["t2"]
    around = run(capsys, *base, "around", "--user", "ana", "2024-04-01T08:01", "--thread", "trip", "--count", "2")
    assert [m["message_id"] for m in around["messages"]] == ["t1", "t2"]
    assert_trip_context(run(capsys, *base, "context", "--user", "ana", "--thread", "trip"))
    assert [m["message_id"] for m in run(capsys, *base, "range", "--user", "ana", "1", "3", "--thread", "trip")] \
        == ["t1", "t2"]
    assert "unknown thread" in _error(capsys, *base, "grep", "--user", "ana", "x", "--thread", "nope")


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) in (3, 4)  # invalid input or not found (docs/reference/cli.md: exit codes)
    return capsys.readouterr().err


def assert_trip_context(context: dict[str, Any]) -> None:
    """The trip thread's context: the import summarised its one conversation, so both turns come as that summary."""
    assert context["turns"] == [] and context["turns_covered"] == 2
    assert [s["summary_id"] for s in context["summaries"]] == ["trip:sum:conv:1"]


@pytest.fixture
def engine(home: Path) -> Iterator[ConversationEngine]:
    """Closed after its test: the CLI commands of the other tests open the same home (one engine at a time)."""
    with ConversationEngine(home, embedder=None) as engine:
        yield engine


def test_thread_on_http_routes_and_mcp_tools(engine: ConversationEngine) -> None:
    for client in live(engine):
        def post(path: str, **body: Any) -> Any:
            answer = client.post(path, json={"user_id": "ana", "thread_id": "trip", **body})
            assert answer.status_code == 200, answer.text
            return answer.json()

        assert [g["message"]["message_id"] for g in post("/api/search_session_history", text="boiler")] == ["t1", "t2"]
        assert [m["message_id"] for m in post("/api/get_turns_since", timestamp="2024-04-01T08:01")["messages"]] \
            == ["t2"]
        assert len(post("/api/get_turns_around", timestamp="2024-04-01T08:01", count=2)["messages"]) == 2
        assert_trip_context(post("/api/get_conversation_context"))
        assert [m["message_id"] for m in post("/api/messages/range", start_seq=1, end_seq=2)] == ["t1"]
        listed = client.post("/api/threads", json={"user_id": "ana"}).json()
        assert [t["thread_id"] for t in listed] == ["trip", "ana:continuous"] or \
            {t["thread_id"] for t in listed} == {"trip", "ana:continuous"}

    async def call() -> list[Any]:
        async with Client(build_server(engine, "ana")) as client:
            return [await client.call_tool(name, {"thread_id": "trip", **args}) for name, args in (
                ("search_session_history", {"text": "boiler"}),
                ("get_turns_since", {"timestamp": "2024-04-01T08:01"}),
                ("get_turns_around", {"timestamp": "2024-04-01T08:01", "count": 2}),
                ("get_conversation_context", {}))]

    grep, since, around, context = anyio.run(call)
    assert [g["message"]["message_id"] for g in grep.structured_content["result"]] == ["t1", "t2"]
    assert [m["message_id"] for m in since.structured_content["messages"]] == ["t2"]
    assert len(around.structured_content["messages"]) == 2
    assert_trip_context(context.structured_content)


def test_export_writes_what_its_extension_says(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--home", str(home), "export", "--user", "ana", "--out"]
    assert run(capsys, *base, str(tmp_path / "a.parquet"))["rows"] == 2
    assert pq.read_table(tmp_path / "a.parquet").column("message_id").to_pylist() == ["c1", "c2"]
    assert run(capsys, *base, str(tmp_path / "a.csv"), "--thread", "trip")["format"] == "csv"
    with (tmp_path / "a.csv").open(encoding="utf-8") as fh:
        assert [r["message_id"] for r in csv.DictReader(fh)] == ["t1", "t2"]
    run(capsys, *base, str(tmp_path / "a.jsonl"))
    lines = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["message_id"] for r in lines] == ["c1", "c2"] and lines[0]["timezone"] == "Europe/Lisbon"
    again = run(capsys, "--home", str(tmp_path / "copy"), "ingest", str(tmp_path / "a.jsonl"))
    assert again["import"]["inserted"] == 2  # a JSONL export imports back
    assert "end the file name with .parquet, .jsonl, .csv" in _error(capsys, *base, str(tmp_path / "a.xlsx"))


def test_a_missing_home_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["stats"], ["search", "--user", "a", "x"], ["users"]):
        err = _error(capsys, "--home", str(tmp_path / "typo"), *argv)
        assert "no convsearch data in" in err and "convsearch ingest" in err
    assert not (tmp_path / "typo").exists()


def test_ingest_guesses_the_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "chat.json").write_text("[]", encoding="utf-8")
    assert "pass --format" in _error(capsys, "--home", str(tmp_path / "h"), "ingest", str(tmp_path / "chat.json"))
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    assert "pass --format" in _error(capsys, "--home", str(tmp_path / "h"), "ingest", str(tmp_path / "notes.txt"))
    examples = Path(__file__).resolve().parents[1] / "data" / "examples"
    for name, fmt in (("locomo.json", "locomo"), ("legacy.json", "legacy"), ("openai.json", "openai")):
        report = run(capsys, "--home", str(tmp_path / "h"), "ingest", str(examples / name), "--user", "g")["import"]
        assert report["format"] == fmt and report["inserted"] > 0


def test_table_output_shows_a_whole_message(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = run(capsys, "--home", str(home), "--format", "table", "get", "--user", "ana", "--message", "c2")
    assert "x" * 200 in text


def test_verbose_logs_each_step(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"user_id": "vee", "role": "user", "content": "hello"}) + "\n", encoding="utf-8")
    assert main(["ingest", str(data), "--home", str(tmp_path / "h"), "-v"]) == 0
    err = capsys.readouterr().err
    assert "import path=" in err and "import stored=1" in err and "lexical index refreshed" in err
    assert main(["ingest", str(data), "--home", str(tmp_path / "h2")]) == 0
    assert "import stored" not in capsys.readouterr().err


def test_a_reimported_id_with_other_content_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    data = tmp_path / "a.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:2]), encoding="utf-8")
    run(capsys, "--home", home, "ingest", str(data))
    edited = [ROWS[0], {**ROWS[1], "content": "Booked the boiler service for Friday"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in edited), encoding="utf-8")
    assert main(["--home", home, "ingest", str(data)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)["import"]
    assert report["duplicates"] == 2 and [c["location"] for c in report["changed"]] == ["line 2"]
    assert "'c2' is already stored with other content" in report["changed"][0]["reason"]
    assert "1 record(s) differ from a message with the same id (first: line 2: id 'c2' is already stored" in captured.err


def test_an_id_the_file_repeats_with_other_content_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    data = tmp_path / "a.jsonl"
    rows = [ROWS[0], ROWS[1], {**ROWS[1], "content": "Booked the boiler service for Friday"}, ROWS[1]]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["--home", home, "ingest", str(data)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)["import"]
    assert report["inserted"] == 2 and report["duplicates"] == 2  # line 4 repeats line 2 exactly: not reported
    assert [(c["location"], c["reason"]) for c in report["changed"]] == [
        ("line 3", "id 'c2' is also at line 2 with other content: that first record is the one stored")]
    assert "1 record(s) differ" in captured.err
    got = run(capsys, "--home", home, "get", "--user", "ana", "--message", "c2")
    assert got["content"] == ROWS[1]["content"]
    elsewhere = tmp_path / "b.jsonl"  # the same message id in another thread of the file: ids are store-wide
    elsewhere.write_text("".join(json.dumps(r) + "\n" for r in [ROWS[2], {**ROWS[2], "thread_id": "home",
                                                                             "content": "Another text"}]), encoding="utf-8")
    report = run(capsys, "--home", home, "ingest", str(elsewhere))["import"]
    assert [(c["location"], c["reason"]) for c in report["changed"]] == [
        ("line 2", "id 't1' is also at line 1 with other content: that first record is the one stored")]


@pytest.mark.model  # see tests/conftest.py (--fast)
def test_update_replaces_a_reimported_text_and_reindexes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    data = tmp_path / "a.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:2]), encoding="utf-8")
    run(capsys, "--home", home, "ingest", str(data), "--index")
    data.write_text(json.dumps({**ROWS[1], "content": "Booked the plumber named Okonkwo"}) + "\n", encoding="utf-8")
    report = run(capsys, "--home", home, "ingest", str(data), "--update")["import"]
    assert "replaced by the new text" in report["changed"][0]["reason"]
    got = run(capsys, "--home", home, "get", "--user", "ana", "--message", "c2")
    assert got["content"] == "Booked the plumber named Okonkwo" and got["seq"] == 2
    found = run(capsys, "--home", home, "search", "--user", "ana", "Okonkwo")
    assert [h["message_id"] for h in found["results"] if h["kind"] == "message"][:1] == ["c2"]
    assert run(capsys, "--home", home, "grep", "--user", "ana", "Booked the boiler") == []  # the old text is gone
    search = run(capsys, "--home", home, "search", "--user", "ana", "Okonkwo", "--explain")
    assert search["mode"] == "hybrid" and search["not_vector_indexed"] == 0  # re-embedded, not left pending
