"""conversation.search end to end on the sample data, with the real MiniLM model and a DuckDB file."""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import pytest

from engine.api import ConversationEngine
from engine.config import Settings
from engine.errors import InvalidInputError, InvalidTimestampError
from engine.evaluation.overrides import RankingOverrides

pytestmark = pytest.mark.model  # see tests/conftest.py (--fast)

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample.jsonl"
NOW = datetime(2024, 3, 7, 12, 0, tzinfo=timezone.utc)
# the sample runs to 2024-03-12, after NOW: accept messages up to 30 days ahead of the pinned clock
AHEAD = Settings(future_tolerance_hours=24 * 30)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with ConversationEngine(tmp_path_factory.mktemp("search"), clock=lambda: NOW, settings=AHEAD) as e:
        e.import_file(SAMPLE, fmt="jsonl")
        e.index()
        yield e


def contents(engine: ConversationEngine, user: str, response) -> list[str]:
    return [engine.get(user, message_id=h.message_id).content for h in response.results if h.kind == "message"]


@pytest.mark.parametrize("query,needle", [("order A-7731", "A-7731"), ("ECONNRESET", "ECONNRESET"),
                                           ("PostgreSQL 15.4", "15.4")])
def test_exact_ids_numbers_and_error_codes_come_back_first(engine, query, needle):
    response = engine.search("alice", query, kinds=("message",))
    assert response.mode == "hybrid"
    assert needle in contents(engine, "alice", response)[0]


def test_a_keyword_hit_survives_a_high_minimum_score(engine):
    response = engine.search("alice", "A-7731", min_score=0.95, kinds=("message",), explain=True)
    top = response.results[0]
    assert "A-7731" in contents(engine, "alice", response)[0]
    assert top.parts.final < 0.95 and top.parts.lexical == 1.0  # kept by its lexical match, not its score


def test_the_floor_exemption_looks_at_the_message_not_its_window(engine):
    response = engine.search("alice", "A-7731", min_score=0.95, limit=20, kinds=("message",), explain=True)
    texts = contents(engine, "alice", response)
    assert texts and all("A-7731" in text for text in texts)  # window neighbours without the id are dropped
    assert all(h.parts.own_lexical >= 0.5 for h in response.results)


def test_a_line_that_matches_nothing_does_not_ride_on_its_window(engine):
    # "Good night, Alice." shares a window with the question; its own line matches nothing
    response = engine.search("alice", "what did we decide about the database?", limit=20, kinds=("message",))
    ids = [h.message_id for h in response.results]
    assert "alice-0057" in ids[:3]  # the answer: "Decision (ADR-007, Monday): managed PostgreSQL 15.4 ..."
    assert "alice-0055" not in ids or ids.index("alice-0055") > ids.index("alice-0057")


def test_the_reply_after_a_strong_match_is_lifted(engine):
    plain = RankingOverrides(settings={"question_turn_weight": 1.0, "question_reply_lift": 0.0})  # reply_lift alone
    response = engine.search_experiment("alice", "what did we decide about the database?", plain, limit=20,
                                        kinds=("message",), explain=True)
    by_id = {h.message_id: h for h in response.results}
    question, answer = by_id["alice-0056"], by_id["alice-0057"]
    assert answer.parts.fused == pytest.approx(0.9 * question.parts.fused)  # lifted by the question it answers
    assert answer.parts.fused > answer.parts.own


def test_the_answer_outranks_the_question_that_asks_for_it(engine):
    # alice-0056 asks "what did we decide about the database, and what's left ...?"; 0057 answers it
    ids = [h.message_id for h in engine.search("alice", "what did we decide about the database?", limit=20,
                                               kinds=("message",)).results]
    assert ids[0] == "alice-0057"
    asked = engine.search("alice", "which database did we choose", limit=20, kinds=("message",)).results
    ids = [h.message_id for h in asked]
    assert ids.index("alice-0012") < ids.index("alice-0056")  # ADR-007 before the question that recalls it
    off = RankingOverrides(settings={"question_turn_weight": 1.0, "question_reply_lift": 0.0})
    before = [h.message_id for h in engine.search_experiment("alice", "which database did we choose", off,
                                                             limit=20, kinds=("message",)).results]
    assert before.index("alice-0056") < before.index("alice-0012")  # what the rules change


