"""Times: a naive time is in the user's zone on every surface (Python, HTTP, MCP, importers, filters),
across midnight and daylight-saving changes; out-of-range times are refused with one clear line."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator
from zoneinfo import available_timezones

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from engine.api import ConversationEngine
from engine.surfaces.cli import main
from engine.config import Settings
from engine.errors import ConvsearchError, ImportFileError, InvalidTimestampError, OutOfOrderError, SettingsError
from engine.query.filters import SearchFilters
from engine.surfaces.mcp.server import build_server
from engine.timeutil import parse_timestamp, zone
from tests.support import live

NOW = datetime(2024, 11, 20, 12, 0, tzinfo=timezone.utc)
UTC = timezone.utc


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[ConversationEngine]:
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        yield engine


def _one(engine: ConversationEngine, user: str, created_at: Any, **fields: Any) -> str:
    result = engine.ingest(user, [{"role": "user", "content": f"at {created_at}", "created_at": created_at, **fields}],
                           index=False)
    return result.inserted[0]


def _stored(engine: ConversationEngine, user: str, message_id: str) -> tuple[datetime, str]:
    view = engine.get(user, message_id=message_id)
    return view.created_at, view.day_label.isoformat()


def test_python_naive_times_are_in_the_users_zone_across_dst_and_midnight(engine: ConversationEngine) -> None:
    engine.add_user("paris", "Europe/Paris")
    before = _one(engine, "paris", "2024-03-31T01:30")  # CET, +01:00
    after = _one(engine, "paris", "2024-03-31T03:30")  # CEST, +02:00: the clocks jumped 02:00 -> 03:00
    assert _stored(engine, "paris", before) == (datetime(2024, 3, 31, 0, 30, tzinfo=UTC), "2024-03-31")
    assert _stored(engine, "paris", after) == (datetime(2024, 3, 31, 1, 30, tzinfo=UTC), "2024-03-31")
    late = _one(engine, "paris", datetime(2024, 5, 1, 23, 30))  # a naive datetime object, too
    assert _stored(engine, "paris", late) == (datetime(2024, 5, 1, 21, 30, tzinfo=UTC), "2024-05-01")
    repeated = _one(engine, "paris", "2024-10-27T02:30")  # happens twice: the first (summer) one
    assert _stored(engine, "paris", repeated)[0] == datetime(2024, 10, 27, 0, 30, tzinfo=UTC)


def test_a_time_the_clocks_skip_is_refused_with_the_fix(engine: ConversationEngine) -> None:
    engine.add_user("paris", "Europe/Paris")
    with pytest.raises(InvalidTimestampError) as caught:
        _one(engine, "paris", "2024-03-31T02:30")
    assert "created_at" in caught.value.message and "does not exist in Europe/Paris" in caught.value.message
    assert "2024-03-31T02:30:00+01:00" in caught.value.message  # what to send instead
    assert _one(engine, "paris", "2024-03-31T02:30:00+01:00")  # ... which is accepted


def test_midnight_in_new_york_for_navigation_and_filters(engine: ConversationEngine) -> None:
    engine.add_user("ny", "America/New_York")
    late, early = _one(engine, "ny", "2024-05-01T23:59"), _one(engine, "ny", "2024-05-02T00:01")
    assert _stored(engine, "ny", late)[1] == "2024-05-01" and _stored(engine, "ny", early)[1] == "2024-05-02"
    since = engine.turns_since("ny", "2024-05-02T00:00")  # midnight in New York, 04:00 UTC
    assert [m.message_id for m in since.messages] == [early]
    filters = SearchFilters.parse(timezone="America/New_York", now=NOW, start="2024-05-02T00:00")
    assert filters.start == datetime(2024, 5, 2, 4, 0, tzinfo=UTC)


def test_times_out_of_range_are_refused_naming_the_field(engine: ConversationEngine) -> None:
    engine.add_user("ny", "America/New_York")
    for bad, words in (("9999-12-31T23:59:59Z", "after now"), ("0001-01-01T00:00:00Z", "before 1970"),
                       ("0001-01-01T00:00:00", "before 1970"), ((NOW + timedelta(days=2)).isoformat(), "24 h"),
                       ("1970-01-01T00:00:00Z", "time 0"), ("1969-12-31T19:00:00", "time 0")):  # 0 in New York
        with pytest.raises(InvalidTimestampError) as caught:
            _one(engine, "ny", bad)
        assert caught.value.message.startswith("message 0: created_at") and words in caught.value.message
        assert "\n" not in caught.value.message
    assert engine.stats("ny")["messages"] == 0
    engine.add_user("tokyo", "Asia/Tokyo")  # year 1 at +09:00 has no UTC form at all
    with pytest.raises(InvalidTimestampError, match="created_at 0001-01-01T00:00:00 is out of range"):
        _one(engine, "tokyo", "0001-01-01T00:00:00")
    ahead = _one(engine, "ny", (NOW + timedelta(hours=3)).isoformat())  # clock skew within the tolerance
    plain = engine.ingest("ny", [{"role": "user", "content": "no time given"}], index=False).inserted[0]
    assert _stored(engine, "ny", plain)[0] == _stored(engine, "ny", ahead)[0]  # not out of order


def test_the_future_tolerance_is_a_setting(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW,
                            settings=Settings(future_tolerance_hours=72)) as engine:
        engine.add_user("u", "UTC")
        assert _one(engine, "u", (NOW + timedelta(days=2)).isoformat())


def test_an_out_of_order_message_says_how_to_recover(engine: ConversationEngine) -> None:
    engine.add_user("u", "UTC")
    _one(engine, "u", "2024-05-01T10:00")
    with pytest.raises(OutOfOrderError) as caught:
        _one(engine, "u", "2024-05-01T09:00")
    assert "last stored message" in caught.value.message and "thread of its own" in caught.value.message


def test_http_post_2330_paris_lands_on_its_own_day() -> None:
    """The issue-14 case: a naive 23:30 in Paris is 21:30 UTC on 2024-05-01, and 23:31+02:00 follows it."""
    with ConversationEngine(_tmp() / "home", embedder=None, clock=lambda: NOW) as engine:
        for client in live(engine):
            client.post("/api/users", json={"user_id": "p", "timezone": "Europe/Paris"}).raise_for_status()
            first = _post(client, "2024-05-01T23:30:00")
            assert first.status_code == 200 and first.json()["opened_days"] == ["2024-05-01"]
            second = _post(client, "2024-05-01T23:31:00+02:00")
            assert second.status_code == 200 and second.json()["opened_days"] == []
            got = client.post("/api/conversation/get", json={"user_id": "p", "message_id": first.json()["inserted"][0]})
            assert got.json()["created_at"].startswith("2024-05-01T21:30:00")
            for bad in ("9999-12-31T23:59:59Z", "0001-01-01T00:00:00", "2024-03-31T02:30"):
                refused = _post(client, bad)
                assert refused.status_code == 422, refused.text
                assert refused.json()["error"]["code"] == "invalid_timestamp"
                assert "created_at" in refused.json()["error"]["message"]


def _tmp() -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(prefix="times-"))


def _post(client: httpx.Client, created_at: str) -> httpx.Response:
    message = {"role": "user", "content": f"at {created_at}", "created_at": created_at}
    return client.post("/api/messages", json={"user_id": "p", "messages": [message]})


def test_mcp_navigation_reads_naive_times_in_the_users_zone(engine: ConversationEngine) -> None:
    engine.add_user("tokyo", "Asia/Tokyo")
    _one(engine, "tokyo", "2024-05-01T23:00", message_id="late")
    _one(engine, "tokyo", "2024-05-02T00:30", message_id="early")

    async def call() -> tuple[Any, Any]:
        async with Client(build_server(engine, "tokyo")) as client:
            since = await client.call_tool("get_turns_since", {"timestamp": "2024-05-02T00:00"})
            bad = await client.call_tool("get_turns_since", {"timestamp": "0001-01-01T00:00"})
            return since, bad

    since, bad = anyio.run(call)
    assert [m["message_id"] for m in since.structured_content["messages"]] == ["early"]
    assert bad.is_error and bad.content[0].text.startswith("invalid_timestamp:")


# Importers ------------------------------------------------------------------------------------
def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_importers_read_naive_times_in_the_users_zone(engine: ConversationEngine, tmp_path: Path) -> None:
    rows = [{"user_id": "ny", "timezone": "America/New_York", "message_id": "n1", "role": "user", "content": "x",
             "created_at": "2024-11-03T01:30"},  # New York's repeated hour: the first (EDT, -04:00)
            {"user_id": "ny", "message_id": "n2", "role": "user", "content": "y", "created_at": "2024-11-03T03:00"}]
    engine.import_file(_jsonl(tmp_path / "a.jsonl", rows), fmt="jsonl")
    assert _stored(engine, "ny", "n1")[0] == datetime(2024, 11, 3, 5, 30, tzinfo=UTC)
    assert _stored(engine, "ny", "n2")[0] == datetime(2024, 11, 3, 8, 0, tzinfo=UTC)


def test_a_line_older_than_the_stored_history_fails_or_is_skipped(engine: ConversationEngine, tmp_path: Path) -> None:
    engine.add_user("u", "UTC")
    _one(engine, "u", "2024-05-01T10:00", message_id="stored")
    rows = [{"message_id": "old", "role": "user", "content": "old", "created_at": "2024-04-30T10:00"},
            {"message_id": "new", "role": "user", "content": "new", "created_at": "2024-05-02T10:00"},
            {"message_id": "stored", "role": "user", "content": "already there", "created_at": "2024-05-01T10:00"}]
    path = _jsonl(tmp_path / "b.jsonl", rows)
    with pytest.raises(ImportFileError) as caught:
        engine.import_file(path, fmt="jsonl", user_id="u")
    assert caught.value.location == "line 1" and "older than the last message already stored" in caught.value.message
    assert "--skip-bad" in caught.value.message and engine.stats("u")["messages"] == 1
    report = engine.import_file(path, fmt="jsonl", user_id="u", skip_bad=True)
    assert report.inserted == 1 and report.duplicates == 1
    assert [(s.location, "older than" in s.reason) for s in report.skipped] == [("line 1", True)]


def test_cli_reports_extreme_times_in_one_line_and_skips_them(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"user_id": "ny", "timezone": "America/New_York", "role": "user", "content": "x",
             "created_at": "0001-01-01T00:00:00"},
            {"user_id": "ny", "role": "user", "content": "y", "created_at": "2024-05-01T10:00:00"}]
    path, home = _jsonl(tmp_path / "c.jsonl", rows), str(tmp_path / "home")
    assert main(["--home", home, "ingest", str(path), "--format", "jsonl"]) == 3  # invalid input
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 1: created_at" in err and "before 1970" in err
    assert main(["--home", home, "ingest", str(path), "--format", "jsonl", "--skip-bad"]) == 0
    report = json.loads(capsys.readouterr().out)["import"]
    assert report["inserted"] == 1 and report["skipped"][0]["location"] == "line 1"


# No overflow anywhere ------------------------------------------------------------------------
ZONES = sorted(z for z in available_timezones() if z not in ("localtime", "posixrules", "Factory"))  # places only
EXTREME = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59))
OFFSETS = st.sampled_from([None, timezone.utc, timezone(timedelta(hours=14)), timezone(timedelta(hours=-12))])


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversationEngine]:
    with ConversationEngine(tmp_path_factory.mktemp("extreme") / "home", embedder=None, clock=lambda: NOW) as engine:
        yield engine


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(moment=EXTREME, offset=OFFSETS, zone_name=st.sampled_from(ZONES), as_text=st.booleans())
def test_extreme_times_in_every_zone_give_an_answer_or_a_clear_error(
        shared: ConversationEngine, moment: datetime, offset: Any, zone_name: str, as_text: bool) -> None:
    value: Any = moment.replace(tzinfo=offset)
    value = value.isoformat() if as_text else value
    user = f"u{abs(hash(zone_name)) % 10**8}"
    shared.add_user(user, zone_name)
    try:
        parsed = parse_timestamp(value, zone(zone_name))
        assert parsed.tzinfo is not None and parsed.utcoffset() == timedelta(0)
    except InvalidTimestampError as exc:
        assert "\n" not in exc.message
    calls = (lambda: shared.turns_since(user, value), lambda: shared.turns_around(user, value),
             lambda: SearchFilters.parse(timezone=zone_name, now=NOW, start=value),
             lambda: shared.search(user, "anything", end=value, day=moment.date().isoformat()),
             lambda: shared.ingest(user, [{"role": "user", "content": "x", "created_at": value}], index=False))
    for call in calls:
        try:
            call()
        except ConvsearchError as exc:  # anything else (OverflowError, ValueError) fails the test
            assert exc.message and "\n" not in exc.message


def test_the_readme_quickstart_runs_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    code = readme.split("```python\n", 1)[1].split("```", 1)[0].replace("./.convsearch", str(tmp_path / "home"))
    monkeypatch.setenv("CONVSEARCH_EMBEDDING_BACKEND", "none")  # lexical is enough to run it
    for _ in range(2):
        exec(compile(code, "README.md", "exec"), {})
    with ConversationEngine(tmp_path / "home", embedder=None) as engine:
        assert engine.stats("alice")["messages"] == 2
        assert engine.get("alice", message_id="q1").created_at == datetime(2024, 3, 4, 9, 0, tzinfo=UTC)


def test_the_engine_clock_must_give_aware_times(tmp_path: Path) -> None:
    with pytest.raises(ConvsearchError, match=r"clock must be a function giving an aware datetime"):
        ConversationEngine(tmp_path / "home", embedder=None, clock=datetime.now)  # naive: failed later with TypeError
    with pytest.raises(ConvsearchError, match=r"clock must be a function"):
        ConversationEngine(tmp_path / "home", embedder=None, clock="now")  # type: ignore[arg-type]


def test_a_default_timezone_is_checked_and_used_by_imports(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"default_timezone: unknown time zone 'Mars/Base'"):
        Settings(default_timezone="Mars/Base")
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"user_id": "ana", "role": "user", "content": "late", "created_at": "2024-05-01T23:30"}) + "\n")
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW,
                            settings=Settings(default_timezone="Europe/Paris")) as e:
        e.import_file(path, fmt="jsonl")
        (message,) = e.substring_search("ana", "late")[0][1:]
        assert e.store.get_user("ana").timezone == "Europe/Paris"  # as add_user would have made it
        assert message.created_at == datetime(2024, 5, 1, 21, 30, tzinfo=UTC)  # read in Paris, not UTC


@pytest.mark.parametrize("name", ["localtime", "posixrules", "Factory", "right/Europe/Paris"])
def test_zone_files_that_are_not_places_are_refused(name: str) -> None:
    with pytest.raises(ConvsearchError, match="unknown time zone"):
        zone(name)


def test_a_day_is_its_first_instant_where_clocks_skip_midnight(engine: ConversationEngine) -> None:
    engine.add_user("cairo", "Africa/Cairo")  # 2024-04-26: 00:00 -> 01:00
    _one(engine, "cairo", "2024-04-26T09:00")
    assert parse_timestamp("2024-04-26", zone("Africa/Cairo")) == datetime(2024, 4, 25, 22, 0, tzinfo=UTC)
    assert [m.content for m in engine.turns_since("cairo", "2024-04-26").messages] == ["at 2024-04-26T09:00"]
    assert engine.search("cairo", "2024", day="2024-04-26", mode="lexical").results
    with pytest.raises(InvalidTimestampError, match="does not exist in Africa/Cairo"):
        engine.turns_since("cairo", "2024-04-26T00:30")  # a time in the skipped hour is still refused


def test_a_moment_is_not_taken_for_a_day(engine: ConversationEngine) -> None:
    engine.add_user("ny", "America/New_York")
    _one(engine, "ny", "2024-05-01T22:00")  # 02:00 UTC on 2 May
    with pytest.raises(ConvsearchError, match="is a moment, not a calendar day"):
        engine.search("ny", "2024", day=datetime(2024, 5, 2, 1, tzinfo=UTC))
    assert engine.search("ny", "2024", day="2024-05-01", mode="lexical").results


@pytest.mark.parametrize("one_call", [True, False], ids=["a call each", "one batch"])
def test_local_times_through_the_repeated_autumn_hour_keep_their_order(engine: ConversationEngine, one_call: bool) -> None:
    """New York, 3 Nov 2024: 01:00-01:59 happens twice. A client sending naive local times every ten
    minutes across it sends 01:50 then 01:00: the second pass is taken, not a refusal."""
    engine.add_user("ny", "America/New_York")
    real = [datetime(2024, 11, 3, 5, 20, tzinfo=UTC) + timedelta(minutes=10 * k) for k in range(12)]
    local = [moment.astimezone(zone("America/New_York")).replace(tzinfo=None).isoformat() for moment in real]
    assert (local[3], local[4]) == ("2024-11-03T01:50:00", "2024-11-03T01:00:00")  # 01:00-01:59, twice
    messages = [{"role": "user", "content": f"step {k}", "created_at": at} for k, at in enumerate(local)]
    for batch in ([[m] for m in messages] if one_call else [messages]):
        engine.ingest("ny", batch, index=False)
    stored = engine.turns_since("ny", "2024-11-02").messages
    assert [m.created_at for m in stored] == real
    assert len({m.conversation_id for m in stored}) == 1  # ten minutes apart: one conversation
