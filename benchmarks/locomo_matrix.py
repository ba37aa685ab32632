"""Every retrieval configuration on LoCoMo from one index build: a table, a JSON file and a plot.

    python benchmarks/locomo_matrix.py --data /work/shared/data/locomo/locomo_dev.json

Configurations: lexical, vector, hybrid (weighted), hybrid (RRF), each over messages only and over
summaries + messages, hybrid weighted + summaries without the covered-by-summary penalty, and
hybrid weighted over messages without summary context (a message scored without its summary's).
Writes benchmarks/results/locomo_dev.json (all metrics of every run) and docs/img/locomo_recall.png
(turn-level recall_any@k and session-level recall_any@k of the main modes, with the LoCoMo
paper's DRAGON anchors).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from engine.evaluation.locomo import DEFAULT_KS, RunConfig, RunResult, open_corpus, run
from engine.surfaces.serialize import to_jsonable

__all__ = ["CONFIGS", "main"]

ROOT = Path(__file__).resolve().parents[1]
MAIN_MODES = (("lexical", None), ("vector", None), ("hybrid", "weighted"), ("hybrid", "rrf"))
CONFIGS = tuple(RunConfig(mode=m, fusion=f, summaries=s) for m, f in MAIN_MODES for s in (False, True)) + (
    RunConfig(mode="hybrid", fusion="weighted", summaries=True, penalty=False),
    RunConfig(mode="hybrid", fusion="weighted", summaries=False, summary_context=False),
)
# The LoCoMo paper (Maharana et al. 2024, RAG table): DRAGON, fraction of evidence retrieved.
DRAGON = {"turn": {5: 56.7, 10: 66.2, 25: 76.7}, "session": {5: 72.1, 10: 84.7}}
COLUMNS = (("turn", "recall_any@1"), ("turn", "recall_any@5"), ("turn", "recall_any@10"), ("turn", "recall_any@20"),
           ("turn", "recall_all@10"), ("turn", "recall_frac@10"), ("turn", "ndcg@10"), ("turn", "mrr"),
           ("window", "recall_any@5"), ("window", "recall_any@10"), ("session", "recall_any@5"),
           ("session", "recall_any@10"), ("session", "recall_frac@5"))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.from_json:  # redraw from a saved run: no import, no index build, no searches
        document = json.loads(args.from_json.read_text(encoding="utf-8"))
    else:
        document = _measure(args)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(format_table(document["runs"]))
    print(f"\n{_facts_line(document)}")
    plot(document["runs"], args.plot)
    print(f"wrote {args.plot}" + ("" if args.from_json else f" and {args.out}"))
    return 0


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    say = lambda text: print(f"matrix: {text}", file=sys.stderr, flush=True)  # noqa: E731
    began = time.perf_counter()
    with open_corpus(args.data, limit_conversations=args.limit_conversations, max_questions=args.max_questions,
                     progress=say) as corpus:
        results = [run(corpus, config, progress=say) for config in CONFIGS]
    return _document(args, results, time.perf_counter() - began)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path("/work/shared/data/locomo/locomo_dev.json"))
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "locomo_dev.json")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "locomo_recall.png")
    p.add_argument("--limit-conversations", type=int, metavar="N", help="only the first N conversations")
    p.add_argument("--max-questions", type=int, metavar="N", help="only the first N QA items of each conversation")
    p.add_argument("--from-json", type=Path, metavar="FILE", help="print and plot a saved result instead of measuring")
    return p


def format_table(runs: Sequence[Mapping[str, Any]], group: str = "overall") -> str:
    """One row per configuration (runs as saved in the JSON): headline metrics of `group`, latency."""
    heads = ["configuration"] + [f"{lvl[0]}.{m.replace('recall_', '')}" for lvl, m in COLUMNS] + ["p50 ms", "p99 ms"]
    rows = [[r["label"]] + [f"{r['groups'][group][lvl][m]:.3f}" for lvl, m in COLUMNS]
            + [f"{r['latency_ms']['p50']:.1f}", f"{r['latency_ms']['p99']:.1f}"] for r in runs]
    widths = [max(len(row[i]) for row in [heads, *rows]) for i in range(len(heads))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in [heads, *rows])


def _facts_line(document: Mapping[str, Any]) -> str:
    facts, overall = document["corpus"], document["runs"][0]["groups"]["overall"]
    return (f"{len(facts['conversations'])} conversations, {facts['turns']} turns, {facts['questions']} questions "
            f"({overall['questions']} in categories 1-4); embedder {facts['embedder']}; import "
            f"{facts['import_seconds']} s, index build {facts['index_seconds']} s; whole matrix "
            f"{document.get('wall_seconds', '?')} s")


def _document(args: argparse.Namespace, results: Sequence[RunResult], seconds: float) -> dict[str, Any]:
    return {
        "command": "python benchmarks/locomo_matrix.py " + " ".join(sys.argv[1:]),
        "data": str(args.data), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wall_seconds": round(seconds),
        "source": _source_state(), "corpus": to_jsonable(results[0].corpus),
        "runs": [{k: v for k, v in to_jsonable(r).items() if k != "corpus"} for r in results],
    }


def _source_state() -> dict[str, Any]:
    """The commit, whether the tree was dirty, and a digest of the engine's code as it ran."""
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("engine/**/*.py"), *ROOT.glob("indexers/**/*.py")]):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return {"git_commit": _git("rev-parse", "HEAD"), "dirty": bool(_git("status", "--porcelain")),
            "code_sha256": digest.hexdigest()}


def _git(*command: str) -> str | None:
    try:
        out = subprocess.run(["git", *command], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def plot(runs: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Turn- and session-level recall_any@k per main mode (solid: + summaries, dashed: messages only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    shown = [r for r in runs if r["config"]["penalty"] and r["config"].get("summary_context", True)]
    colours = dict(zip(dict.fromkeys(_mode_name(r) for r in shown), plt.cm.tab10.colors))
    for ax, level, title in ((axes[0], "turn", "turn level (cited message)"), (axes[1], "session", "session level")):
        for r in shown:
            with_summaries = r["config"]["summaries"]
            ys = [r["groups"]["overall"][level][f"recall_any@{k}"] for k in DEFAULT_KS]
            ax.plot(DEFAULT_KS, ys, marker="o", ms=3, color=colours[_mode_name(r)], ls="-" if with_summaries else "--",
                    label=f"{_mode_name(r)}{' + summaries' if with_summaries else ', messages only'}")
        anchors = DRAGON[level]
        ax.plot(list(anchors), [v / 100 for v in anchors.values()], "kx", ms=7,
                label="LoCoMo paper: DRAGON (fractional R@k)")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("k")
        ax.set_xticks([1, 5, 10, 20, 25])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("recall_any@k (categories 1-4)")
    axes[0].set_ylim(0, 1)
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _mode_name(run_doc: Mapping[str, Any]) -> str:
    config = run_doc["config"]
    return f"{config['mode']}/{config['fusion']}" if config["mode"] == "hybrid" else config["mode"]


if __name__ == "__main__":
    sys.exit(main())
