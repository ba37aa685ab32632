"""Importers: every format into a real DuckDB file, all-or-nothing, idempotent, round-trips."""

from __future__ import annotations

import io
import json
import sys
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.errors import ImportFileError, InvalidInputError, UnknownUserError
from engine.importers import FORMATS, ImportReport, SkippedRecord, export_thread_parquet, import_file
from engine.importers.legacy import MIGRATED_TITLE
from engine.importers.locomo import load_locomo, parse_locomo_datetime, repair_evidence, session_numbers
from engine.store.ingest import Ingestor
from engine.store.core import Store
from tests.support import StatementCount, chat_export

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
EXAMPLES = Path(__file__).resolve().parent.parent / "data" / "examples"
LOCOMO_DEV = Path("/work/shared/data/locomo/locomo_dev.json")
EMPTY = {"users": 0, "threads": 0, "messages": 0, "conversations": 0, "day_segments": 0, "summaries": 0}


def ingestor_for(store: Store) -> Ingestor:
    return Ingestor(store, idle_timeout=timedelta(minutes=30), clock=lambda: NOW)


def run(store: Store, path: Path, fmt: str, **options) -> ImportReport:
    return import_file(store, ingestor_for(store), path, fmt=fmt, **options)


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows) + "\n",
                    encoding="utf-8")
    return path


def thread_messages(store: Store, thread_id: str):
    return store.messages_in_range(thread_id, 0)


# JSONL ------------------------------------------------------------------------------------------
def test_sample_imports_both_users_in_their_zones(store, sample_path):
    report = run(store, sample_path, "jsonl")
    assert (report.format, report.users, report.inserted, report.duplicates) == ("jsonl", ("alice", "bob"), 128, 0)
    assert set(report.threads) == {"alice:continuous", "bob:continuous"} and report.skipped == ()
    alice, bob = thread_messages(store, "alice:continuous"), thread_messages(store, "bob:continuous")
    assert [m.seq for m in alice] == list(range(1, 77)) and [m.seq for m in bob] == list(range(1, 53))
    assert [m.message_id for m in alice[:2]] == ["alice-0001", "alice-0002"]
    assert all(a.created_at <= b.created_at for a, b in zip(alice, alice[1:]))
    assert {u.user_id: u.timezone for u in store.list_users()} == {"alice": "Europe/Paris", "bob": "Asia/Tokyo"}
    days = [str(d.day_label) for d in store.timeline.day_segments("alice:continuous")]
    assert days == ["2024-03-04", "2024-03-05", "2024-03-06", "2024-03-07", "2024-03-08", "2024-03-09", "2024-03-12"]
    # bob's 07:31 Tokyo session is still 4 March in UTC: the day follows his zone.
    early = next(m for m in bob if m.message_id == "bob-0011")
    assert early.created_at.date() == date(2024, 3, 4) and early.day_label == date(2024, 3, 5)
    tools = [m for m in alice if m.role == "tool"]
    assert tools and all(m.tools_used for m in tools) and max(len(m.content.split()) for m in tools) > 3000


def test_sample_conversations_split_on_gaps_not_midnight(store, sample_path):
    run(store, sample_path, "jsonl")
    conversations = sorted(store.timeline.conversations("alice:continuous"), key=lambda c: c.first_seq)
    assert len(conversations) == 8 and len(store.timeline.conversations("bob:continuous")) == 5
    by_id = {m.message_id: m for m in thread_messages(store, "alice:continuous")}
    # Two conversations on 6 March (08:40 and 14:52, Paris)...
    march6 = {m.conversation_id for m in by_id.values() if m.day_label == date(2024, 3, 6)}
    assert len(march6) == 2
    # ...and the late session of 7 March is one conversation over two days.
    late = [m for m in by_id.values() if m.day_label in (date(2024, 3, 7), date(2024, 3, 8))]
    assert len({m.conversation_id for m in late}) == 1 and len({m.day_label for m in late}) == 2


def test_reimport_is_a_noop(store, sample_path):
    run(store, sample_path, "jsonl")
    before = store.stats()
    again = run(store, sample_path, "jsonl")
    assert (again.inserted, again.duplicates) == (0, 128) and store.stats() == before


def test_bad_line_fails_the_whole_file_and_stores_nothing(store, sample_path, tmp_path):
    lines = sample_path.read_text(encoding="utf-8").splitlines()
    lines[49] = json.dumps({"user_id": "alice", "role": "robot", "content": "beep"})
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(ImportFileError) as caught:
        run(store, path, "jsonl")
    assert caught.value.location == "line 50" and "robot" in str(caught.value) and "--skip-bad" in str(caught.value)
    assert store.stats() == EMPTY


