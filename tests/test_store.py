"""The store on a real DuckDB file: users, threads, messages, reopening, isolation, bad input."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from engine.store.db import INLINE_VALUES, SCHEMA_VERSION, Database, in_values
from engine.errors import (
    EngineClosedError,
    InvalidInputError,
    StoreLockedError,
    UnknownMessageError,
    UnknownThreadError,
    UnknownTimezoneError,
    UnknownUserError,
)
from engine.store.ingest import Ingestor
from engine.models import NewMessage
from engine.store.core import Store

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


def _msgs(n: int, start: datetime = T0, step: timedelta = timedelta(minutes=1), prefix: str = "m") -> list[NewMessage]:
    return [NewMessage("user" if i % 2 == 0 else "assistant", f"{prefix} number {i}", start + i * step,
                       message_id=f"{prefix}-{i}") for i in range(n)]


def test_everything_survives_close_and_reopen(tmp_path):
    path = tmp_path / "store.duckdb"
    with Store(path) as store:
        store.ensure_user("alice", "Europe/Paris")
        Ingestor(store, idle_timeout=timedelta(minutes=30)).add_messages("alice", _msgs(5))
        before = store.stats()
    with Store(path) as store:
        assert store.stats() == before
        assert before["messages"] == 5 and before["users"] == 1
        assert [m.content for m in store.messages_in_range("alice:continuous", 1)] == [f"m number {i}" for i in range(5)]
        assert store.db.schema_version() == SCHEMA_VERSION


def test_migrations_are_applied_once(tmp_path):
    path = tmp_path / "s.duckdb"
    Database(path).close()
    db = Database(path)
    assert db.execute("SELECT count(*) FROM schema_version")[0][0] == SCHEMA_VERSION
    db.close()


def test_release_buffers_drops_the_blocks_a_whole_table_read_left_cached(tmp_path):
    path = tmp_path / "s.duckdb"
    db = Database(path)
    db.execute("CREATE TABLE big AS SELECT range AS i, md5(range::VARCHAR) || md5((-range)::VARCHAR) AS s FROM range(400000)")
    db.close()  # on disk: blocks the buffer pool caches when they are read
    db = Database(path)
    cached = "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE tag = 'BASE_TABLE'"
    limit = db.execute("SELECT current_setting('memory_limit')")
    assert db.execute("SELECT count(DISTINCT s) FROM big")[0][0] == 400000
    before = db.execute(cached)[0][0]
    db.release_buffers()
    assert before > 8 * 2**20 and db.execute(cached)[0][0] < before / 10
    assert db.execute("SELECT current_setting('memory_limit')") == limit  # back to what it was
    assert db.execute("SELECT count(*) FROM big")[0][0] == 400000
    db.close()
    memory = Database(":memory:")  # there the blocks are the data: nothing is dropped (or spilled)
    memory.execute("CREATE TABLE big AS SELECT md5(range::VARCHAR) AS s FROM range(400000)")
    held = "SELECT sum(memory_usage_bytes) FROM duckdb_memory() WHERE tag = 'IN_MEMORY_TABLE'"
    before = memory.execute(held)[0][0]
    memory.release_buffers()
    assert before > 8 * 2**20 and memory.execute(held)[0][0] == before
    memory.close()


def test_reads_beside_a_transaction_see_committed_rows_and_wait_while_buffers_are_released(tmp_path):
    """A read that finds another thread's transaction open runs on a cursor of its own, beside it:
    it sees the committed rows without waiting, while the writer's thread sees its own writes.
    While `release_buffers` lowers the memory limit (a read then fails: "failed to pin block"),
    those reads wait."""
    db = Database(tmp_path / "s.duckdb")
    db.execute("CREATE TABLE t AS SELECT range AS i FROM range(10)")
    count = "SELECT count(*) FROM t"
    opened, release = threading.Event(), threading.Event()

    def writer() -> None:
        with db.transaction():
            db.execute("INSERT INTO t VALUES (99)")
            assert db.execute(count)[0][0] == 11  # its own write
            opened.set()
            release.wait(30)

    held = threading.Thread(target=writer)
    held.start()
    assert opened.wait(10)
    assert db.execute(count)[0][0] == 10  # beside the open transaction: committed rows only
    done = threading.Event()
    with db.reads_held_off():
        reader = threading.Thread(target=lambda: (db.execute(count), done.set()))
        reader.start()
        assert not done.wait(0.3)
    assert done.wait(10)
    release.set()
    held.join(10)
    assert db.execute(count)[0][0] == 11
    db.close()
    with pytest.raises(EngineClosedError):
        db.execute(count)


def test_unknown_ids_and_zones_get_clear_errors(tmp_path):
    with Store(tmp_path / "s.duckdb") as store:
        with pytest.raises(UnknownUserError, match="add_user"):
            store.get_user("nobody")
        with pytest.raises(UnknownTimezoneError, match="IANA"):
            store.ensure_user("x", "Mars/Olympus")
        assert store.stats()["users"] == 0
        store.ensure_user("alice")
        with pytest.raises(UnknownThreadError):
            store.get_thread("nope")
        with pytest.raises(UnknownMessageError):
            store.get_message("nope")
        with pytest.raises(InvalidInputError):
            store.ensure_user("")


def test_other_users_ids_look_unknown(tmp_path):
    with Store(tmp_path / "s.duckdb") as store:
        ingestor = Ingestor(store, idle_timeout=timedelta(minutes=30))
        for user in ("alice", "bob"):
            store.ensure_user(user)
            ingestor.add_messages(user, _msgs(2, prefix=user))
        with pytest.raises(UnknownMessageError):
            store.get_message("bob-0", user_id="alice")
        with pytest.raises(UnknownThreadError):
            store.get_thread("bob:continuous", user_id="alice")
        assert store.messages_by_ids(["bob-0", "alice-0"], user_id="alice")[0].message_id == "alice-0"
        assert len(store.messages_by_ids(["bob-0", "alice-0"], user_id="alice")) == 1


def test_substring_search_is_literal(tmp_path):
    with Store(tmp_path / "s.duckdb") as store:
        store.ensure_user("u")
        Ingestor(store, idle_timeout=timedelta(minutes=30)).add_messages("u", [
            NewMessage("user", "100% sure it's a_b", T0), NewMessage("user", "1000 sure", T0),
        ])
        found = store.substring_search("u:continuous", "0% SURE IT'S A_B")
        assert [m.seq for m in found] == [1]


@pytest.mark.process
def test_second_writer_process_gets_a_clear_error(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "s.duckdb"
    with Store(path):
        code = (
            "import sys\nfrom engine.store.core import Store\nfrom engine.errors import StoreLockedError\n"
            f"try:\n    Store({str(path)!r})\nexcept StoreLockedError as e:\n    print('LOCKED', e)\n    sys.exit(3)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "another process" in done.stdout
    assert StoreLockedError.http_status == 423


def test_thread_tail_finds_the_last_time_when_the_latest_seqs_are_gone(tmp_path):
    """The tail's time is looked for among the latest seqs first; with those deleted it is still found."""
    from engine.store.core import TAIL_PROBE

    with Store(tmp_path / "store.duckdb") as store:
        store.ensure_user("alice", "UTC")
        Ingestor(store, idle_timeout=timedelta(minutes=30)).add_messages("alice", _msgs(TAIL_PROBE + 40))
        def at(i: int) -> datetime:  # message i's time as the store hands it back (naive UTC)
            return (T0 + i * timedelta(minutes=1)).replace(tzinfo=None)

        assert store.thread_tail("alice:continuous") == (TAIL_PROBE + 40, at(TAIL_PROBE + 39))
        store.db.execute("DELETE FROM messages WHERE seq > 7")  # the last TAIL_PROBE + 33 messages
        assert store.thread_tail("alice:continuous") == (TAIL_PROBE + 40, at(6))
        store.db.execute("DELETE FROM messages")
        assert store.thread_tail("alice:continuous") == (TAIL_PROBE + 40, None)


