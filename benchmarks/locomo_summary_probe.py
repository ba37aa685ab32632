"""Which summaries help search, on LoCoMo: one index build, summary variants swapped in per session.

    python benchmarks/locomo_summary_probe.py --data /work/shared/data/locomo/locomo_dev.json \
        --variants 'none dataset engine engine:cover_words=100' [--weights 0.35] [--leading 1] [--out FILE]

The corpus is imported without summaries and indexed once. For each variant, every session gets
the summaries that variant writes over exactly its turns (the engine's: a day summary and a
conversation summary, as the live replay and the bulk path make them; the dataset's: its human
session summary), then every question is asked messages only and by default (summary hits too),
and, for each `--weights` value, messages only with that summary-context weight, for each `--leading`
value, by default with at most that many summaries leading, and with `--bars` every bar and count of
leading summaries (replayed from one summaries-only and one messages-only search per question). Prints turn any@10 overall
and per conversation, NDCG@10 and session any@5. Minutes, not the replay's quarter hour: the
variants differ only in summary text, which is what this probes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from benchmarks.locomo_cv import folds
from engine.evaluation.locomo import ADVERSARIAL, Corpus, hit_coverage, load_locomo, open_corpus, score_question
from engine.evaluation.metrics import mean
from engine.models import Message, Summary
from engine.summaries.summarizers import ExtractiveSummarizer

__all__ = ["VARIANTS", "main"]

METRICS = (("turn", "recall_any@10"), ("turn", "ndcg@10"), ("session", "recall_any@5"))
# turns, (human text, session date) -> [(kind, title, markdown)]
Writer = Callable[[Sequence[Message], tuple[str, str]], list[tuple[str, str, str]]]


def _engine(**options: int) -> Writer:
    """The engine's extractive summaries (a day and a conversation summary); `options` go to its constructor."""
    summarizer = ExtractiveSummarizer(**options)

    def write(turns: Sequence[Message], _human: tuple[str, str]) -> list[tuple[str, str, str]]:
        markdown = summarizer.summarize(turns)
        return [("day", f"Day summary {turns[0].day_label.isoformat()}", markdown),
                ("conversation", summarizer.title(turns), markdown)]
    return write


def _whole(turns: Sequence[Message], _human: tuple[str, str]) -> list[tuple[str, str, str]]:
    """Every turn, as one summary: the bound of what quoting can cover."""
    return [("day", "Session", "\n".join(f"{m.speaker}: {m.content}" for m in turns))]


def _dataset(_turns: Sequence[Message], human: tuple[str, str]) -> list[tuple[str, str, str]]:
    """The human session summary, titled as the importer titles it."""
    text, label = human
    number = _turns[0].external_id.split(":")[0].lstrip("D")
    return [("day", f"Session {number}: {label}", text)] if text else []


VARIANTS: dict[str, Writer] = {"none": lambda turns, human: [], "dataset": _dataset, "engine": _engine(),
                               "whole": _whole}


def variant(name: str) -> Writer:
    """A named variant, or "engine:cover_words=100;topic_words=0" for the extractive one with options."""
    if ":" not in name:
        return VARIANTS[name]
    options = dict(part.split("=") for part in name.split(":", 1)[1].split(";"))
    return _engine(**{k: int(v) for k, v in options.items()})


def sessions(corpus: Corpus) -> dict[tuple[str, str], list[Message]]:
    """(user, session number) -> its turns, in order."""
    out: dict[tuple[str, str], list[Message]] = defaultdict(list)
    store = corpus.engine.store
    for user in corpus.conversations:
        for thread in store.threads_of(user):
            for m in store.messages_in_range(thread.thread_id, 0, include_notes=False):
                if m.external_id:
                    out[(user, m.external_id.split(":")[0].lstrip("D"))].append(m)
    return out


def install(corpus: Corpus, by_session: dict[tuple[str, str], list[Message]], human: dict[tuple[str, str], tuple[str, str]],
            writer: Writer) -> int:
    """Replace every stored summary by what `writer` makes of each session."""
    timeline = corpus.engine.store.timeline
    corpus.engine.store.db.execute("DELETE FROM summaries")
    for user in corpus.conversations:
        timeline.summaries_changed(user)  # the summary index rebuilds on the next search
    now = datetime.now(timezone.utc)
    count = 0
    for (user, number), turns in by_session.items():
        for kind, title, markdown in writer(turns, human.get((user, number), ("", ""))):
            timeline.upsert_summary(Summary(
                summary_id=f"{turns[0].thread_id}:probe:{kind}:{number}", thread_id=turns[0].thread_id, user_id=user,
                kind=kind, from_seq=turns[0].seq, to_seq=turns[-1].seq, markdown=markdown, created_at=now,
                updated_at=now, day_label=turns[0].day_label if kind == "day" else None,
                conversation_id=turns[0].conversation_id, title=title, message_count=len(turns)))
            count += 1
    for user in corpus.conversations:
        corpus.engine.summary_index.embed_pending(user)  # as the engine's write paths do
    return count


def ask(corpus: Corpus, kinds: tuple[str, ...], overrides: dict[str, float]) -> dict[str, Any]:
    searcher = corpus.engine.searcher
    default = searcher.settings
    searcher.settings = default.model_copy(update=overrides)
    per: dict[str, list[list[float]]] = defaultdict(list)
    try:
        for item in corpus.items:
            if item.category == ADVERSARIAL:
                continue
            response = searcher.search(item.user_id, item.question, limit=20, kinds=kinds)
            scores = score_question(*hit_coverage(response.results, corpus.turns, item.evidence), item.evidence,
                                    (5, 10, 20))
            per[item.user_id].append([scores[level][metric] for level, metric in METRICS])
    finally:
        searcher.settings = default
    return _means(per)


