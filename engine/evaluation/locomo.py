"""The LoCoMo retrieval harness: import a LoCoMo file into a throwaway store, index it once, and
score each QA item's question as a search in its own conversation against the item's evidence.

One corpus (`open_corpus`) serves any number of runs (`run`), so a matrix of configurations pays
for the embedding once. Every hit is judged at three levels; at each, a rank slot is the set of
evidence turns the hit *covers*, and the metrics of `engine.evaluation.metrics` do the rest:

* turn: a message hit covers its cited message's dia_id (`Message.external_id`); a summary hit
  covers nothing, though it holds its rank.
* window: a message hit covers every turn of its window (from_seq..to_seq of its thread).
* session: a hit covers the turns of its sessions: a message hit its cited turn's session (from
  the dia_id "D<session>:<turn>"), a summary hit the sessions of the messages in its span.

Summaries come from one of three sources (`SUMMARY_SOURCES`): "dataset" imports the file's
human-written session summaries (and makes none of its own); "none" drops them and makes none;
"engine" drops them and replays every turn, in time order and one at a time, through
`ConversationEngine.ingest`, the path a live deployment uses, so the summaries are the engine's own
(its triggers, its summarizer), with each session ended as a client would and the scheduled close
run at the end.

Categories 1-4 make the "overall" group; adversarial questions (5) are scored apart, since
their evidence points at turns that do *not* answer them.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from engine.api import ConversationEngine
from engine.config import Settings
from engine.evaluation.overrides import RankingOverrides
from engine.evaluation.metrics import (as_slots, mean, ndcg, percentile, recall_all, recall_any, recall_fraction,
                                       reciprocal_rank)
from engine.importers.locomo import LOCOMO_TIMEZONE, load_locomo, locomo_sessions, repair_evidence
from engine.query.search_types import LIMIT_RANGE, SearchHit
from indexers.embedders import Embedder

__all__ = [
    "CATEGORIES", "ADVERSARIAL", "DEFAULT_KS", "QaItem", "EvidenceLog", "RunConfig", "Corpus", "RunResult",
    "open_corpus", "run", "hit_coverage", "score_question", "session_of", "parse_ks", "SUMMARY_SOURCES",
    "metric_groups", "latency_summary",
]

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ADVERSARIAL = 5
DEFAULT_KS = (1, 5, 10, 20)
NDCG_K = 10
SUMMARY_SOURCES = ("dataset", "engine", "none")
_DIA_ID = re.compile(r"D(\d+):(\d+)")

TurnMap = Mapping[tuple[str, int], str]  # (thread_id, seq) -> dia_id


@dataclass(frozen=True, slots=True)
class QaItem:
    user_id: str  # the LoCoMo sample id, which the importer makes a user
    question: str
    category: int
    evidence: tuple[str, ...]  # repaired dia_ids that name a turn of the conversation


@dataclass(frozen=True, slots=True)
class EvidenceLog:
    """What the loader did to the file's evidence lists."""

    raw_ids: int
    malformed: int  # raw ids that repair_evidence split, rewrote or dropped
    not_in_conversation: int  # well-formed ids naming no imported turn: dropped
    questions_without_evidence: int  # skipped (or with an empty question): nothing to score
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunConfig:
    mode: str = "hybrid"
    fusion: str | None = None  # None: the settings' default
    summaries: bool = True  # kinds=("summary", "message") rather than ("message",)
    penalty: bool = True
    summary_context: bool = True  # a message's score takes in its covering summary's
    ks: tuple[int, ...] = DEFAULT_KS

    def __post_init__(self) -> None:
        low, high = LIMIT_RANGE
        if not self.ks or any(not low <= k <= high for k in self.ks):
            raise ValueError(f"every k must be within {low}..{high} (the search limit), got {self.ks}")

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("summary", "message") if self.summaries else ("message",)

    @property
    def limit(self) -> int:
        return max(self.ks)

    def label(self, default_fusion: str = "weighted") -> str:
        fused = f"/{self.fusion or default_fusion}" if self.mode == "hybrid" else ""
        extras = ("+summaries" if self.summaries else " messages only") + ("" if self.penalty else " no-penalty")
        extras += "" if self.summary_context else " no-summary-context"
        return f"{self.mode}{fused}{extras}"