def test_the_query_words_side_by_side_outrank_the_same_words_apart(engine):
    # alice-0061 holds "row", "level" and "security", never as "row-level security"; alice-0057 holds the phrase
    hits = engine.search("alice", "row-level security", limit=20, kinds=("message",)).results
    ids = [h.message_id for h in hits]
    assert ids.index("alice-0061") > ids.index("alice-0057")
    off = RankingOverrides(settings={"phrase_weight": 0.0})
    before = engine.search_experiment("alice", "row-level security", off, limit=20, kinds=("message",)).results
    gap = {h.message_id: h.score for h in hits}, {h.message_id: h.score for h in before}
    with_rule, without = (s["alice-0057"] - s["alice-0061"] for s in gap)
    # what the rule changes: without it the two are within 0.01 (their order follows the query's vector)
    assert abs(without) < 0.01 and with_rule > without + 0.02


def test_a_word_from_the_middle_of_a_long_tool_output_finds_it(engine):
    # req-9120 sits in the middle of a 6,701-character log: neither its head nor its tail holds it
    response = engine.search("alice", "req-9120", kinds=("message",))
    hit = response.results[0]
    assert hit.message_id == "alice-0032" and "req-9120" in hit.snippet  # cited from the piece that matched
    assert hit.from_seq == hit.to_seq == hit.seq  # the piece's window is the message alone
    errors = engine.search("alice", "ECONNRESET", kinds=("message",))
    assert "alice-0032" in [h.message_id for h in errors.results[:3]]


def test_a_date_in_the_query_ranks_by_the_turns_days_not_as_keywords(engine):
    # alice-0011 holds "Saturday 16 March" and nothing of the error: its "March" made it a hit
    dated = engine.search("alice", "ECONNRESET in March 2024", kinds=("message",))
    assert dated.terms == ("econnreset",)
    ids = [h.message_id for h in dated.results]
    assert "alice-0011" not in ids and {"alice-0032", "alice-0033", "alice-0036"} <= set(ids[:4])
    as_words = engine.search_experiment("alice", "ECONNRESET in March 2024", RankingOverrides(
        settings={"dates_as_keywords": True}), kinds=("message",))
    assert "alice-0011" in [h.message_id for h in as_words.results]
    assert engine.search("alice", "March 2024", kinds=("message",)).terms == ("march", "2024")  # nothing else to match


def test_a_named_participant_s_turns_come_first(tmp_path):
    with ConversationEngine(tmp_path, clock=lambda: NOW) as engine:
        engine.add_user("dora")
        # Carol's question shares more of the query's words; Bob's turn is the one about Bob
        turns = [("Bob", "Carol, I finally got a kayak last week, a red one."),
                 ("Carol", "Bob, a kayak! Which kayak did you buy?"), ("Bob", "A sit-on-top, for the lake.")]
        engine.ingest("dora", [{"role": "user", "speaker": who, "content": text, "message_id": f"m{i}",
                                "created_at": f"2024-01-01T09:0{i}"} for i, (who, text) in enumerate(turns)])
        response = engine.search("dora", "which kayak did Bob buy?", kinds=("message",))
        assert response.results[0].speaker == "Bob"


def test_the_turn_a_strong_match_reacts_to_is_lifted(tmp_path):
    """Carol's reaction holds the query's words; Bob's turn before it says what happened, in other words."""
    turns = [("Bob", "On Saturday I drove out to the county animal shelter and came home with a three-legged tabby."),
             ("Carol", "You adopted a cat? That is wonderful, adopting is the kindest thing."),
             ("Bob", "Thanks! Anyway, how was your week at work?"), ("Carol", "Busy. We finally shipped the billing page.")]
    with ConversationEngine(tmp_path, clock=lambda: NOW) as engine:
        engine.add_user("dora")
        engine.ingest("dora", [{"role": "user", "speaker": who, "content": text, "message_id": f"m{i}",
                                "created_at": f"2024-01-01T09:0{i}"} for i, (who, text) in enumerate(turns)])
        hits = engine.search("dora", "who adopted a cat?", kinds=("message",), explain=True).results
        off = RankingOverrides(settings={"reacted_to_lift": 0.0})
        before = [h.message_id for h in engine.search_experiment("dora", "who adopted a cat?", off,
                                                                 kinds=("message",)).results]
    assert [h.message_id for h in hits[:2]] == ["m1", "m0"]
    assert hits[1].parts.fused == pytest.approx(0.85 * hits[0].parts.fused)
    assert hits[1].parts.fused > hits[1].parts.own  # lifted above its own match
    assert before.index("m2") < before.index("m0")  # without the rule the small talk after the match came first