def test_failure_while_storing_rolls_back_the_batches_already_stored(store, sample_path, tmp_path):
    store.ensure_user("zoe")
    store.ensure_thread("zoe", "taken")
    before = store.stats()
    lines = sample_path.read_text(encoding="utf-8").splitlines()
    lines.append(json.dumps({"user_id": "bob", "thread_id": "taken", "role": "user", "content": "mine?"}))
    with pytest.raises(ImportFileError, match="line 129.*taken"):
        run(store, write_jsonl(tmp_path / "late.jsonl", lines), "jsonl")
    assert store.stats() == before  # alice's and bob's continuous threads were stored first, then undone
    for user in ("alice", "bob"):  # the users the import created went with it: none is left half there
        with pytest.raises(UnknownUserError):
            store.get_user(user)


def test_skip_bad_imports_the_rest_and_lists_each_bad_line(store, sample_path, tmp_path):
    lines = sample_path.read_text(encoding="utf-8").splitlines()
    lines[49] = "{not json"
    lines.insert(10, json.dumps({"user_id": "bob", "role": "user"}))
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    report = run(store, path, "jsonl", skip_bad=True)
    assert [s.location for s in report.skipped] == ["line 11", "line 51"]
    assert "content" in report.skipped[0].reason and "JSON" in report.skipped[1].reason
    assert report.inserted == 127 and store.stats()["messages"] == 127


def test_bad_timestamp_names_the_accepted_forms(store, tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"user_id": "u", "role": "user", "content": "x", "created_at": "yesterday"}])
    with pytest.raises(ImportFileError, match="line 1.*yesterday.*ISO 8601.*2024-05-01T13:45:30"):
        run(store, path, "jsonl")


def test_line_user_id_wins_and_argument_is_the_default(store, tmp_path):
    rows = [{"role": "user", "content": "mine", "created_at": "2024-05-01T10:00"},
            {"user_id": "other", "role": "user", "content": "theirs", "created_at": "2024-05-01T10:00"},
            {"role": "user", "content": "in a thread", "thread_id": "side", "created_at": "2024-05-01T11:00"},
            {"role": "user", "content": "no time"}]
    report = run(store, write_jsonl(tmp_path / "u.jsonl", rows), "jsonl", user_id="me", timezone="Asia/Tokyo")
    assert report.users == ("me", "other") and store.get_user("me").timezone == "Asia/Tokyo"
    mine = thread_messages(store, "me:continuous")
    assert [m.content for m in mine] == ["mine", "no time"] and mine[1].created_at == NOW
    # A naive time is read in the user's zone: 10:00 in Tokyo is 01:00 UTC.
    assert mine[0].created_at == datetime(2024, 5, 1, 1, 0, tzinfo=timezone.utc)
    assert [m.content for m in thread_messages(store, "other:continuous")] == ["theirs"]
    assert store.get_thread("side", user_id="me").mode == "thread"


def test_records_without_a_user_are_bad(store, tmp_path):
    path = write_jsonl(tmp_path / "n.jsonl", [{"role": "user", "content": "who?"}])
    with pytest.raises(ImportFileError, match="no user_id"):
        run(store, path, "jsonl")


def test_message_id_of_another_user_is_a_bad_record(store, tmp_path):
    rows = [{"user_id": "a", "role": "user", "content": "x", "message_id": "m1", "created_at": "2024-01-01"},
            {"user_id": "b", "role": "user", "content": "y", "message_id": "m1", "created_at": "2024-01-01"}]
    report = run(store, write_jsonl(tmp_path / "d.jsonl", rows), "jsonl", skip_bad=True)
    assert [s.location for s in report.skipped] == ["line 2"] and report.inserted == 1


def test_unknown_format_and_missing_file_are_refused(store, sample_path, tmp_path):
    with pytest.raises(InvalidInputError, match="jsonl, parquet, openai, locomo, legacy"):
        run(store, sample_path, "csv")
    with pytest.raises(InvalidInputError, match="nope.jsonl"):
        run(store, tmp_path / "nope.jsonl", "jsonl")
    assert FORMATS == ("jsonl", "parquet", "openai", "locomo", "legacy")


