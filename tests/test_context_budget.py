"""assemble_context within its budget: the text never counts more than max_tokens (as the engine counts),
a budget below the smallest block is one clear error naming it, and no message carries more than
VIEW_CAP_CHARS of its text (the stored text stays whole)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine.api import ConversationEngine
from engine.errors import InvalidInputError
from engine.query.context import smallest_budget
from engine.query.navigation_results import VIEW_CAP_CHARS

NOW = datetime(2024, 5, 2, 12, 0, tzinfo=timezone.utc)


def _engine(home: Path, with_yesterday: bool) -> ConversationEngine:
    engine = ConversationEngine(home, embedder=None, clock=lambda: NOW)
    engine.add_user("c", "UTC")
    rows = []
    if with_yesterday:  # a closed day: its summary heads the payload
        rows += [{"message_id": f"y{i}", "role": "user" if i % 2 == 0 else "assistant",
                  "content": f"We decided to migrate the billing database to PostgreSQL, step {i}.",
                  "created_at": (datetime(2024, 5, 1, 9) + timedelta(minutes=i)).isoformat()} for i in range(12)]
    rows += [{"message_id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant",
              "content": "東京タワーで会議をしましょう。" * 5,
              "created_at": (datetime(2024, 5, 2, 9) + timedelta(minutes=i)).isoformat()} for i in range(12)]
    engine.ingest("c", rows)
    return engine


@pytest.mark.parametrize("with_yesterday", [False, True])
def test_the_text_never_exceeds_the_budget(tmp_path: Path, with_yesterday: bool) -> None:
    with _engine(tmp_path / "home", with_yesterday) as engine:
        counter = engine.pipeline.counter
        least = smallest_budget(counter)
        assert least == counter.count("## Current Conversation\n[Earlier messages truncated]")
        headed = 0
        for budget in range(1, 160):
            if budget < least:
                with pytest.raises(InvalidInputError, match=f"max_tokens must be at least {least}, got {budget}"):
                    engine.assemble_context("c", max_tokens=budget)
                continue
            payload = engine.assemble_context("c", max_tokens=budget)
            assert counter.count(payload.text) == payload.estimated_tokens <= budget, budget
            headed += payload.yesterday_summary is not None
        assert engine.assemble_context("c", max_tokens=least).text.endswith("[Earlier messages truncated]")
        roomy = engine.assemble_context("c", max_tokens=5000)
        assert roomy.messages_loaded == 12 and not roomy.truncated
        assert (roomy.yesterday_summary is not None) is with_yesterday
        assert (headed > 0) is with_yesterday  # summaries come back once the budget has room for them


def test_one_long_message_is_squeezed_or_dropped_never_over(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("c", "UTC")
        engine.ingest("c", [{"message_id": "a", "role": "user", "content": "東京タワーで会議をしましょう。" * 40,
                             "created_at": "2024-05-02T09:00"}])
        counter = engine.pipeline.counter
        for budget in range(smallest_budget(counter), 120):
            payload = engine.assemble_context("c", max_tokens=budget)
            assert counter.count(payload.text) <= budget and payload.truncated, budget


def test_a_window_below_the_smallest_block_names_both_numbers(tmp_path: Path) -> None:
    from engine.query.context import apply_context_window

    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        counter = engine.pipeline.counter
        with pytest.raises(InvalidInputError, match=r"max_tokens \(100\) must be greater than reserved_tokens \(95\) "
                                                    f"by at least {smallest_budget(counter)} tokens"):
            apply_context_window([], 100, 95, counter=counter)


def test_every_message_carries_at_most_the_view_cap(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home", embedder=None, clock=lambda: NOW) as engine:
        engine.add_user("c", "UTC")
        engine.ingest("c", [
            {"message_id": "big", "role": "user", "content": "word " * 200_000, "created_at": "2024-05-02T09:00"},
            {"message_id": "log", "role": "tool", "content": "BEGIN " + "x1 " * 20_000 + "END",
             "created_at": "2024-05-02T09:01"},
        ])
        payload = engine.assemble_context("c", max_tokens=1_000_000)
        big, log = payload.messages
        assert len(big.content) < VIEW_CAP_CHARS + 100 and big.content.startswith("word word")
        assert f"get message 'big' with offset={VIEW_CAP_CHARS} for the rest" in big.content
        assert log.content.startswith("BEGIN") and log.content.endswith("END")  # a tool output keeps its end
        assert "characters omitted" in log.content and len(log.content) <= VIEW_CAP_CHARS
        assert payload.truncated and payload.messages_loaded == 2 and len(payload.text) < 3 * VIEW_CAP_CHARS
        assert engine.get("c", message_id="big").content_chars == 1_000_000  # the stored text is whole


def test_a_slice_past_the_threads_end_is_refused(tmp_path: Path) -> None:
    with ConversationEngine(tmp_path / "home", embedder=None) as engine:
        engine.add_user("u")
        engine.ingest("u", [{"role": "user", "content": f"turn {i}"} for i in range(3)])
        with pytest.raises(InvalidInputError, match=r"starts after the thread's last message \(seq 3\)"):
            engine.request_context_slice("u", 1000, 2000)
        engine.request_context_slice("u", 2, 4)  # seqs 2 and 3: "turn 1" and "turn 2"
        payload = engine.assemble_context("u")
        assert payload.source == "slice" and payload.messages_loaded == 2
        assert "turn 1" in payload.text and "turn 2" in payload.text and "turn 0" not in payload.text
