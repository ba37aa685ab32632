"""Turns that ask (engine.query.questions) and the rules that weigh them (engine.query.ranking)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.query.questions import asking_share, asks, ends_asking
from engine.query.ranking import lift_replies, reply_lifts, weigh_asking


@pytest.mark.parametrize("query,expected", [
    ("what did we decide about the database?", True),
    ("which database did we choose", True),  # no question mark: the interrogative word says it
    ("When did Caroline go to the LGBTQ support group?", True),
    ("ADR-007?", True),
    ("database decision", False),
    ("PostgreSQL 15.4", False),
    ("  ", False),
])
def test_a_query_asks_by_its_question_mark_or_its_first_word(query, expected):
    assert asks(query) is expected


@pytest.mark.parametrize("line,expected", [
    ("How have you been? 😊", True),  # an emoji or a quote after the mark still ends a question
    ('She asked "why?"', True),
    ("Really?! wow", False),
    ("I went there. It was nice.", False),
    ("Is it 15.4? Yes, 15.4.", False),  # the turn ends by answering
])
def test_a_turn_ends_asking_only_when_its_last_sentence_is_a_question(line, expected):
    assert ends_asking(line) is expected


def test_the_asking_share_is_the_part_of_the_turn_in_questions():
    assert asking_share("Which one?") == pytest.approx(1.0)
    assert asking_share("We go with PostgreSQL 15.4. Fine.") == 0.0
    assert asking_share("") == 0.0
    mixed = "OK, decision made: we go with PostgreSQL. Can you draft the plan?"
    assert asking_share(mixed) == pytest.approx(len("Can you draft the plan?") / (len(mixed) - 1))  # the break's space


def test_turns_that_ask_weigh_less_by_their_share_and_the_others_not_at_all():
    scores = np.array([0.8, 0.8, 0.5])
    weighed = weigh_asking(scores, np.array([1.0, 0.5, 0.0]), weight=0.8)
    assert weighed == pytest.approx([0.64, 0.72, 0.5])
    assert weigh_asking(scores, np.array([1.0, 0.5, 0.0]), weight=1.0) == pytest.approx(scores)  # off


def test_the_reply_to_a_question_may_be_lifted_more_than_other_replies():
    lifts = reply_lifts(np.array([True, False, True]), lift=0.9, question_lift=1.0)
    assert lifts == pytest.approx([1.0, 0.9, 1.0])
    assert reply_lifts(np.array([True, False]), lift=0.9, question_lift=0.0) == pytest.approx([0.9, 0.9])  # off
    scores, previous = np.array([0.8, 0.1, 0.1]), np.array([-1, 0, 0])
    assert lift_replies(scores, previous, lift=np.array([0.0, 1.0, 0.9])) == pytest.approx([0.8, 0.8, 0.72])