def test_one_megabyte_message_round_trips_intact(store, tmp_path):
    text = ("journal ligne 数据 " * 80_000)[:1_000_000]
    path = write_jsonl(tmp_path / "big.jsonl", [{"user_id": "u", "role": "tool", "content": text,
                                                 "tools_used": ["cat"], "created_at": "2024-01-01T00:00:00Z"}])
    run(store, path, "jsonl")
    stored = thread_messages(store, "u:continuous")[0]
    assert stored.content == text and stored.tools_used == ("cat",)


def test_everything_survives_closing_and_reopening(tmp_path, sample_path):
    with Store(tmp_path / "s.duckdb") as first:
        run(first, sample_path, "jsonl")
        stats, messages = first.stats(), thread_messages(first, "alice:continuous")
    with Store(tmp_path / "s.duckdb") as second:
        assert second.stats() == stats and thread_messages(second, "alice:continuous") == messages


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_goes_to_a_terminal_stderr_only(tmp_path, sample_path, capsys, monkeypatch):
    with Store(tmp_path / "quiet.duckdb") as quiet:
        run(quiet, sample_path, "jsonl", progress=True)
    assert capsys.readouterr().err == ""  # stderr is not a terminal here: no 0% bars in logs
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with Store(tmp_path / "loud.duckdb") as loud:
        run(loud, sample_path, "jsonl", progress=True)
    assert capsys.readouterr().out == "" and "ingest" in terminal.getvalue()


# Parquet ----------------------------------------------------------------------------------------
def test_export_then_parquet_import_round_trips(tmp_path, sample_path):
    fields = ("message_id", "seq", "role", "content", "created_at", "day_label", "speaker", "tools_used",
              "metadata", "external_id", "kind")
    with Store(tmp_path / "a.duckdb") as source:
        run(source, write_jsonl(tmp_path / "m.jsonl", [
            {"user_id": "alice", "timezone": "Europe/Paris", "thread_id": "side", "role": "user", "content": "side",
             "external_id": "e1", "metadata": {"k": [1, "v"]}, "created_at": "2024-03-04T00:30:00+01:00"}]), "jsonl")
        run(source, sample_path, "jsonl")
        written = export_thread_parquet(source, "alice", tmp_path / "alice.parquet")
        side = export_thread_parquet(source, "alice", tmp_path / "side.parquet", thread_id="side")
        original = thread_messages(source, "alice:continuous") + thread_messages(source, "side")
    with Store(tmp_path / "b.duckdb") as target:
        report = run(target, tmp_path / "alice.parquet", "parquet")
        run(target, tmp_path / "side.parquet", "parquet")
        copied = thread_messages(target, "alice:continuous") + thread_messages(target, "side")
        assert (written, side, report.inserted) == (76, 1, 76) and target.get_user("alice").timezone == "Europe/Paris"
        assert [tuple(getattr(m, f) for f in fields) for m in copied] == [tuple(getattr(m, f) for f in fields) for m in original]
        assert run(target, tmp_path / "alice.parquet", "parquet").inserted == 0


def test_parquet_bad_row_is_named_and_missing_columns_refused(store, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"user_id": ["u", "u"], "role": ["user", "wizard"], "content": ["a", "b"]}), tmp_path / "r.parquet")
    with pytest.raises(ImportFileError, match="row 2.*wizard"):
        run(store, tmp_path / "r.parquet", "parquet")
    pq.write_table(pa.table({"user_id": ["u"], "text": ["a"]}), tmp_path / "c.parquet")
    with pytest.raises(ImportFileError, match="no column content, role"):
        run(store, tmp_path / "c.parquet", "parquet")
    assert store.stats() == EMPTY


# OpenAI -----------------------------------------------------------------------------------------
def test_openai_example_gives_one_thread_per_conversation(store):
    report = run(store, EXAMPLES / "openai.json", "openai", user_id="carol", timezone="Europe/Berlin")
    assert report.threads == ("carol:openai:conv-weekly-plan", "carol:openai-2") and report.inserted == 5
    plan = thread_messages(store, "carol:openai:conv-weekly-plan")
    assert [m.role for m in plan] == ["system", "user", "assistant"] and all(m.created_at == NOW for m in plan)
    assert "Monday: easy 8 km" in plan[2].content and "Saturday: long run" in plan[2].content
    bread = thread_messages(store, "carol:openai-2")
    assert [m.created_at.timestamp() for m in bread] == [1709800000, 1709800042.5]
    assert store.get_thread("carol:openai-2", user_id="carol").title == "Bread baking"
    assert run(store, EXAMPLES / "openai.json", "openai", user_id="carol").inserted == 0