@pytest.mark.parametrize("small_rows", [0, 8], ids=["arrow", "values"])
def test_insert_or_ignore_keeps_stored_rows_inside_and_outside_a_transaction(tmp_path, monkeypatch, small_rows):
    """A batch holding a key already stored: its new rows go in, the stored row keeps its value, and
    a transaction around it stays usable (the plain insert tried first must not abort it); through a
    registered Arrow table and as a VALUES statement alike."""
    import pyarrow as pa

    import engine.store.db as db_module

    monkeypatch.setattr(db_module, "SMALL_INSERT_ROWS", small_rows)
    db = Database(tmp_path / "store.duckdb")
    db.execute("INSERT INTO users VALUES ('kept', 'UTC', TIMESTAMP '2024-01-01')")
    clash = pa.table({"user_id": ["kept", "new-1"], "timezone": ["Europe/Paris", "UTC"],
                      "created_at": [datetime(2025, 1, 1)] * 2})
    db.insert_arrow("users", clash, or_ignore=True)
    with db.transaction():
        db.insert_arrow("users", clash.set_column(0, "user_id", pa.array(["kept", "new-2"])), or_ignore=True)
        db.execute("INSERT INTO users VALUES ('after', 'UTC', TIMESTAMP '2024-01-01')")
    assert db.execute("SELECT user_id, timezone FROM users ORDER BY user_id") == [
        ("after", "UTC"), ("kept", "UTC"), ("new-1", "UTC"), ("new-2", "UTC")]
    with pytest.raises(Exception, match="(?i)duplicate|constraint"):
        db.insert_arrow("users", clash)
    db.close()