def test_multi_term_queries_match_any_term(engine):
    response = engine.search("alice", "A-7731 xylophonequartz", kinds=("message",))
    assert "A-7731" in contents(engine, "alice", response)[0]


def test_a_japanese_query_finds_the_japanese_exchange(engine):
    response = engine.search("bob", "京都", kinds=("message",))
    assert any("京都" in text for text in contents(engine, "bob", response)[:3])


def test_a_french_query_finds_the_french_day(engine):
    response = engine.search("alice", "diapositive migration équipe", kinds=("message",))
    assert response.results[0].day_label == date(2024, 3, 5)


def test_no_search_returns_another_users_messages(engine):
    for query in ("Mochi", "京都", "E0502 borrow", "cat food salmon"):
        response = engine.search("alice", query, limit=20)
        assert all(h.thread_id.startswith("alice:") for h in response.results)
        assert not any("Mochi" in text for text in contents(engine, "alice", response))


def test_day_filter_applies_before_the_cut(engine):
    response = engine.search("alice", "PostgreSQL", day="2024-03-06", limit=20, kinds=("message",))
    assert response.results and {h.day_label for h in response.results} == {date(2024, 3, 6)}


def test_time_filters(engine):
    recent = engine.search("alice", "pool ECONNRESET database", recency_days=1, limit=20, kinds=("message",))
    assert recent.results and all(h.created_at >= datetime(2024, 3, 6, 12, tzinfo=timezone.utc) for h in recent.results)
    window = engine.search("alice", "PostgreSQL", start="2024-03-04T00:00", end="2024-03-05T00:00", limit=20)
    assert window.results and all(h.day_label == date(2024, 3, 4) for h in window.results if h.kind == "message")


def test_overlapping_windows_never_return_a_message_twice(engine):
    response = engine.search("alice", "PostgreSQL migration plan", limit=20, kinds=("message",))
    ids = [h.message_id for h in response.results]
    assert len(ids) == len(set(ids)) and len(ids) > 5


def test_an_experiments_settings_rank_its_searches_only(engine):
    """RankingOverrides.settings reweigh one experiment's searches; the engine's own ranking is untouched."""
    query = "which database did we choose and why"
    experiment = engine.search_experiment("alice", query, RankingOverrides(settings={"vector_weight": 1.0,
                                                                                     "lexical_weight": 0.0}),
                                          kinds=("message",), explain=True)
    assert experiment.results
    production = engine.search("alice", query, kinds=("message",), explain=True)
    same = engine.search_experiment("alice", query, RankingOverrides(), kinds=("message",), explain=True)
    assert same.results == production.results  # no overrides: the production ranking, hit for hit
    assert engine.settings.lexical_weight == AHEAD.lexical_weight > 0
    assert [h.score for h in production.results] != [h.score for h in experiment.results]
    with pytest.raises(InvalidInputError, match="unknown settings"):
        engine.search_experiment("alice", query, RankingOverrides(settings={"vector_wieght": 1.0}))
    with pytest.raises(InvalidInputError, match="reply_lift"):
        engine.search_experiment("alice", query, RankingOverrides(settings={"reply_lift": -1.0}))


