"""What an extractive summary may not say: a question or an undecided matter as a decision, code as a
quote, one sentence twice (the summary and context tools' audit)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from engine.models import Message
from engine.summaries.said import said_in
from engine.summaries.summarizers import ExtractiveSummarizer, section_text

AT = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


def summary_of(*texts: str) -> str:
    turns = [Message(f"m{i}", "t", "u", i, "user" if i % 2 else "assistant", text, AT + timedelta(minutes=i),  # type: ignore[arg-type]
                     AT.date(), "t:conv:1") for i, text in enumerate(texts, 1)]
    return ExtractiveSummarizer().summarize(turns)


@pytest.mark.parametrize("text", ["**Should we go with Postgres?**", "Should we go with Postgres?!",
                                  "(Should we go with Postgres?)", 'Marc asked: "should we go with Postgres?"'])
def test_a_question_with_closing_marks_is_a_question(text: str) -> None:
    assert [(s.question, s.cue) for s in said_in(text)] == [(True, None)]


@pytest.mark.parametrize("text", ["We haven't decided yet about the cache layer.", "The team has not decided on hosting.",
                                  "It is still undecided.", "Je ne suis pas d'accord pour MySQL.",
                                  "キャッシュはまだ決定していません。"])
def test_a_decision_not_made_is_an_open_loop(text: str) -> None:
    assert [s.cue for s in said_in(text)] == ["Open loops"]
    markdown = summary_of("Where do we keep the cache layer and the hosting?", text)
    assert "Decisions" not in markdown or text not in section_text(markdown, "Decisions")


def test_a_decision_is_still_a_decision() -> None:
    assert [s.cue for s in said_in("We decided to use Postgres for billing.")] == ["Decisions"]


def test_code_in_tilde_fences_is_never_quoted() -> None:
    markdown = summary_of("How do I deploy the billing service?",
                          "Run this:\n~~~\nTODO: we decided to drop the replica set.\n~~~\nThen check the dashboard.")
    assert "replica set" not in markdown


def test_a_sentence_said_three_times_is_quoted_once() -> None:
    repeated = "The staging deploy failed on the migration step 0007."
    markdown = summary_of(repeated, "Looking at it.", repeated, "Still red.", repeated, "Rolling back the migration now.")
    assert markdown.count(repeated) == 1, markdown
