"""Navigation on a real DuckDB file: by id, by time, by seq, by literal text, and context windows."""

from __future__ import annotations

import itertools
from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from engine.errors import (
    InvalidInputError,
    InvalidTimestampError,
    UnknownDaySegmentError,
    UnknownMessageError,
    UnknownThreadError,
    UnknownUserError,
)
from engine.store.ingest import Ingestor
from engine.models import NewMessage, Summary, day_segment_id
from engine.query.navigation import MAX_LIMIT, Navigator
from engine.store.core import Store

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)
ALICE = "alice:continuous"


def _msgs(n: int, start: datetime = T0, step: timedelta = MINUTE, prefix: str = "a") -> list[NewMessage]:
    return [NewMessage("user" if i % 2 == 0 else "assistant", f"{prefix} number {i}", start + i * step,
                       message_id=f"{prefix}-{i}") for i in range(n)]


def _summary(summary_id: str, from_seq: int, to_seq: int, *, user: str = "alice", kind: str = "range") -> Summary:
    return Summary(summary_id=summary_id, thread_id=f"{user}:continuous", user_id=user, kind=kind,
                   from_seq=from_seq, to_seq=to_seq, markdown=f"summary of {from_seq}..{to_seq}",
                   created_at=T0, updated_at=T0, message_count=to_seq - from_seq + 1)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "nav.duckdb") as s:
        s.ensure_user("alice", "UTC")
        s.ensure_user("bob", "UTC")
        s.ensure_user("tokyo", "Asia/Tokyo")
        yield s


@pytest.fixture
def ingestor(store):
    return Ingestor(store, idle_timeout=timedelta(minutes=30), clock=lambda: NOW)


@pytest.fixture
def nav(store):
    return Navigator(store, clock=lambda: NOW)


@pytest.fixture
def alice(ingestor):
    """Alice: 20 turns a minute apart from T0 (seq 1..20); Bob: 3 turns."""
    ingestor.add_messages("alice", _msgs(20))
    ingestor.add_messages("bob", _msgs(3, prefix="b"))
    return ingestor


def _seqs(views) -> list[int]:
    return [v.seq for v in views]


# By id ---------------------------------------------------------------------------------------
def test_get_message_returns_its_view(nav, ingestor):
    ingestor.add_messages("alice", [NewMessage("assistant", "ran it", T0, message_id="x", speaker="Claude",
                                               tools_used=("bash",))])
    view = nav.get_message("alice", "x")
    assert (view.message_id, view.seq, view.role, view.speaker, view.content) == ("x", 1, "assistant", "Claude", "ran it")
    assert view.created_at == T0 and view.day_label == date(2024, 5, 1) and view.tools_used == ("bash",)
    assert view.conversation_id == f"{ALICE}:conv:1" and view.day_segment_id == day_segment_id(ALICE, date(2024, 5, 1))


def test_unknown_ids_and_other_users_ids_are_not_found(nav, alice):
    with pytest.raises(UnknownMessageError, match="'b-0'"):
        nav.get_message("alice", "b-0")
    with pytest.raises(UnknownMessageError, match="'nope'"):
        nav.get_message("alice", "nope")
    bob_day = day_segment_id("bob:continuous", date(2024, 5, 1))
    with pytest.raises(UnknownDaySegmentError, match="bob:continuous"):
        nav.get_day("alice", bob_day)
    with pytest.raises(UnknownDaySegmentError):
        nav.get_day_range("alice", bob_day, "b-0", "b-1")
    alice_day = day_segment_id(ALICE, date(2024, 5, 1))
    with pytest.raises(UnknownMessageError, match="'b-0'"):
        nav.get_day_range("alice", alice_day, "b-0", "a-3")
    with pytest.raises(UnknownThreadError):
        nav.messages_range("alice", 1, 3, thread_id="bob:continuous")
    with pytest.raises(UnknownThreadError):
        nav.substring_search("alice", "number", thread_id="bob:continuous")
    with pytest.raises(UnknownUserError):
        nav.get_message("carol", "a-0")
    assert [v.message_id for _, v in nav.substring_search("alice", "b number")] == []


def test_get_day_lists_its_turns_with_the_summary(store, nav, ingestor):
    ingestor.add_messages("alice", _msgs(3, start=T0, prefix="d1"))
    ingestor.add_messages("alice", [NewMessage("system", "day summary updated", T0 + 5 * MINUTE, kind="note")])
    ingestor.add_messages("alice", _msgs(2, start=T0 + timedelta(days=1), prefix="d2"))
    first = day_segment_id(ALICE, date(2024, 5, 1))
    store.timeline.set_day_summary(first, "# May 1\nthree turns", NOW)
    day = nav.get_day("alice", first)
    assert day.message_ids == ("d1-0", "d1-1", "d1-2")  # the note is not content
    assert (day.summary_markdown, day.day_label, day.updated_at) == ("# May 1\nthree turns", date(2024, 5, 1), NOW)
    second = nav.get_day("alice", day_segment_id(ALICE, date(2024, 5, 2)))
    assert second.message_ids == ("d2-0", "d2-1") and second.summary_markdown is None


