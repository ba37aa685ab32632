"""What a server meets when requests overlap (found by a concurrency audit): the background step
takes one user's writer lock at a time, so a long write of one user (a reindex, an import's refresh)
never holds another user's writes up; reads that take two statements survive a write between them;
two requests adding the same new user both get it. Real DuckDB file, lexical only."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from datetime import datetime, timezone
from pathlib import Path

import pytest

from engine.api import ConversationEngine
from engine.errors import StorageFullError, StoreBusyError, UnknownUserError
from engine.summaries.retries import SummaryJob

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)


def test_a_background_step_never_makes_one_user_wait_for_another(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        for user in ("big", "small"):
            engine.add_user(user)
        engine.summaries.retries.failed(SummaryJob("big", "day", "big:continuous:day:2024-06-01", "big:continuous"),
                                        "the LLM was down")
        engine.summaries.retries.clock = lambda: float("inf")  # due now
        holding, release = threading.Event(), threading.Event()

        def long_write() -> None:  # a reindex of "big", say
            with engine.locks.user("big"):
                holding.set()
                release.wait(30)

        writer = threading.Thread(target=long_write)
        writer.start()
        assert holding.wait(10)
        step = threading.Thread(target=engine.maintain)  # waits for big's lock for big's retry
        step.start()
        small = threading.Thread(target=lambda: engine.ingest("small", [{"role": "user", "content": "still here"}]))
        small.start()
        small.join(10)
        done = not small.is_alive()
        release.set()
        for thread in (writer, step, small):
            thread.join(30)
        assert done, "small's ingest waited for big's long write (through the background step's lock)"
        assert engine.substring_search("small", "still here")



def test_a_summary_dropped_between_two_reads_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("u")
        start = NOW - timedelta(days=3)
        engine.ingest("u", [{"role": "user", "content": f"We decided to ship release {k}.",
                             "created_at": (start + timedelta(hours=k)).isoformat()} for k in range(12)])
        engine.finalize_days("u")
        read = engine.store.history.summary_turn_stats
        assert len(read("u:continuous")) >= 2
        # as if a deletion dropped the first summary after the summaries were listed
        monkeypatch.setattr(engine.store.history, "summary_turn_stats", lambda t: dict(list(read(t).items())[1:]))
        context = engine.conversation_context("u", 40)  # was KeyError: a 500 over HTTP
        assert context.summaries or context.turns
        assert engine.turns_since("u", start.isoformat()).messages


def test_two_requests_adding_the_same_new_user_both_get_it(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        for round_ in range(20):
            gate = threading.Barrier(6)
            got: list[object] = []

            def add(user: str = f"user-{round_}") -> None:
                gate.wait()
                try:
                    got.append(engine.add_user(user, "Europe/Paris").user_id)
                except Exception as exc:  # noqa: BLE001 - any failure is the finding
                    got.append(exc)

            threads = [threading.Thread(target=add) for _ in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert got == [f"user-{round_}"] * 6, got


def _writes_beside(engine: ConversationEngine, importer: threading.Thread,
                   release: threading.Event) -> tuple[bool, bool]:
    """A write of "small" and one of "big" while the import of "big" is held: whether small's was done
    within 10 s and big's still waiting after 0.5 s. Then the import goes on and all three end."""
    small = threading.Thread(target=lambda: engine.ingest("small", [{"role": "user", "content": "still here"}]))
    big = threading.Thread(target=lambda: engine.ingest("big", [{"role": "user", "content": "after the import"}]))
    small.start()
    big.start()
    small.join(10)
    big.join(0.5)
    small_done, big_waited = not small.is_alive(), big.is_alive()
    release.set()
    for thread in (importer, small, big):
        thread.join(30)
    return small_done, big_waited