def test_openai_needs_a_user_and_reads_chatgpt_trees(store, tmp_path):
    with pytest.raises(InvalidInputError, match="user_id"):
        run(store, EXAMPLES / "openai.json", "openai")
    tree = {"id": "t1", "current_node": "c", "mapping": {
        "r": {"message": None, "parent": None},
        "a": {"message": {"id": "a", "author": {"role": "user"}, "content": {"parts": ["question"]}, "create_time": 100},
              "parent": "r"},
        "b": {"message": {"id": "b", "author": {"role": "assistant"}, "content": {"parts": ["old answer"]}}, "parent": "a"},
        "c": {"message": {"id": "c", "author": {"role": "assistant"}, "content": {"parts": ["new answer"]}}, "parent": "i"},
        "i": {"message": {"id": "i", "author": {"role": "user"}, "content": {"parts": [{"type": "image_asset_pointer"}]}},
              "parent": "s"},
        "s": {"message": {"id": "s", "author": {"role": "system"}, "content": {"parts": [""]}}, "parent": "a"}}}
    path = tmp_path / "chatgpt.json"
    path.write_text(json.dumps([tree]), encoding="utf-8")
    report = run(store, path, "openai", user_id="dan")
    messages = thread_messages(store, "dan:openai:t1")
    assert [(m.content, m.created_at.timestamp(), m.external_id) for m in messages] == [
        ("question", 100, "a"), ("new answer", 100, "c")]
    assert report.without_text == 1  # the image alone; the empty system node is the export's, not a message


# Legacy -----------------------------------------------------------------------------------------
def test_legacy_history_becomes_one_migrated_conversation(store):
    report = run(store, EXAMPLES / "legacy.json", "legacy", user_id="erin", timezone="Europe/Paris")
    messages = thread_messages(store, "erin:continuous")
    assert report.inserted == 6 and [m.role for m in messages] == ["user", "assistant"] * 3
    assert messages[3].tools_used == ("calendar.create", "email.send") and messages[2].tools_used == ()
    (conversation,) = store.timeline.conversations("erin:continuous")
    assert conversation.title == MIGRATED_TITLE and conversation.ended_at is not None
    assert (conversation.first_seq, conversation.last_seq) == (1, 6)  # 18 days apart, still one conversation
    assert run(store, EXAMPLES / "legacy.json", "legacy", user_id="erin").inserted == 0
    with pytest.raises(InvalidInputError, match="user_id"):
        run(store, EXAMPLES / "legacy.json", "legacy")


def test_legacy_jsonl_with_a_bad_entry(store, tmp_path):
    rows = [{"timestamp": 1700000000000, "userMessage": "hi", "assistantResponse": "hello", "toolsUsed": [{"name": "t"}]},
            {"timestamp": "not a time", "userMessage": "x", "assistantResponse": "y"}]
    path = write_jsonl(tmp_path / "legacy.jsonl", rows)
    with pytest.raises(ImportFileError, match="line 2.*not a time"):
        run(store, path, "legacy", user_id="f")
    report = run(store, path, "legacy", user_id="f", skip_bad=True)
    messages = thread_messages(store, "f:continuous")
    assert report.skipped == (SkippedRecord("line 2", report.skipped[0].reason),) and len(messages) == 2
    assert messages[0].created_at == datetime.fromtimestamp(1_700_000_000, tz=timezone.utc)
    assert messages[1].tools_used == ("t",)


def test_a_legacy_entry_at_time_0_is_skipped_once_not_dated_1970(store, tmp_path):
    """Exports write 0 for a missing time; an entry's two messages are one record to skip."""
    rows = [{"timestamp": 0, "userMessage": "hi", "assistantResponse": "hello"},
            {"timestamp": 1700000000, "userMessage": "a real one", "assistantResponse": "yes"}]
    path = write_jsonl(tmp_path / "legacy.jsonl", rows)
    with pytest.raises(ImportFileError, match="line 1.*time 0"):
        run(store, path, "legacy", user_id="g")
    report = run(store, path, "legacy", user_id="g", skip_bad=True)
    assert [s.location for s in report.skipped] == ["line 1"] and "missing time" in report.skipped[0].reason
    assert [m.content for m in thread_messages(store, "g:continuous")] == ["a real one", "yes"]