def test_get_day_range_is_inclusive_ordered_and_checked(nav, ingestor):
    ingestor.add_messages("alice", _msgs(5, prefix="d1"))
    ingestor.add_messages("alice", _msgs(2, start=T0 + timedelta(days=1), prefix="d2"))
    day = day_segment_id(ALICE, date(2024, 5, 1))
    views = nav.get_day_range("alice", day, "d1-1", "d1-3")
    assert [v.message_id for v in views] == ["d1-1", "d1-2", "d1-3"]
    assert all(v.created_at and v.role and v.content for v in views)
    assert [v.message_id for v in nav.get_day_range("alice", day, "d1-2", "d1-2")] == ["d1-2"]
    with pytest.raises(InvalidInputError, match="reversed"):
        nav.get_day_range("alice", day, "d1-3", "d1-1")
    with pytest.raises(InvalidInputError, match="'d2-0' is not in day"):
        nav.get_day_range("alice", day, "d1-0", "d2-0")


# Turns since ---------------------------------------------------------------------------------
def test_turns_since_reads_from_the_moment_on(nav, alice):
    got = nav.turns_since("alice", "2024-05-01T09:15:00Z")
    assert _seqs(got.messages) == list(range(16, 21)) and not got.truncated and got.next_seq is None
    assert got.since == T0 + 15 * MINUTE and got.notice is None
    assert _seqs(nav.turns_since("alice", "2024-05-01T09:14:30Z").messages) == list(range(16, 21))


def test_turns_since_before_all_history_and_in_the_future(nav, alice):
    everything = nav.turns_since("alice", "2020-01-01")
    assert _seqs(everything.messages) == list(range(1, 21)) and not everything.truncated
    capped = nav.turns_since("alice", "2020-01-01", limit=5)
    assert _seqs(capped.messages) == [1, 2, 3, 4, 5] and capped.truncated
    future = nav.turns_since("alice", "2030-01-01T00:00:00Z")
    assert future.messages == () and future.summaries == () and not future.truncated
    assert "future" in future.notice


def test_turns_since_summaries_end_at_their_last_message(store, nav, alice):
    store.timeline.upsert_summary(_summary("early", 1, 5))  # ends at T0 + 4 min
    store.timeline.upsert_summary(_summary("late", 6, 12))  # ends at T0 + 11 min
    at_end = nav.turns_since("alice", T0 + 4 * MINUTE)
    assert [s.summary_id for s in at_end.summaries] == ["late"]  # "early" ends at, not after, the moment
    just_before = nav.turns_since("alice", T0 + 4 * MINUTE - timedelta(seconds=1))
    assert [s.summary_id for s in just_before.summaries] == ["early", "late"]
    assert just_before.summaries[0].ends_at == T0 + 4 * MINUTE and just_before.summaries[0].message_count == 5
    assert nav.turns_since("alice", T0, include_summaries=False).summaries == ()


