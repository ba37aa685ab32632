"""Leave-one-conversation-out choice of ranking settings on LoCoMo, from one index build.

    python benchmarks/locomo_cv.py --data /work/shared/data/locomo/locomo_dev.json [--grid outside_time_weight=1,0.8]

Each configuration (a set of Settings overrides of the message-ranking rules) is run over every
question with the real searcher, by default messages only and without summary context (what a
deployment without summaries gets); `--summaries engine` replays the turns through ingest so the
summaries are the engine's own, and `--modes messages,default` asks each question messages only
with summary context and by default (summary hits too), the objective then averaging the modes.
For each conversation, the configuration with the best mean of
turn recall_any@10, turn NDCG@10 and session recall_any@5 on the *other* conversations is chosen
and scored on the held-out one; the report gives each held-out figure, their pooled mean and their
spread, and which configuration each fold chose. Writes benchmarks/results/locomo_cv.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from engine.config import Settings
from engine.evaluation.locomo import ADVERSARIAL, Corpus, hit_coverage, open_corpus, score_question
from engine.evaluation.metrics import mean, percentile
from engine.evaluation.overrides import RankingOverrides

__all__ = ["METRICS", "GRID", "MODES", "main", "run_questions", "pooled", "parse_modes", "folds", "format_report"]

ROOT = Path(__file__).resolve().parents[1]
METRICS = (("turn", "recall_any@10"), ("turn", "ndcg@10"), ("session", "recall_any@5"), ("turn", "mrr"))
OBJECTIVE = METRICS[:3]
# Round 2 rules (the default grid), each with "off" among its values, so every fold may also reject it.
# The values were narrowed on the same folds by a faster replay of cached candidates (see docs/benchmarks.md).
GRID: dict[str, tuple[float, ...]] = {
    "message_own_weight": (0.3, 0.4),
    "message_context_cap": (2.0, float("inf")),
    "other_speaker_weight": (0.77, 1.0),
    "reply_lift": (0.0, 0.9),
}
BASELINE = {"message_own_weight": 0.3, "message_context_cap": float("inf"), "other_speaker_weight": 1.0,
            "reply_lift": 0.0}  # round 1's ranking: every new rule off


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    say = lambda text: print(f"cv: {text}", file=sys.stderr, flush=True)  # noqa: E731
    grid = dict(args.grid) or GRID
    configs = alone(grid) if args.alone else [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    began = time.perf_counter()
    modes = tuple(args.modes.split(","))
    with open_corpus(args.data, progress=say, summaries=args.summaries) as corpus:
        runs = [run_questions(corpus, overrides, say, modes) for overrides in configs]
    document = {"data": str(args.data), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "wall_seconds": round(time.perf_counter() - began), "runs": runs, "folds": folds(runs)}
    if args.alone:
        document["lever_folds"] = {name: folds([r for r in runs if set(r["overrides"]) <= {name}]) for name in grid}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(format_report(document))
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path("/work/shared/data/locomo/locomo_dev.json"))
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "locomo_cv.json")
    p.add_argument("--grid", type=_grid_axis, action="append", default=[], metavar="SETTING=V1,V2",
                   help="a setting and the values to choose from (repeatable); the others keep their defaults. "
                        "Without it: the round-2 grid")
    p.add_argument("--alone", action="store_true",
                   help="each setting's values alone (the others at their defaults) instead of every combination; "
                        "the report adds each setting's own leave-one-out choice against the defaults")
    p.add_argument("--summaries", choices=("dataset", "engine", "none"), default="none",
                   help="where summaries come from (engine: the live replay); only the modes other than bare use them")
    p.add_argument("--modes", type=parse_modes, default="bare",
                   help="comma separated, of: bare (messages only, no summary context), messages (messages only, "
                        "summary context), default (summary hits and context)")
    return p


def alone(grid: Mapping[str, Sequence[float]]) -> list[dict[str, float]]:
    """The defaults ({}), then each setting's values other than its default, one setting at a time."""
    defaults = Settings()
    return [{}] + [{name: v} for name, values in grid.items() for v in values if v != getattr(defaults, name)]


def parse_modes(text: str) -> str:
    if not text or any(m not in MODES for m in text.split(",")):
        raise argparse.ArgumentTypeError(f"modes are a comma separated subset of {', '.join(MODES)}, got {text!r}")
    return text