# LoCoMo -----------------------------------------------------------------------------------------
def tiny_locomo(tmp_path: Path, **conversation_extra) -> Path:
    conversation = {
        "speaker_a": "Ann", "speaker_b": "Ben",
        "session_1_date_time": "9:00 am on 3 March, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Morning!"},
                      {"speaker": "Ben", "dia_id": "D1:2", "text": "Look at this", "blip_caption": "a red kite"}],
        "session_2_date_time": "12:10 pm on 3 March, 2023",
        "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "Lunch?"}],
        "session_3_date_time": "8:00 pm on 9 March, 2023",
        **conversation_extra,
    }
    sample = {"sample_id": "conv-x", "conversation": conversation, "qa": [],
              "session_summary": {"session_1_summary": "Ann greets Ben.", "session_2_summary": "Ben asks about lunch."}}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


def test_locomo_sessions_closer_than_the_idle_timeout_stay_two_conversations(store, tmp_path):
    """Session 2 starts 9 minutes after session 1's last turn: its own call, after session 1 ended."""
    report = run(store, tiny_locomo(tmp_path, session_2_date_time="9:10 am on 3 March, 2023"), "locomo", user_id="x")
    assert report.inserted == 3
    conversations = sorted(store.timeline.conversations("conv-x:continuous"), key=lambda c: c.first_seq)
    assert [(c.first_seq, c.last_seq, c.end_reason) for c in conversations] == [(1, 2, "session end"), (3, 3, "session end")]


def test_locomo_sessions_summaries_and_shared_days(store, tmp_path):
    report = run(store, tiny_locomo(tmp_path), "locomo", user_id="ignored")
    assert (report.users, report.inserted, report.summaries) == (("conv-x",), 3, 2)
    messages = thread_messages(store, "conv-x:continuous")
    assert [(m.external_id, m.role, m.speaker) for m in messages] == [
        ("D1:1", "user", "Ann"), ("D1:2", "assistant", "Ben"), ("D2:1", "assistant", "Ben")]
    assert messages[1].content == "Look at this [image: a red kite]"
    assert [m.created_at.strftime("%H:%M") for m in messages] == ["09:00", "09:01", "12:10"]
    summaries = store.timeline.summaries("conv-x:continuous")
    assert [(s.summary_id, s.kind, s.from_seq, s.to_seq, s.message_count) for s in summaries] == [
        ("conv-x:continuous:sum:session:1", "day", 1, 2, 2), ("conv-x:continuous:sum:session:2", "day", 3, 3, 1)]
    (day,) = store.timeline.day_segments("conv-x:continuous")  # session 3 has a date but no turns
    assert day.summary_markdown == "Ann greets Ben.\n\nBen asks about lunch."
    assert len(store.timeline.conversations("conv-x:continuous")) == 2
    assert store.get_user("conv-x").timezone == "UTC" and not store.list_users()[1:]


def test_locomo_bad_date_and_unknown_speaker(store, tmp_path):
    path = tiny_locomo(tmp_path, session_2_date_time="lunchtime")
    with pytest.raises(ImportFileError, match="conv-x session_2_date_time.*1:56 pm on 8 May, 2023"):
        run(store, path, "locomo")
    path = tiny_locomo(tmp_path, session_2=[{"speaker": "Zed", "dia_id": "D2:1", "text": "?"}])
    report = run(store, path, "locomo", skip_bad=True)
    assert [s.location for s in report.skipped] == ["conv-x D2:1"] and report.inserted == 2


@pytest.fixture(scope="module")
def locomo_store(tmp_path_factory):
    if not LOCOMO_DEV.is_file():
        pytest.skip(f"LoCoMo dev file not found at {LOCOMO_DEV} (it lives in the shared data directory)")
    with Store(tmp_path_factory.mktemp("locomo") / "s.duckdb") as store:
        report = run(store, LOCOMO_DEV, "locomo")
        yield store, report


def test_locomo_dev_file_imports_five_users(locomo_store):
    store, report = locomo_store
    samples = load_locomo(LOCOMO_DEV)
    turns = {s["sample_id"]: [t for n in session_numbers(s["conversation"]) for t in s["conversation"][f"session_{n}"]]
             for s in samples}
    assert report.users == ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43") and report.skipped == ()
    assert report.inserted == sum(len(t) for t in turns.values())
    for sample_id, expected in turns.items():
        messages = thread_messages(store, f"{sample_id}:continuous")
        assert [m.external_id for m in messages] == [t["dia_id"] for t in expected]
        assert [m.speaker for m in messages] == [t["speaker"] for t in expected]
        captions = [(m, t) for m, t in zip(messages, expected) if t.get("blip_caption")]
        assert captions and all(m.content.endswith(f"[image: {t['blip_caption']}]") for m, t in captions)