def test_summaries_lead_and_covered_messages_are_penalised(tmp_path):
    # the summary outscores the best message here, though by less than the default margin (2x)
    leading = AHEAD.model_copy(update={"summary_lead_margin": 1.0})
    with ConversationEngine(tmp_path, clock=lambda: NOW, settings=leading) as engine:
        engine.import_file(SAMPLE, fmt="jsonl")
        engine.index("alice")
        day = engine.get("alice", day_segment_id="alice:continuous:day:2024-03-04")
        first, last = (engine.get("alice", message_id=m).seq for m in (day.message_ids[0], day.message_ids[-1]))
        summary = engine.summarize_range("alice", first, last + 1)
        response = engine.search("alice", "which database did we choose and why", explain=True)
        top = response.results[0]
        assert top.kind == "summary" and (top.from_seq, top.to_seq) == (summary.from_seq, summary.to_seq)
        # the range, the day and the conversation summary cover the same turns: one of them shows
        assert [(h.from_seq, h.to_seq) for h in response.results if h.kind == "summary"].count((first, last)) == 1
        covered = [h for h in response.results if h.kind == "message" and h.covered_by_summary]
        assert covered and all(h.parts.penalty == pytest.approx(0.85) for h in covered)
        assert all(h.score == pytest.approx(h.parts.fused * 0.85, abs=1e-6) for h in covered)
        # the ablation switch is an experiment's, outside the production signature
        with pytest.raises(TypeError):
            engine.search("alice", "which database did we choose and why", penalty=False)  # type: ignore[call-arg]
        unpenalised = engine.search_experiment("alice", "which database did we choose and why",
                                               RankingOverrides(penalty=False), explain=True)
        assert all(h.parts.penalty == 1.0 for h in unpenalised.results if h.kind == "message")
        assert any(h.covered_by_summary and h.score == pytest.approx(h.parts.fused, abs=1e-6)
                   for h in unpenalised.results)
        only_messages = engine.search("alice", "which database did we choose and why", limit=1)
        assert only_messages.results[0].kind == "message"  # limit 1 leaves no slot for a summary


def test_ties_go_to_the_newer_day(tmp_path):
    with ConversationEngine(tmp_path, clock=lambda: NOW, settings=AHEAD) as engine:
        engine.add_user("carol")
        for thread, message_id, at in (("t-old", "old", "2024-01-01T09:00"), ("t-new", "new", "2024-01-02T09:00")):
            engine.store.ensure_thread("carol", thread)  # two threads: two windows with equal scores
            engine.ingest("carol", [{"role": "user", "content": "zebraquartz", "created_at": at, "message_id": message_id}],
                          thread_id=thread)
        response = engine.search("carol", "zebraquartz", kinds=("message",))
        assert [h.message_id for h in response.results] == ["new", "old"]
        assert response.results[0].score == response.results[1].score


def test_within_a_window_ties_cite_the_newer_message(tmp_path):
    with ConversationEngine(tmp_path, clock=lambda: NOW, settings=AHEAD) as engine:
        engine.add_user("erin")
        engine.ingest("erin", [{"role": "user", "content": "zebraquartz", "created_at": at, "message_id": message_id}
                               for message_id, at in (("first", "2024-01-01T09:00"), ("second", "2024-01-01T09:01"))])
        assert engine.search("erin", "zebraquartz").results[0].message_id == "second"


def test_messages_not_yet_embedded_are_found_lexically(tmp_path):
    with ConversationEngine(tmp_path, clock=lambda: NOW, settings=AHEAD) as engine:
        engine.add_user("dave")
        engine.ingest("dave", [{"role": "user", "content": "the invoice INV-4410 bounced", "created_at": "2024-01-01T09:00"}],
                      index=False)
        response = engine.search("dave", "INV-4410")
        assert response.not_vector_indexed == 1 and response.results[0].parts is None
        assert "INV-4410" in response.results[0].snippet


def test_without_embeddings_search_is_lexical_and_says_so(tmp_path):
    with ConversationEngine(tmp_path, clock=lambda: NOW, embedder=None, settings=AHEAD) as engine:
        engine.import_file(SAMPLE, fmt="jsonl")
        response = engine.search("alice", "ECONNRESET")
        assert response.mode == "lexical" and "lexical" in response.notice
        assert "ECONNRESET" in contents(engine, "alice", response)[0]


@pytest.mark.parametrize("kwargs,error", [
    ({"query": "   "}, InvalidInputError), ({"query": "x", "limit": 0}, InvalidInputError),
    ({"query": "x", "limit": 21}, InvalidInputError), ({"query": "x", "day": "March 5"}, InvalidInputError),
    ({"query": "x", "start": "yesterday"}, InvalidTimestampError), ({"query": "x", "kinds": ("files",)}, InvalidInputError),
])
def test_bad_search_input_gets_a_clear_error(engine, kwargs, error):
    with pytest.raises(error):
        engine.search("alice", **kwargs)