def test_last_seqs_gives_each_thread_its_highest_seq_ever_given(tmp_path):
    """One query for every thread of a user, in threads_of's order, equal to thread_tail's seq
    (a deleted last message keeps its seq given; another user's threads are not listed)."""
    with Store(tmp_path / "store.duckdb") as store:
        for user in ("alice", "bob"):
            store.ensure_user(user, "UTC")
        ingest = Ingestor(store, idle_timeout=timedelta(minutes=30))
        ingest.add_messages("alice", _msgs(5))
        store.ensure_thread("alice", "side-project")
        ingest.add_messages("alice", _msgs(3, prefix="s"), thread_id="side-project")
        ingest.add_messages("bob", _msgs(2, prefix="b"))
        store.db.execute("DELETE FROM messages WHERE message_id = 'm-4'")
        seqs = store.last_seqs("alice")
        assert list(seqs) == [t.thread_id for t in store.threads_of("alice")]
        assert seqs == {t.thread_id: store.thread_tail(t.thread_id)[0] for t in store.threads_of("alice")}
        assert seqs == {"alice:continuous": 5, "side-project": 3}


def test_a_few_rows_are_stored_as_a_large_batch_stores_them(tmp_path, monkeypatch):
    """Small inserts are VALUES statements, large ones Arrow tables: every column of what they store
    is the same (times, days, lists, empty lists, NULLs, JSON, non-ASCII text, float32 vectors)."""
    import numpy as np

    import engine.store.db as db_module

    messages = [
        NewMessage("user", "Zoë écrit: 「テスト」 ✓", T0, message_id="a", speaker="Zoë", tools_used=("grep", "ls"),
                   metadata={"k": [1, "ü"]}, external_id="ext-1"),
        NewMessage("assistant", "plain", T0 + timedelta(hours=20), message_id="b"),
        NewMessage("user", "later\nline two", T0 + timedelta(days=3), message_id="c", tools_used=()),
    ]
    vectors = np.random.default_rng(7).standard_normal((3, 384)).astype(np.float32)
    tables = {}
    for name, small_rows in (("values", 8), ("arrow", 0)):
        monkeypatch.setattr(db_module, "SMALL_INSERT_ROWS", small_rows)
        with Store(tmp_path / f"{name}.duckdb") as store:
            store.ensure_user("alice", "Asia/Tokyo")
            Ingestor(store, idle_timeout=timedelta(minutes=30)).add_messages("alice", messages)
            store.embedding_cache("m").put("alice", ["h1", "h2", "h3"], vectors)
            tables[name] = {table: store.db.execute(f"SELECT * {exclude} FROM {table} ORDER BY ALL")
                            for table, exclude in (("messages", ""), ("conversations", ""), ("embedding_cache", ""),
                                                   ("day_segments", "EXCLUDE (updated_at)"))}  # the clock's
            cached = store.embedding_cache("m").get("alice", ["h1", "h2", "h3"])
            assert all(np.array_equal(cached[h], v) for h, v in zip(["h1", "h2", "h3"], vectors))
    assert tables["values"] == tables["arrow"]
    assert len(tables["values"]["messages"]) == 3 and len(tables["values"]["day_segments"]) == 3


@pytest.mark.parametrize("size", [0, 1, INLINE_VALUES, INLINE_VALUES + 1, 40])
def test_in_values_selects_the_listed_rows_written_inline_or_as_one_list(size: int) -> None:
    db = Database(":memory:")
    db.execute("CREATE TABLE t (id VARCHAR)")
    db.execute("INSERT INTO t SELECT 'id' || i FROM range(100) r(i)")
    wanted = [f"id{i}" for i in range(0, 2 * size, 2)] + ["missing"] * (size > 0)
    among, values = in_values("id", wanted)
    assert sorted(r[0] for r in db.execute(f"SELECT id FROM t WHERE {among}", values)) == sorted(
        w for w in wanted if w != "missing")
    assert ("unnest" in among) == (len(wanted) > INLINE_VALUES)


def test_existing_message_ids_asks_in_statements_of_a_bounded_size(tmp_path, monkeypatch):
    """A million ids in one list held the GIL 0.67 s while DuckDB took it in, and every other
    thread's statement waited: the ids go a bounded number a statement, with the same answer."""
    import engine.store.core as core_module

    with Store(tmp_path / "store.duckdb") as store:
        for user in ("alice", "bob"):
            store.ensure_user(user, "UTC")
        ingest = Ingestor(store, idle_timeout=timedelta(minutes=30))
        ingest.add_messages("alice", _msgs(7))
        ingest.add_messages("bob", _msgs(4, prefix="b"))
        asked = [f"m-{i}" for i in range(10)] + [f"b-{i}" for i in range(6)] + ["nobody"]
        whole = store.existing_message_ids(asked)
        statements: list[str] = []
        execute = store.db.execute
        monkeypatch.setattr(store.db, "execute", lambda sql, params=None: statements.append(sql) or execute(sql, params))
        monkeypatch.setattr(core_module, "IDS_A_STATEMENT", 3)
        assert store.existing_message_ids(asked) == whole == {**{f"m-{i}": "alice" for i in range(7)},
                                                              **{f"b-{i}": "bob" for i in range(4)}}
        assert len(statements) == 6  # 17 ids, 3 a statement
