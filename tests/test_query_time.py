"""Dates named in a query (engine.query.time_phrases) and the rule that favours their turns."""

from __future__ import annotations

from datetime import date, datetime, timezone

import numpy as np
import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.query.time_phrases import LATE_MENTION_DAYS, DaySpan, query_time, read_dates
from engine.query.ranking import favour_matching
from tests.support import HashEmbedder


@pytest.mark.parametrize("query,spans", [
    ("What did Gina find on 1 February, 2023?", [DaySpan(date(2023, 2, 1), date(2023, 2, 1))]),
    ("What painting did Melanie show on October 13, 2023?", [DaySpan(date(2023, 10, 13), date(2023, 10, 13))]),
    ("What did John do the week before August 3rd 2023?", [DaySpan(date(2023, 7, 27), date(2023, 8, 3))]),
    ("deploy on 2024-03-05", [DaySpan(date(2024, 3, 5), date(2024, 3, 5))]),
    ("What workout class did Maria start in December 2023?", [DaySpan(date(2023, 12, 1), date(2023, 12, 31))]),
    ("When did Melanie go camping in June?", [DaySpan(month=6)]),
    ("How many times has Melanie gone to the beach in 2023?", [DaySpan(date(2023, 1, 1), date(2023, 12, 31))]),
    ("in May 2023 and on 3 June, 2023", [DaySpan(date(2023, 6, 3), date(2023, 6, 3)),
                                         DaySpan(date(2023, 5, 1), date(2023, 5, 31))]),
])
def test_the_dates_a_query_names_become_day_spans(query, spans):
    assert list(query_time(query).spans) == spans


@pytest.mark.parametrize("query,spans", [
    ("what changed since May 2023?", [DaySpan(date(2023, 5, 1), None)]),
    ("deploys after 5 March 2024", [DaySpan(date(2024, 3, 6), None)]),
    ("what we had before June 2023", [DaySpan(None, date(2023, 5, 31))]),
    ("prior to the 2nd of June, 2023", [DaySpan(None, date(2023, 6, 1))]),
    ("done by 2023-06-03", [DaySpan(None, date(2023, 6, 3))]),
    ("until 2024", [DaySpan(None, date(2024, 12, 31))]),
    ("since 2023", [DaySpan(date(2023, 1, 1), None)]),
    ("two weeks after 1 May 2023", [DaySpan(date(2023, 5, 1), date(2023, 5, 15))]),
    ("a couple of days before the 3 June, 2023", [DaySpan(date(2023, 6, 1), date(2023, 6, 3))]),
    ("since May", [DaySpan(month=5)]),  # no year: that month of any year, unbounded
    ("the photo from May 2023", [DaySpan(date(2023, 5, 1), date(2023, 5, 31))]),  # "from" does not bound
    ("the museum after lunch on 5 May 2023", [DaySpan(date(2023, 5, 5), date(2023, 5, 5))]),  # not right before
])
def test_a_word_before_a_date_bounds_its_span(query, spans):
    assert list(query_time(query).spans) == spans


def test_an_open_span_holds_every_day_on_its_side():
    since, before = query_time("since May 2023"), query_time("before June 2023")
    assert since.holds(date(2023, 5, 1)) and since.holds(date(2031, 1, 1)) and not since.holds(date(2023, 4, 30))
    # the days told about before June, and the week after that tells about them
    assert before.holds(date(1999, 1, 1)) and before.holds(date(2023, 6, LATE_MENTION_DAYS))
    assert not before.holds(date(2023, 6, LATE_MENTION_DAYS + 1))


@pytest.mark.parametrize("query", ["May I ask what we decided?", "the march of progress", "what did we decide last week?",
                                   "this may be why the build broke", "this march ended at the park",
                                   "order A-7731 costs 2023 dollars", "on 31 June, 2023", "error 404 on port 2024"])
def test_a_query_naming_no_date_has_no_span(query):
    assert not query_time(query)


@pytest.mark.parametrize("query,keywords", [
    ("ECONNRESET since March 2024", ["ECONNRESET"]),  # the word that bounds the date goes with it
    ("errors the week before August 3rd 2023, please", ["errors", ",", "please"]),
    ("What did Gina find on 1 February, 2023?", ["What", "did", "Gina", "find", "on", "?"]),
    ("When did Melanie go camping in June?", ["When", "did", "Melanie", "go", "camping", "?"]),
    ("this may be why the deploy failed", ["this", "may", "be", "why", "the", "deploy", "failed"]),  # a verb
    ("outage on 31 June, 2023", ["outage", "on", "31", "June,", "2023"]),  # no such day: no date to read
])
def test_the_keywords_of_a_query_leave_out_the_dates_it_names(query, keywords):
    when, rest = read_dates(query)
    assert rest.split() == keywords and len(rest) == len(query)
    assert when == query_time(query)


def test_a_span_holds_its_days_and_the_week_after_them():
    june = query_time("camping in June 2023")
    assert june.holds(date(2023, 6, 1)) and june.holds(date(2023, 6, 30))
    assert june.holds(date(2023, 7, LATE_MENTION_DAYS)) and not june.holds(date(2023, 7, LATE_MENTION_DAYS + 1))
    assert not june.holds(date(2023, 5, 31)) and not june.holds(date(2024, 6, 15))
    any_june = query_time("camping in June")
    assert any_june.holds(date(2021, 6, 15)) and any_june.holds(date(2023, 7, 2)) and not any_june.holds(date(2023, 8, 1))


def test_turns_of_other_days_weigh_less_only_when_some_turn_is_on_the_named_day():
    scores = np.array([0.5, 0.6, 0.4])
    assert favour_matching(scores, np.array([True, False, False]), other_weight=0.8) == pytest.approx([0.5, 0.48, 0.32])
    assert favour_matching(scores, np.zeros(3, dtype=bool), other_weight=0.8) == pytest.approx(scores)


def test_a_named_month_brings_its_turn_first(tmp_path):
    now = datetime(2024, 1, 1, tzinfo=timezone.utc)
    plain = Settings(summarizer="none")  # no summary covers (and demotes) the first day
    with ConversationEngine(tmp_path, embedder=HashEmbedder(), clock=lambda: now, settings=plain) as engine:
        engine.add_user("dora")
        # May's line is the closer match (the query's words, fewer others); the query names June
        engine.ingest("dora", [
            {"role": "user", "speaker": "Bob", "content": "Our camping trip at the lake!",
             "message_id": "may", "created_at": "2023-05-20T09:00"},
            {"role": "user", "speaker": "Bob", "content": "Camping trip at the lake again, lovely weekend.",
             "message_id": "june", "created_at": "2023-06-20T09:00"}])
        ids = [h.message_id for h in engine.search("dora", "camping trip in June 2023", kinds=("message",)).results]
        assert ids[0] == "june"
        later = [h.message_id for h in engine.search("dora", "camping trip since June 2023", kinds=("message",)).results]
        assert later[0] == "june"  # an open span: every day from June on
        earlier = [h.message_id for h in engine.search("dora", "camping trip before June 2023", kinds=("message",)).results]
        assert earlier[0] == "may"
        off = engine.searcher.settings.model_copy(update={"outside_time_weight": 1.0})
        engine.searcher.settings = off
        ids_off = [h.message_id for h in engine.search("dora", "camping trip in June 2023", kinds=("message",)).results]
        assert ids_off[0] == "may"  # without the rule the closer line wins