@dataclass(frozen=True, slots=True)
class Corpus:
    """An indexed temporary store and the questions to ask it."""

    engine: ConversationEngine
    items: tuple[QaItem, ...]
    turns: TurnMap
    evidence: EvidenceLog
    conversations: tuple[str, ...]
    import_seconds: float
    index_seconds: float
    embedder: str | None
    summary_source: str = "dataset"
    summaries: int = 0  # stored summaries (day, conversation) when the questions were asked


@dataclass(frozen=True, slots=True)
class RunResult:
    config: RunConfig
    label: str
    groups: Mapping[str, Mapping[str, Any]]  # group name -> questions and level -> metric -> mean
    latency_ms: Mapping[str, float]
    modes_used: Mapping[str, int]  # what the engine actually ran (hybrid falls back to lexical)
    notices: tuple[str, ...]
    corpus: Mapping[str, Any] = field(default_factory=dict)


def session_of(dia_id: str) -> str:
    """'D3:12' -> '3'."""
    found = _DIA_ID.fullmatch(dia_id)
    if found is None:
        raise ValueError(f"not a LoCoMo dia_id: {dia_id!r}")
    return found.group(1)


def parse_ks(text: str) -> tuple[int, ...]:
    """'1,5,10' -> (1, 5, 10), sorted and deduplicated."""
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--k takes whole numbers separated by commas, got {text!r}") from None
    return tuple(ks)


# Corpus -------------------------------------------------------------------------------------
@contextmanager
def open_corpus(path: str | Path, *, limit_conversations: int | None = None, max_questions: int | None = None,
                settings: Settings | None = None, embedder: Embedder | None | str = "auto",
                progress: Callable[[str], None] | None = None, summaries: str = "dataset",
                bar: Callable[[str], Callable[[int, int], None]] | None = None) -> Iterator[Corpus]:
    """Load `path` into a fresh store in a temporary directory, index it, and yield the corpus.

    `limit_conversations` keeps the file's first N conversations, `max_questions` the first N QA
    items of each (a sliced copy is written inside the temporary directory, never elsewhere);
    `summaries` is where summaries come from (SUMMARY_SOURCES, see the module's docstring).
    """
    if summaries not in SUMMARY_SOURCES:
        raise ValueError(f"summaries must be one of {', '.join(SUMMARY_SOURCES)}, got {summaries!r}")
    say = progress or (lambda _: None)
    samples = _sliced(load_locomo(path), limit_conversations, max_questions)
    if summaries != "dataset":
        samples = [{k: v for k, v in s.items() if k != "session_summary"} for s in samples]
    base = settings or Settings()
    chosen = base if summaries == "engine" else base.model_copy(update={"summarizer": "none"})
    with tempfile.TemporaryDirectory(prefix="convsearch-locomo-") as workdir:
        source = Path(workdir) / "locomo_slice.json"
        source.write_text(json.dumps(samples), encoding="utf-8")
        with ConversationEngine(Path(workdir) / "home", settings=chosen, embedder=embedder) as engine:
            began = time.perf_counter()
            if summaries == "engine":
                say(f"replaying {len(samples)} conversations turn by turn through ingest")
                users = _replay(engine, samples)
            else:
                say(f"importing {len(samples)} conversations")
                users = engine.import_file(source, fmt="locomo").users
            imported = time.perf_counter() - began
            say("indexing")
            began = time.perf_counter()
            engine.index(progress=bar("index") if bar else None)
            indexed = time.perf_counter() - began
            turns, present = _turn_map(engine, users)
            items, log = _questions(samples, present)
            name = engine.pipeline.embedder.name if engine.pipeline.embedder else None
            yield Corpus(engine, tuple(items), turns, log, tuple(users), round(imported, 3), round(indexed, 3), name,
                         summaries, engine.stats()["summaries"])


def _replay(engine: ConversationEngine, samples: list[dict]) -> tuple[str, ...]:
    """Every turn through `ingest`, one call each, in time order; each session ended as a client
    would end it; then the scheduled close (what `serve`'s timer does after the last day)."""
    users: dict[str, None] = {}
    for user_id, turns in locomo_sessions(samples):
        if user_id not in users:
            engine.add_user(user_id, LOCOMO_TIMEZONE)
            engine.pipeline.shard(user_id)  # in memory, as a server holds it: each ingest updates it in place
            users[user_id] = None
        for turn in turns:
            engine.ingest(user_id, [turn], index=False)
        engine.end_conversation(user_id, reason="session end")
    engine.finalize_days()
    return tuple(users)