def _grid_axis(text: str) -> tuple[str, tuple[float, ...]]:
    name, _, values = (part.strip() for part in text.partition("="))
    if name not in Settings.model_fields:
        raise argparse.ArgumentTypeError(f"{name!r} is not a setting: use a field of engine.config.Settings")
    try:
        return name, tuple(float(v) for v in values.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SETTING=V1,V2 with numbers, got {text!r}") from None


# mode -> (kinds, summary context): what each question is asked as
MODES = {"bare": (("message",), False), "messages": (("message",), True), "default": (("summary", "message"), True)}


def run_questions(corpus: Corpus, overrides: Mapping[str, float], say, modes: Sequence[str] = ("bare",)) -> dict[str, Any]:
    """Every question under these settings, in each mode: per-conversation means of METRICS (named
    "mode/level.metric" when there are several modes), and the latency."""
    per: dict[str, list[list[float]]] = {}
    latencies: list[float] = []
    for item in corpus.items:
        if item.category == ADVERSARIAL:
            continue
        row: list[float] = []
        for name in modes:
            kinds, context = MODES[name]
            ranking = RankingOverrides(summary_context=context, settings=dict(overrides))
            began = time.perf_counter()
            response = corpus.engine.search_experiment(item.user_id, item.question, ranking, limit=20, kinds=kinds)
            latencies.append((time.perf_counter() - began) * 1000)
            scores = score_question(*hit_coverage(response.results, corpus.turns, item.evidence), item.evidence,
                                    (5, 10, 20))
            row += [scores[level][metric] for level, metric in METRICS]
        per.setdefault(item.user_id, []).append(row)
    say(f"{overrides}: done")
    names = [f"{mode}/{lvl}.{m}" if len(modes) > 1 else f"{lvl}.{m}" for mode in modes for lvl, m in METRICS]
    return {"overrides": dict(overrides), "p50_ms": round(percentile(latencies, 50), 2),
            "conversations": {user: {"questions": len(rows), **{name: round(mean(col), 4)
                                                              for name, col in zip(names, zip(*rows))}}
                              for user, rows in per.items()}}


def _objective(run: Mapping[str, Any], users: Sequence[str]) -> float:
    """Mean of the OBJECTIVE metrics (of every mode) over the questions of `users` (weighted by their counts)."""
    convs = run["conversations"]
    total = sum(convs[u]["questions"] for u in users)
    keys = [k for k in convs[users[0]] if k.endswith(tuple(f"{lvl}.{m}" for lvl, m in OBJECTIVE))]
    return sum(convs[u]["questions"] * convs[u][k] for u in users for k in keys) / (total * len(keys))


def folds(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """For each conversation: the run best on the other four, and its figures on this one."""
    users = sorted(runs[0]["conversations"])
    out = []
    for held in users:
        rest = [u for u in users if u != held]
        best = max(runs, key=lambda r: _objective(r, rest))
        out.append({"held_out": held, "chose": best["overrides"], "figures": best["conversations"][held]})
    return out


def format_report(document: Mapping[str, Any]) -> str:
    names = [k for k in document["runs"][0]["conversations"][document["folds"][0]["held_out"]] if k != "questions"]
    lines = ["held-out conversation  n    " + "  ".join(n.rjust(20) for n in names) + "  chosen"]
    for fold in document["folds"]:
        f = fold["figures"]
        lines.append(f"{fold['held_out']:<22} {f['questions']:>4} " + "  ".join(f"{f[n]:>20.3f}" for n in names)
                     + f"  {fold['chose']}")
    n = [fold["figures"]["questions"] for fold in document["folds"]]
    for name in names:
        values = [fold["figures"][name] for fold in document["folds"]]
        held_out = sum(v * k for v, k in zip(values, n)) / sum(n)
        lines.append(f"LOO {name}: pooled {held_out:.3f}, spread {min(values):.3f}..{max(values):.3f}")
    for name, lever in document.get("lever_folds", {}).items():
        lines.append(f"{name} alone: " + _held_out(lever, names)
                     + " | chose " + ", ".join(str(f["chose"].get(name, "default")) for f in lever))
    for run in document["runs"]:
        tag = "baseline " if run["overrides"] == BASELINE else ""
        lines.append(f"{tag}{run['overrides']}: " + pooled(run, names) + f", p50 {run['p50_ms']} ms")
    return "\n".join(lines)


def _held_out(lever: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    n = [f["figures"]["questions"] for f in lever]
    return ", ".join(f"{name} {sum(f['figures'][name] * k for f, k in zip(lever, n)) / sum(n):.3f}" for name in names)


def pooled(run: Mapping[str, Any], names: Sequence[str]) -> str:
    convs = run["conversations"].values()
    total = sum(c["questions"] for c in convs)
    return ", ".join(f"{n} {sum(c[n] * c['questions'] for c in convs) / total:.3f}" for n in names)


if __name__ == "__main__":
    sys.exit(main())