def test_locomo_session_summaries_cover_their_sessions(locomo_store):
    store, report = locomo_store
    sample = load_locomo(LOCOMO_DEV)[0]
    thread_id = f"{sample['sample_id']}:continuous"
    messages = {m.seq: m for m in thread_messages(store, thread_id)}
    summaries = store.timeline.summaries(thread_id, kinds=["day"])
    assert len(summaries) == len(session_numbers(sample["conversation"])) == 19
    for summary in summaries:
        number = int(summary.summary_id.rsplit(":", 1)[1])
        covered = [messages[s] for s in range(summary.from_seq, summary.to_seq + 1)]
        assert {m.metadata["session"] for m in covered} == {number}
        assert summary.message_count == len(sample["conversation"][f"session_{number}"]) == len(covered)
        assert summary.markdown == sample["session_summary"][f"session_{number}_summary"]
        segment = store.timeline.get_day_segment(covered[0].day_segment_id, user_id=sample["sample_id"])
        assert summary.markdown in segment.summary_markdown and summary.day_label == segment.day_label
    assert report.summaries == sum(len(store.timeline.summaries(f"{u}:continuous")) for u in report.users)


def test_locomo_dev_reimport_is_a_noop(locomo_store):
    store, _ = locomo_store
    before = store.stats()
    again = run(store, LOCOMO_DEV, "locomo")
    assert (again.inserted, again.summaries) == (0, 0) and store.stats() == before


def test_repair_evidence_fixes_or_drops_malformed_ids():
    clean, notes = repair_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "D", "D1:3", "D1:3", "D0:2"])
    assert clean == ["D8:6", "D9:17", "D11:26", "D30:5", "D1:3"]
    assert Counter(n.split()[0] for n in notes) == Counter({"split": 1, "repaired": 2, "dropped": 2})
    assert any("'D'" in n for n in notes) and repair_evidence(["D2:4"]) == (["D2:4"], [])


@pytest.mark.parametrize(("text", "expected"), [
    ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)),
    ("12:48 am on 1 February, 2023", datetime(2023, 2, 1, 0, 48, tzinfo=timezone.utc)),
    ("12:05 pm on 30 Dec, 2022", datetime(2022, 12, 30, 12, 5, tzinfo=timezone.utc)),
    ("10:37 AM on 27 June 2023", datetime(2023, 6, 27, 10, 37, tzinfo=timezone.utc)),
])
def test_locomo_date_parser(text, expected):
    assert parse_locomo_datetime(text) == expected


@pytest.mark.parametrize("text", ["13:00 pm on 8 May, 2023", "1:56 pm on 31 February, 2023", "8 May 2023", "", None,
                                  "1:56 pm on 8 Mayo, 2023"])
def test_locomo_date_parser_refuses_bad_dates(text):
    with pytest.raises(InvalidInputError, match="1:56 pm on 8 May, 2023|not a real date"):
        parse_locomo_datetime(text)


def test_a_chat_export_of_many_short_conversations_is_stored_in_statements_of_many_threads(tmp_path: Path) -> None:
    """A ChatGPT export holds one thread per conversation: their threads are made, their records
    checked and appended together (thread by thread: ~17 statements each), every thread as it
    would be alone."""
    export = chat_export(60, 4, datetime(2024, 3, 4, 9, tzinfo=timezone.utc))
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    with ConversationEngine(tmp_path / "home", settings=Settings(summarizer="none"), embedder=None) as engine:
        statements = StatementCount(engine)
        report = engine.import_file(path, fmt="openai", user_id="u")
        assert (report.inserted, len(report.threads)) == (240, 60)
        assert statements.count <= 30, statements.count
        for thread in engine.store.threads_of("u")[::7]:
            number = int(thread.thread_id.rsplit(":c", 1)[1])  # u:openai:c<number>
            turns = engine.store.messages_in_range(thread.thread_id, 1)
            assert [m.content for m in turns] == [m["content"] for m in export[number]["messages"]]
            assert [(c.first_seq, c.last_seq) for c in engine.store.timeline.conversations(thread.thread_id)] == [(1, 4)]
            assert engine.store.thread_tail(thread.thread_id) == (4, turns[-1].created_at.replace(tzinfo=None))
        for check in ("store_seq_order", "store_thread_tail", "store_orphan_turn", "store_day_bounds",
                      "store_conversation_bounds"):
            assert engine.store.checks.problems(check) == [], check
