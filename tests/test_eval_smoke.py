"""Smoke runs of the LoCoMo harness on a tiny LoCoMo-format file built here (no shared data)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from engine.surfaces.cli import eval_commands
from engine.evaluation.locomo import RunConfig, open_corpus, run
from tests.support import HashEmbedder

SESSION_1 = [
    ("Ana", "I adopted a grey kitten named Pixel last weekend."),
    ("Ben", "Congrats! How is Pixel settling in?"),
    ("Ana", "She sleeps on my keyboard all day."),
    ("Ben", "My sister is moving to Lisbon in spring."),
]
SESSION_2 = [
    ("Ana", "I started pottery classes on Tuesdays."),
    ("Ben", "Nice, I am training for the Berlin marathon."),
    ("Ana", "My first bowl came out lopsided but I love it."),
]
QA = [
    {"question": "What is the name of Ana's kitten?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
    {"question": "Where is Ben's sister moving?", "answer": "Lisbon", "evidence": ["D1:04"], "category": 2},
    {"question": "What hobbies did Ana pick up?", "answer": "pottery", "evidence": ["D2:1; D2:3"], "category": 1},
    {"question": "Which marathon is Ben training for?", "answer": "Berlin", "evidence": ["D:2:2"], "category": 3},
    {"question": "What did Ben name his kitten?", "adversarial_answer": "Pixel", "evidence": ["D1:1"],
     "category": 5},
    {"question": "What colour is the bowl?", "answer": "unknown", "evidence": ["D9:9"], "category": 4},
    {"question": "Who likes jazz?", "answer": "nobody", "evidence": [], "category": 3},
]


def _turns(number: int, lines: list[tuple[str, str]]) -> list[dict]:
    return [{"speaker": s, "dia_id": f"D{number}:{i}", "text": t} for i, (s, t) in enumerate(lines, start=1)]


@pytest.fixture
def tiny_locomo(tmp_path: Path) -> Path:
    sample = {
        "sample_id": "conv-t1",
        "conversation": {
            "speaker_a": "Ana", "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": _turns(1, SESSION_1),
            "session_2_date_time": "10:00 am on 20 May, 2023", "session_2": _turns(2, SESSION_2),
        },
        "session_summary": {"session_1_summary": "Ana adopted a kitten, Pixel; Ben's sister moves to Lisbon.",
                            "session_2_summary": "Ana took up pottery; Ben trains for the Berlin marathon."},
        "qa": QA,
    }
    path = tmp_path / "tiny_locomo.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


def _in_unit_range(group: dict) -> bool:
    values = [v for level in ("turn", "window", "session") for v in group[level].values()]
    return bool(values) and all(0.0 <= v <= 1.0 for v in values)


def test_cli_json_last_line(tiny_locomo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    eval_commands.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["eval", "locomo", "--data", str(tiny_locomo), "--mode", "lexical", "--k", "1,3",
                              "--json"])
    args.handler(args)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("LoCoMo retrieval: lexical")
    result = json.loads(out[-1])
    groups = result["groups"]
    assert groups["overall"]["questions"] == 4 and groups["adversarial"]["questions"] == 1
    assert set(groups["overall"]) == {"questions", "turn", "window", "session"}
    assert {"recall_any@3", "recall_all@1", "recall_frac@3", "ndcg@3", "mrr"} <= set(groups["overall"]["turn"])
    assert all(_in_unit_range(groups[g]) for g in ("overall", "single-hop", "temporal", "adversarial"))
    assert result["latency_ms"]["searches"] == 5 and result["latency_ms"]["p99"] >= result["latency_ms"]["p50"]
    evidence = result["corpus"]["evidence"]
    assert (evidence["malformed"], evidence["not_in_conversation"], evidence["questions_without_evidence"]) == (3, 1, 2)
    assert any("'D:2:2' to 'D2:2'" in note for note in evidence["notes"])


def test_easy_questions_are_found(tiny_locomo: Path) -> None:
    with open_corpus(tiny_locomo, embedder=None) as corpus:
        result = run(corpus, RunConfig(mode="lexical", summaries=False, ks=(1, 3)))
    # "kitten ... name" and "sister ... moving" share rare words with exactly one turn each
    assert result.groups["single-hop"]["turn"]["recall_any@3"] == 1.0
    assert result.groups["temporal"]["turn"]["mrr"] == 1.0
    assert result.modes_used == {"lexical": 5}


def test_hybrid_run_with_summaries_and_limited_questions(tiny_locomo: Path) -> None:
    with open_corpus(tiny_locomo, embedder=HashEmbedder(), max_questions=3) as corpus:
        assert len(corpus.items) == 3 and corpus.embedder == HashEmbedder.name
        result = run(corpus, RunConfig(mode="hybrid", fusion="rrf", ks=(2, 5)))
    assert result.modes_used == {"hybrid": 3}
    assert result.groups["overall"]["questions"] == 3 and result.groups["adversarial"] == {"questions": 0}
    assert _in_unit_range(result.groups["overall"])
    assert result.groups["overall"]["session"]["recall_any@5"] == 1.0  # two sessions, five slots


def test_leave_one_out_chooses_on_the_other_conversations_only() -> None:
    from benchmarks.locomo_cv import folds

    def conv(n: int, value: float) -> dict:
        return {"questions": n, "turn.recall_any@10": value, "turn.ndcg@10": value, "session.recall_any@5": value,
                "turn.mrr": value}

    # A wins c1 by far, B wins c2 and c3 a little: a fold never sees its own conversation's figures
    runs = [{"overrides": {"rule": "A"}, "conversations": {"c1": conv(10, 0.9), "c2": conv(10, 0.5), "c3": conv(10, 0.5)}},
            {"overrides": {"rule": "B"}, "conversations": {"c1": conv(10, 0.1), "c2": conv(10, 0.6), "c3": conv(10, 0.6)}}]
    chosen = {f["held_out"]: (f["chose"]["rule"], f["figures"]["turn.recall_any@10"]) for f in folds(runs)}
    assert chosen == {"c1": ("B", 0.1), "c2": ("A", 0.5), "c3": ("A", 0.5)}


def test_cv_run_scores_each_conversation_and_restores_the_settings(tiny_locomo: Path) -> None:
    from benchmarks.locomo_cv import run_questions

    with open_corpus(tiny_locomo, embedder=None) as corpus:
        before = corpus.engine.searcher.settings
        result = run_questions(corpus, {"reply_lift": 0.0, "other_speaker_weight": 1.0}, lambda _: None)
        assert corpus.engine.searcher.settings is before
    figures = result["conversations"]["conv-t1"]
    assert figures["questions"] == 4  # categories 1-4 with evidence; the adversarial one is left out
    assert all(0.0 <= figures[k] <= 1.0 for k in figures if k != "questions")
    assert figures["turn.recall_any@10"] > 0  # the easy questions are found


def test_cv_grid_axes_name_real_settings() -> None:
    from benchmarks.locomo_cv import _grid_axis

    assert _grid_axis("outside_time_weight=1,0.7") == ("outside_time_weight", (1.0, 0.7))
    with pytest.raises(argparse.ArgumentTypeError, match="not a setting"):
        _grid_axis("outside_time_wieght=1,0.7")  # a typo would otherwise run the default five times over
    with pytest.raises(argparse.ArgumentTypeError, match="SETTING=V1,V2"):
        _grid_axis("reply_lift=high")


def test_cv_alone_varies_one_setting_at_a_time_against_the_defaults() -> None:
    from benchmarks.locomo_cv import alone

    configs = alone({"reply_lift": (0.0, 0.9), "phrase_weight": (0.0, 1.0, 2.0)})
    # the defaults once (0.9 and 1.0 are them), then each other value alone: never a combination
    assert configs == [{}, {"reply_lift": 0.0}, {"phrase_weight": 0.0}, {"phrase_weight": 2.0}]


def test_cv_modes_are_scored_apart_and_all_count_in_the_choice(tiny_locomo: Path) -> None:
    from benchmarks.locomo_cv import _objective, run_questions

    with open_corpus(tiny_locomo, embedder=None) as corpus:
        result = run_questions(corpus, {"summary_lead_margin": 1.0}, lambda _: None, ("messages", "default"))
    figures = result["conversations"]["conv-t1"]
    assert {k.split("/")[0] for k in figures if k != "questions"} == {"messages", "default"}
    one_mode = {"overrides": {}, "conversations": {"c": {"questions": 1, "messages/turn.recall_any@10": 1.0,
                                                          "messages/turn.ndcg@10": 1.0, "messages/session.recall_any@5": 1.0,
                                                          "default/turn.recall_any@10": 0.0, "default/turn.ndcg@10": 0.0,
                                                          "default/session.recall_any@5": 0.0, "messages/turn.mrr": 1.0}}}
    assert _objective(one_mode, ["c"]) == 0.5  # the mean over both modes; MRR is reported, never chosen on


def test_cv_report_gives_each_fold_and_each_run_pooled() -> None:
    from benchmarks.locomo_cv import folds, format_report

    def conv(n: int, value: float) -> dict:
        return {"questions": n, "turn.recall_any@10": value, "turn.ndcg@10": value, "session.recall_any@5": value,
                "turn.mrr": value}

    runs = [{"overrides": {"rule": 1.0}, "p50_ms": 1.0, "conversations": {"c1": conv(10, 0.8), "c2": conv(30, 0.4)}},
            {"overrides": {"rule": 2.0}, "p50_ms": 2.0, "conversations": {"c1": conv(10, 0.2), "c2": conv(30, 0.6)}}]
    report = format_report({"runs": runs, "folds": folds(runs)}).splitlines()
    # c1 is held out under rule 2 (best on c2), c2 under rule 1: pooled (10 * 0.2 + 30 * 0.4) / 40
    assert "LOO turn.recall_any@10: pooled 0.350, spread 0.200..0.400" in report
    pooled_run = "turn.recall_any@10 0.500, turn.ndcg@10 0.500, session.recall_any@5 0.500, turn.mrr 0.500"
    assert f"{{'rule': 1.0}}: {pooled_run}, p50 1.0 ms" in report


@pytest.mark.model
def test_model_benchmark_runs_a_sentence_transformers_folder(tiny_locomo: Path, tmp_path: Path, capsys) -> None:
    from benchmarks.locomo_model import main
    from indexers.model_files import minilm_dir

    out = tmp_path / "model.json"
    assert main(["--data", str(tiny_locomo), "--model-dir", str(minilm_dir()), "--threads", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["model"] == minilm_dir().name and report["embedded_per_s"] > 0
    figures = report["conversations"]["conv-t1"]
    assert figures["questions"] == 4 and figures["turn.recall_any@10"] > 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("pooled: turn.recall_any@10 ")