def _sliced(samples: list[dict], limit_conversations: int | None, max_questions: int | None) -> list[dict]:
    for name, value in (("limit_conversations", limit_conversations), ("max_questions", max_questions)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    chosen = samples[:limit_conversations] if limit_conversations else samples
    if max_questions is None:
        return chosen
    return [{**s, "qa": list(s.get("qa") or [])[:max_questions]} for s in chosen]


def _turn_map(engine: ConversationEngine, users: Sequence[str]
              ) -> tuple[dict[tuple[str, int], str], dict[str, set[str]]]:
    """(thread_id, seq) -> dia_id over all users, and each user's set of dia_ids."""
    turns: dict[tuple[str, int], str] = {}
    present: dict[str, set[str]] = {}
    for user in users:
        for thread in engine.store.threads_of(user):
            for message in engine.store.messages_in_range(thread.thread_id, 0):
                if message.external_id:
                    turns[(message.thread_id, message.seq)] = message.external_id
                    present.setdefault(user, set()).add(message.external_id)
    return turns, present


def _questions(samples: list[dict], present: Mapping[str, set[str]]) -> tuple[list[QaItem], EvidenceLog]:
    """Every QA item with its evidence repaired; items left without evidence are counted, not scored."""
    items: list[QaItem] = []
    notes: list[str] = []
    raw_count = malformed = missing = empty = 0
    for sample in samples:
        user = sample["sample_id"]
        for number, qa in enumerate(sample.get("qa") or [], start=1):
            raw = [str(e) for e in qa.get("evidence") or []]
            raw_count += len(raw)
            clean: list[str] = []
            for one in raw:
                fixed, said = repair_evidence([one])
                malformed += bool(said)
                notes += [f"{user} qa {number}: {note}" for note in said]
                clean += [e for e in fixed if e not in clean]
            kept = [e for e in clean if e in present.get(user, set())]
            for gone in (e for e in clean if e not in kept):
                missing += 1
                notes.append(f"{user} qa {number}: dropped {gone!r}: no such turn in the conversation")
            question = str(qa.get("question") or "").strip()
            if not kept or not question:
                empty += 1
                continue
            items.append(QaItem(user, question, int(qa.get("category") or 0), tuple(kept)))
    return items, EvidenceLog(raw_count, malformed, missing, empty, tuple(notes))


# Scoring ------------------------------------------------------------------------------------
def hit_coverage(hits: Sequence[SearchHit], turns: TurnMap, evidence: Sequence[str]
                 ) -> tuple[list[str | None], list[frozenset[str]], list[frozenset[str]]]:
    """Per hit, in rank order: the cited dia_id (None for a summary), and the evidence turns it
    covers at window level and at session level."""
    wanted = frozenset(evidence)
    by_session: dict[str, set[str]] = {}
    for dia_id in wanted:
        by_session.setdefault(session_of(dia_id), set()).add(dia_id)
    cited: list[str | None] = []
    windows: list[frozenset[str]] = []
    sessions: list[frozenset[str]] = []
    for hit in hits:
        span = {turns.get((hit.thread_id, s)) for s in range(hit.from_seq, hit.to_seq + 1)} - {None}
        if hit.kind == "message":
            own = turns.get((hit.thread_id, hit.seq)) if hit.seq is not None else None
            cited.append(own)
            windows.append(frozenset(span) & wanted)
            touched = {session_of(own)} if own else set()
        else:
            cited.append(None)  # a summary is not a turn: it holds a rank but is never relevant here
            windows.append(frozenset())
            touched = {session_of(d) for d in span}
        sessions.append(frozenset(d for s in touched for d in by_session.get(s, ())))
    return cited, windows, sessions


def score_question(cited: Sequence[str | None], windows: Sequence[frozenset[str]],
                   sessions: Sequence[frozenset[str]], evidence: Sequence[str], ks: Sequence[int]
                   ) -> dict[str, dict[str, float]]:
    """Every metric of one question: level -> metric name -> value in [0, 1]."""
    turn = as_slots(cited)
    scores: dict[str, dict[str, float]] = {"turn": {}, "window": {}, "session": {}}
    for level, slots in (("turn", turn), ("window", windows), ("session", sessions)):
        for k in ks:
            scores[level][f"recall_any@{k}"] = recall_any(slots, evidence, k)
            scores[level][f"recall_all@{k}"] = recall_all(slots, evidence, k)
            if level != "window":  # LoCoMo's fractional recall, for the paper's anchors
                scores[level][f"recall_frac@{k}"] = recall_fraction(slots, evidence, k)
    scores["turn"][f"ndcg@{min(NDCG_K, max(ks))}"] = ndcg(cited, evidence, min(NDCG_K, max(ks)))
    scores["turn"]["mrr"] = reciprocal_rank(cited, evidence)
    return scores


# Running ------------------------------------------------------------------------------------
def run(corpus: Corpus, config: RunConfig, *, progress: Callable[[str], None] | None = None,
        bar: Callable[[str], Callable[[int, int], None]] | None = None) -> RunResult:
    """Ask every question of the corpus under `config`; the means per group and the latencies.
    `bar(label)` gives a (done, total) callback, e.g. a progress bar."""
    say = progress or (lambda _: None)
    step = bar("search") if bar else (lambda done, total: None)
    default_fusion = corpus.engine.settings.fusion
    label = config.label(default_fusion)
    overrides = RankingOverrides(penalty=config.penalty, summary_context=config.summary_context)
    say(f"searching {len(corpus.items)} questions: {label}")
    per_item: list[tuple[int, dict[str, dict[str, float]]]] = []
    latencies: list[float] = []
    modes: Counter[str] = Counter()
    notices: Counter[str] = Counter()
    for done, item in enumerate(corpus.items, start=1):
        step(done, len(corpus.items))
        began = time.perf_counter()
        response = corpus.engine.search_experiment(item.user_id, item.question, overrides, limit=config.limit,
                                                   kinds=config.kinds, mode=config.mode, fusion=config.fusion)
        latencies.append((time.perf_counter() - began) * 1000)
        modes[response.mode] += 1
        if response.notice:
            notices[response.notice] += 1
        coverage = hit_coverage(response.results, corpus.turns, item.evidence)
        per_item.append((item.category, score_question(*coverage, item.evidence, config.ks)))
    return RunResult(
        config=config, label=label, groups=metric_groups(per_item), latency_ms=latency_summary(latencies),
        modes_used=dict(modes), notices=tuple(f"{n} x {text}" for text, n in notices.items()),
        corpus=_corpus_facts(corpus, default_fusion),
    )


def metric_groups(per_item: Sequence[tuple[int, dict[str, dict[str, float]]]]) -> dict[str, dict[str, Any]]:
    """overall (categories 1-4), each category, and adversarial apart; an empty group has no means."""
    members = {"overall": [s for c, s in per_item if c != ADVERSARIAL]}
    members.update({name: [s for c, s in per_item if c == number] for number, name in CATEGORIES.items()})
    groups: dict[str, dict[str, Any]] = {}
    for name, scores in members.items():
        group: dict[str, Any] = {"questions": len(scores)}
        if scores:
            group.update({level: {metric: round(mean([s[level][metric] for s in scores]), 4)
                                  for metric in scores[0][level]} for level in scores[0]})
        groups[name] = group
    return groups


def latency_summary(latencies: Sequence[float]) -> dict[str, float]:
    """How many searches, and their p50, p99 and mean in ms."""
    if not latencies:
        return {"searches": 0}
    return {"searches": len(latencies), "p50": round(percentile(latencies, 50), 2),
            "p99": round(percentile(latencies, 99), 2), "mean": round(mean(latencies), 2)}


def _corpus_facts(corpus: Corpus, default_fusion: str) -> dict[str, Any]:
    return {"conversations": list(corpus.conversations), "questions": len(corpus.items),
            "turns": len(corpus.turns), "import_seconds": corpus.import_seconds,
            "index_seconds": corpus.index_seconds, "embedder": corpus.embedder, "default_fusion": default_fusion,
            "summary_source": corpus.summary_source, "summaries": corpus.summaries,
            "evidence": corpus.evidence}