def test_turns_since_continuation_returns_the_rest_exactly_once(nav, ingestor):
    # Bursts of messages sharing one timestamp, so a page boundary falls inside a burst.
    stamps = [T0 + (i // 4) * MINUTE for i in range(25)]
    ingestor.add_messages("alice", [NewMessage("user", f"t{i}", at, message_id=f"t{i}") for i, at in enumerate(stamps)])
    page = nav.turns_since("alice", "2024-05-01T09:01:00Z", limit=7)
    seen = [v.message_id for v in page.messages]
    pages = 1
    while page.truncated:
        assert page.next_seq is not None and f"from_seq={page.next_seq}" in page.continue_with
        assert page.next_timestamp == stamps[page.next_seq - 1]
        page = nav.turns_since("alice", "2024-05-01T09:01:00Z", limit=7, from_seq=page.next_seq,
                               include_summaries=False)
        seen += [v.message_id for v in page.messages]
        pages += 1
    assert seen == [f"t{i}" for i in range(4, 25)] and pages == 3
    assert page.next_seq is None and page.continue_with is None


def test_turns_since_refuses_bad_input(nav, alice):
    for bad in (0, -1, MAX_LIMIT + 1, 2.5, True):
        with pytest.raises(InvalidInputError, match="limit"):
            nav.turns_since("alice", T0, limit=bad)
    with pytest.raises(InvalidTimestampError, match="accepted.*2024-05-01"):
        nav.turns_since("alice", "yesterday-ish")
    with pytest.raises(InvalidTimestampError):
        nav.turns_around("alice", "")
    assert len(nav.turns_since("alice", "2020-01-01", limit=MAX_LIMIT).messages) == 20


def test_naive_timestamps_are_read_in_the_users_zone(nav, ingestor):
    ingestor.add_messages("tokyo", _msgs(10, start=datetime(2024, 5, 1, 0, 0, tzinfo=timezone.utc), prefix="t"))
    naive = nav.turns_since("tokyo", "2024-05-01T09:03")  # 09:03 in Tokyo is 00:03 UTC
    assert naive.since == datetime(2024, 5, 1, 0, 3, tzinfo=timezone.utc)
    assert _seqs(naive.messages) == list(range(4, 11))
    assert _seqs(nav.turns_since("tokyo", datetime(2024, 5, 1, 9, 3)).messages) == list(range(4, 11))
    assert nav.turns_since("tokyo", "2024-05-01T09:03Z").messages == ()  # an explicit offset wins
    around = nav.turns_around("tokyo", "2024-05-01T09:05", count=4)
    assert _seqs(around.messages) == [4, 5, 6, 7]


# Turns around --------------------------------------------------------------------------------
def test_turns_around_splits_by_ratio(nav, alice):
    got = nav.turns_around("alice", T0 + 10 * MINUTE, count=6)  # seq 11 is at the moment
    assert _seqs(got.messages) == [8, 9, 10, 11, 12, 13]
    assert (got.before_count, got.after_count) == (3, 3) and got.notice is None
    tilted = nav.turns_around("alice", T0 + 10 * MINUTE, count=5, before_ratio=0.8)
    assert _seqs(tilted.messages) == [7, 8, 9, 10, 11] and (tilted.before_count, tilted.after_count) == (4, 1)


def test_turns_around_ratio_ends_and_zero(nav, alice):
    moment = T0 + 10 * MINUTE
    assert _seqs(nav.turns_around("alice", moment, count=4, before_ratio=0).messages) == [11, 12, 13, 14]
    assert _seqs(nav.turns_around("alice", moment, count=4, before_ratio=1).messages) == [7, 8, 9, 10]
    for outside in (-1, 2, float("inf")):
        with pytest.raises(InvalidInputError, match="before_ratio must be a number from 0 to 1"):
            nav.turns_around("alice", moment, count=4, before_ratio=outside)
    empty = nav.turns_around("alice", moment, count=0)
    assert empty.messages == () and (empty.before_count, empty.after_count) == (0, 0)
    with pytest.raises(InvalidInputError, match="count"):
        nav.turns_around("alice", moment, count=-1)
    with pytest.raises(InvalidInputError, match="before_ratio"):
        nav.turns_around("alice", moment, before_ratio=float("nan"))


def test_turns_around_does_not_top_up_a_short_side(nav, alice):
    start = nav.turns_around("alice", "2020-01-01", count=10)
    assert (start.before_count, start.after_count) == (0, 5) and _seqs(start.messages) == [1, 2, 3, 4, 5]
    assert "only 0 of 5" in start.notice
    end = nav.turns_around("alice", "2030-01-01", count=10)
    assert (end.before_count, end.after_count) == (5, 0) and _seqs(end.messages) == [16, 17, 18, 19, 20]
    near = nav.turns_around("alice", T0 + 2 * MINUTE, count=10)
    assert (near.before_count, near.after_count) == (2, 5) and _seqs(near.messages) == [1, 2, 3, 4, 5, 6, 7]


# Conversation context ------------------------------------------------------------------------
def test_context_without_summaries(nav, alice):
    got = nav.conversation_context("alice", turns=5)
    assert _seqs(got.turns) == [16, 17, 18, 19, 20] and got.summaries == ()
    assert (got.uncovered_count, got.turns_covered) == (20, 5)
    beyond = nav.conversation_context("alice", turns=500)
    assert _seqs(beyond.turns) == list(range(1, 21)) and beyond.turns_covered == 20
    zero = nav.conversation_context("alice", turns=0)
    assert zero.turns == () and zero.summaries == () and zero.turns_covered == 0
    with pytest.raises(InvalidInputError, match="turns"):
        nav.conversation_context("alice", turns=-1)


def test_context_fills_with_the_latest_summaries(store, nav, alice):
    for i, (lo, hi) in enumerate([(1, 5), (6, 10), (11, 15), (16, 17)]):
        store.timeline.upsert_summary(_summary(f"s{i}", lo, hi))
    got = nav.conversation_context("alice", turns=10)  # 3 uncovered (18..20) + 7 to cover
    assert _seqs(got.turns) == [18, 19, 20] and got.uncovered_count == 3
    assert [(s.from_seq, s.to_seq, s.message_count) for s in got.summaries] == [(11, 15, 5), (16, 17, 2)]
    assert got.turns_covered == 10
    more = nav.conversation_context("alice", turns=11)  # one short: the next summary back overshoots
    assert [(s.from_seq, s.to_seq) for s in more.summaries] == [(6, 10), (11, 15), (16, 17)]
    assert more.turns_covered == 15
    few = nav.conversation_context("alice", turns=2)  # enough uncovered: no summaries
    assert _seqs(few.turns) == [19, 20] and few.summaries == ()


def test_context_when_everything_is_covered(store, nav, alice):
    store.timeline.upsert_summary(_summary("all", 1, 20, kind="conversation"))
    got = nav.conversation_context("alice", turns=3)
    assert got.uncovered_count == 0 and got.turns == ()
    assert [s.summary_id for s in got.summaries] == ["all"] and got.turns_covered == 20


def test_context_does_not_double_count_overlapping_summaries(store, nav, alice):
    store.timeline.upsert_summary(_summary("day", 1, 20, kind="day"))
    store.timeline.upsert_summary(_summary("conv-a", 1, 10, kind="conversation"))
    store.timeline.upsert_summary(_summary("conv-b", 11, 20, kind="conversation"))
    store.timeline.upsert_summary(_summary("tail", 15, 20))
    got = nav.conversation_context("alice", turns=40)
    assert [s.summary_id for s in got.summaries] == ["day"]  # the widest latest span; the rest are inside it
    assert got.turns_covered == 20


def test_context_counts_only_new_messages_of_a_partial_overlap(store, nav, alice):
    store.timeline.upsert_summary(_summary("old", 1, 12))
    store.timeline.upsert_summary(_summary("new", 9, 20))
    got = nav.conversation_context("alice", turns=20)
    assert [(s.summary_id, s.message_count, s.overlap) for s in got.summaries] == [("old", 12, 4), ("new", 12, 0)]
    assert got.turns_covered == 20


def test_context_uses_real_message_counts_after_deletions(store, nav, alice):
    store.timeline.upsert_summary(_summary("s1", 1, 10))
    store.timeline.upsert_summary(_summary("s2", 11, 20))
    store.delete_messages(["a-11", "a-12", "a-13", "a-14"])  # seq 12..15: s2 now holds 6 messages
    got = nav.conversation_context("alice", turns=8)
    assert [(s.summary_id, s.message_count) for s in got.summaries] == [("s1", 10), ("s2", 6)]
    assert got.turns_covered == 16
    assert [(s.summary_id, s.message_count) for s in nav.conversation_context("alice", turns=6).summaries] == [("s2", 6)]


def test_context_ignores_engine_notes(store, nav, ingestor):
    ingestor.add_messages("alice", _msgs(4))
    ingestor.add_messages("alice", [NewMessage("system", "day summary updated", T0 + 10 * MINUTE, kind="note")])
    got = nav.conversation_context("alice", turns=10)
    assert _seqs(got.turns) == [1, 2, 3, 4] and got.uncovered_count == 4
    store.timeline.upsert_summary(_summary("s", 1, 5))  # its span holds the note: 4 real turns
    assert [s.message_count for s in nav.conversation_context("alice", turns=10).summaries] == [4]


# Seq ranges and substrings -------------------------------------------------------------------
def test_messages_range_is_half_open(nav, alice, ingestor):
    assert _seqs(nav.messages_range("alice", 3, 6)) == [3, 4, 5]
    assert nav.messages_range("alice", 4, 4) == []
    assert _seqs(nav.messages_range("alice", 18, 100)) == [18, 19, 20]
    with pytest.raises(InvalidInputError, match="reversed"):
        nav.messages_range("alice", 6, 3)
    with pytest.raises(InvalidInputError, match="start_seq"):
        nav.messages_range("alice", -1, 3)
    with pytest.raises(InvalidInputError, match="wider"):
        nav.messages_range("alice", 1, MAX_LIMIT + 2)
    ingestor.store.ensure_thread("alice", "side")
    ingestor.add_messages("alice", _msgs(2, prefix="side"), thread_id="side")
    assert [v.message_id for v in nav.messages_range("alice", 1, 3, thread_id="side")] == ["side-0", "side-1"]


@pytest.mark.parametrize("needle", ["100%", "a_b", "it's", ".*", "%", "_", "'", "\\"])
def test_substring_needles_are_literal(nav, ingestor, needle):
    contents = ["fully 100% sure", "snake a_b case", "it's fine", "regex .* here", "plain text", "back\\slash"]
    ingestor.add_messages("alice", [NewMessage("user", c, T0 + i * MINUTE, message_id=f"c{i}")
                                    for i, c in enumerate(contents)])
    found = nav.substring_search("alice", needle)
    expected = [c for c in contents if needle in c]
    assert [v.content for _, v in found] == expected
    assert all(v.content[offset:offset + len(needle)] == needle for offset, v in found)


def test_substring_is_case_insensitive_limited_and_refuses_empty(nav, alice):
    found = nav.substring_search("alice", "NUMBER 1")
    assert [v.message_id for _, v in found] == ["a-1"] + [f"a-{i}" for i in range(10, 20)]
    assert found[0][0] == 2
    assert len(nav.substring_search("alice", "number", limit=3)) == 3
    with pytest.raises(InvalidInputError, match="non-empty"):
        nav.substring_search("alice", "")
    with pytest.raises(InvalidInputError, match="limit"):
        nav.substring_search("alice", "x", limit=0)


def test_reads_do_not_create_the_continuous_thread(store, nav):
    store.ensure_user("dora")
    assert nav.turns_since("dora", T0).messages == ()
    assert nav.conversation_context("dora", turns=5).turns_covered == 0
    assert store.stats("dora")["threads"] == 0


# Properties on generated threads -------------------------------------------------------------
_users = itertools.count()

_threads = st.lists(st.integers(min_value=0, max_value=3), min_size=0, max_size=25)  # minute gaps
_spans = st.lists(st.tuples(st.integers(min_value=1, max_value=26), st.integers(min_value=0, max_value=12)), max_size=5)


def _generated(store: Store, gaps: list[int]) -> str:
    user = f"gen{next(_users)}"
    store.ensure_user(user, "UTC")
    at, batch = T0, []
    for i, gap in enumerate(gaps):
        at += gap * MINUTE
        batch.append(NewMessage("user", f"g{i}", at, message_id=f"{user}-{i}"))
    Ingestor(store, idle_timeout=timedelta(minutes=30)).add_messages(user, batch)
    return user


@pytest.mark.slow
@seed(20240501)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gaps=_threads, count=st.integers(min_value=0, max_value=30),
       ratio=st.floats(min_value=0, max_value=1), offset=st.integers(min_value=-5, max_value=60))
def test_turns_around_property(store, gaps, count, ratio, offset):
    user = _generated(store, gaps)
    moment = T0 + offset * MINUTE
    got = Navigator(store).turns_around(user, moment, count=count, before_ratio=ratio)
    before, after = got.messages[:got.before_count], got.messages[got.before_count:]
    assert len(got.messages) <= count and len(after) == got.after_count
    assert all(m.created_at < moment for m in before) and all(m.created_at >= moment for m in after)
    assert _seqs(got.messages) == sorted(set(_seqs(got.messages)))
    times = [T0 + sum(gaps[:i + 1]) * MINUTE for i in range(len(gaps))]
    assert got.before_count == min(got.requested_before, sum(t < moment for t in times))
    assert got.after_count == min(got.requested_after, sum(t >= moment for t in times))


@pytest.mark.slow
@seed(20240502)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gaps=_threads, spans=_spans, deleted=st.sets(st.integers(min_value=1, max_value=25), max_size=6),
       turns=st.integers(min_value=0, max_value=30))
def test_conversation_context_property(store, gaps, spans, deleted, turns):
    user = _generated(store, gaps)
    for i, (lo, width) in enumerate(spans):
        store.timeline.upsert_summary(_summary(f"{user}-s{i}", lo, lo + width, user=user))
    store.delete_messages([f"{user}-{seq - 1}" for seq in deleted])
    stored = {m.seq for m in store.messages_in_range(f"{user}:continuous", 0)}
    got = Navigator(store).conversation_context(user, turns=turns)
    raw = _seqs(got.turns)
    assert raw == sorted(set(raw)) and len(raw) <= turns
    assert not any(lo <= s <= lo + w for s in raw for lo, w in spans)
    represented = set(raw)
    for s in reversed(got.summaries):  # the order they were chosen: newest span first
        inside = {q for q in stored if s.from_seq <= q <= s.to_seq}
        assert s.message_count == len(inside) and len(inside - represented) == s.message_count - s.overlap
        represented |= inside
    assert got.turns_covered == len(represented) >= min(turns, len(stored))
