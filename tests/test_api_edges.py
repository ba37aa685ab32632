"""What a developer calling the Python API gets at its edges: refusals that keep what is stored,
one engine per store in a process, a closed engine, and notices that say why nothing matched.
A real store in tmp_path, lexical only (fast)."""

from __future__ import annotations

import math
from datetime import date
from pathlib import Path
from typing import Iterator

import pytest

from engine.api import ConversationEngine
from engine.errors import (EngineClosedError, InvalidInputError, StoreLockedError, UnknownThreadError,
                           UnknownTimezoneError, UnknownUserError)

MESSAGES = [{"message_id": i, "role": "user", "content": f"note {i} about papaya", "created_at": f"2024-06-02T10:0{n}"}
            for n, i in enumerate(["a", "b", "ab"])]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[ConversationEngine]:
    with ConversationEngine(tmp_path / "home", embedder=None) as e:
        e.add_user("u", "Europe/Paris")
        e.ingest("u", MESSAGES)
        yield e


def ids_of_day(engine: ConversationEngine) -> list[str]:
    return sorted(e.message.message_id for e in engine.day_timeline("u", "2024-06-02").entries)


@pytest.mark.parametrize("call", ["delete", "delete_messages"])
def test_a_bare_string_of_ids_is_refused_and_deletes_nothing(engine: ConversationEngine, call: str) -> None:
    with pytest.raises(InvalidInputError, match=r"list of message id strings, like \['m1', 'm2'\]"):
        getattr(engine, call)("u", message_ids="ab")
    assert ids_of_day(engine) == ["a", "ab", "b"]
    assert engine.delete("u", message_ids=["ab"])["messages_deleted"] == 1 and ids_of_day(engine) == ["a", "b"]


def test_a_second_engine_on_the_same_store_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    first = ConversationEngine(tmp_path / "home", embedder=None)
    with pytest.raises(StoreLockedError, match="already open in this process"):
        ConversationEngine(tmp_path / "home", embedder=None)
    first.close()
    with ConversationEngine(tmp_path / "home", embedder=None) as again:
        assert again.users() == []


def test_a_closed_engine_says_so(tmp_path: Path) -> None:
    engine = ConversationEngine(tmp_path / "home", embedder=None)
    engine.add_user("u")
    engine.close()
    for call in (lambda: engine.get("u", message_id="a"), lambda: engine.search("u", "papaya"),
                 lambda: engine.ingest("u", [{"role": "user", "content": "late"}])):
        with pytest.raises(EngineClosedError, match="this engine is closed"):
            call()
    engine.close()  # closing twice is harmless


def test_a_day_is_a_date_or_its_iso_text(engine: ConversationEngine) -> None:
    assert ids_of_day(engine) == sorted(e.message.message_id for e in engine.day_timeline("u", date(2024, 6, 2)).entries)
    assert ids_of_day(engine) == ["a", "ab", "b"]
    with pytest.raises(InvalidInputError, match="use YYYY-MM-DD"):
        engine.day_timeline("u", "June 2nd")


def test_bad_arguments_are_refused(engine: ConversationEngine) -> None:
    with pytest.raises(InvalidInputError, match="fusion must be weighted or rrf"):
        engine.search("u", "papaya", fusion="max")
    with pytest.raises(UnknownTimezoneError):
        engine.add_user("v", "")
    assert "v" not in engine.users()


@pytest.mark.parametrize("field,value,message", [
    ("metadata", {"obj": object()}, "metadata must hold JSON values only"),
    ("metadata", {"x": math.nan}, "metadata must hold JSON values only"),
    ("speaker", "Ann\x00", "speaker holds a NUL character"),
])
def test_a_message_that_could_not_come_back_as_sent_is_refused(engine: ConversationEngine, field: str, value: object,
                                                               message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        engine.ingest("u", [{"role": "user", "content": "hello", field: value}])
    assert len(ids_of_day(engine)) == 3


@pytest.mark.parametrize("query", ["🚀", "C++", "the"])
def test_a_query_without_a_searchable_word_says_so(engine: ConversationEngine, query: str) -> None:
    response = engine.search("u", query)
    assert response.results == () and response.notice is not None
    assert "no word of the query can be matched by keyword" in response.notice and "substring" in response.notice
    assert "no word of the query" not in (engine.search("u", "papaya").notice or "")


def test_not_found_errors_name_what_to_call(engine: ConversationEngine) -> None:
    with pytest.raises(UnknownUserError, match="add_user"):
        engine.search("nobody", "papaya")
    with pytest.raises(UnknownThreadError, match="list_threads"):
        engine.substring_search("u", "papaya", thread_id="nope")


def test_a_live_ingest_cannot_name_another_users_thread(engine: ConversationEngine) -> None:
    engine.add_user("mallory")
    with pytest.raises(UnknownThreadError):
        engine.ingest("mallory", [{"role": "user", "content": "planted"}], thread_id="u:continuous")
    assert ids_of_day(engine) == ["a", "ab", "b"]


def test_an_offset_past_a_messages_end_is_refused(engine: ConversationEngine) -> None:
    text = engine.get("u", message_id="a")
    assert not isinstance(text, list) and hasattr(text, "content_chars")
    with pytest.raises(InvalidInputError, match=r"offset 500 is past the end of message 'a' \(\d+ characters\)"):
        engine.get("u", message_id="a", offset=500)
    page = engine.get("u", message_id="a", offset=5)
    assert getattr(page, "content") == MESSAGES[0]["content"][5:]


HUGE = 10**5000  # str() of an int past 4,300 digits raises ValueError: an echo of it must not


@pytest.mark.parametrize("call", [
    lambda e, n: e.get("u", message_id="a", offset=n),
    lambda e, n: e.messages_range("u", 1, n),
    lambda e, n: e.turns_since("u", "2024-06-01", from_seq=n),
    lambda e, n: e.search("u", "papaya", limit=n),
    lambda e, n: e.turns_around("u", "2024-06-02T10:00", count=n),
])
@pytest.mark.parametrize("number", [HUGE, -HUGE], ids=["huge", "huge_negative"])
def test_a_number_too_large_to_print_is_refused_with_its_size(engine: ConversationEngine, call, number: int) -> None:
    with pytest.raises(InvalidInputError, match="a number of about 5001 digits"):
        call(engine, number)


@pytest.mark.parametrize("seq", [0, -1, -HUGE, 2**63], ids=["0", "-1", "huge_negative", "2**63"])
def test_every_seq_out_of_range_says_the_same(engine: ConversationEngine, seq: int) -> None:
    with pytest.raises(InvalidInputError, match=r"start_seq: seqs start at 1 \(a thread's first message\) and are at most"):
        engine.messages_range("u", seq, 2)