def test_an_import_holds_other_users_writes_up_for_its_store_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import took every user's writer lock to its end: its summaries and index of one user
    (8-34 s at 100k) held every other user's writes up. After its store, it holds its own users' only."""
    source = tmp_path / "big.jsonl"
    source.write_text("".join(json.dumps({"role": "user" if i % 2 else "assistant", "content": f"imported line {i}",
                                          "created_at": (NOW - timedelta(days=3, minutes=i)).isoformat()}) + "\n"
                              for i in range(40, 0, -1)), encoding="utf-8")
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("small")
        inside, release = threading.Event(), threading.Event()
        close_days = engine.summaries.backfill.close_days

        def slow_close(user: str, *args: object, **kwargs: object) -> object:  # big's summaries take a while
            if user == "big":
                inside.set()
                release.wait(30)
            return close_days(user, *args, **kwargs)

        monkeypatch.setattr(engine.summaries.backfill, "close_days", slow_close)
        reports: list[object] = []
        importer = threading.Thread(target=lambda: reports.append(engine.import_file(source, fmt="jsonl", user_id="big")))
        importer.start()
        assert inside.wait(10)
        small_done, big_waited = _writes_beside(engine, importer, release)
        assert small_done, "small's ingest waited for big's import"
        assert big_waited, "big's own write did not wait for its import's summaries"
        assert len(reports) == 1 and engine.substring_search("small", "still here")
        assert len(engine.substring_search("big", "imported line")) == 40


def test_two_deletions_of_the_same_messages_report_them_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each report lists what that call deleted: the second finds nothing, not the ids it then did not delete."""
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("u")
        engine.ingest("u", [{"role": "user", "content": f"line {i}", "message_id": f"m{i}",
                             "created_at": (NOW - timedelta(hours=1, minutes=-i)).isoformat()} for i in range(4)])
        inside, release = threading.Event(), threading.Event()
        delete = engine.deleter.delete_messages

        def held(user_id: str, ids: list[str]) -> int:  # the first deletion is held inside
            if not inside.is_set():
                inside.set()
                release.wait(30)
            return delete(user_id, ids)

        monkeypatch.setattr(engine.deleter, "delete_messages", held)
        reports: list[dict] = []
        calls = [threading.Thread(target=lambda: reports.append(engine.delete("u", message_ids=["m1", "m2"])))
                 for _ in range(2)]
        calls[0].start()
        assert inside.wait(10)
        calls[1].start()
        calls[1].join(0.3)
        release.set()
        for call in calls:
            call.join(30)
        assert sorted((r["messages_deleted"], r["message_ids"], r["not_found"]) for r in reports) == [
            (0, [], ["m1", "m2"]), (2, ["m1", "m2"], [])]


def test_an_import_settles_every_user_when_one_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure settling one of an import's users (its summaries, say, on a full disk) stopped the
    users after it, whose summaries then waited for the scheduled close. Each is settled; the failure
    is raised after them, and every message stays stored."""
    source = tmp_path / "two.jsonl"
    source.write_text("".join(json.dumps({"user_id": user, "role": "user" if i % 2 else "assistant",
                                          "content": f"{user} imported line {i}",
                                          "created_at": (NOW - timedelta(days=3, minutes=-i)).isoformat()}) + "\n"
                              for user in ("first", "second") for i in range(6)), encoding="utf-8")
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        close_days = engine.summaries.backfill.close_days

        def full_for_first(user: str, *args: object, **kwargs: object) -> object:
            if user == "first":
                raise StorageFullError("no space left on the device")
            return close_days(user, *args, **kwargs)

        monkeypatch.setattr(engine.summaries.backfill, "close_days", full_for_first)
        with pytest.raises(StorageFullError):
            engine.import_file(source, fmt="jsonl")
        assert [len(engine.substring_search(user, "imported line")) for user in ("first", "second")] == [6, 6]
        assert [[day.has_summary for day in engine.list_days(user)] for user in ("first", "second")] == [[False], [True]]


def test_reads_go_on_while_an_import_stores_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import stores its file in one transaction (~36 s at 1M messages), and every read of every
    user waited behind it (6.6 s for a context read during a 100k import). A read outside that
    transaction now runs beside it, and sees what was committed: not the import's rows until it ends."""
    source = tmp_path / "big.jsonl"
    source.write_text("".join(json.dumps({"role": "user", "content": f"imported line {i}",
                                          "created_at": (NOW - timedelta(days=3, minutes=-i)).isoformat()}) + "\n"
                              for i in range(40)), encoding="utf-8")
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("big")
        engine.add_user("small")
        engine.ingest("small", [{"role": "user", "content": "a line of small's"}])
        inside, release = threading.Event(), threading.Event()

        def held(messages: object) -> None:  # told inside the import's transaction, which then waits
            inside.set()
            release.wait(30)

        monkeypatch.setattr(engine.ingestor, "on_stored", held)
        importer = threading.Thread(target=lambda: engine.import_file(source, fmt="jsonl", user_id="big"))
        importer.start()
        assert inside.wait(10)
        seen: dict[str, object] = {}
        reader = threading.Thread(target=lambda: seen.update(
            days=len(engine.list_days("small")), turns=len(engine.conversation_context("small").turns),
            big=len(engine.substring_search("big", "imported line"))))
        reader.start()
        reader.join(10)
        done_while_held = not reader.is_alive()
        release.set()
        importer.join(30)
        reader.join(30)
        assert done_while_held, "a read waited for another user's import"
        assert seen == {"days": 1, "turns": 1, "big": 0}  # committed rows only
        assert len(engine.substring_search("big", "imported line")) == 40