BARS = (1, 3, 5, 10, 20)  # a summary leads when it scores at least the message at this rank
MOST = (1, 2)  # summaries leading at most


def replay_leading(corpus: Corpus) -> dict[str, Any]:
    """Where summary hits sit, replayed from one summaries-only and one messages-only search per
    question: for each bar and count, summaries first, then messages (what `merge_summaries_first`
    does), scored as the default configuration is. The engine's rule is bar 20, at most 2."""
    searcher = corpus.engine.searcher
    per: dict[tuple[int, int], dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    for item in corpus.items:
        if item.category == ADVERSARIAL:
            continue
        summaries = searcher.search(item.user_id, item.question, limit=20, kinds=("summary",)).results
        messages = searcher.search(item.user_id, item.question, limit=20, kinds=("message",)).results
        for bar in BARS:
            floor = messages[min(bar, len(messages)) - 1].score if messages else 0.0
            passing = [h for h in summaries if h.score >= floor]
            for most in MOST:
                hits = [*passing[:most], *messages][:20]
                scores = score_question(*hit_coverage(hits, corpus.turns, item.evidence), item.evidence, (5, 10, 20))
                per[(bar, most)][item.user_id].append([scores[level][metric] for level, metric in METRICS])
    return {f"default, bar {bar}, at most {most}": _means(rows) for (bar, most), rows in per.items()}


def _means(per: dict[str, list[list[float]]]) -> dict[str, Any]:
    rows = [r for user in per for r in per[user]]
    return {"overall": [round(mean(col), 4) for col in zip(*rows)],
            "per_conversation": {u: {"n": len(per[u]), **{f"{lvl}.{m}": round(mean(col), 4) for (lvl, m), col
                                                        in zip(METRICS, zip(*per[u]))}} for u in per},
            "n": len(rows)}


def choose(runs: dict[str, Any], names: Sequence[str]) -> list[dict[str, Any]]:
    """Leave-one-conversation-out among the variants `names`, on the mean of METRICS over both
    modes (messages only, default), as benchmarks/locomo_cv.py chooses settings."""
    as_cv = []
    for name in names:
        modes = {"messages": runs[f"{name} / messages only"], "default": runs[f"{name} / default"]}
        users = modes["messages"]["per_conversation"]
        as_cv.append({"overrides": {"variant": name}, "conversations": {
            u: {"questions": users[u]["n"], **{f"{mode}/{lvl}.{m}": run["per_conversation"][u][f"{lvl}.{m}"]
                                               for mode, run in modes.items() for lvl, m in METRICS}}
            for u in users}})
    return folds(as_cv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    say = lambda text: print(f"probe: {text}", file=sys.stderr, flush=True)  # noqa: E731
    human = {(s["sample_id"], key.split("_")[1]): (text, s["conversation"].get(f"session_{key.split('_')[1]}_date_time"))
             for s in load_locomo(args.data) for key, text in (s.get("session_summary") or {}).items()
             if isinstance(text, str)}
    weights = [float(w) for w in args.weights.split(",")] if args.weights else []
    leading = [int(n) for n in args.leading.split(",")] if args.leading else []
    document: dict[str, Any] = {"data": str(args.data), "runs": {}}
    with open_corpus(args.data, summaries="none", progress=say, embedder=None if args.lexical else "auto",
                     limit_conversations=args.conversations) as corpus:
        by_session = sessions(corpus)
        for name in args.variants.split(" "):
            began = time.perf_counter()
            count = install(corpus, by_session, human, variant(name))
            configs = {"messages only": (("message",), {}), "default": (("summary", "message"), {})}
            configs.update({f"messages only, context weight {w}": (("message",), {"summary_context_weight": w})
                            for w in weights})
            configs.update({f"default, up to {n} summaries": (("summary", "message"), {"max_summary_results": n})
                            for n in leading})
            results = {label: ask(corpus, kinds, overrides) for label, (kinds, overrides) in configs.items()}
            if args.bars and count:
                results.update(replay_leading(corpus))
            for label, result in results.items():
                document["runs"][f"{name} / {label}"] = result
                o = result["overall"]
                convs = " ".join(f"{v['turn.recall_any@10']:.3f}" for v in result["per_conversation"].values())
                print(f"{name} / {label}: t.any@10 {o[0]:.3f} ndcg {o[1]:.3f} s.any@5 {o[2]:.3f} | {convs}",
                      flush=True)
            say(f"{name}: {count} summaries, {time.perf_counter() - began:.0f} s")
    if args.choose:
        document["folds"] = choose(document["runs"], args.choose.split(" "))
        for fold in document["folds"]:
            print(f"LOO held out {fold['held_out']}: chose {fold['chose']['variant']}, {fold['figures']}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--variants", default=" ".join(VARIANTS), help="space separated")
    p.add_argument("--weights", default="", help="extra summary_context_weight values, comma separated")
    p.add_argument("--leading", default="", help="extra max_summary_results values (default mode), comma separated")
    p.add_argument("--bars", action="store_true", help="also replay where summary hits sit (BARS x MOST)")
    p.add_argument("--lexical", action="store_true", help="no embedder: keyword search only (fast)")
    p.add_argument("--conversations", type=int, help="the file's first N conversations only (a smoke test)")
    p.add_argument("--choose", default="", help="space separated variants to choose among, leave-one-conversation-out")
    p.add_argument("--out", type=Path)
    return p


if __name__ == "__main__":
    sys.exit(main())