def _held_import(engine: ConversationEngine, source: Path, monkeypatch: pytest.MonkeyPatch,
                 outcome: list[object]) -> tuple[threading.Thread, threading.Event]:
    """An import of `source` for "big", held inside its transaction once its rows are stored."""
    inside, release = threading.Event(), threading.Event()
    told = engine.ingestor.on_stored

    def held(messages: object) -> None:  # the Ingestor tells every writer's stores here: hold the import's
        if threading.current_thread() is importer:
            inside.set()
            release.wait(30)
        told(messages)

    monkeypatch.setattr(engine.ingestor, "on_stored", held)

    def run() -> None:
        try:
            outcome.append(engine.import_file(source, fmt="jsonl", user_id="big"))
        except Exception as exc:  # noqa: BLE001 - the test reads it
            outcome.append(exc)

    importer = threading.Thread(target=run)
    importer.start()
    assert inside.wait(10)
    return importer, release


def _lines(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"role": "user", "content": f"imported line {i}",
                                        "created_at": (NOW - timedelta(days=3, minutes=-i)).isoformat()}) + "\n"
                            for i in range(count)), encoding="utf-8")
    return path


def test_other_users_write_while_an_import_stores_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import's transaction (3-5 s at 100k messages, 53 s at 1M, measured) held every other user's writes
    up. It now runs on a connection of its own, under its users' locks only: another user's write
    goes through meanwhile, the import's own user's waits, and both land with the import."""
    source = _lines(tmp_path / "big.jsonl", 40)
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("small")
        outcome: list[object] = []
        importer, release = _held_import(engine, source, monkeypatch, outcome)
        small_done, big_waited = _writes_beside(engine, importer, release)
        assert small_done, "another user's write waited for the import's transaction"
        assert big_waited, "the import's own user's write did not wait for it"
        assert [type(o).__name__ for o in outcome] == ["ImportReport"]
        assert engine.substring_search("small", "still here")
        assert len(engine.substring_search("big", "imported line")) == 40
        assert engine.substring_search("big", "after the import")


def test_an_import_whose_message_id_another_user_took_meanwhile_stores_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Message ids are unique across the store: the write that commits first keeps the id, and the
    import beside it fails whole with an error that says to run it again (which then names the id)."""
    source = tmp_path / "big.jsonl"
    source.write_text(json.dumps({"role": "user", "content": "imported line", "message_id": "shared",
                                  "created_at": (NOW - timedelta(days=3)).isoformat()}) + "\n", encoding="utf-8")
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("small")
        outcome: list[object] = []
        importer, release = _held_import(engine, source, monkeypatch, outcome)
        engine.ingest("small", [{"role": "user", "content": "small's line", "message_id": "shared"}])
        release.set()
        importer.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], StoreBusyError), outcome
        assert "run it again" in outcome[0].message
        assert engine.get("small", message_id="shared").content == "small's line"
        with pytest.raises(UnknownUserError):  # the import created "big": rolled back with it
            engine.ingest("big", [{"role": "user", "content": "hello"}])
